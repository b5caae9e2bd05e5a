"""The knowledge room's fold: projects, trusted state, interactions, candidates, model calls.

Tables: `projects`, `project_aliases`, `project_state`, `interactions`,
`candidates` and `model_calls`. Besides the knowledge loop's own events it
reads a memory stored as a candidate (a row of the triage queue), a
promotion or rejection and a reinforcement (after the memory fold has
applied them to the memory: `engine.FOLDS` runs it first, and
`projections.fold.changed_memory` says whether it did), and an erasure.
Like every fold it is total: a payload field of the wrong type reads as
absent, a status change that does not apply
(`vocabulary.knowledge.status_after`) changes nothing, and a name a
registered project already holds keeps its first owner.

Projects: registering a name or an alias re-canonicalises every row that
holds it in any letter case (the memory fold does the memories'), so an
alias registered later resolves old rows too; the log keeps what was
written. Which names an event adds is decided once, in the pass's shared
`ProjectIndex`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final

from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.eventlog.vocabulary import knowledge as vk
from mnemolog.eventlog.vocabulary.events import read_float, read_id, read_int, read_str
from mnemolog.eventlog.vocabulary.knowledge import STATE_CATEGORIES
from mnemolog.projections.fold import Fold, Handler, Shared, changed_memory, erasure_subjects, id_set
from mnemolog.projections.knowledge.model_calls import recorded
from mnemolog.projections.knowledge.rules import project_key

INTERACTION_COLUMNS: Final = (
    "id",
    "namespace",
    "project",
    "client",
    "session",
    "context_id",
    "prompt",
    "response",
    "reinforce",
    "captured_at",
    "seq",
    "extraction",
    "extracted_seq",
    "failures",
    "reinforced",
    "occurred_at",
)


class KnowledgeFold(Fold):
    """The knowledge room's fold (see the module docstring)."""

    TABLES: ClassVar[tuple[str, ...]] = (
        "projects",
        "project_aliases",
        "project_state",
        "interactions",
        "candidates",
        "model_calls",
    )

    def __init__(self, shared: Shared) -> None:
        super().__init__(shared)
        self.interactions: dict[str, tuple[Any, ...]] = {}
        # Memories stored as candidates (id, seq): each is a row of the triage queue from its store
        # on, whoever stored it (an extraction annotates its own rows when its candidate.extracted folds).
        self.candidates: list[tuple[str, int]] = []
        # Every id stored since the last flush: a repeated store is no new candidate (first write wins).
        self.stored_ids: set[str] = set()

    def flush(self) -> None:
        self.stored_ids = set()
        if self.candidates:
            flush_stored_candidates(self)
        if self.interactions:
            flush_interactions(self)

    # Assigned below the handlers (they are module functions taking the fold).
    HANDLES: ClassVar[Mapping[str, Handler]] = {}


def _recanonicalise(f: KnowledgeFold, key: str, name: str) -> None:
    for table in ("interactions", "project_state"):
        f.conn.execute(
            f"UPDATE {table} SET project = ? WHERE lower(project) = ? AND project <> ?", [name, key, name]
        )


def project_named(f: KnowledgeFold, e: Entry, d: dict[str, Any]) -> None:
    """project.registered or .aliased: the project and aliases it adds; rows holding them take the name."""
    f.shared.flush()
    reg = f.shared.projects.register(e, d)
    if reg.project is not None:
        name, description = reg.project
        f.conn.execute("INSERT INTO projects VALUES (?, ?, ?, ?)", [name, description, e.seq, e.ts])
        _recanonicalise(f, project_key(name), name)
    for key, alias, name in reg.aliases:
        f.conn.execute("INSERT INTO project_aliases VALUES (?, ?, ?, ?)", [key, alias, name, e.seq])
        _recanonicalise(f, key, name)


def _state_key(f: KnowledgeFold, d: dict[str, Any]) -> tuple[str, str, str] | None:
    project, category, key = d.get("project"), d.get("category"), d.get("key")
    if not (isinstance(project, str) and project and category in STATE_CATEGORIES and isinstance(key, str)):
        return None
    return f.shared.projects.canonical(project), str(category), key


def state_set(f: KnowledgeFold, e: Entry, d: dict[str, Any]) -> None:
    f.shared.flush()
    where = _state_key(f, d)
    value = d.get("value")
    if where is None or not isinstance(value, str):
        return
    f.conn.execute(
        "UPDATE project_state SET state = 'replaced', ended_seq = ?, ended_at = ? "
        "WHERE project = ? AND category = ? AND key = ? AND state = 'current'",
        [e.seq, e.ts, *where],
    )
    f.conn.execute(
        "INSERT INTO project_state VALUES (?, ?, ?, ?, ?, 'current', ?, ?, NULL, NULL, NULL)",
        [*where, value, read_str(d.get("source")), e.seq, e.ts],
    )


def state_invalidated(f: KnowledgeFold, e: Entry, d: dict[str, Any]) -> None:
    f.shared.flush()
    where = _state_key(f, d)
    if where is None:
        return
    f.conn.execute(
        "UPDATE project_state SET state = 'invalid', ended_seq = ?, ended_at = ?, reason = ? "
        "WHERE project = ? AND category = ? AND key = ? AND state = 'current'",
        [e.seq, e.ts, read_str(d.get("reason")), *where],
    )


def interaction_captured(f: KnowledgeFold, e: Entry, d: dict[str, Any]) -> None:
    iid = read_id(d.get("id"))
    prompt = d.get("prompt")
    if not iid or not isinstance(prompt, str):
        return
    if iid in f.interactions:
        return  # a repeated id: the first capture wins (INSERT OR IGNORE keeps an older one)
    project = d.get("project")
    response = d.get("response")
    f.interactions[iid] = (
        iid,
        str(d.get("namespace", "default")),
        f.shared.projects.canonical(project) if isinstance(project, str) and project else "",
        read_str(d.get("client")),
        read_str(d.get("session")),
        read_str(d.get("context_id")),
        prompt,
        response if isinstance(response, str) else "",
        d.get("reinforce") is True,
        e.ts,
        e.seq,
        "pending",
        None,
        0,
        0,
        read_int(d.get("occurred_at")),
    )


def flush_interactions(f: KnowledgeFold) -> None:
    """Insert the buffered captures; an id the table holds already keeps its first capture."""
    rows = list(f.interactions.values())
    f.interactions = {}
    cols = ", ".join(INTERACTION_COLUMNS)
    if len(rows) <= 8:
        one = "(" + ", ".join("?" * len(INTERACTION_COLUMNS)) + ")"
        f.conn.execute(
            f"INSERT OR IGNORE INTO interactions ({cols}) VALUES {', '.join([one] * len(rows))}",
            [x for r in rows for x in r],
        )
        return
    import pyarrow as pa  # only a fold big enough to need it pays for the import

    table = pa.table(
        {c: list(col) for c, col in zip(INTERACTION_COLUMNS, zip(*rows, strict=True), strict=True)}
    )
    f.conn.register("ml_interactions", table)
    try:
        f.conn.execute(f"INSERT OR IGNORE INTO interactions ({cols}) SELECT {cols} FROM ml_interactions")
    finally:
        f.conn.unregister("ml_interactions")


def flush_stored_candidates(f: KnowledgeFold) -> None:
    """Queue rows for the memories stored as candidates since the last flush.

    A candidate an extraction proposed gets its row here too, from its store, with
    placeholders (no interaction, extractor "stored") that its `candidate.extracted`,
    folded right after in the same batch, replaces; a candidate stored any other way
    (an import) keeps them, so triage sees it like any other.
    """
    rows, f.candidates = f.candidates, []
    f.conn.executemany(
        "INSERT OR IGNORE INTO candidates (id, interaction_id, extractor, extracted_seq, triage, "
        "triage_failures) VALUES (?, '', 'stored', ?, 'pending', 0)",
        [[mid, seq] for mid, seq in rows],
    )


def candidate_extracted(f: KnowledgeFold, e: Entry, d: dict[str, Any]) -> None:
    f.shared.flush()
    iid = read_id(d.get("interaction_id"))
    done = f.conn.execute(
        "UPDATE interactions SET extraction = 'extracted', extracted_seq = ? "
        "WHERE id = ? AND extraction = 'pending' RETURNING id",
        [e.seq, iid],
    ).fetchall()
    if not done:
        return  # unknown or already extracted interaction: its first extraction stands
    described = d.get("candidates")
    about = (
        {read_id(c.get("id")): c for c in described if isinstance(c, dict)}
        if isinstance(described, list)
        else {}
    )
    ids = d.get("candidate_ids")
    for cid in [read_id(x) for x in ids] if isinstance(ids, list) else []:
        if not cid:
            continue
        c = about.get(cid, {})
        # The row its store queued (with placeholders) takes what the extraction says of it.
        f.conn.execute(
            "INSERT INTO candidates (id, interaction_id, layer, rule, side, extractor, model, "
            "extracted_seq, triage, triage_failures) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', 0) "
            "ON CONFLICT (id) DO UPDATE SET interaction_id = excluded.interaction_id, "
            "layer = excluded.layer, rule = excluded.rule, side = excluded.side, "
            "extractor = excluded.extractor, model = excluded.model, extracted_seq = excluded.extracted_seq "
            "WHERE candidates.interaction_id = ''",
            [
                cid,
                iid,
                read_str(c.get("layer")),
                read_str(c.get("rule")),
                read_str(c.get("source")),
                str(d.get("extractor", "")),
                read_str(d.get("model")),
                e.seq,
            ],
        )


def extraction_failed(f: KnowledgeFold, e: Entry, d: dict[str, Any]) -> None:
    f.shared.flush()
    f.conn.execute(
        "UPDATE interactions SET failures = failures + 1 WHERE id = ? AND extraction = 'pending'",
        [read_id(d.get("interaction_id"))],
    )


def candidate_triaged(f: KnowledgeFold, e: Entry, d: dict[str, Any]) -> None:
    f.shared.flush()
    action = d.get("action")
    if action not in vk.ACTIONS:
        return
    f.conn.execute(
        "UPDATE candidates SET triage = ?, verdict = ?, verdict_confidence = ?, reason = ?, "
        "conflicts_with = ?, duplicate_of = ?, action = ?, why = ?, triager = ?, triaged_seq = ? "
        "WHERE id = ? AND decided_seq IS NULL",
        [
            "waiting" if action == "wait" else "decided",
            read_str(d.get("verdict")),
            read_float(d.get("confidence")),
            read_str(d.get("reason")),
            read_str(d.get("conflicts_with")),
            read_str(d.get("duplicate_of")),
            action,
            read_str(d.get("why")),
            read_str(d.get("triager")),
            e.seq,
            read_id(d.get("id")),
        ],
    )


def triage_failed(f: KnowledgeFold, e: Entry, d: dict[str, Any]) -> None:
    f.shared.flush()
    f.conn.execute(
        "UPDATE candidates SET triage_failures = triage_failures + 1 WHERE id = ?", [read_id(d.get("id"))]
    )


def stored(f: KnowledgeFold, e: Entry, d: dict[str, Any]) -> None:
    """memory.stored as a candidate: a row of the triage queue (the memory fold keeps the memory)."""
    mid = d.get("id")
    if not isinstance(mid, str) or not mid or mid in f.stored_ids:
        return  # as the memory fold: a repeated id is not stored again
    f.stored_ids.add(mid)
    if d.get("status") == "candidate":
        f.candidates.append((mid, e.seq))


def decided(f: KnowledgeFold, e: Entry, d: dict[str, Any]) -> None:
    """memory.promoted or .rejected that changed the memory (its fold ran first): the row is decided."""
    f.shared.flush()
    mid = read_id(d.get("id"))
    if not changed_memory(f.conn, mid, e.seq):
        return
    by = d.get("by")
    f.conn.execute(
        "UPDATE candidates SET triage = 'decided', decided_by = ?, decided_seq = ? WHERE id = ?",
        [by if isinstance(by, str) else None, e.seq, mid],
    )


def reinforced(f: KnowledgeFold, e: Entry, d: dict[str, Any]) -> None:
    """memory.reinforced that changed the memory: the interaction that reinforced it counts one more."""
    f.shared.flush()
    if changed_memory(f.conn, read_id(d.get("id")), e.seq):
        f.conn.execute(
            "UPDATE interactions SET reinforced = reinforced + 1 WHERE id = ?",
            [read_id(d.get("interaction_id"))],
        )


def erased(f: KnowledgeFold, e: Entry, d: dict[str, Any]) -> None:
    """memory.erased: candidates of erased memories or interactions, and the interactions, leave."""
    f.shared.flush()
    who = erasure_subjects(d)
    if who.memories:
        with id_set(f.conn, "ml_erased", who.memories) as ids:
            f.conn.execute(f"DELETE FROM candidates WHERE id IN {ids}")
    if who.interactions:
        with id_set(f.conn, "ml_erased", who.interactions) as ids:
            f.conn.execute(f"DELETE FROM candidates WHERE interaction_id IN {ids}")
            f.conn.execute(f"DELETE FROM interactions WHERE id IN {ids}")


KnowledgeFold.HANDLES = {
    vk.PROJECT_REGISTERED: project_named,
    vk.PROJECT_ALIASED: project_named,
    vk.STATE_SET: state_set,
    vk.STATE_INVALIDATED: state_invalidated,
    vk.INTERACTION_CAPTURED: interaction_captured,
    # Each extraction and triage call is also a row of model_calls (the run logs read it).
    vk.CANDIDATE_EXTRACTED: recorded(candidate_extracted),
    vk.EXTRACTION_FAILED: recorded(extraction_failed),
    vk.CANDIDATE_TRIAGED: recorded(candidate_triaged),
    vk.TRIAGE_FAILED: recorded(triage_failed),
    v.MEMORY_STORED: stored,
    vk.MEMORY_PROMOTED: decided,
    vk.MEMORY_REJECTED: decided,
    vk.MEMORY_REINFORCED: reinforced,
    v.MEMORY_ERASED: erased,
}
