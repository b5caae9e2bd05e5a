"""Named read queries of the knowledge loop: projects, trusted state, interactions, candidates,
the reinforcement pool, duplicates and neighbours, and what decay has to look at.

Each takes a connection from a projection session (caught up with the log)
and returns plain values; the tables are those `knowledge.fold` keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import duckdb

from mnemolog.eventlog.vocabulary.knowledge import PERSONAL_KINDS, STATE_CATEGORIES
from mnemolog.projections.knowledge.fold import INTERACTION_COLUMNS
from mnemolog.projections.knowledge.rules import ProjectRegistry
from mnemolog.projections.memory.model import MEMORY_SELECT, Memory, row_to_memory
from mnemolog.projections.schema import visible

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "CANDIDATE_QUEUES",
    "candidate",
    "candidate_ids",
    "candidates",
    "canonical_project",
    "decay_rows",
    "extraction_states",
    "interaction",
    "interactions",
    "knowledge_counts",
    "known_candidates",
    "known_interactions",
    "memories_with_prefix",
    "pending_candidates",
    "pending_interactions",
    "project_registry",
    "projects",
    "reinforcement_pool",
    "state_at",
    "state_entries",
    "statuses_of",
]

#: The queues `candidates list --status` shows: untriaged (or every triage failed),
#: waiting for a person, and decided either way.
CANDIDATE_QUEUES: Final = ("pending", "needs_human", "promoted", "rejected")

#: The state categories in the vocabulary's order, as a SQL list (constants, not input).
_CATEGORY_ORDER: Final = "[" + ", ".join(f"'{c}'" for c in STATE_CATEGORIES) + "]"

#: A bracketed word opening a memory's content: the old way of tagging a domain.
PREFIX_PATTERN: Final = r"^\s*\[([A-Za-z][A-Za-z0-9_-]{0,31})\]\s*"

_CANDIDATE_COLS: Final = (
    "interaction_id",
    "layer",
    "rule",
    "side",
    "extractor",
    "model",
    "extracted_seq",
    "triage",
    "verdict",
    "verdict_confidence",
    "reason",
    "conflicts_with",
    "duplicate_of",
    "action",
    "why",
    "triager",
    "triaged_seq",
    "triage_failures",
    "decided_by",
    "decided_seq",
)


# -- projects ---------------------------------------------------------------------------


def project_registry(conn: duckdb.DuckDBPyConnection) -> ProjectRegistry:
    """The registry as the log built it (registration order, aliases in the order given)."""
    registry = ProjectRegistry()
    for name, description in conn.execute("SELECT name, description FROM projects ORDER BY seq").fetchall():
        registry = registry.applied("project.registered", {"name": name, "description": description})
    for name, alias in conn.execute(
        "SELECT name, alias FROM project_aliases ORDER BY seq, alias_key"
    ).fetchall():
        registry = registry.applied("project.aliased", {"name": name, "alias": alias})
    return registry


def canonical_project(conn: duckdb.DuckDBPyConnection, name: str | None) -> str:
    """The registered project ``name`` (a name or an alias, any case) stands for; "" for none.

    ``ProjectRegistry.canonical`` over the registry as the log built it: the
    canonicalisation every boundary uses, for the callers that hold only a
    connection.
    """
    return project_registry(conn).canonical(name)


def projects(conn: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every registered project with its aliases and what it holds, by name."""
    rows = conn.execute(
        """SELECT p.name, p.description, p.registered_at,
                  coalesce((SELECT list(a.alias ORDER BY a.seq, a.alias_key) FROM project_aliases a
                            WHERE a.name = p.name), []),
                  (SELECT count(*) FROM memories m WHERE m.project = p.name AND m.status = 'active'),
                  (SELECT count(*) FROM memories m WHERE m.project = p.name AND m.status = 'candidate'),
                  (SELECT count(*) FROM interactions i WHERE i.project = p.name),
                  (SELECT count(*) FROM project_state s WHERE s.project = p.name AND s.state = 'current')
           FROM projects p ORDER BY p.name"""
    ).fetchall()
    return [
        {
            "name": r[0],
            "description": r[1],
            "registered_at": r[2],
            "aliases": list(r[3]),
            "memories": r[4],
            "candidates": r[5],
            "interactions": r[6],
            "state_entries": r[7],
        }
        for r in rows
    ]


# -- trusted state ----------------------------------------------------------------------


def state_entries(
    conn: duckdb.DuckDBPyConnection,
    project: str,
    *,
    category: str | None = None,
    key: str | None = None,
    history: bool = False,
) -> list[dict[str, Any]]:
    """A project's state entries by category order then key (current ones, or every version)."""
    where = ["project = ?"]
    args: list[Any] = [project]
    if category is not None:
        where.append("category = ?")
        args.append(category)
    if key is not None:
        where.append("key = ?")
        args.append(key)
    if not history:
        where.append("state = 'current'")
    rows = conn.execute(
        "SELECT project, category, key, value, source, state, seq, set_at, ended_seq, ended_at, reason "
        f"FROM project_state WHERE {' AND '.join(where)} "
        f"ORDER BY array_position({_CATEGORY_ORDER}, category), key, seq",
        args,
    ).fetchall()
    names = (
        "project",
        "category",
        "key",
        "value",
        "source",
        "state",
        "seq",
        "set_at",
        "ended_seq",
        "ended_at",
    )
    return [{**dict(zip(names, r[:10], strict=True)), "reason": r[10]} for r in rows]


def state_at(conn: duckdb.DuckDBPyConnection, project: str, category: str, key: str, seq: int) -> int | None:
    """The seq of the `state.set` that was the current value of (project, category, key) at ``seq``.

    None when the entry had no current value then (never set, or invalidated).
    """
    row = conn.execute(
        "SELECT seq FROM project_state WHERE project = ? AND category = ? AND key = ? AND seq < ? "
        "AND (ended_seq IS NULL OR ended_seq > ?) ORDER BY seq DESC LIMIT 1",
        [project, category, key, seq, seq],
    ).fetchone()
    return int(row[0]) if row else None


# -- interactions -----------------------------------------------------------------------


def _interaction(row: tuple[Any, ...]) -> dict[str, Any]:
    return dict(zip(INTERACTION_COLUMNS, row, strict=True))


def interaction(conn: duckdb.DuckDBPyConnection, interaction_id: str) -> dict[str, Any] | None:
    row = conn.execute(
        f"SELECT {', '.join(INTERACTION_COLUMNS)} FROM interactions WHERE id = ?", [interaction_id]
    ).fetchone()
    return _interaction(row) if row else None


def interactions(
    conn: duckdb.DuckDBPyConnection,
    *,
    project: str | None = None,
    session: str | None = None,
    since: int | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """Captured interactions, newest first."""
    where: list[str] = ["TRUE"]
    args: list[Any] = []
    if project is not None:
        where.append("project = ?")
        args.append(project)
    if session is not None:
        where.append("session = ?")
        args.append(session)
    if since is not None:
        where.append("captured_at >= ?")
        args.append(since)
    rows = conn.execute(
        f"SELECT {', '.join(INTERACTION_COLUMNS)} FROM interactions WHERE {' AND '.join(where)} "
        "ORDER BY seq DESC LIMIT ?",
        [*args, limit],
    ).fetchall()
    return [_interaction(r) for r in rows]


def pending_interactions(conn: duckdb.DuckDBPyConnection, limit: int) -> list[str]:
    """Interactions not yet extracted (failed ones included), oldest first."""
    rows = conn.execute(
        "SELECT id FROM interactions WHERE extraction = 'pending' ORDER BY seq LIMIT ?", [limit]
    ).fetchall()
    return [str(r[0]) for r in rows]


# -- candidates -------------------------------------------------------------------------


def _queue_sql(queue: str) -> str:
    return {
        "pending": "m.status = 'candidate' AND c.triage = 'pending'",
        "needs_human": "m.status = 'candidate' AND c.triage = 'waiting'",
        "promoted": "c.decided_seq IS NOT NULL AND m.status <> 'candidate' AND m.status <> 'invalid'",
        "rejected": "m.status = 'invalid'",
    }[queue]


def _candidate(row: tuple[Any, ...]) -> Memory:
    n = len(row) - len(_CANDIDATE_COLS)
    mem = row_to_memory(row[:n])
    info = dict(zip(_CANDIDATE_COLS, row[n:], strict=True))
    mem["candidate"] = {**info, "queue": _queue_of(mem["status"], info)}
    return mem


def _queue_of(status: str, info: dict[str, Any]) -> str:
    if status == "candidate":
        return "needs_human" if info["triage"] == "waiting" else "pending"
    return "rejected" if status == "invalid" else "promoted"


_CANDIDATE_SELECT: Final = f"SELECT {MEMORY_SELECT}, {', '.join('c.' + c for c in _CANDIDATE_COLS)} " + (
    "FROM candidates c JOIN memories m ON m.id = c.id"
)


def candidate(conn: duckdb.DuckDBPyConnection, memory_id: str) -> Memory | None:
    """A memory that began as a candidate, with what extraction and triage said of it."""
    row = conn.execute(f"{_CANDIDATE_SELECT} WHERE c.id = ?", [memory_id]).fetchone()
    return _candidate(row) if row else None


def candidates(
    conn: duckdb.DuckDBPyConnection, queues: Sequence[str], *, project: str | None = None, limit: int = 50
) -> list[Memory]:
    """Candidates in the given queues, oldest first (the order a person works through them)."""
    where = " OR ".join(f"({_queue_sql(qu)})" for qu in queues) or "FALSE"
    args: list[Any] = []
    if project is not None:
        where = f"({where}) AND m.project = ?"
        args.append(project)
    rows = conn.execute(
        f"{_CANDIDATE_SELECT} WHERE {where} ORDER BY m.stored_seq LIMIT ?", [*args, limit]
    ).fetchall()
    return [_candidate(r) for r in rows]


def pending_candidates(conn: duckdb.DuckDBPyConnection, limit: int) -> list[str]:
    rows = conn.execute(
        f"SELECT c.id FROM candidates c JOIN memories m ON m.id = c.id WHERE {_queue_sql('pending')} "
        "ORDER BY m.stored_seq LIMIT ?",
        [limit],
    ).fetchall()
    return [str(r[0]) for r in rows]


def known_candidates(conn: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> set[str]:
    """Which of ``ids`` are candidates (memories that began as one), in one query."""
    rows = conn.execute("SELECT id FROM candidates WHERE id IN (SELECT unnest(?::VARCHAR[]))", [list(ids)])
    return {str(r[0]) for r in rows.fetchall()}


def known_interactions(conn: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> set[str]:
    rows = conn.execute("SELECT id FROM interactions WHERE id IN (SELECT unnest(?::VARCHAR[]))", [list(ids)])
    return {str(r[0]) for r in rows.fetchall()}


def extraction_states(conn: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> dict[str, str]:
    """Where the extraction of each of ``ids`` stands (pending, extracted), in one query."""
    rows = conn.execute(
        "SELECT id, extraction FROM interactions WHERE id IN (SELECT unnest(?::VARCHAR[]))", [list(ids)]
    )
    return {str(r[0]): str(r[1]) for r in rows.fetchall()}


def statuses_of(conn: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> dict[str, str]:
    """The status of each of ``ids`` that is a memory, in one query."""
    rows = conn.execute(
        "SELECT id, status FROM memories WHERE id IN (SELECT unnest(?::VARCHAR[]))", [list(ids)]
    )
    return {str(r[0]): str(r[1]) for r in rows.fetchall()}


def candidate_ids(conn: duckdb.DuckDBPyConnection, interaction_id: str) -> list[str]:
    rows = conn.execute(
        "SELECT c.id FROM candidates c JOIN memories m ON m.id = c.id WHERE c.interaction_id = ? "
        "ORDER BY m.stored_seq",
        [interaction_id],
    ).fetchall()
    return [str(r[0]) for r in rows]


# -- matching ---------------------------------------------------------------------------


def reinforcement_pool(conn: duckdb.DuckDBPyConnection, project: str) -> list[tuple[str, str, float | None]]:
    """(id, text, confidence) of the active, visible memories a response in ``project`` may reinforce.

    The project's own memories, and the global identity and preference memories.
    """
    kinds = ", ".join(f"'{k}'" for k in PERSONAL_KINDS)
    clauses = [f"(m.project = '' AND m.kind IN ({kinds}))"]
    args: list[Any] = []
    if project:
        clauses.append("m.project = ?")
        args.append(project)
    rows = conn.execute(
        "SELECT m.id, coalesce(m.title || ' ', '') || m.content, m.confidence FROM memories m "
        f"WHERE m.status = 'active' AND {visible('m')} AND ({' OR '.join(clauses)}) ORDER BY m.stored_seq",
        args,
    ).fetchall()
    return [(str(r[0]), str(r[1]), r[2]) for r in rows]


def memories_with_prefix(conn: duckdb.DuckDBPyConnection, limit: int) -> list[Memory]:
    """Memories whose content begins with a bracketed word, such as "[materials] ..." (oldest first)."""
    rows = conn.execute(
        f"SELECT {MEMORY_SELECT} FROM memories m WHERE regexp_matches(m.content, ?) "
        "ORDER BY m.stored_seq LIMIT ?",
        [PREFIX_PATTERN, limit],
    ).fetchall()
    return [row_to_memory(r) for r in rows]


# -- decay ------------------------------------------------------------------------------


def decay_rows(conn: duckdb.DuckDBPyConnection, idle_before: int) -> pa.Table:
    """Active, never-referenced memories idle since before ``idle_before`` (µs): decay's inputs.

    Columns: id, title, kind, confidence, anchor (the later of activation and
    last change), and what may exempt it: pinned (``metadata.vault.pinned``),
    direct (stored as it is, not promoted from an extracted candidate) and
    in_pack (included in a recorded context pack: a reference the log
    already holds, though no `memory.reinforced` counted it).
    """
    return conn.execute(
        "SELECT m.id, coalesce(nullif(m.title, ''), left(m.content, 120)) AS title, m.kind, m.confidence, "
        "greatest(coalesce(m.promoted_at, m.updated_at), m.updated_at) AS anchor, "
        "coalesce(contains(m.metadata, '\"pinned\":true') "
        "AND coalesce(try_cast(json_extract(m.metadata, '$.vault.pinned') AS BOOLEAN), false), false) "
        "AS pinned, "
        "m.id NOT IN (SELECT id FROM candidates) AS direct, "
        "EXISTS (SELECT 1 FROM ctx_pack_members p WHERE p.id = m.id AND p.source = 'memory' "
        "AND p.included) AS in_pack "
        "FROM memories m WHERE m.status = 'active' AND m.reference_count = 0 "
        "AND greatest(coalesce(m.promoted_at, m.updated_at), m.updated_at) < ? ORDER BY m.stored_seq",
        [idle_before],
    ).to_arrow_table()


# -- counts -----------------------------------------------------------------------------


def knowledge_counts(conn: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """What stats reports for the loop: statuses, candidate queues, interactions, projects, state."""

    def pairs(sql: str) -> dict[str, int]:
        return {str(k): int(n) for k, n in conn.execute(sql).fetchall()}

    queues = dict.fromkeys(CANDIDATE_QUEUES, 0)
    for queue in CANDIDATE_QUEUES:
        row = conn.execute(
            f"SELECT count(*) FROM candidates c JOIN memories m ON m.id = c.id WHERE {_queue_sql(queue)}"
        ).fetchone()
        queues[queue] = int(row[0]) if row else 0
    failures = conn.execute("SELECT coalesce(sum(triage_failures), 0) FROM candidates").fetchone()
    extraction_failures = conn.execute("SELECT coalesce(sum(failures), 0) FROM interactions").fetchone()
    return {
        "statuses": pairs("SELECT status, count(*) FROM memories GROUP BY status ORDER BY status"),
        "candidates": queues,
        "triage_failures": int(failures[0]) if failures else 0,
        "interactions": pairs("SELECT extraction, count(*) FROM interactions GROUP BY extraction ORDER BY 1"),
        "extraction_failures": int(extraction_failures[0]) if extraction_failures else 0,
        "projects": int((conn.execute("SELECT count(*) FROM projects").fetchone() or (0,))[0]),
        "state_entries": pairs("SELECT state, count(*) FROM project_state GROUP BY state ORDER BY 1"),
        # Extraction and triage calls by trigger and outcome, e.g. {"cron": {"ok": 3, "error": 1}}.
        "calls": {
            str(t): {"ok": int(ok), "error": int(err)}
            for t, ok, err in conn.execute(
                "SELECT coalesce(trigger, 'manual'), count(*) FILTER (status = 'ok'), "
                "count(*) FILTER (status = 'error') FROM model_calls GROUP BY 1 ORDER BY 1"
            ).fetchall()
        },
    }
