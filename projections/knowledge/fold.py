"""The fold of the knowledge loop's events: projects, state, interactions, candidates, statuses.

Handlers of `projections.fold.Fold` for the knowledge events, in their own
module so the memory fold stays readable. Like the rest of the fold they are
total: a payload field of the wrong type reads as absent, a status change
that does not apply (`vocabulary_knowledge.status_after`) is skipped, and a
name a registered project already holds keeps its first owner.

Projects: registering a name or an alias re-canonicalises every row that
holds it in any letter case (memories, interactions, state), so an alias
registered later resolves old rows too; the log keeps what was written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import duckdb

from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.vocabulary import knowledge as vk
from mnemolog.eventlog.vocabulary.events import read_float, read_id, read_str, read_tags
from mnemolog.eventlog.vocabulary.knowledge import PROJECT_NAME, STATE_CATEGORIES, status_after
from mnemolog.projections.knowledge.model_calls import recorded
from mnemolog.projections.knowledge.rules import project_key

if TYPE_CHECKING:
    from collections.abc import Callable

    from mnemolog.projections.fold import Fold

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
)
#: Tables whose `project` column holds a project name.
_PROJECT_TABLES: Final = ("memories", "interactions", "project_state")


def load_project_index(conn: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Every registered name and alias, by its `project_key`, to its project's name."""
    index = {project_key(str(n)): str(n) for (n,) in conn.execute("SELECT name FROM projects").fetchall()}
    aliases = conn.execute("SELECT alias_key, name FROM project_aliases").fetchall()
    index.update({str(k): str(n) for k, n in aliases})
    return index


def _name(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    stripped = value.strip()
    return stripped if PROJECT_NAME.fullmatch(stripped) else None


def _recanonicalise(f: Fold, key: str, name: str) -> None:
    for table in _PROJECT_TABLES:
        f.conn.execute(
            f"UPDATE {table} SET project = ? WHERE lower(project) = ? AND project <> ?", [name, key, name]
        )


def _add_alias(f: Fold, e: Entry, name: str, alias: Any) -> None:
    alias_name = _name(alias)
    if alias_name is None or f.project_index is None or project_key(alias_name) in f.project_index:
        return
    f.conn.execute(
        "INSERT INTO project_aliases VALUES (?, ?, ?, ?)", [project_key(alias_name), alias_name, name, e.seq]
    )
    f.project_index[project_key(alias_name)] = name
    _recanonicalise(f, project_key(alias_name), name)


def project_registered(f: Fold, e: Entry, d: dict[str, Any]) -> None:
    f.flush()
    name = _name(d.get("name"))
    if f.project_index is None:
        f.project_index = load_project_index(f.conn)
    if name is None or project_key(name) in f.project_index:
        return
    description = d.get("description")
    f.conn.execute(
        "INSERT INTO projects VALUES (?, ?, ?, ?)",
        [name, description if isinstance(description, str) else "", e.seq, e.ts],
    )
    f.project_index[project_key(name)] = name
    _recanonicalise(f, project_key(name), name)
    aliases = d.get("aliases")
    for alias in aliases if isinstance(aliases, list) else []:
        _add_alias(f, e, name, alias)


def project_aliased(f: Fold, e: Entry, d: dict[str, Any]) -> None:
    f.flush()
    if f.project_index is None:
        f.project_index = load_project_index(f.conn)
    given = _name(d.get("name"))
    name = f.project_index.get(project_key(given)) if given else None
    if name is not None:
        _add_alias(f, e, name, d.get("alias"))


def _state_key(f: Fold, d: dict[str, Any]) -> tuple[str, str, str] | None:
    project, category, key = d.get("project"), d.get("category"), d.get("key")
    if not (isinstance(project, str) and project and category in STATE_CATEGORIES and isinstance(key, str)):
        return None
    return f.canonical_project(project), str(category), key


def state_set(f: Fold, e: Entry, d: dict[str, Any]) -> None:
    f.flush()
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


def state_invalidated(f: Fold, e: Entry, d: dict[str, Any]) -> None:
    f.flush()
    where = _state_key(f, d)
    if where is None:
        return
    f.conn.execute(
        "UPDATE project_state SET state = 'invalid', ended_seq = ?, ended_at = ?, reason = ? "
        "WHERE project = ? AND category = ? AND key = ? AND state = 'current'",
        [e.seq, e.ts, read_str(d.get("reason")), *where],
    )


def interaction_captured(f: Fold, e: Entry, d: dict[str, Any]) -> None:
    iid = read_id(d.get("id"))
    prompt = d.get("prompt")
    if not iid or not isinstance(prompt, str):
        return
    if iid in f.buf.interactions:
        return  # a repeated id: the first capture wins (INSERT OR IGNORE keeps an older one)
    project = d.get("project")
    response = d.get("response")
    f.buf.interactions[iid] = (
        iid,
        str(d.get("namespace", "default")),
        f.canonical_project(project) if isinstance(project, str) and project else "",
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
    )


def flush_interactions(f: Fold) -> None:
    """Insert the buffered captures; an id the table holds already keeps its first capture."""
    rows = list(f.buf.interactions.values())
    f.buf.interactions = {}
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


def flush_stored_candidates(f: Fold) -> None:
    """Queue rows for the memories stored as candidates since the last flush.

    A candidate an extraction proposed gets its row here too, from its store, with
    placeholders (no interaction, extractor "stored") that its `candidate.extracted`,
    folded right after in the same batch, replaces; a candidate stored any other way
    (an import) keeps them, so triage sees it like any other.
    """
    rows, f.buf.candidates = f.buf.candidates, []
    f.conn.executemany(
        "INSERT OR IGNORE INTO candidates (id, interaction_id, extractor, extracted_seq, triage, "
        "triage_failures) VALUES (?, '', 'stored', ?, 'pending', 0)",
        [[mid, seq] for mid, seq in rows],
    )


def candidate_extracted(f: Fold, e: Entry, d: dict[str, Any]) -> None:
    f.flush()
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


def extraction_failed(f: Fold, e: Entry, d: dict[str, Any]) -> None:
    f.flush()
    f.conn.execute(
        "UPDATE interactions SET failures = failures + 1 WHERE id = ? AND extraction = 'pending'",
        [read_id(d.get("interaction_id"))],
    )


def candidate_triaged(f: Fold, e: Entry, d: dict[str, Any]) -> None:
    f.flush()
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


def triage_failed(f: Fold, e: Entry, d: dict[str, Any]) -> None:
    f.flush()
    f.conn.execute(
        "UPDATE candidates SET triage_failures = triage_failures + 1 WHERE id = ?", [read_id(d.get("id"))]
    )


def _transition(f: Fold, e: Entry, d: dict[str, Any]) -> str | None:
    """The memory's id when ``e`` changes its status (applied here), else None."""
    f.flush()
    mid = read_id(d.get("id"))
    row = f.conn.execute("SELECT status, stored_seq FROM memories WHERE id = ?", [mid]).fetchone()
    after = status_after(e.type, row[0] if row else None)
    if row is None or after is None:
        return None
    f.conn.execute("UPDATE memories SET status = ?, last_event_seq = ? WHERE id = ?", [after, e.seq, mid])
    f.conn.execute("DELETE FROM inactive WHERE id = ?", [mid])
    if after != "active":
        f.conn.execute("INSERT INTO inactive VALUES (?, ?)", [mid, row[1]])
    return mid


def promoted(f: Fold, e: Entry, d: dict[str, Any]) -> None:
    mid = _transition(f, e, d)
    if mid is None:
        return
    project = d.get("project")
    domains = d.get("domains")
    f.conn.execute(
        "UPDATE memories SET promoted_at = ?, project = ?, domains = ?::VARCHAR[] WHERE id = ?",
        [
            e.ts,
            f.canonical_project(project) if isinstance(project, str) and project else "",
            read_tags(domains) if isinstance(domains, list) else [],
            mid,
        ],
    )
    _decided(f, e, d, mid)


def rejected(f: Fold, e: Entry, d: dict[str, Any]) -> None:
    mid = _transition(f, e, d)
    if mid is not None:
        _decided(f, e, d, mid)


def _decided(f: Fold, e: Entry, d: dict[str, Any], mid: str) -> None:
    by = d.get("by")
    f.conn.execute(
        "UPDATE candidates SET triage = 'decided', decided_by = ?, decided_seq = ? WHERE id = ?",
        [by if isinstance(by, str) else None, e.seq, mid],
    )


def reinforced(f: Fold, e: Entry, d: dict[str, Any]) -> None:
    f.flush()
    mid = read_id(d.get("id"))
    confidence = read_float(d.get("confidence"))
    if confidence is None or not 0.0 <= confidence <= 1.0:
        return
    done = f.conn.execute(
        "UPDATE memories SET confidence = ?, reference_count = reference_count + 1, last_referenced_at = ?, "
        "last_event_seq = ? WHERE id = ? AND status = 'active' RETURNING id",
        [confidence, e.ts, e.seq, mid],
    ).fetchall()
    if done:
        f.conn.execute(
            "UPDATE interactions SET reinforced = reinforced + 1 WHERE id = ?",
            [read_id(d.get("interaction_id"))],
        )


def reinstated(f: Fold, e: Entry, d: dict[str, Any]) -> None:
    mid = _transition(f, e, d)
    if mid is not None:  # a person used it: a reference, as memview counts it
        f.conn.execute(
            "UPDATE memories SET reference_count = reference_count + 1, last_referenced_at = ? WHERE id = ?",
            [e.ts, mid],
        )


def superseded(f: Fold, e: Entry, d: dict[str, Any]) -> None:
    # Buffered: a decay run supersedes thousands of memories at once, and one statement
    # applies them all. The first supersession of an id in a batch is the one that counts,
    # as it would be applied one by one (the next finds the memory superseded already).
    mid = read_id(d.get("id"))
    if not mid or mid in f.buf.superseded:
        return
    confidence = read_float(d.get("confidence"))
    decayed = d.get("by") == "decay" and confidence is not None and 0.0 <= confidence <= 1.0
    f.buf.superseded[mid] = (e.seq, confidence if decayed else None)


def flush_superseded(f: Fold) -> None:
    """Apply the buffered supersessions to the active memories they name (status_after's rule)."""
    pending = f.buf.superseded
    f.buf.superseded = {}
    assert status_after(vk.MEMORY_SUPERSEDED, "active") == "superseded"
    import pyarrow as pa

    batch = pa.table(
        {
            "id": list(pending),
            "seq": [seq for seq, _ in pending.values()],
            "confidence": pa.array([c for _, c in pending.values()], pa.float64()),
        }
    )
    f.conn.register("ml_superseded", batch)
    try:
        done = f.conn.execute(
            "UPDATE memories SET status = 'superseded', last_event_seq = b.seq, "
            "confidence = coalesce(b.confidence, memories.confidence) "
            "FROM ml_superseded b WHERE memories.id = b.id AND memories.status = 'active' "
            "RETURNING memories.id, memories.stored_seq"
        ).fetchall()
    finally:
        f.conn.unregister("ml_superseded")
    if done:
        rows = pa.table({"id": [r[0] for r in done], "doc": [r[1] for r in done]})
        f.conn.register("ml_inactive", rows)
        try:
            f.conn.execute("INSERT INTO inactive SELECT id, doc FROM ml_inactive")
        finally:
            f.conn.unregister("ml_inactive")


HANDLERS: Final[dict[str, Callable[[Fold, Entry, dict[str, Any]], None]]] = {
    vk.PROJECT_REGISTERED: project_registered,
    vk.PROJECT_ALIASED: project_aliased,
    vk.STATE_SET: state_set,
    vk.STATE_INVALIDATED: state_invalidated,
    vk.INTERACTION_CAPTURED: interaction_captured,
    # Each extraction and triage call is also a row of model_calls (the run logs read it).
    vk.CANDIDATE_EXTRACTED: recorded(candidate_extracted),
    vk.EXTRACTION_FAILED: recorded(extraction_failed),
    vk.CANDIDATE_TRIAGED: recorded(candidate_triaged),
    vk.TRIAGE_FAILED: recorded(triage_failed),
    vk.MEMORY_PROMOTED: promoted,
    vk.MEMORY_REJECTED: rejected,
    vk.MEMORY_REINFORCED: reinforced,
    vk.MEMORY_SUPERSEDED: superseded,
    vk.MEMORY_REINSTATED: reinstated,
}
