"""The memory vocabulary: every rule about event payloads that more than one fold needs.

One home for: the event type names, the memory kinds and link relations,
the fields a `memory.updated` may change, which memories an entry touches
(`touched_ids`), how metadata merges, how a fold reads a payload field of
the wrong type, and the upcasters that bring an old `tv` up to the current
shape. The projection fold (mnemolog.projections.fold), the bundle's pure
fold (mnemolog.eventlog.bundle.memview), the payload models
(mnemolog.substrate.events) and the vault renderer all import these; none
keeps a copy.

Standard library only: the offline bundle verifier imports this module and
may use nothing but the standard library, cbor2 and pynacl.

Adding an event type: a name constant below, an entry in TOUCHES (or
NO_TOUCHES when it touches no memory), and, when its payload shape changes,
an upcaster registered with `upcaster(type, from_tv)`. A test checks that
every payload model's type is classified and that its upcaster chain ends
at the model's `TV`.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = [
    "ARCHIVE_BY",
    "ATOMISATION_COMPLETED",
    "ATOMISATION_FAILED",
    "ATOMISATION_REQUESTED",
    "CANDIDATE_EXTRACTED",
    "CANDIDATE_TRIAGED",
    "CHAINED_SINCE",
    "CONTEXT_BUILT",
    "DEFAULT_STATUS",
    "DOCUMENT_INGESTED",
    "DOCUMENT_REMOVED",
    "EMBEDDER_CONFIGURED",
    "EXTRACTION_FAILED",
    "FIRST_TOUCH",
    "HEADS_COMMITTED",
    "INT32",
    "INT64",
    "INTERACTION_CAPTURED",
    "KINDS",
    "LINK_CREATED",
    "LINK_REMOVED",
    "LOG_NOT_CARRIED",
    "MEMORY_ARCHIVED",
    "MEMORY_PROMOTED",
    "MEMORY_REINFORCED",
    "MEMORY_REINSTATED",
    "MEMORY_REJECTED",
    "MEMORY_RESTORED",
    "MEMORY_STORED",
    "MEMORY_SUPERSEDED",
    "MEMORY_UPDATED",
    "MIGRATION_COMPLETED",
    "MIGRATION_REFUSED",
    "MIGRATION_ROLLED_BACK",
    "MIGRATION_STARTED",
    "MUTABLE_FIELDS",
    "NO_TOUCHES",
    "POLICY_SET",
    "PROJECT_ALIASED",
    "PROJECT_REGISTERED",
    "RELATIONS",
    "STATE_INVALIDATED",
    "STATE_SET",
    "STATUSES",
    "TOKEN_ISSUED",
    "TOKEN_REVOKED",
    "TOUCHES",
    "TOUCH_PREV",
    "TRANSITIONS",
    "TRIAGE_FAILED",
    "UNDO_FIELDS",
    "UPCASTERS",
    "Status",
    "Touches",
    "Upcaster",
    "chained",
    "chained_since",
    "merge_metadata",
    "read_float",
    "read_id",
    "read_int",
    "read_span",
    "read_str",
    "read_tags",
    "read_touch_prev",
    "status_after",
    "touched_ids",
    "upcast",
    "upcast_chain_end",
    "upcaster",
]

# -- event types (past-tense facts; a name is stable once written) -------------

MEMORY_STORED: Final = "memory.stored"
MEMORY_UPDATED: Final = "memory.updated"
MEMORY_ARCHIVED: Final = "memory.archived"
MEMORY_RESTORED: Final = "memory.restored"
LINK_CREATED: Final = "link.created"
LINK_REMOVED: Final = "link.removed"
POLICY_SET: Final = "policy.set"
ATOMISATION_REQUESTED: Final = "atomisation.requested"
ATOMISATION_COMPLETED: Final = "atomisation.completed"
ATOMISATION_FAILED: Final = "atomisation.failed"
MIGRATION_STARTED: Final = "migration.started"
MIGRATION_ROLLED_BACK: Final = "migration.rolled_back"
MIGRATION_COMPLETED: Final = "migration.completed"
MIGRATION_REFUSED: Final = "migration.refused"
LOG_ROLLBACK_ACCEPTED: Final = "log.rollback_accepted"

# -- the knowledge loop's event types -----------------------------------------------------

PROJECT_REGISTERED: Final = "project.registered"
PROJECT_ALIASED: Final = "project.aliased"
STATE_SET: Final = "state.set"
STATE_INVALIDATED: Final = "state.invalidated"
INTERACTION_CAPTURED: Final = "interaction.captured"
CANDIDATE_EXTRACTED: Final = "candidate.extracted"
EXTRACTION_FAILED: Final = "extraction.failed"
CANDIDATE_TRIAGED: Final = "candidate.triaged"
TRIAGE_FAILED: Final = "triage.failed"
MEMORY_PROMOTED: Final = "memory.promoted"
MEMORY_REJECTED: Final = "memory.rejected"
MEMORY_REINFORCED: Final = "memory.reinforced"
MEMORY_SUPERSEDED: Final = "memory.superseded"
#: A person brings a superseded memory back (`restore`): superseded -> active.
MEMORY_REINSTATED: Final = "memory.reinstated"

# -- memory lifecycle -------------------------------------------------------------------

Status = Literal["candidate", "active", "superseded", "invalid"]
#: candidate -> active (promoted) -> superseded (decay, a person, a newer memory);
#: candidate -> invalid (rejected); superseded -> active (reinstated by a person).
#: Memories written before statuses existed are active.
STATUSES: Final[tuple[str, ...]] = ("candidate", "active", "superseded", "invalid")
DEFAULT_STATUS: Final = "active"

#: The status changes the loop's events make: (statuses it applies to, status after).
#: A change from any other status is refused by the command and skipped by a fold.
TRANSITIONS: Final[dict[str, tuple[frozenset[str], str]]] = {
    MEMORY_PROMOTED: (frozenset({"candidate"}), "active"),
    MEMORY_REJECTED: (frozenset({"candidate"}), "invalid"),
    MEMORY_SUPERSEDED: (frozenset({"active"}), "superseded"),
    MEMORY_REINSTATED: (frozenset({"superseded"}), "active"),
}


def status_after(event_type: str, current: str | None) -> str | None:
    """The status a memory has after ``event_type``, or None when the event does not apply to it."""
    rule = TRANSITIONS.get(event_type)
    if rule is None or current not in rule[0]:
        return None
    return rule[1]


DOCUMENT_INGESTED: Final = "document.ingested"
DOCUMENT_REMOVED: Final = "document.removed"
CONTEXT_BUILT: Final = "context.built"
EMBEDDER_CONFIGURED: Final = "embedder.configured"

# -- the memory model ------------------------------------------------------------

KINDS: Final[tuple[str, ...]] = (
    "observation",
    "user",
    "feedback",
    "project",
    "decision",
    "reference",
    "knowledge",
)
RELATIONS: Final[tuple[str, ...]] = (
    "related_to",
    "supersedes",
    "contradicts",
    "derived_from",
    "derives_from",
    "reflects_on",
)
# Whose signal a `memory.archived` is: an operator hid it; atomisation hid an atomised
# parent (only together with atomised_into > 0); a forced or interrupted re-atomisation
# retired an atom. Any other value reads as the operator's archive.
ARCHIVE_BY: Final[tuple[str, ...]] = ("operator", "atomisation", "reatomisation")
# What a `memory.updated` may change (its payload model has exactly these besides id).
MUTABLE_FIELDS: Final[tuple[str, ...]] = (
    "title",
    "content",
    "kind",
    "namespace",
    "tags",
    "confidence",
    "source",
    "metadata",
    "last_seen",
    "project",
    "domains",
    "occurred_at",
)
# What a migration's update replaced and its rollback puts back.
UNDO_FIELDS: Final[tuple[str, ...]] = (*MUTABLE_FIELDS, "updated_at", "last_event_seq")


#: The parent's metadata key that mirrors its archive by atomisation (docs/curators.md,
#: the atomisation contract): both folds set it from the `memory.archived` with
#: `by: atomisation` and drop it on `memory.restored`, so get, list and bundles show it.
ATOMISATION_ARCHIVED_KEY: Final = "atomisation_archived_at"


def iso_time(us: int) -> str:
    """An ISO-8601 UTC time with a Z of a µs timestamp (as atomisation's result envelope says it)."""
    return dt.datetime.fromtimestamp(us / 1e6, dt.UTC).isoformat().replace("+00:00", "Z")


def mirror_atomisation_archive(meta: dict[str, Any], archived_us: int | None) -> dict[str, Any]:
    """`meta` with the atomisation-archive mirror set to that time, or removed when None."""
    when = None if archived_us is None else iso_time(archived_us)
    return merge_metadata(meta, {ATOMISATION_ARCHIVED_KEY: when})


def merge_metadata(old: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Top-level merge: keys in the patch replace, a null value removes the key."""
    out = dict(old)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


# -- reading payload fields ---------------------------------------------------------
# Entries are signed, but `mnemolog log append` can write any map, so a fold reads
# every field totally: a value of the wrong type reads as the default. Both folds
# read through these, so they cannot disagree about an odd payload.

INT64: Final = (-(2**63), 2**63 - 1)
INT32: Final = (-(2**31), 2**31 - 1)


def read_id(v: Any) -> str:
    """A memory id, or "" (which touches nothing) for anything but text."""
    return v if isinstance(v, str) else ""


def read_str(v: Any) -> str | None:
    """Text, or None for anything else."""
    return v if isinstance(v, str) else None


def read_int(v: Any, lo_hi: tuple[int, int] = INT64) -> int | None:
    """An integer within lo_hi (int64 by default; not a boolean), or None."""
    if isinstance(v, int) and not isinstance(v, bool) and lo_hi[0] <= v <= lo_hi[1]:
        return v
    return None


def read_float(v: Any) -> float | None:
    """A finite number as a float (not a boolean, not beyond the float range), or None."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        try:
            f = float(v)
        except OverflowError:  # an integer beyond the float range
            return None
        return f if math.isfinite(f) else None
    return None


def read_tags(v: Any) -> list[str]:
    """A list's items as text, or [] for anything but a list."""
    return [str(t) for t in v] if isinstance(v, list) else []


def read_span(v: Any) -> list[int] | None:
    """A non-empty list of int32 values, or None if anything in it is not one."""
    if not isinstance(v, list) or not v:
        return None
    out = [read_int(x, INT32) for x in v]
    return None if any(x is None for x in out) else [x for x in out if x is not None]


# -- which memories an entry touches -------------------------------------------------


@dataclass(frozen=True)
class Touches:
    """The payload fields naming the memories an event touches.

    `ids` hold one memory id each, `lists` a list of them; the touched ids are
    those of `ids` in order, then those of `lists`, without repeats.
    """

    ids: tuple[str, ...] = ()
    lists: tuple[str, ...] = ()


# The one rule, used by the projection's `touches` table, the bundle exporter and the
# bundle verifier. An event type that touches memories adds its line here.
TOUCHES: dict[str, Touches] = {
    MEMORY_STORED: Touches(ids=("id", "atom_of")),
    MEMORY_UPDATED: Touches(ids=("id",)),
    MEMORY_ARCHIVED: Touches(ids=("id",)),
    MEMORY_RESTORED: Touches(ids=("id",)),
    LINK_CREATED: Touches(ids=("src", "dst")),
    LINK_REMOVED: Touches(ids=("src", "dst")),
    ATOMISATION_REQUESTED: Touches(ids=("source_id",)),
    ATOMISATION_COMPLETED: Touches(ids=("source_id",), lists=("atom_ids",)),
    ATOMISATION_FAILED: Touches(ids=("source_id",)),
    # The memories whose migration updates it undoes (named in the signed payload).
    MIGRATION_ROLLED_BACK: Touches(lists=("memory_ids",)),
    # The memories a context pack put in front of a model (so a memory's bundle holds its packs).
    CONTEXT_BUILT: Touches(lists=("memory_ids",)),
}
# Event types that touch no memory (the test of the vocabulary requires every payload
# model's type in exactly one of TOUCHES and NO_TOUCHES).
NO_TOUCHES: set[str] = {
    POLICY_SET,
    MIGRATION_STARTED,
    MIGRATION_COMPLETED,
    MIGRATION_REFUSED,
    LOG_ROLLBACK_ACCEPTED,
    DOCUMENT_INGESTED,
    DOCUMENT_REMOVED,
    EMBEDDER_CONFIGURED,
}

# The knowledge loop. An interaction's id is touched like a
# memory's, so a candidate's bundle can carry the interaction it came from.
TOUCHES.update(
    {
        INTERACTION_CAPTURED: Touches(ids=("id",)),
        CANDIDATE_EXTRACTED: Touches(ids=("interaction_id",), lists=("candidate_ids",)),
        EXTRACTION_FAILED: Touches(ids=("interaction_id",)),
        CANDIDATE_TRIAGED: Touches(ids=("id", "conflicts_with", "duplicate_of")),
        TRIAGE_FAILED: Touches(ids=("id",)),
        MEMORY_PROMOTED: Touches(ids=("id",)),
        MEMORY_REJECTED: Touches(ids=("id",)),
        MEMORY_REINFORCED: Touches(ids=("id",)),
        MEMORY_SUPERSEDED: Touches(ids=("id", "superseded_by")),
        MEMORY_REINSTATED: Touches(ids=("id",)),
    }
)
NO_TOUCHES |= {PROJECT_REGISTERED, PROJECT_ALIASED, STATE_SET, STATE_INVALIDATED}


def touched_ids(type_: str, data: dict[str, Any]) -> list[str]:
    """The memory ids an entry touches (payload at its current tv), in a fixed order, once each."""
    spec = TOUCHES.get(type_)
    if spec is None:
        return []
    # `log verify` asks this of every entry: one pass, no intermediate list (read_id's rule:
    # only non-empty text names a memory).
    out: list[str] = []
    for f in spec.ids:
        i = data.get(f)
        if isinstance(i, str) and i and i not in out:
            out.append(i)
    for f in spec.lists:
        v = data.get(f)
        if isinstance(v, list):
            for i in v:
                if isinstance(i, str) and i and i not in out:
                    out.append(i)
    return out


# -- upcasters -----------------------------------------------------------------------

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
# (type, tv) -> the function turning a payload of that tv into one of tv + 1.
UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def upcaster(type_: str, from_tv: int) -> Callable[[Upcaster], Upcaster]:
    """Register `fn` as the step from `from_tv` to `from_tv + 1` of `type_`."""

    def deco(fn: Upcaster) -> Upcaster:
        if (type_, from_tv) in UPCASTERS:
            raise ValueError(f"two upcasters for {type_} tv {from_tv}")
        UPCASTERS[(type_, from_tv)] = fn
        return fn

    return deco


def upcast(type_: str, tv: int, data: dict[str, Any]) -> dict[str, Any]:
    """Bring a payload of an old `tv` up to the current one (never rewritten on disk)."""
    while True:
        fn = UPCASTERS.get((type_, tv))
        if fn is None:
            return data
        data = fn(data)
        tv += 1


def upcast_chain_end(type_: str, tv: int = 1) -> int:
    """The tv a payload of `tv` reads as after every upcaster (what a model's TV must be)."""
    while (type_, tv) in UPCASTERS:
        tv += 1
    return tv


@upcaster(POLICY_SET, 1)
def _policy_set_v1(d: dict[str, Any]) -> dict[str, Any]:
    # tv 1 held the namespace's entire policy: replacing it is "clear, then set it all".
    policy = d.get("policy")
    return {
        "namespace": d.get("namespace", ""),
        "changes": {} if d.get("cleared") or not isinstance(policy, dict) else dict(policy),
        "unset": [],
        "clear": True,
    }


# -- the per-memory back-chain ----------------------------------------------------------
# From these type versions on, an entry that touches memories carries in its signed
# payload, under TOUCH_PREV, a map from each memory it touches to the seq of the
# previous entry that touched that memory (FIRST_TOUCH when none did). A bundle
# holding a memory's entries can then show that none between its first and its
# newest is missing. Older versions carry no pointer: their upcasters leave the
# payload as it was, and a verifier makes no completeness claim across them.

TOUCH_PREV: Final = "touch_prev"
FIRST_TOUCH: Final = -1
HEADS_COMMITTED: Final = "heads.committed"
NO_TOUCHES.add(HEADS_COMMITTED)

#: Stands in a migrated log (substrate.seal_migration) for an entry of the old log that is
#: not carried over (its key history: the new log has its own), so that every carried entry
#: keeps its seq.
LOG_NOT_CARRIED: Final = "log.not_carried"
NO_TOUCHES.add(LOG_NOT_CARRIED)

# Team use: scoped tokens. Only a token's hash is ever written; the token itself never is.
TOKEN_ISSUED: Final = "token.issued"
TOKEN_REVOKED: Final = "token.revoked"
NO_TOUCHES |= {TOKEN_ISSUED, TOKEN_REVOKED}

# The touching types written before back-chains existed -> the first tv that carries
# TOUCH_PREV. A type added to TOUCHES later carries it from its tv 1.
CHAINED_SINCE: dict[str, int] = {}


def _unchained(d: dict[str, Any]) -> dict[str, Any]:
    # An entry written before back-chains: same payload, no pointer (read as "unknown").
    return d


for _type in (
    MEMORY_STORED,
    MEMORY_UPDATED,
    MEMORY_ARCHIVED,
    MEMORY_RESTORED,
    LINK_CREATED,
    ATOMISATION_REQUESTED,
    ATOMISATION_COMPLETED,
    ATOMISATION_FAILED,
    MIGRATION_ROLLED_BACK,
):
    CHAINED_SINCE[_type] = upcast_chain_end(_type) + 1
    upcaster(_type, CHAINED_SINCE[_type] - 1)(_unchained)


def chained_since(type_: str) -> int | None:
    """The first tv of `type_` that carries back-chain pointers (None: it touches no memory)."""
    if type_ not in TOUCHES:
        return None
    return CHAINED_SINCE.get(type_, 1)


def chained(type_: str, tv: int) -> bool:
    """Whether an entry of this type and version carries its back-chain pointers."""
    since = chained_since(type_)
    return since is not None and tv >= since


def read_touch_prev(data: dict[str, Any]) -> dict[str, int]:
    """A payload's back-chain pointers (memory id -> previous seq, FIRST_TOUCH: none); valid ones only."""
    raw = data.get(TOUCH_PREV)
    if not isinstance(raw, dict):
        return {}
    out: dict[str, int] = {}
    for k, val in raw.items():
        seq = read_int(val)
        if isinstance(k, str) and seq is not None and seq >= FIRST_TOUCH:
            out[k] = seq
    return out


# -- the knowledge loop's memory fields (after the back-chain versions) ------------------


@upcaster(MEMORY_STORED, 2)
def _memory_stored_v2(d: dict[str, Any]) -> dict[str, Any]:
    # tv 3 added the knowledge fields; everything stored before them is an active,
    # project-less, untagged memory (whatever a forged older payload claims).
    return {**d, "project": "", "domains": [], "status": DEFAULT_STATUS}


@upcaster(CANDIDATE_TRIAGED, 1)
def _candidate_triaged_v1(d: dict[str, Any]) -> dict[str, Any]:
    # tv 2 records the embedding similarity of the nearest active memory; tv 1 triage
    # computed none (the duplicate threshold was recorded but never applied).
    return {**d, "similarity": None, "similar_to": None}


@upcaster(MEMORY_UPDATED, 2)
def _memory_updated_v2(d: dict[str, Any]) -> dict[str, Any]:
    # tv 3 may also change project and domains; an older update never did.
    return {k: x for k, x in d.items() if k not in ("project", "domains")}


# -- sealed content (crypto-shredding) ------------------------------------------------------
# From these type versions on, a payload's content fields are not in the entry in readable
# form: eventlog.sealing moves each into a box under `sealed`, sealed with the data key of
# the subject the type names in `key`. Forgetting destroys that key. Opened payloads have
# the shape of the version before, so its upcaster changes nothing.

SEALED_FIELD: Final = "sealed"
#: Content forgotten: the memories (and interactions) it names lose their data keys.
MEMORY_ERASED: Final = "memory.erased"
TOUCHES[MEMORY_ERASED] = Touches(lists=("ids", "interactions"))


@dataclass(frozen=True)
class Sealing:
    """Which payload field names the subject whose data key seals `fields`."""

    key: str
    fields: tuple[str, ...]


_MEMORY_TEXT = ("title", "content", "tags", "metadata", "source")
SEALED: dict[str, Sealing] = {
    MEMORY_STORED: Sealing("id", _MEMORY_TEXT),
    MEMORY_UPDATED: Sealing("id", _MEMORY_TEXT),
    INTERACTION_CAPTURED: Sealing("id", ("prompt", "response")),
    CANDIDATE_EXTRACTED: Sealing("interaction_id", ("candidates", "responses", "warnings")),
    EXTRACTION_FAILED: Sealing("interaction_id", ("responses", "warnings")),
    CANDIDATE_TRIAGED: Sealing("id", ("responses", "warnings")),
    TRIAGE_FAILED: Sealing("id", ("responses", "warnings")),
    ATOMISATION_COMPLETED: Sealing("source_id", ("responses", "dropped", "warnings")),
    DOCUMENT_INGESTED: Sealing("document_id", ("chunks",)),
    # A pack's quoted entries are sealed one by one, each under its own subject's key
    # (eventlog.sealing.PACK_RECORD_FIELDS), so forgetting a memory leaves a gap in the
    # packs that quoted it and nothing else.
    CONTEXT_BUILT: Sealing("pack_id", ("query",)),
}
# type -> the first tv whose content is sealed.
SEALED_SINCE: dict[str, int] = {}


def _opened(d: dict[str, Any]) -> dict[str, Any]:
    # A payload written before sealing already has the opened shape.
    return d


for _type in SEALED:
    SEALED_SINCE[_type] = upcast_chain_end(_type) + 1
    upcaster(_type, SEALED_SINCE[_type] - 1)(_opened)


def seals(type_: str, tv: int) -> bool:
    """Whether entries of this type and version carry their content sealed."""
    since = SEALED_SINCE.get(type_)
    return since is not None and tv >= since


# -- when it happened (after sealing) ----------------------------------------------------
# memory.stored tv 5 and interaction.captured tv 3 may carry `occurred_at` (µs, UTC): when
# what they record happened, if not when they were written. Older payloads carry none.
upcaster(MEMORY_STORED, 4)(_opened)
upcaster(INTERACTION_CAPTURED, 2)(_opened)
# memory.updated tv 5 may change it (a date given wrong is put right); older updates never did.
upcaster(MEMORY_UPDATED, 4)(_opened)
