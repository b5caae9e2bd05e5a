"""The memory as the projection serves it: its columns, its typed shape, and a row's conversion.

`Memory` is a TypedDict, so callers that index a memory by key (`m["id"]`)
keep working and a type checker knows every field. Reads add optional keys:
`links` (get), `score` (recall, search), `explain` (recall's ranks, on
request); writes add `warnings` (what post hooks reported), `embedding`
(what embed-on-insert did) and, for a store under an auto-atomise policy,
the `atomise_*` keys.
"""

from __future__ import annotations

import json
from typing import Any, NotRequired, TypedDict, cast

__all__ = ["MEMORY_FIELDS", "MEMORY_SELECT", "Edge", "Links", "Memory", "row_to_memory"]

MEMORY_FIELDS = [
    "id",
    "namespace",
    "kind",
    "title",
    "content",
    "tags",
    "confidence",
    "source",
    "metadata",
    "created_at",
    "updated_at",
    "last_seen",
    "atom_of",
    "source_span",
    "atomised_into",
    "atomisation_archived_at",
    "archived_at",
    "archive_reason",
    "stored_seq",
    "last_event_seq",
    "project",
    "domains",
    "status",
    "promoted_at",
    "reference_count",
    "last_referenced_at",
    "occurred_at",
]
# The columns of a Memory, selected from `memories m`, in MEMORY_FIELDS order.
MEMORY_SELECT = ", ".join(f"m.{c}" for c in MEMORY_FIELDS)


class Edge(TypedDict):
    """A link as stored: `seq` is its `link.created` entry, `created_at` that entry's time (µs)."""

    seq: int
    src: str
    dst: str
    relation: str
    metadata: dict[str, Any]
    created_at: int
    warnings: NotRequired[list[str]]
    already_linked: NotRequired[bool]


class Links(TypedDict):
    """A memory's edges: those leaving it and those entering it, oldest first."""

    outgoing: list[Edge]
    incoming: list[Edge]


class Memory(TypedDict):
    """One memory: its fields, both archive signals, and where the log holds it (seqs).

    The knowledge loop's fields: `project` ("" = every project), `domains`,
    `status` (candidate, active, superseded, invalid), `promoted_at` (when
    it became active), `reference_count` and `last_referenced_at` (its
    reinforcements). `occurred_at`: when what it records happened, if given.
    """

    id: str
    namespace: str
    kind: str
    title: str | None
    content: str
    tags: list[str]
    confidence: float | None
    source: str | None
    metadata: dict[str, Any]
    created_at: int
    updated_at: int
    last_seen: int | None
    atom_of: str | None
    source_span: list[int] | None
    atomised_into: int | None
    atomisation_archived_at: int | None
    archived_at: int | None
    archive_reason: str | None
    stored_seq: int
    last_event_seq: int
    project: str
    domains: list[str]
    status: str
    promoted_at: int | None
    reference_count: int
    last_referenced_at: int | None
    occurred_at: int | None  # when what it says happened (µs), when it says
    links: NotRequired[Links]
    score: NotRequired[float]
    warnings: NotRequired[list[str]]
    atomise_mode: NotRequired[str]
    atomise_outcome: NotRequired[str]
    atomise_error: NotRequired[dict[str, Any]]
    atomisation: NotRequired[dict[str, Any]]
    candidate: NotRequired[dict[str, Any]]  # what extraction and triage said (candidates list)
    decayed_confidence: NotRequired[float]  # confidence at the clock of the read (decay run)
    embedding: NotRequired[str]
    explain: NotRequired[dict[str, Any]]
    already_stored: NotRequired[bool]


def row_to_memory(row: tuple[Any, ...]) -> Memory:
    """A row of MEMORY_SELECT as a Memory (metadata decoded, lists as lists)."""
    m = dict(zip(MEMORY_FIELDS, row, strict=False))
    m["metadata"] = json.loads(m["metadata"]) if m["metadata"] else {}
    m["tags"] = list(m["tags"] or [])
    m["domains"] = list(m["domains"] or [])
    if m["source_span"] is not None:
        m["source_span"] = list(m["source_span"])
    return cast(Memory, m)
