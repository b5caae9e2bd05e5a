"""Memory views as a pure function of entries: the fold a forensic bundle ships and re-checks.

The projection (DuckDB) is the read model of a home; a bundle cannot carry
it, and an auditor cannot trust it. So a bundle's memory views, atomisation
envelopes and chain are defined here, over entries alone, with the same
semantics as the projection's fold (first store wins; updates replace
given fields and merge metadata, a null removing a key; archive signals by
operator or by atomisation; restore clears both; atomisation.completed sets
`atomised_into`). The exporter and the verifier call the same functions, so
the verifier recomputes every view byte for byte.

Which memories an entry touches, how metadata merges and how an odd field
is read are the vocabulary's rules (mnemolog.eventlog.vocabulary.events), shared
with the projection; a property test holds the two folds to the same views.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from mnemolog.eventlog.format import sealing
from mnemolog.eventlog.format.entry import Entry, to_jsonable
from mnemolog.eventlog.vocabulary import events as vk
from mnemolog.eventlog.vocabulary.events import (
    ATOMISATION_ARCHIVED_KEY,
    SEALED_FIELD,
    UNDO_FIELDS,
    merge_metadata,
    mirror_atomisation_archive,
    read_float,
    read_id,
    read_int,
    read_span,
    read_str,
    read_tags,
    touched_ids,
    upcast,
)

__all__ = [
    "ENVELOPES_FORMAT",
    "KNOWLEDGE_DEFAULTS",
    "VIEWS_FORMAT",
    "chain_closure",
    "entry_touched_ids",
    "envelope",
    "fold_views",
    "opened",
    "render_envelopes",
    "render_json",
    "render_views",
    "stored_ids",
    "touched_ids",
]

VIEWS_FORMAT = "mnemolog/memory-views/v1"
ENVELOPES_FORMAT = "mnemolog/atomisation-envelopes/v1"


def _id(value: Any) -> str:
    return read_id(value)


def _merge(old: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    return to_jsonable(merge_metadata(old, patch))  # type: ignore[no-any-return]


def _new_view(e: Entry, d: dict[str, Any], mid: str) -> dict[str, Any]:
    meta = d.get("metadata")
    atom_of = d.get("atom_of")
    return {
        "id": mid,
        "namespace": str(d.get("namespace", "default")),
        "kind": str(d.get("kind", "observation")),
        "title": read_str(d.get("title")),
        "content": str(d.get("content", "")),
        "tags": read_tags(d.get("tags")),
        "confidence": read_float(d.get("confidence")),
        "source": read_str(d.get("source")),
        "metadata": to_jsonable(meta) if isinstance(meta, dict) else {},
        "created_at": read_int(d.get("created_at")) or e.ts,
        "updated_at": e.ts,
        "last_seen": read_int(d.get("last_seen")),
        "atom_of": atom_of if isinstance(atom_of, str) and atom_of else None,
        "source_span": read_span(d.get("source_span")),
        "atomised_into": None,
        "atom_ids": [],
        "atomisation_archived_at": None,
        "archived_at": None,
        "archive_reason": None,
        "stored_seq": e.seq,
        "last_event_seq": e.seq,
        "links": {"outgoing": [], "incoming": []},  # filled in at the end of the fold
        "seqs": [],
        **_sealed(d),
        **_occurred(d),
    }


def _occurred(d: dict[str, Any]) -> dict[str, Any]:
    # Shown only when the entry says when it happened: a view of any other memory is byte for
    # byte what it was before memory.stored could carry occurred_at.
    when = read_int(d.get("occurred_at"))
    return {"occurred_at": when} if when is not None else {}


def _sealed(d: dict[str, Any]) -> dict[str, Any]:
    # Only a view with content it could not open says so: every other view is byte for byte
    # what it was before sealing existed.
    closed = d.get(SEALED_FIELD)
    return {"sealed": sorted(str(f) for f in closed)} if isinstance(closed, list) and closed else {}


# -- the knowledge loop's part of a view ------------------------------------------------
# Shown as a "knowledge" block, and only once the memory has any of it (a project, a
# domain, a status other than active, a reinforcement): the views of memories that never
# met the knowledge loop are byte for byte what they were before it existed, so bundles
# exported then still verify.


def _project(value: Any) -> str:
    return value.strip() if isinstance(value, str) and value else ""


#: A view without a knowledge block has these values (its projected row shows them).
KNOWLEDGE_DEFAULTS: dict[str, Any] = {
    "project": "",
    "domains": [],
    "status": "active",
    "promoted_at": None,
    "reference_count": 0,
    "last_referenced_at": None,
}


def _knowledge(d: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    domains = d.get("domains")
    candidate = d.get("status") == "candidate"
    block = {
        **KNOWLEDGE_DEFAULTS,
        "status": "candidate" if candidate else "active",
        "project": _project(d.get("project")),
        "domains": read_tags(domains) if domains else [],
    }
    shown = candidate or bool(block["project"]) or bool(block["domains"])
    return block, shown


def _knowledge_event(view: dict[str, Any], block: dict[str, Any], e: Entry, d: dict[str, Any]) -> bool:
    """Apply a knowledge event to a view; True when it changed the memory."""
    if e.type == vk.MEMORY_REINFORCED:
        conf = read_float(d.get("confidence"))
        if conf is None or not 0.0 <= conf <= 1.0 or block["status"] != "active":
            return False
        view["confidence"] = conf
        view["last_event_seq"] = e.seq
        block["reference_count"] += 1
        block["last_referenced_at"] = e.ts
        return True
    after = vk.status_after(e.type, block["status"])
    if after is None:
        return False
    block["status"] = after
    view["last_event_seq"] = e.seq
    if e.type == vk.MEMORY_PROMOTED:
        domains = d.get("domains")
        block["promoted_at"] = e.ts
        block["project"] = _project(d.get("project"))
        block["domains"] = read_tags(domains) if isinstance(domains, list) else []
    elif e.type == vk.MEMORY_SUPERSEDED and d.get("by") == "decay":
        conf = read_float(d.get("confidence"))
        if conf is not None and 0.0 <= conf <= 1.0:
            view["confidence"] = conf
    elif e.type == vk.MEMORY_REINSTATED:
        block["reference_count"] += 1
        block["last_referenced_at"] = e.ts
    return True


_KNOWLEDGE_EVENTS = frozenset(
    (
        vk.MEMORY_PROMOTED,
        vk.MEMORY_REJECTED,
        vk.MEMORY_SUPERSEDED,
        vk.MEMORY_REINFORCED,
        vk.MEMORY_REINSTATED,
    )
)


def _updated(v: dict[str, Any], e: Entry, d: dict[str, Any]) -> None:
    v["updated_at"] = e.ts
    v["last_event_seq"] = e.seq
    for col in ("namespace", "kind", "source"):
        if d.get(col) is not None:
            v[col] = str(d[col])
    conf = read_float(d.get("confidence"))
    if conf is not None:
        v["confidence"] = conf
    seen = read_int(d.get("last_seen"))
    if seen is not None:
        v["last_seen"] = seen
    if isinstance(d.get("tags"), list):
        v["tags"] = read_tags(d["tags"])
    if isinstance(d.get("metadata"), dict):
        v["metadata"] = _merge(v["metadata"], d["metadata"])
    if d.get("title") is not None:
        v["title"] = str(d["title"])
    if d.get("content") is not None:
        v["content"] = str(d["content"])
    when = read_int(d.get("occurred_at"))
    if when is not None:
        v["occurred_at"] = when
    closed = _sealed(d).get("sealed")
    if closed:
        v["sealed"] = sorted({*v.get("sealed", []), *closed})


def opened(e: Entry, keys: sealing.KeyLookup | None = None) -> dict[str, Any]:
    """An entry's payload at its current tv, its sealed content opened with `keys` where it can be."""
    data = e.data
    if e.type in vk.SEALED:
        data = sealing.open_payload(e.type, data, keys or _no_key)
    return upcast(e.type, e.tv, data)


def _no_key(_subject: str) -> None:
    return None


def entry_touched_ids(e: Entry) -> list[str]:
    """The memories entry `e` touches, read at its current tv."""
    return payload_touched_ids(e.type, e.tv, e.data)


def payload_touched_ids(type_: str, tv: int, data: dict[str, Any]) -> list[str]:
    """The memories an entry of this type, tv and payload touches (`entry_touched_ids`'s rule,
    for a payload a writer is about to sign)."""
    return touched_ids(type_, upcast(type_, tv, data))


def _mirror(meta: dict[str, Any], archived_us: int | None) -> dict[str, Any]:
    return to_jsonable(mirror_atomisation_archive(meta, archived_us))  # type: ignore[no-any-return]


def fold_views(
    entries: Iterable[Entry],
    ids: Collection[str],
    *,
    mirror: bool = True,
    keys: sealing.KeyLookup | None = None,
) -> dict[str, dict[str, Any]]:
    """The views of the memories `ids` after `entries` (in seq order); stored ones only.

    `mirror=False` folds as releases before the atomisation-archive mirror did (no
    `metadata.atomisation_archived_at`), so a bundle exported by one still verifies.
    Sealed content is opened with `keys`; what does not open is left out of the
    views (see `opened`).
    """
    views: dict[str, dict[str, Any]] = {}
    wanted = set(ids)
    # Every entry about a memory, even one that precedes its store (as the touches table has it).
    seqs: dict[str, list[int]] = {i: [] for i in wanted}
    # Edges likewise: the projection keeps a link whether or not its ends exist yet.
    links: dict[str, dict[str, list[dict[str, Any]]]] = {i: {"outgoing": [], "incoming": []} for i in wanted}
    undo: list[tuple[int, str, dict[str, Any]]] = []
    blocks: dict[str, dict[str, Any]] = {}
    shown: set[str] = set()
    for e in entries:
        d = opened(e, keys)
        for i in touched_ids(e.type, d):
            if i in wanted:
                seqs[i].append(e.seq)
        if e.type == "memory.stored":
            mid = _id(d.get("id"))
            if mid in wanted and mid not in views:
                views[mid] = _new_view(e, d, mid)
                blocks[mid], is_shown = _knowledge(d)
                if is_shown:
                    shown.add(mid)
        if e.type == vk.MEMORY_ERASED:
            # The content was forgotten: the view keeps what the log proves (ids, times,
            # links), says when and why, and shows no content even where a key was given.
            for i in touched_ids(e.type, d):
                if i in views:
                    views[i]["erased"] = {"seq": e.seq, "reason": read_str(d.get("reason"))}
                    views[i].update(title=None, content="", tags=[], source=None, metadata={})
        target = views.get(_id(d.get("id")))
        if e.type in _KNOWLEDGE_EVENTS and target is not None:
            if _knowledge_event(target, blocks[target["id"]], e, d):
                shown.add(target["id"])
        elif e.type == "memory.updated" and target is not None:
            block = blocks[target["id"]]
            if d.get("migration_run"):
                before = {k: copy.deepcopy(target[k]) for k in UNDO_FIELDS if k in target}
                before.update({k: copy.deepcopy(block[k]) for k in ("project", "domains")})
                before.setdefault("occurred_at", None)  # none shown: none put back
                undo.append((e.seq, target["id"], before))
            _updated(target, e, d)
            if isinstance(d.get("project"), str):
                block["project"] = _project(d["project"])
                shown.add(target["id"])
            if isinstance(d.get("domains"), list):
                block["domains"] = read_tags(d["domains"])
                shown.add(target["id"])
        elif e.type == "migration.rolled_back" and read_int(d.get("snapshot_size")) is not None:
            # A log-backed migration rolled back: what its updates replaced comes back.
            size = d["snapshot_size"]
            for seq, mid, before in sorted(undo, key=lambda u: u[0], reverse=True):
                if seq >= size and mid in views:
                    block = blocks[mid]
                    block["project"], block["domains"] = before["project"], before["domains"]
                    views[mid].update(
                        {k: x for k, x in before.items() if k not in ("project", "domains", "occurred_at")}
                    )
                    if before["occurred_at"] is None:
                        views[mid].pop("occurred_at", None)  # a view shows a date only when it has one
                    else:
                        views[mid]["occurred_at"] = before["occurred_at"]
            undo = [u for u in undo if u[0] < size]
        elif e.type == "memory.archived" and target is not None:
            if d.get("by") == "atomisation":
                target["atomisation_archived_at"] = e.ts
                if mirror:
                    target["metadata"] = _mirror(target["metadata"], e.ts)
            else:
                target["archived_at"] = e.ts
                target["archive_reason"] = read_str(d.get("reason"))
            target["last_event_seq"] = e.seq
        elif e.type == "memory.restored" and target is not None:
            if mirror and ATOMISATION_ARCHIVED_KEY in target["metadata"]:
                target["metadata"] = _mirror(target["metadata"], None)
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
        elif e.type == "link.removed":
            gone = (_id(d.get("src")), _id(d.get("dst")), str(d.get("relation", "")))
            for end, side in ((gone[0], "outgoing"), (gone[1], "incoming")):
                if end in wanted:
                    kept = [x for x in links[end][side] if (x["src"], x["dst"], x["relation"]) != gone]
                    links[end][side] = kept
    for mid, v in views.items():
        v["seqs"] = seqs[mid]
        v["links"] = links[mid]
        if mid in shown:
            v["knowledge"] = blocks[mid]
    return views


def envelope(view: dict[str, Any]) -> dict[str, Any]:
    """The atomisation envelope: both atomisation signals and both directions of the chain
    (docs/curators.md, bundles carry the chain both ways)."""
    return {
        "memory_id": view["id"],
        "atomised_into": view["atomised_into"],
        "archived_at": view["atomisation_archived_at"],
        "atom_ids": list(view["atom_ids"]),
        "atom_of": view["atom_of"],
    }


def chain_closure(root: str, entries: Sequence[Entry]) -> set[str]:
    """Every memory connected to `root` by atomisation: parents, atoms, siblings, transitively.

    Edges come from `memory.stored` with `atom_of` (atom to parent), from
    `atomisation.completed` (source to each atom id it names) and from
    `candidate.extracted` (the interaction to each candidate it yielded, so a
    promoted memory's bundle holds the interaction it came from; the
    interaction's id is a closure member without a view).
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
        elif e.type == vk.CANDIDATE_EXTRACTED:
            # A candidate's lineage: the interaction it was extracted from.
            cands = d.get("candidate_ids")
            for c in cands if isinstance(cands, list) else []:
                edge(_id(d.get("interaction_id")), _id(c))
    seen = {root}
    todo = [root]
    while todo:
        for nxt in adj.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def stored_ids(entries: Iterable[Entry]) -> set[str]:
    """Every memory id some `memory.stored` entry among `entries` names."""
    return {_id(e.data.get("id")) for e in entries if e.type == "memory.stored"} - {""}


def render_json(value: Any) -> bytes:
    """The one JSON rendering of views: sorted keys, two-space indent, UTF-8, final newline."""
    return (json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()


def render_views(views: dict[str, dict[str, Any]]) -> bytes:
    """memories.json of a bundle: the views under the views format."""
    return render_json({"format": VIEWS_FORMAT, "memories": views})


def render_envelopes(views: dict[str, dict[str, Any]]) -> bytes:
    """envelopes.json of a bundle: each view's AtomisationEnvelope under the envelopes format."""
    return render_json({"format": ENVELOPES_FORMAT, "envelopes": {k: envelope(v) for k, v in views.items()}})
