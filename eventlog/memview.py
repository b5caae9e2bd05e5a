"""Memory views as a pure function of entries: the fold a forensic bundle ships and re-checks.

The projection (DuckDB) is the read model of a home; a bundle cannot carry
it, and an auditor cannot trust it. So a bundle's memory views, atomisation
envelopes and chain are defined here, over entries alone, with the same
semantics as the projection's fold (first store wins; updates replace
given fields and merge metadata, a null removing a key; archive signals by
operator or by atomisation; restore clears both; atomisation.completed sets
`atomised_into`). The exporter and the verifier call the same functions, so
the verifier recomputes every view byte for byte.

`touched_ids` says which memories an entry touches; it mirrors the
projection's `touches` table, which the exporter uses to select entries.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from mnemolog.eventlog.entry import Entry, to_jsonable

VIEWS_FORMAT = "mnemolog/memory-views/v1"
ENVELOPES_FORMAT = "mnemolog/atomisation-envelopes/v1"


def _id(value: Any) -> str:
    return value if isinstance(value, str) else ""


def touched_ids(type_: str, data: dict[str, Any]) -> list[str]:
    """The memory ids an entry touches, in a fixed order, without duplicates."""
    ids: list[str] = []
    if type_ == "memory.stored":
        ids = [_id(data.get("id")), _id(data.get("atom_of"))]
    elif type_ in ("memory.updated", "memory.archived", "memory.restored"):
        ids = [_id(data.get("id"))]
    elif type_ == "link.created":
        ids = [_id(data.get("src")), _id(data.get("dst"))]
    elif type_ == "migration.rolled_back":
        ids = [_id(x) for x in data.get("memory_ids") or [] if isinstance(x, str)]
    elif type_ in ("atomisation.requested", "atomisation.completed", "atomisation.failed"):
        ids = [_id(data.get("source_id"))]
        if type_ == "atomisation.completed":
            atoms = data.get("atom_ids")
            ids += [_id(a) for a in atoms] if isinstance(atoms, list) else []
    out: list[str] = []
    for i in ids:
        if i and i not in out:
            out.append(i)
    return out


_UNDO_FIELDS = (
    "title",
    "content",
    "kind",
    "namespace",
    "tags",
    "confidence",
    "source",
    "metadata",
    "last_seen",
    "updated_at",
    "last_event_seq",
)


def _merge(old: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(old)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = to_jsonable(v)
    return out


def _float(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _new_view(e: Entry, d: dict[str, Any], mid: str) -> dict[str, Any]:
    span = d.get("source_span")
    tags = d.get("tags")
    meta = d.get("metadata")
    return {
        "id": mid,
        "namespace": str(d.get("namespace", "default")),
        "kind": str(d.get("kind", "observation")),
        "title": d.get("title") if isinstance(d.get("title"), str) else None,
        "content": str(d.get("content", "")),
        "tags": [str(t) for t in tags] if isinstance(tags, list) else [],
        "confidence": _float(d.get("confidence")),
        "source": d.get("source") if isinstance(d.get("source"), str) else None,
        "metadata": to_jsonable(meta) if isinstance(meta, dict) else {},
        "created_at": int(d.get("created_at") or e.ts),
        "updated_at": e.ts,
        "last_seen": d.get("last_seen") if isinstance(d.get("last_seen"), int) else None,
        "atom_of": d.get("atom_of") if isinstance(d.get("atom_of"), str) and d.get("atom_of") else None,
        "source_span": [int(x) for x in span] if isinstance(span, list) and span else None,
        "atomised_into": None,
        "atom_ids": [],
        "atomisation_archived_at": None,
        "archived_at": None,
        "archive_reason": None,
        "stored_seq": e.seq,
        "last_event_seq": e.seq,
        "links": {"outgoing": [], "incoming": []},  # filled in at the end of the fold
        "seqs": [],
    }


def _updated(v: dict[str, Any], e: Entry, d: dict[str, Any]) -> None:
    v["updated_at"] = e.ts
    v["last_event_seq"] = e.seq
    for col in ("namespace", "kind", "source"):
        if d.get(col) is not None:
            v[col] = str(d[col])
    if d.get("confidence") is not None:
        v["confidence"] = _float(d["confidence"])
    if d.get("last_seen") is not None:
        v["last_seen"] = int(d["last_seen"])
    if isinstance(d.get("tags"), list):
        v["tags"] = [str(t) for t in d["tags"]]
    if isinstance(d.get("metadata"), dict):
        v["metadata"] = _merge(v["metadata"], d["metadata"])
    if d.get("title") is not None:
        v["title"] = str(d["title"])
    if d.get("content") is not None:
        v["content"] = str(d["content"])


def fold_views(entries: Iterable[Entry], ids: Collection[str]) -> dict[str, dict[str, Any]]:
    """The views of the memories `ids` after `entries` (in seq order); stored ones only."""
    views: dict[str, dict[str, Any]] = {}
    wanted = set(ids)
    # Every entry about a memory, even one that precedes its store (as the touches table has it).
    seqs: dict[str, list[int]] = {i: [] for i in wanted}
    # Edges likewise: the projection keeps a link whether or not its ends exist yet.
    links: dict[str, dict[str, list[dict[str, Any]]]] = {i: {"outgoing": [], "incoming": []} for i in wanted}
    undo: list[tuple[int, str, dict[str, Any]]] = []
    for e in entries:
        d = e.data
        for i in touched_ids(e.type, d):
            if i in wanted:
                seqs[i].append(e.seq)
        if e.type == "memory.stored":
            mid = _id(d.get("id"))
            if mid in wanted and mid not in views:
                views[mid] = _new_view(e, d, mid)
        target = views.get(_id(d.get("id")))
        if e.type == "memory.updated" and target is not None:
            if d.get("migration_run"):
                undo.append((e.seq, target["id"], {k: copy.deepcopy(target[k]) for k in _UNDO_FIELDS}))
            _updated(target, e, d)
        elif e.type == "migration.rolled_back" and isinstance(d.get("snapshot_size"), int):
            # A log-backed migration rolled back: what its updates replaced comes back.
            size = d["snapshot_size"]
            for seq, mid, before in sorted(undo, key=lambda u: u[0], reverse=True):
                if seq >= size and mid in views:
                    views[mid].update(before)
            undo = [u for u in undo if u[0] < size]
        elif e.type == "memory.archived" and target is not None:
            if d.get("by") == "atomisation":
                target["atomisation_archived_at"] = e.ts
            else:
                target["archived_at"] = e.ts
                target["archive_reason"] = d.get("reason") if isinstance(d.get("reason"), str) else None
            target["last_event_seq"] = e.seq
        elif e.type == "memory.restored" and target is not None:
            target["archived_at"] = None
            target["archive_reason"] = None
            target["atomisation_archived_at"] = None
            target["last_event_seq"] = e.seq
        elif e.type == "atomisation.completed":
            src = views.get(_id(d.get("source_id")))
            atoms = d.get("atom_ids")
            if src is not None and isinstance(atoms, list):
                src["atomised_into"] = len(atoms)
                src["atom_ids"] = [_id(a) for a in atoms]
                src["last_event_seq"] = e.seq
        elif e.type == "link.created":
            edge = {
                "seq": e.seq,
                "src": _id(d.get("src")),
                "dst": _id(d.get("dst")),
                "relation": str(d.get("relation", "")),
                "metadata": to_jsonable(d.get("metadata")) if isinstance(d.get("metadata"), dict) else {},
                "created_at": e.ts,
            }
            if edge["src"] in wanted:
                links[edge["src"]]["outgoing"].append(edge)
            if edge["dst"] in wanted:
                links[edge["dst"]]["incoming"].append(edge)
    for mid, v in views.items():
        v["seqs"] = seqs[mid]
        v["links"] = links[mid]
    return views


def envelope(view: dict[str, Any]) -> dict[str, Any]:
    """The seed's AtomisationEnvelope: both atomisation signals and both directions of the chain."""
    return {
        "memory_id": view["id"],
        "atomised_into": view["atomised_into"],
        "archived_at": view["atomisation_archived_at"],
        "atom_ids": list(view["atom_ids"]),
        "atom_of": view["atom_of"],
    }


def chain_closure(root: str, entries: Sequence[Entry]) -> set[str]:
    """Every memory connected to `root` by atomisation: parents, atoms, siblings, transitively.

    Edges come from `memory.stored` with `atom_of` (atom to parent) and from
    `atomisation.completed` (source to each atom id it names).
    """
    adj: dict[str, set[str]] = {}

    def edge(a: str, b: str) -> None:
        if a and b and a != b:
            adj.setdefault(a, set()).add(b)
            adj.setdefault(b, set()).add(a)

    for e in entries:
        d = e.data
        if e.type == "memory.stored":
            edge(_id(d.get("id")), _id(d.get("atom_of")))
        elif e.type == "atomisation.completed":
            atoms = d.get("atom_ids")
            for a in atoms if isinstance(atoms, list) else []:
                edge(_id(d.get("source_id")), _id(a))
    seen = {root}
    todo = [root]
    while todo:
        for nxt in adj.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def stored_ids(entries: Iterable[Entry]) -> set[str]:
    return {_id(e.data.get("id")) for e in entries if e.type == "memory.stored"} - {""}


def render_json(value: Any) -> bytes:
    """The one JSON rendering of views: sorted keys, two-space indent, UTF-8, final newline."""
    return (json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()


def render_views(views: dict[str, dict[str, Any]]) -> bytes:
    return render_json({"format": VIEWS_FORMAT, "memories": views})


def render_envelopes(views: dict[str, dict[str, Any]]) -> bytes:
    return render_json({"format": ENVELOPES_FORMAT, "envelopes": {k: envelope(v) for k, v in views.items()}})
