"""The Markdown vault as a projection of the store, and vaults imported as events.

`render` maps every memory to a NoteRecord (projections.vault.render does the
files); `import_vault` reads a vault (validated first) and writes events: a
`memory.stored` per new note (its `source` is the file; unknown frontmatter
fields are kept), `memory.updated` when a known note changed, archive and
restore events, and `supersedes` / `derives_from` links. Re-importing
unchanged files writes nothing. Rendering, importing the result into a new
store and rendering again gives the same bytes.

Where the vault's fields live in a memory: kind, title, content, tags,
confidence, namespace, atom_of are the memory's own; created_at and
last_seen carry `captured` and `last_seen` (midnight UTC); the rest
(description, sources, pinned, expires_at, schema_version, unknown fields)
is kept under `metadata["vault"]`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mnemolog.eventlog.errors import BadInput
from mnemolog.eventlog.progress import Progress
from mnemolog.eventlog.store.fsio import read_regular
from mnemolog.eventlog.vocabulary.events import MUTABLE_FIELDS
from mnemolog.projections.memory import queries
from mnemolog.projections.memory.model import Memory
from mnemolog.projections.vault.read import ParsedNote, read_vault
from mnemolog.projections.vault.render import NoteLink, NoteRecord, RenderReport, render_vault
from mnemolog.projections.vault.validate import (
    Problem,
    ValidationFailed,
    agent_names,
    errors,
    validate_vault,
)
from mnemolog.substrate.events import LinkCreated, MemoryArchived, MemoryRestored, MemoryStored, MemoryUpdated
from mnemolog.substrate.ids import looks_like_id, new_id
from mnemolog.substrate.session import Session, Sessions

__all__ = [
    "DEFAULT_AGENT",
    "VAULT_KEY",
    "ImportReport",
    "decode_value",
    "derive_title",
    "digest",
    "encode_value",
    "import_notes",
    "import_vault",
    "memory_to_record",
    "midnight",
    "records",
    "render",
    "supersession",
    "validate",
    "vault_metadata",
]

VAULT_KEY = "vault"
DEFAULT_CONFIDENCE = 0.6
DEFAULT_AGENT = "mnemolog"


def _date(us: int | None) -> dt.date:
    return dt.datetime.fromtimestamp((us or 0) / 1e6, dt.UTC).date()


def midnight(d: dt.date) -> int:
    """Midnight UTC of a date, in µs (how a vault date is kept in a memory)."""
    return int(dt.datetime(d.year, d.month, d.day, tzinfo=dt.UTC).timestamp()) * 1_000_000


def encode_value(v: Any) -> Any:
    """YAML values (dates included) into JSON-safe values that decode back exactly."""
    if isinstance(v, dt.datetime):
        return {"$datetime": v.isoformat()}
    if isinstance(v, dt.date):
        return {"$date": v.isoformat()}
    if isinstance(v, Mapping):
        return {str(k): encode_value(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [encode_value(x) for x in v]
    return v


def decode_value(v: Any) -> Any:
    """The inverse of encode_value: tagged dates and datetimes back to Python values."""
    if isinstance(v, dict):
        if set(v) == {"$date"}:
            return dt.date.fromisoformat(v["$date"])
        if set(v) == {"$datetime"}:
            return dt.datetime.fromisoformat(v["$datetime"])
        return {k: decode_value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [decode_value(x) for x in v]
    return v


def supersession(s: Session) -> tuple[dict[str, str], dict[str, str]]:
    """(supersedes, superseded_by) maps from `supersedes` links (latest link wins)."""
    sup: dict[str, str] = {}
    by: dict[str, str] = {}
    for src, dst in queries.supersedes_links(s.conn):
        sup[src] = dst
        by[dst] = src
    return sup, by


def derive_title(content: str, limit: int = 60) -> str:
    """A name for an untitled memory: its first sentence or line, cut at a word."""
    first = content.strip().split("\n", 1)[0].strip()
    for stop in (". ", "? ", "! "):
        i = first.find(stop)
        if 20 <= i < limit:  # not after "Dr." or "e.g."
            first = first[: i + 1]
    first = first.rstrip(".!?:;, ")
    if len(first) <= limit:
        return first
    cut = first[:limit].rsplit(" ", 1)[0]
    return cut or first[:limit]


def note_links(m: Memory, edges: Sequence[tuple[str, str, dict[str, Any]]]) -> list[NoteLink]:
    """The edges a note must carry itself: all but an atom's derives_from to its parent,
    which `mnemolog_atom_of` already says (and import draws, as atomisation did)."""
    out = []
    for relation, dst, meta in edges:
        if relation == "derives_from" and dst == m.get("atom_of"):
            continue
        out.append(NoteLink(relation, dst, meta))
    return out


def memory_to_record(
    m: Memory,
    supersedes: Mapping[str, str],
    superseded_by: Mapping[str, str],
    hidden: bool,
    edges: Sequence[tuple[str, str, dict[str, Any]]] = (),
) -> NoteRecord:
    """A memory as the vault renders it (its `metadata["vault"]` fills the vault-only fields)."""
    v = dict((m.get("metadata") or {}).get(VAULT_KEY) or {})
    expires = v.get("expires_at")
    sources = v.get("sources")
    if sources is None:
        sources = [m["source"]] if m.get("source") else []
    return NoteRecord(
        memory_id=m["id"],
        kind=m["kind"],
        title=m.get("title") or derive_title(m["content"]),
        description=str(v.get("description", "")),
        content=m["content"],
        tags=tuple(m.get("tags") or ()),
        confidence=DEFAULT_CONFIDENCE if m["confidence"] is None else m["confidence"],
        captured=dt.date.fromisoformat(v["captured"])
        if isinstance(v.get("captured"), str)
        else _date(m["created_at"]),
        last_seen=_date(m.get("last_seen") or m["updated_at"]),
        sources=tuple(sources),
        pinned=bool(v.get("pinned", False)),
        expires_at=dt.date.fromisoformat(expires) if isinstance(expires, str) else None,
        supersedes=supersedes.get(m["id"]),
        superseded_by=superseded_by.get(m["id"]),
        archived=hidden,
        atom_of=m.get("atom_of"),
        namespace=m["namespace"],
        extra_frontmatter=decode_value(v.get("extra") or {}),
        links=note_links(m, edges),
        project=m.get("project") or "",
        domains=tuple(m.get("domains") or ()),
        occurred_at=m.get("occurred_at"),
    )


def records(s: Session, namespace: str | None = None) -> list[NoteRecord]:
    """Every active memory, and the archived and superseded ones (for the Archive), oldest first.

    Candidates and rejected (invalid) memories are not knowledge yet, or any more: they stay
    out of the vault.
    """
    sup, by = supersession(s)
    edges = queries.links_by_source(s.conn)
    return [
        memory_to_record(m, sup, by, hidden or m["status"] == "superseded", edges.get(m["id"], ()))
        for m, hidden in queries.memories_with_hidden(s.conn, namespace)
        if m["status"] in ("active", "superseded")
    ]


def vault_metadata(r: NoteRecord) -> dict[str, Any]:
    """What a record holds beyond a memory's own fields, kept under `metadata["vault"]`."""
    v: dict[str, Any] = {"description": r.description, "sources": list(r.sources), "pinned": r.pinned}
    if r.expires_at is not None:
        v["expires_at"] = r.expires_at.isoformat()
    if r.extra_frontmatter:
        v["extra"] = encode_value(dict(r.extra_frontmatter))
    return v


@dataclass
class ImportReport:
    """What an import wrote: ids stored, updated, archived, restored; links; unchanged files."""

    stored: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: int = 0
    archived: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    linked: int = 0
    files: int = 0
    warnings: list[str] = field(default_factory=list)  # post hooks that failed after a write

    def to_json(self) -> dict[str, Any]:
        return {
            **({"warnings": self.warnings} if self.warnings else {}),
            "files": self.files,
            "stored": self.stored,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "archived": self.archived,
            "restored": self.restored,
            "linked": self.linked,
        }


def _order(notes: Sequence[ParsedNote]) -> list[ParsedNote]:
    """Parents before their atoms, so atom_of always names a stored memory."""
    by_id = {n.record.memory_id: n for n in notes if n.record is not None}
    out: list[ParsedNote] = []
    seen: set[str] = set()

    def visit(n: ParsedNote, depth: int = 0) -> None:
        assert n.record is not None
        if n.record.memory_id in seen:
            return
        seen.add(n.record.memory_id)
        parent = n.record.atom_of
        if parent and parent in by_id and depth < 64:
            visit(by_id[parent], depth + 1)
        out.append(n)

    for n in notes:
        if n.record is not None:
            visit(n)
    return out


def _fields(r: NoteRecord) -> dict[str, Any]:
    """What a record says, in the memory's own terms (for change detection and updates)."""
    return {
        "title": r.title or None,
        "content": r.content,
        "kind": r.kind,
        "namespace": r.namespace,
        "tags": list(r.tags),
        "confidence": r.confidence,
        "metadata_vault": vault_metadata(r),
        "created_at": midnight(r.captured),
        "last_seen": midnight(r.last_seen),
        "project": r.project,
        "domains": list(r.domains),
        "occurred_at": r.occurred_at,
    }


def import_notes(sessions: Sessions, notes: Sequence[ParsedNote], agent: str) -> ImportReport:
    """Write the events that make the store hold these notes (idempotent)."""
    report = ImportReport(files=len(notes))
    ids: dict[str, str] = {}
    with sessions.session() as s:
        for n in notes:
            assert n.record is not None
            rid = n.record.memory_id
            existing = s.get(rid) if looks_like_id(rid) else None
            if existing is None:
                by_source = queries.memory_by_source(s.conn, f"vault:{n.rel}")
                existing = s.get(by_source) if by_source else None
            if existing is not None:
                ids[rid] = existing["id"]
            elif looks_like_id(rid):
                ids[rid] = rid
            else:
                ids[rid] = new_id()
        sup, by = supersession(s)
        prog = Progress("importing vault", len(notes))
        for n in _order(notes):
            prog.advance()
            r = n.record
            assert r is not None
            mid = ids[r.memory_id]
            parent = ids.get(r.atom_of, r.atom_of) if r.atom_of else None
            current = s.get(mid)
            want = _fields(r)
            if current is None:
                payload = MemoryStored.new(
                    r.content,
                    namespace=r.namespace,
                    kind=r.kind,
                    title=r.title or None,
                    tags=r.tags,
                    confidence=r.confidence,
                    source=f"vault:{n.rel}",
                    metadata={VAULT_KEY: want["metadata_vault"]},
                    created_at=want["created_at"],
                    last_seen=want["last_seen"],
                    atom_of=parent if parent and s.get(parent) else None,
                    memory_id=mid,
                    project=r.project,
                    domains=r.domains,
                    occurred_at=r.occurred_at,
                )
                s.write_memory(payload)
                report.stored.append(mid)
                if payload.atom_of:
                    s.write_link(LinkCreated(src=mid, dst=payload.atom_of, relation="derives_from"))
                    report.linked += 1
                current = s.get(mid)
            else:
                have = memory_to_record(current, sup, by, False)
                changes = _diff(_fields(have), want)
                if changes:
                    s.append(MemoryUpdated.model_validate({"id": mid, **changes}))
                    report.updated.append(mid)
                    current = s.get(mid)
            assert current is not None
            hidden = queries.is_hidden(s.conn, mid)
            if r.archived and not hidden:
                s.append(MemoryArchived(id=mid, reason=f"archived in vault {agent}"))
                report.archived.append(mid)
            elif hidden and not r.archived and current["archived_at"] is not None:
                s.append(MemoryRestored(id=mid, reason=f"active in vault {agent}"))
                report.restored.append(mid)
            if mid not in report.stored and mid not in report.updated and mid not in report.archived:
                report.unchanged += 1
        prog.close()
        # Every other edge the notes carry, once each. Their targets exist by now, unless
        # the vault was rendered for one namespace and points outside it: said in a warning.
        extra_supersedes: dict[tuple[str, str], dict[str, Any]] = {}
        for n in notes:
            r = n.record
            assert r is not None
            mid = ids[r.memory_id]
            have_out = {(e["relation"], e["dst"]) for e in s.links(mid)["outgoing"]}
            for ln in r.links:
                dst = ids.get(ln.to, ln.to)
                if ln.relation == "supersedes":
                    extra_supersedes[(mid, dst)] = dict(ln.metadata)  # drawn with the pointers below
                    continue
                if (ln.relation, dst) in have_out:
                    continue
                if s.get(dst) is None:
                    report.warnings.append(f"{n.rel}: {ln.relation} link to {ln.to} skipped: no such memory")
                    continue
                link = {"src": mid, "dst": dst, "relation": ln.relation, "metadata": dict(ln.metadata)}
                s.write_link(LinkCreated.model_validate(link))
                have_out.add((ln.relation, dst))
                report.linked += 1
        # Supersession last: both ends exist by now. A memory's supersedes /
        # superseded_by is its latest such link, so the pointers the files name
        # (the winners) are linked after any other pair touching the same ends.
        sup, by = supersession(s)
        want_sup: dict[str, str] = {}
        want_by: dict[str, str] = {}
        pairs: list[tuple[str, str]] = []
        for n in notes:
            r = n.record
            assert r is not None
            mid = ids[r.memory_id]
            if r.supersedes:
                want_sup[mid] = ids.get(r.supersedes, r.supersedes)
                pairs.append((mid, want_sup[mid]))
            if r.superseded_by:
                want_by[mid] = ids.get(r.superseded_by, r.superseded_by)
                pairs.append((want_by[mid], mid))
        unique = list(dict.fromkeys([*extra_supersedes, *pairs]))
        unique.sort(key=lambda p: (want_sup.get(p[0]) == p[1]) + (want_by.get(p[1]) == p[0]))
        have_links = set(queries.supersedes_links(s.conn))
        for src, dst in unique:
            stale_winner = (want_sup.get(src) == dst and sup.get(src) != dst) or (
                want_by.get(dst) == src and by.get(dst) != src
            )
            if (src, dst) in have_links and not stale_winner:
                continue
            if s.get(src) is None or s.get(dst) is None:
                continue
            meta = extra_supersedes.get((src, dst), {})
            s.write_link(LinkCreated(src=src, dst=dst, relation="supersedes", metadata=meta))
            sup[src], by[dst] = dst, src
            report.linked += 1
        report.warnings += s.warnings
    return report


def _diff(have: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    # What an update may change, but for the source (a note does not carry it) and the metadata
    # (a note owns only its vault part, compared below). A note without a date leaves the
    # memory's as it is: an update can change a date, not remove one.
    for k in MUTABLE_FIELDS:
        if k in ("source", "metadata") or (k == "occurred_at" and want[k] is None):
            continue
        if have[k] != want[k]:
            out[k] = want[k]
    if have["metadata_vault"] != want["metadata_vault"]:
        out["metadata"] = {VAULT_KEY: want["metadata_vault"]}
    if "title" in out and out["title"] is None:
        out["title"] = ""
    return out


def import_vault(sessions: Sessions, root: Path, agent: str | None = None) -> ImportReport:
    """Validate, then import every agent's notes (or one agent's)."""
    problems = [p for p in validate_vault(root) if agent is None or p.file.startswith(f"{agent}/")]
    if errors(problems):
        raise ValidationFailed(problems)
    agents = [agent] if agent else agent_names(root)
    total = ImportReport()
    for a in agents:
        notes = read_vault(root, a)
        bad = [n for n in notes if n.record is None]
        if bad:
            raise BadInput(f"{bad[0].rel}: {'; '.join(bad[0].problems)}", file=bad[0].rel)
        r = import_notes(sessions, notes, a)
        for k in ("stored", "updated", "archived", "restored"):
            getattr(total, k).extend(getattr(r, k))
        total.warnings += r.warnings
        total.unchanged += r.unchanged
        total.linked += r.linked
        total.files += r.files
    return total


def render(
    sessions: Sessions, root: Path, agent: str = DEFAULT_AGENT, namespace: str | None = None
) -> RenderReport:
    """Write the vault of every memory (of a namespace) under root/agent."""
    with sessions.session() as s:
        recs = records(s, namespace)
    return render_vault(root, agent, recs)


def validate(root: Path) -> list[Problem]:
    """Every problem of a vault's files (see projections.vault.validate)."""
    return validate_vault(root)


def digest(root: Path) -> str:
    """SHA-256 over every file under root (path and bytes), for fixed-point checks."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + b"\0" + read_regular(p, 1 << 30))
    return h.hexdigest()
