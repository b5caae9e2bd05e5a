"""Writing a vault from plain records: the Markdown projection of an agent's memories.

`plan_vault(agent, records)` is the pure core: it maps records to the bytes of
every file (notes, wiki pages, INDEX.md and its sub-indexes), deterministically
(same records, same bytes). `render_vault(root, agent, records)` is the I/O
edge: it writes only the files whose bytes changed (atomic_write each),
removes the files it wrote before that no record produces any more, and keeps
the list of files it owns in `<root>/<agent>/.mnemolog-vault.json`.

Mapping (docs/vault.md has the full table):

- kinds user, feedback, project, decision, reference keep their type;
  observation (atoms included) becomes a `reference` note; knowledge becomes
  a wiki page when every source is under raw/ (the format's wiki rule) and a
  `reference` note otherwise;
- confidence: >= 0.75 high, >= 0.45 medium, below low; high/medium/low read
  back as 0.9/0.6/0.3, and a float that is not one of those three is kept
  exactly in `mnemolog_confidence`;
- whatever the format's fields cannot hold is kept in `mnemolog_*` fields
  (id, kind, namespace, atom_of, the untruncated title and description, the
  ids of supersedes/superseded_by), so `read` recovers the record exactly.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, Final

from mnemolog.eventlog.errors import BadInput, StorageError, UsageError
from mnemolog.eventlog.progress import Progress
from mnemolog.eventlog.store.fsio import (
    FileTooLarge,
    NotRegularFile,
    atomic_write,
    fsync_dir,
    read_regular,
    stale_temps,
)
from mnemolog.eventlog.vocabulary.events import KINDS, RELATIONS
from mnemolog.projections.vault import index as index_format
from mnemolog.projections.vault import naming, regions, schema
from mnemolog.projections.vault.frontmatter import (
    FIELD_ORDER,
    Document,
    serialize_bytes,
)

CONFIDENCE_VALUES: Final = {"high": 0.9, "medium": 0.6, "low": 0.3}
HIGH_AT: Final = 0.75
MEDIUM_AT: Final = 0.45

MANIFEST_NAME: Final = ".mnemolog-vault.json"
MANIFEST_FORMAT: Final = "mnemolog-vault-manifest/1"
MANIFEST_MAX_BYTES: Final = 256 << 20
INDEX_MAX_LINES: Final = 150
INDEX_PAGE_ENTRIES: Final = 140
PROMOTED_KEY: Final = "promoted_to_persona"

# (heading, sub-index slice) in the format's order (docs/vault.md, INDEX.md).
SECTIONS: Final = (
    ("Critical Feedback", "feedback"),
    ("Locked Decisions", "decisions"),
    ("User Profile", "user"),
    ("Active Projects", "projects"),
    ("Reference", "reference"),
    ("Recently Promoted to Persona", "promoted"),
    ("Archive (superseded)", "archive"),
)
_TYPE_SECTION: Final = {"feedback": 0, "decision": 1, "user": 2, "project": 3, "reference": 4}
_PROMOTED, _ARCHIVE = 5, 6

RESERVED_PREFIX: Final = "mnemolog_"
# Keys render writes itself; `related` (wiki cross-links) and `provenance` may come in
# extra_frontmatter because the records have no field for them.
RESERVED_KEYS: Final = frozenset(FIELD_ORDER) - {"related", "provenance"} | {"archived"}
_AGENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_MANAGED_RE = re.compile(r"(?:memory|wiki)/[^/\x00.][^/\x00]*\.md")


def confidence_level(value: float) -> str:
    """high at 0.75 and above, medium at 0.45 and above, low below."""
    if value >= HIGH_AT:
        return "high"
    return "medium" if value >= MEDIUM_AT else "low"


def confidence_value(level: str) -> float:
    return CONFIDENCE_VALUES[level]


def _bad(record_id: str, what: str) -> BadInput:
    return BadInput(f"NoteRecord {record_id!r}: {what}", memory_id=record_id)


def _is_date(value: Any) -> bool:
    return isinstance(value, date) and not isinstance(value, datetime)


@dataclass(frozen=True)
class NoteLink:
    """An edge leaving the note's memory: how it relates, to which memory id, its metadata."""

    relation: str
    to: str
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def frontmatter(self) -> dict[str, Any]:
        out: dict[str, Any] = {"relation": self.relation, "to": self.to}
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        return out


@dataclass(frozen=True, kw_only=True)
class NoteRecord:
    """One memory as the vault sees it; the substrate maps its memories to these."""

    memory_id: str
    kind: str
    title: str
    description: str
    content: str
    tags: Sequence[str] = ()
    confidence: float
    captured: date
    last_seen: date
    sources: Sequence[str] = ()
    pinned: bool = False
    expires_at: date | None = None
    supersedes: str | None = None
    superseded_by: str | None = None
    archived: bool = False
    atom_of: str | None = None
    namespace: str = "default"
    extra_frontmatter: Mapping[str, Any] = field(default_factory=dict)
    # Every edge leaving this memory but the ones other fields already carry (the
    # supersession pointers' winners and an atom's derives_from its parent).
    links: Sequence[NoteLink] = ()
    project: str = ""  # the knowledge loop's project ("" = every project)
    domains: Sequence[str] = ()
    occurred_at: int | None = None  # µs: when what the memory says happened, if it says

    def __post_init__(self) -> None:
        rid = self.memory_id if isinstance(self.memory_id, str) else repr(self.memory_id)
        if not isinstance(self.memory_id, str) or not self.memory_id.strip():
            raise _bad(rid, "memory_id must be a non-empty string")
        if self.kind not in KINDS:
            raise _bad(rid, f"kind must be one of {', '.join(KINDS)}, found {self.kind!r}")
        for name in ("title", "description", "content", "namespace"):
            if not isinstance(getattr(self, name), str):
                raise _bad(rid, f"{name} must be a string")
        c = self.confidence
        if isinstance(c, bool) or not isinstance(c, int | float) or not math.isfinite(c):
            raise _bad(rid, f"confidence must be a number in [0, 1], found {c!r}")
        if not 0.0 <= c <= 1.0:
            raise _bad(rid, f"confidence must be in [0, 1], found {c!r}")
        object.__setattr__(self, "confidence", float(c))
        for name in ("captured", "last_seen"):
            if not _is_date(getattr(self, name)):
                raise _bad(rid, f"{name} must be a date, found {getattr(self, name)!r}")
        if self.expires_at is not None and not _is_date(self.expires_at):
            raise _bad(rid, f"expires_at must be a date or None, found {self.expires_at!r}")
        for name in ("tags", "sources"):
            values = getattr(self, name)
            if isinstance(values, str) or not all(isinstance(v, str) and v.strip() for v in values):
                raise _bad(rid, f"{name} must be a sequence of non-empty strings")
            object.__setattr__(self, name, tuple(values))
        for name in ("supersedes", "superseded_by", "atom_of"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, str) or not v.strip()):
                raise _bad(rid, f"{name} must be a memory id or None, found {v!r}")
        if not isinstance(self.pinned, bool) or not isinstance(self.archived, bool):
            raise _bad(rid, "pinned and archived must be booleans")
        if not isinstance(self.project, str) or not all(isinstance(d, str) for d in self.domains):
            raise _bad(rid, "project must be a string and domains a list of strings")
        object.__setattr__(self, "domains", tuple(self.domains))
        occ = self.occurred_at
        if occ is not None and (isinstance(occ, bool) or not isinstance(occ, int) or occ < 0):
            raise _bad(rid, f"occurred_at must be µs since the epoch or None, found {occ!r}")
        extra = dict(self.extra_frontmatter)
        for key in extra:
            if not isinstance(key, str):
                raise _bad(rid, f"extra_frontmatter keys must be strings, found {key!r}")
            if key in RESERVED_KEYS or key.startswith(RESERVED_PREFIX):
                raise _bad(rid, f"extra_frontmatter may not set {key!r}: render owns it")
        links = tuple(self.links)
        for ln in links:
            if not isinstance(ln, NoteLink) or ln.relation not in RELATIONS:
                raise _bad(rid, f"links: each is a NoteLink with a relation in {', '.join(RELATIONS)}")
            if not isinstance(ln.to, str) or not ln.to.strip() or not isinstance(ln.metadata, Mapping):
                raise _bad(rid, "links: each names a memory id and carries a metadata mapping")
        # One edge per (relation, target), in one canonical order, so that a store and its
        # re-import render the same bytes (the first edge's metadata is the one kept).
        unique: dict[tuple[str, str], NoteLink] = {}
        for ln in links:
            unique.setdefault((ln.relation, ln.to), ln)
        object.__setattr__(self, "links", tuple(unique[k] for k in sorted(unique)))
        if PROMOTED_KEY in extra and not _is_date(extra[PROMOTED_KEY]):
            raise _bad(rid, f"{PROMOTED_KEY} must be a date")
        object.__setattr__(self, "extra_frontmatter", extra)


@dataclass(frozen=True)
class RenderReport:
    """Paths relative to the vault root; `unchanged` counts files left as they were.

    The last three lists are about the managed regions of INDEX files, as
    `AgentFilesReport` says them for persona files: "file: region" for a region a
    person edited (kept) or deleted (not put back), "file: why" for a file left alone.
    """

    written: list[str]
    unchanged: int
    removed: list[str]
    kept_edits: list[str] = field(default_factory=list)
    missing_regions: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)


class UnmanagedFileConflict(UsageError):
    """render would overwrite a file it did not write (exit 64)."""

    slug = "vault_unmanaged_file"


def vault_type(record: NoteRecord) -> str:
    """The vault type a record renders as: one of the five note types, or wiki_page."""
    if record.kind == "observation":
        return "reference"
    if record.kind == "knowledge":
        grounded = bool(record.sources) and all(s.startswith("raw/") for s in record.sources)
        return schema.WIKI_TYPE if grounded else "reference"
    return record.kind


def _display(text: str, limit: int, fallback: str) -> str:
    shown = index_format.one_line(text) or fallback
    if len(shown) > limit:
        shown = shown[: limit - 1].rstrip() + "…"
    return shown


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip(" \t#>-*"):
            return line.strip(" \t#>-*")
    return ""


@dataclass(frozen=True)
class _Placed:
    record: NoteRecord
    vtype: str
    directory: str  # "memory" or "wiki"
    filename: str
    title: str
    hook: str


def _place(records: Sequence[NoteRecord]) -> dict[str, _Placed]:
    seen: set[str] = set()
    for r in records:
        if r.memory_id in seen:
            raise BadInput(f"two records share memory_id {r.memory_id!r}", memory_id=r.memory_id)
        seen.add(r.memory_id)
    notes: list[tuple[str, naming.NoteName, tuple[date, str]]] = []
    pages: list[tuple[str, naming.WikiName, tuple[date, str]]] = []
    vtypes = {}
    for r in records:
        vt = vtypes[r.memory_id] = vault_type(r)
        topic = naming.slugify_topic(r.title)
        order = (r.captured, r.memory_id)
        if vt == schema.WIKI_TYPE:
            year = r.expires_at.year if r.expires_at is not None else None
            pages.append((r.memory_id, naming.WikiName(topic, year), order))
        else:
            scope = None
            if vt in ("decision", "project") and r.expires_at is not None:
                scope = naming.Scope.from_expiry(r.expires_at)
            notes.append((r.memory_id, naming.NoteName(vt, topic, scope), order))
    note_files = naming.unique_filenames(notes)
    page_files = naming.unique_filenames(pages)
    placed = {}
    for r in records:
        vt = vtypes[r.memory_id]
        title = _display(r.title, schema.NAME_MAX, f"Untitled {r.kind}")
        hook = _display(r.description, schema.DESCRIPTION_HOOK_MAX, _first_line(r.content) or title)
        if vt == schema.WIKI_TYPE:
            placed[r.memory_id] = _Placed(r, vt, "wiki", page_files[r.memory_id], title, hook)
        else:
            placed[r.memory_id] = _Placed(r, vt, "memory", note_files[r.memory_id], title, hook)
    return placed


def _frontmatter(p: _Placed, placed: Mapping[str, _Placed]) -> dict[str, Any]:
    r = p.record
    level = confidence_level(r.confidence)
    meta: dict[str, Any] = {
        "schema_version": schema.CURRENT_SCHEMA_VERSION,
        "name": p.title,
        "description": p.hook,
        "type": p.vtype,
        "captured": r.captured,
        "last_seen": r.last_seen,
        "sources": list(r.sources) or [f"mnemolog:{r.memory_id}"],
        "confidence": level,
        "mnemolog_id": r.memory_id,
        "mnemolog_kind": r.kind,
        "mnemolog_namespace": r.namespace,
    }
    meta.update(r.extra_frontmatter)
    if p.vtype == schema.WIKI_TYPE:
        meta["provenance"] = schema.WIKI_PROVENANCE
    if p.title != r.title:
        meta["mnemolog_title"] = r.title
    if p.hook != r.description:
        meta["mnemolog_description"] = r.description
    if r.confidence != CONFIDENCE_VALUES[level]:
        meta["mnemolog_confidence"] = r.confidence
    if r.pinned:
        meta["pinned"] = True
    if r.expires_at is not None:
        meta["expires_at"] = r.expires_at
    for key, target in (("supersedes", r.supersedes), ("superseded_by", r.superseded_by)):
        if target is None:
            continue
        meta[f"mnemolog_{key}"] = target
        other = placed.get(target)
        # The format's field holds a filename, and the validator wants it to exist next to
        # this file; a target elsewhere (or not rendered) is kept by id only.
        if other is not None and other.directory == p.directory and other is not p:
            meta[key] = other.filename
    if r.tags:
        meta["tags"] = list(r.tags)
    if r.archived:
        meta["archived"] = True
    if r.atom_of is not None:
        meta["mnemolog_atom_of"] = r.atom_of
    if r.links:
        meta["mnemolog_links"] = [ln.frontmatter() for ln in r.links]
    if r.project:
        meta["mnemolog_project"] = r.project
    if r.domains:
        meta["mnemolog_domains"] = list(r.domains)
    if r.occurred_at is not None:
        meta["mnemolog_occurred_at"] = schema.instant_text(r.occurred_at)
    return meta


def _section(p: _Placed, placed: Mapping[str, _Placed]) -> tuple[int, str]:
    """Which INDEX section lists a note, and the hook its line shows there."""
    r = p.record
    if r.superseded_by is not None:
        newer = placed.get(r.superseded_by)
        if newer is not None:
            when = newer.record.captured
            return _ARCHIVE, f"superseded by {newer.filename}, {when.isoformat()}"
        return _ARCHIVE, f"superseded by memory {r.superseded_by}, {r.last_seen.isoformat()}"
    if r.archived:
        return _ARCHIVE, f"archived {r.last_seen.isoformat()}: {p.hook}"
    promoted = r.extra_frontmatter.get(PROMOTED_KEY)
    if isinstance(promoted, date):
        return _PROMOTED, f"promoted {promoted.isoformat()} from {p.filename}"
    return _TYPE_SECTION[p.vtype], p.hook


def _page(heading: str, lines: Sequence[str]) -> str:
    return f"# {heading}\n\n" + "".join(f"{line}\n" for line in lines)


def _slice_files(title: str, heading: str, slice_name: str, entries: Sequence[str]) -> dict[str, str]:
    """Sub-index files for one section, paged into a tree when it is long.

    Pages hold at most INDEX_PAGE_ENTRIES lines: INDEX_{slice}_NNN.md list
    entries, INDEX_{slice}_l2_NNN.md list those pages, and so on, until the
    top INDEX_{slice}.md fits on one page.
    """
    files: dict[str, str] = {}
    lines = list(entries)
    spans = [(i, i) for i in range(1, len(lines) + 1)]
    level = 0
    while len(lines) > INDEX_PAGE_ENTRIES:
        level += 1
        count = math.ceil(len(lines) / INDEX_PAGE_ENTRIES)
        width = max(3, len(str(count)))
        new_lines, new_spans = [], []
        for n in range(count):
            lo = n * INDEX_PAGE_ENTRIES
            chunk, chunk_spans = lines[lo : lo + INDEX_PAGE_ENTRIES], spans[lo : lo + INDEX_PAGE_ENTRIES]
            mid = "" if level == 1 else f"l{level}_"
            name = f"INDEX_{slice_name}_{mid}{n + 1:0{width}d}.md"
            files[name] = _page(f"{title}: {heading} ({n + 1}/{count})", chunk)
            span = (chunk_spans[0][0], chunk_spans[-1][1])
            new_lines.append(f"- [{name}]({name}) {index_format.EM_DASH} entries {span[0]}–{span[1]}")
            new_spans.append(span)
        lines, spans = new_lines, new_spans
    files[naming.index_filename(slice_name)] = _page(f"{title}: {heading}", lines)
    return files


def index_region(slice_name: str) -> str:
    """The managed region holding one section's lines in INDEX.md (`index.feedback`, ...)."""
    return f"index.{slice_name}"


def _top_index(title: str, sections: Sequence[tuple[str, str, list[str]]]) -> str:
    # Each section's lines sit in a managed region (regions.py), so a line a person adds
    # outside them survives the next render; headings and title are outside, plain Markdown.
    parts = [f"# {title}\n"]
    for heading, slice_name, lines in sections:
        body = "".join(f"{line}\n" for line in lines)
        parts.append(f"\n## {heading}\n" + regions.block(index_region(slice_name), body))
    return "".join(parts)


def _index_files(title: str, sections: Sequence[tuple[str, str, list[str]]]) -> dict[str, str]:
    """INDEX.md inline when it fits in INDEX_MAX_LINES, else one sub-index per non-empty section."""
    inline = _top_index(title, sections)
    # The count includes the region markers: it is the length a reader meets.
    if inline.count("\n") <= INDEX_MAX_LINES:
        return {naming.INDEX_FILENAME: inline}
    files: dict[str, str] = {}
    top: list[tuple[str, str, list[str]]] = []
    for heading, slice_name, entries in sections:
        links = []
        if entries:
            files.update(_slice_files(title, heading, slice_name, entries))
            sub = naming.index_filename(slice_name)
            links.append(f"- [{sub}]({sub}) {index_format.EM_DASH} {len(entries)} entries")
        top.append((heading, slice_name, links))
    files[naming.INDEX_FILENAME] = _top_index(title, top)
    return files


def check_agent_name(agent: str) -> None:
    if not isinstance(agent, str) or not _AGENT_RE.fullmatch(agent) or agent.startswith("_"):
        raise UsageError(
            f"agent name must be 1-128 of [A-Za-z0-9._-], not starting with '.', '_' or '-'; found {agent!r}"
        )


def note_paths(records: Sequence[NoteRecord]) -> dict[str, str]:
    """Where each record renders, by memory id: `memory/<name>.md` or `wiki/<name>.md`."""
    return {mid: f"{p.directory}/{p.filename}" for mid, p in _place(records).items()}


def plan_vault(agent: str, records: Sequence[NoteRecord]) -> dict[str, bytes]:
    """Every file of one agent's vault, by path relative to `<root>/<agent>/`."""
    check_agent_name(agent)
    placed = _place(records)
    files: dict[str, bytes] = {}
    sections: list[list[tuple[str, str]]] = [[] for _ in SECTIONS]
    wiki_entries: list[tuple[str, str]] = []
    for p in placed.values():
        doc = Document(_frontmatter(p, placed), p.record.content)
        files[f"{p.directory}/{p.filename}"] = serialize_bytes(doc)
        if p.directory == "wiki":
            wiki_entries.append((p.filename, index_format.entry(p.title, p.filename, p.hook)))
        else:
            n, hook = _section(p, placed)
            sections[n].append((p.filename, index_format.entry(p.title, p.filename, hook)))
    memory_index = _index_files(
        f"{agent} {index_format.EM_DASH} Memory Index",
        [
            (heading, slice_name, [line for _, line in sorted(sections[i])])
            for i, (heading, slice_name) in enumerate(SECTIONS)
        ],
    )
    for name, text in memory_index.items():
        files[f"memory/{name}"] = text.encode("utf-8")
    if wiki_entries:
        wiki_index = _index_files(
            f"{agent} {index_format.EM_DASH} Wiki Index",
            [("Pages", "pages", [line for _, line in sorted(wiki_entries)])],
        )
        for name, text in wiki_index.items():
            files[f"wiki/{name}"] = text.encode("utf-8")
    return dict(sorted(files.items()))


# -- the I/O edge ------------------------------------------------------------


def _read_manifest(path: Path) -> set[str]:
    where = {"file": str(path)}
    try:
        data = read_regular(path, MANIFEST_MAX_BYTES)
    except FileNotFoundError:
        return set()
    except FileTooLarge:
        raise BadInput(f"{path}: manifest exceeds {MANIFEST_MAX_BYTES} bytes", **where) from None
    except OSError as exc:
        raise StorageError(f"cannot read the vault manifest {path}: {exc}", **where) from exc
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(
            f"{path}: manifest is not JSON ({exc}); delete it to adopt the files", **where
        ) from None
    if (
        not isinstance(doc, dict)
        or doc.get("format") != MANIFEST_FORMAT
        or not isinstance(doc.get("files"), list)
        or not all(isinstance(f, str) for f in doc["files"])
    ):
        raise BadInput(
            f"{path}: expected {{'format': {MANIFEST_FORMAT!r}, 'files': [paths]}}, "
            "found something else; delete it to adopt the files",
            **where,
        )
    # An entry outside memory/ or wiki/ was not written by us: never act on it.
    return {f for f in doc["files"] if _MANAGED_RE.fullmatch(f)}


def _write_manifest(path: Path, agent: str, files: set[str]) -> None:
    doc = {"format": MANIFEST_FORMAT, "agent": agent, "files": sorted(files)}
    atomic_write(path, (json.dumps(doc, indent=0) + "\n").encode("utf-8"))


def _same_bytes(path: Path, data: bytes) -> bool | None:
    """True/False for a regular file with equal/different bytes; None when nothing is there."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size != len(data):
            return False
        return read_regular(path, len(data)) == data
    except (FileTooLarge, NotRegularFile):
        return False  # replaced since the lstat: rewrite it
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc


def _remove_leftovers(agent_dir: Path, managed: set[str]) -> None:
    """Temp files a killed render left next to files it manages (or its manifest)."""
    dirs = {agent_dir, *(agent_dir / rel for rel in {str(Path(r).parent) for r in managed} if rel != ".")}
    for d in sorted(dirs):
        for temp, target in stale_temps(d):
            rel = str((d / target).relative_to(agent_dir))
            if rel in managed or rel == MANIFEST_NAME:
                with contextlib.suppress(FileNotFoundError):
                    temp.unlink()


# The INDEX files a person may add lines to (their entry lists are managed regions);
# sub-index pages are mnemolog's alone and rewritten whole.
_TOP_INDEXES: Final = (f"memory/{naming.INDEX_FILENAME}", f"wiki/{naming.INDEX_FILENAME}")


def _merge_index(path: Path, planned: bytes) -> tuple[regions.MergeResult | None, str | None]:
    """The INDEX on disk with its regions brought up to `planned`; (None, why) to leave it alone.

    (None, None) when the file has no region at all: it is an INDEX written before
    the regions were, so the planned one replaces it.
    """
    try:
        existing = read_regular(path, MANIFEST_MAX_BYTES).decode("utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    except UnicodeDecodeError:
        return None, "not UTF-8"
    except (FileTooLarge, NotRegularFile) as exc:
        return None, str(exc)
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    try:
        if not regions.parse(existing):
            return None, None
        contents = {r.name: r.content(t) for t in [planned.decode("utf-8")] for r in regions.parse(t)}
        return regions.merge(existing, contents), None
    except regions.RegionError as exc:
        return None, f"{exc}; fix its markers to have it rendered again"


def render_vault(
    root: Path,
    agent: str,
    records: Sequence[NoteRecord],
    *,
    overwrite_unmanaged: bool = False,
) -> RenderReport:
    """Bring `<root>/<agent>/` to the rendering of `records`, touching only what changed.

    Refuses (UnmanagedFileConflict) to replace a file with different bytes that
    the manifest does not list, unless `overwrite_unmanaged`. The manifest is
    written before the files (listing old and new) and after them (new only),
    so a crash at any point leaves no file that a later render would not know
    it owns.
    """
    files = plan_vault(agent, records)
    agent_dir = root / agent
    manifest = agent_dir / MANIFEST_NAME
    owned = _read_manifest(manifest)
    _remove_leftovers(agent_dir, owned | set(files))
    state = {rel: _same_bytes(agent_dir / rel, data) for rel, data in files.items()}
    kept: list[str] = []
    missing: list[str] = []
    left_alone: list[str] = []
    for rel in _TOP_INDEXES:
        if rel in files and state[rel] is False and rel in owned:
            merged, why = _merge_index(agent_dir / rel, files[rel])
            where = f"{agent}/{rel}"
            if why is not None:
                left_alone.append(f"{where}: {why}")
                state[rel] = True  # left as it is on disk
            elif merged is not None:
                kept += [f"{where}: {n}" for n in merged.kept_edits]
                missing += [f"{where}: {n}" for n in merged.missing]
                files[rel] = merged.text.encode("utf-8")
                state[rel] = _same_bytes(agent_dir / rel, files[rel])
    conflicts = sorted(rel for rel, same in state.items() if same is False and rel not in owned)
    if conflicts and not overwrite_unmanaged:
        raise UnmanagedFileConflict(
            f"{len(conflicts)} file(s) under {agent_dir} were not written by mnemolog and "
            f"would change, e.g. {conflicts[0]}; pass overwrite_unmanaged=True to adopt them",
            files=conflicts[:20],
        )
    wanted = set(files)
    if not wanted <= owned:
        _write_manifest(manifest, agent, owned | wanted)
    written = []
    prog = Progress("rendering vault", len(files))
    for rel, data in files.items():
        if state[rel] is not True:
            try:
                atomic_write(agent_dir / rel, data)
            except OSError as exc:
                raise StorageError(f"cannot write {agent_dir / rel}: {exc}") from exc
            written.append(f"{agent}/{rel}")
        prog.advance()
    prog.close()
    removed = []
    touched_dirs = set()
    for rel in sorted(owned - wanted):
        path = agent_dir / rel
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StorageError(f"cannot remove {path}: {exc}") from exc
        removed.append(f"{agent}/{rel}")
        touched_dirs.add(path.parent)
    for d in sorted(touched_dirs):
        fsync_dir(d)
    if owned != wanted:
        _write_manifest(manifest, agent, wanted)
    return RenderReport(
        written=written,
        unchanged=len(files) - len(written),
        removed=removed,
        kept_edits=kept,
        missing_regions=missing,
        conflicts=left_alone,
    )
