"""Event payloads: one frozen pydantic model per (type, tv), and the upcasters.

Names are past-tense facts and stable once written. Commands build payloads
through these models (so a malformed command never reaches the log);
replay reads payloads as plain maps and `upcast` brings an old `tv` up to
the current shape without ever rewriting what was written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Kind = Literal["observation", "user", "feedback", "project", "decision", "reference", "knowledge"]
KINDS: tuple[str, ...] = ("observation", "user", "feedback", "project", "decision", "reference", "knowledge")
Relation = Literal["related_to", "supersedes", "contradicts", "derived_from", "derives_from", "reflects_on"]
RELATIONS: tuple[str, ...] = (
    "related_to",
    "supersedes",
    "contradicts",
    "derived_from",
    "derives_from",
    "reflects_on",
)
AutoAtomiseMode = Literal["off", "deferred", "synchronous"]


class Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    def to_data(self) -> dict[str, Any]:
        """The map stored in the entry: None-valued optional fields are left out."""
        return self.model_dump(mode="python", exclude_none=True)


class MemoryStored(Payload):
    """`memory.stored` tv 1: a new memory (also every atom, which carries atom_of)."""

    id: str
    namespace: str
    kind: Kind = "observation"
    title: str | None = None
    content: str
    tags: list[str] = Field(default_factory=list)
    confidence: float | None = None
    source: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: int | None = None  # µs; only when the memory predates its store (imports)
    last_seen: int | None = None
    atom_of: str | None = None
    source_span: list[int] | None = None  # [start, end) of the atom's text in the parent


class MemoryUpdated(Payload):
    """`memory.updated` tv 1: fields given replace; metadata keys merge (null removes)."""

    id: str
    title: str | None = None
    content: str | None = None
    kind: Kind | None = None
    namespace: str | None = None
    tags: list[str] | None = None
    confidence: float | None = None
    source: str | None = None
    metadata: dict[str, Any] | None = None
    last_seen: int | None = None
    migration_run: str | None = None  # set by a log-backed migration; rollbacks undo these


class MemoryArchived(Payload):
    """`memory.archived` tv 1; `by` says whose signal it is.

    "operator": an operator hid it. "atomisation": the atomisation signal of an
    atomised parent (hidden only together with atomised_into > 0).
    "reatomisation": an atom superseded by a forced re-atomisation, or left by
    an interrupted one.
    """

    id: str
    by: Literal["operator", "atomisation", "reatomisation"] = "operator"
    reason: str | None = None
    atomised_into: int | None = None


class MemoryRestored(Payload):
    id: str
    reason: str | None = None


class LinkCreated(Payload):
    """`link.created` tv 1: an edge; derives_from from an atom to its parent is the signed edge."""

    src: str
    dst: str
    relation: Relation
    metadata: dict[str, Any] = Field(default_factory=dict)


class Policy(BaseModel):
    """A namespace's governance policy; unset fields inherit from the parent namespace."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    write: Literal["any", "none"] | None = None
    auto_atomise_mode: AutoAtomiseMode | None = None
    auto_atomise_threshold_cl100k: int | None = Field(default=None, ge=1)
    auto_atomise_max_atom_tokens: int | None = Field(default=None, ge=50, le=1000)
    auto_atomise_max_retries: int | None = Field(default=None, ge=0, le=10)
    curator: Literal["ollama", "rules"] | None = None


class PolicySetV1(Payload):
    """`policy.set` tv 1 (written until tv 2 existed): the namespace's whole policy, or cleared."""

    namespace: str
    policy: dict[str, Any] = Field(default_factory=dict)
    cleared: bool = False


class PolicySet(Payload):
    """`policy.set` tv 2: what the operator changed, field by field.

    `clear` drops the namespace's own policy first; then `changes` are set and
    `unset` fields removed. tv 1 recorded the merged result instead, so the log
    could not say which fields an operator actually touched.
    """

    namespace: str
    changes: dict[str, Any] = Field(default_factory=dict)
    unset: list[str] = Field(default_factory=list)
    clear: bool = False


class AtomisationRequested(Payload):
    source_id: str
    curator: str
    max_atom_tokens: int
    max_retries: int
    mode: Literal["deferred", "manual"] = "deferred"


class AtomisationCompleted(Payload):
    """The seed's atomisation_complete: everything an auditor needs, LLM output included."""

    source_id: str
    atom_ids: list[str]
    curator: str
    model: str | None = None
    prompt_sha256: str | None = None
    input_tokens: int
    output_tokens: int
    atom_tokens: list[int]
    max_atom_tokens: int
    attempts: int
    dropped: list[dict[str, Any]] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    responses: list[str] = Field(default_factory=list)
    forced: bool = False
    previous_atom_ids: list[str] = Field(default_factory=list)
    request_seq: int | None = None


class AtomisationFailed(Payload):
    source_id: str
    curator: str
    reason: str
    message: str
    attempts: int = 0
    refused_atom_index: int | None = None
    atom_ids: list[str] = Field(default_factory=list)
    request_seq: int | None = None


class MigrationStarted(Payload):
    """A log-backed migration began: the snapshot is the checkpoint of `snapshot_size`."""

    run_id: str
    snapshot_size: int
    snapshot_root: str
    target_version: int
    backend_id: str


class MigrationRolledBack(Payload):
    """Restore to the checkpoint of `snapshot_size`: projections undo the tagged updates after it."""

    run_id: str
    snapshot_size: int
    backend_id: str
    memory_ids: list[str] = Field(default_factory=list)  # what it puts back (for bundles)


class MigrationRecorded(Payload):
    """`migration.completed` / `migration.refused`: the seed's MigrationEvent audit record."""

    run_id: str
    action: Literal["migrate", "rollback"]
    from_version: int
    to_version: int
    dry_run: bool
    backend_id: str
    snapshot_ref: dict[str, str] | None = None
    units_touched: int
    units_skipped: int
    rolled_back: bool
    error: str
    started_at: str
    finished_at: str
    scripts: list[str] = Field(default_factory=list)
    outcome: str


class NoteAdded(Payload):
    model_config = ConfigDict(frozen=True, extra="allow", defer_build=True)


PAYLOADS: dict[tuple[str, int], type[Payload]] = {
    ("memory.stored", 1): MemoryStored,
    ("memory.updated", 1): MemoryUpdated,
    ("memory.archived", 1): MemoryArchived,
    ("memory.restored", 1): MemoryRestored,
    ("link.created", 1): LinkCreated,
    ("policy.set", 1): PolicySetV1,
    ("policy.set", 2): PolicySet,
    ("atomisation.requested", 1): AtomisationRequested,
    ("atomisation.completed", 1): AtomisationCompleted,
    ("atomisation.failed", 1): AtomisationFailed,
    ("migration.started", 1): MigrationStarted,
    ("migration.rolled_back", 1): MigrationRolledBack,
    ("migration.completed", 1): MigrationRecorded,
    ("migration.refused", 1): MigrationRecorded,
}
CURRENT_TV: dict[str, int] = {}
for _t, _v in PAYLOADS:
    CURRENT_TV[_t] = max(CURRENT_TV.get(_t, 0), _v)

# (type, tv) -> function turning a tv payload into a tv+1 payload.
UPCASTERS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {}


def register_upcaster(
    type_: str, from_tv: int
) -> Callable[[Callable[[dict[str, Any]], dict[str, Any]]], Callable[[dict[str, Any]], dict[str, Any]]]:
    def deco(fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
        UPCASTERS[(type_, from_tv)] = fn
        return fn

    return deco


@register_upcaster("policy.set", 1)
def _policy_set_v1(d: dict[str, Any]) -> dict[str, Any]:
    # tv 1 held the namespace's entire policy: replacing it is "clear, then set it all".
    return {
        "namespace": d.get("namespace", ""),
        "changes": {} if d.get("cleared") else dict(d.get("policy") or {}),
        "unset": [],
        "clear": True,
    }


def upcast(type_: str, tv: int, data: dict[str, Any]) -> dict[str, Any]:
    """Bring a payload of an old `tv` up to the current one (never rewritten on disk)."""
    target = CURRENT_TV.get(type_)
    if target is None:
        return data
    while tv < target:
        fn = UPCASTERS.get((type_, tv))
        if fn is None:
            return data
        data = fn(data)
        tv += 1
    return data
