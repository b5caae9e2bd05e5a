"""Named read queries over the projection, for the substrate's commands.

The substrate speaks in memories, policies and atomisations; the tables and
their SQL live here (and in `recall` for ranked reads, `get` and `list`).
Each function takes a connection from a projection session (caught up with
the log) and returns plain values. A new projection table comes with its
query functions here, beside the DDL in `schema` and its fold handler.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

import duckdb

from mnemolog.projections.fold import id_set
from mnemolog.projections.memory.model import MEMORY_SELECT, Memory, row_to_memory
from mnemolog.projections.schema import visible

__all__ = [
    "all_own_policies",
    "atom_parent",
    "atomisation_counts",
    "is_hidden",
    "latest_atoms",
    "memories_with_hidden",
    "memory_by_source",
    "migration_snapshot_sizes",
    "migration_undo_ids",
    "own_policies",
    "pending_atomisations",
    "supersedes_links",
    "touching_seqs",
    "unarchived_completions",
    "unfinished_atoms",
]


# -- memories ------------------------------------------------------------------------


def atom_parent(conn: duckdb.DuckDBPyConnection, memory_id: str) -> str | None:
    """The memory `memory_id` is an atom of, if it is one (None too when it is unknown)."""
    row = conn.execute("SELECT atom_of FROM memories WHERE id = ?", [memory_id]).fetchone()
    return None if row is None else row[0]


def memory_by_source(conn: duckdb.DuckDBPyConnection, source: str) -> str | None:
    """The newest memory whose `source` is exactly this, if any."""
    row = conn.execute(
        "SELECT id FROM memories WHERE source = ? ORDER BY stored_seq DESC LIMIT 1", [source]
    ).fetchone()
    return None if row is None else str(row[0])


def is_hidden(conn: duckdb.DuckDBPyConnection, memory_id: str) -> bool:
    """Whether the archive guard hides the memory from recall (False for an unknown id)."""
    row = conn.execute(f"SELECT NOT {visible('m')} FROM memories m WHERE id = ?", [memory_id]).fetchone()
    return bool(row and row[0])


def memories_with_hidden(
    conn: duckdb.DuckDBPyConnection, namespace: str | None = None
) -> list[tuple[Memory, bool]]:
    """Every memory (of a namespace and those below it), oldest first, with its guard verdict."""
    where, args = ("TRUE", [])
    if namespace is not None:
        where, args = ("(m.namespace = ? OR starts_with(m.namespace, ?))", [namespace, namespace + "/"])
    rows = conn.execute(
        f"SELECT {MEMORY_SELECT}, NOT {visible('m')} AS hidden FROM memories m WHERE {where} "
        "ORDER BY m.stored_seq",
        args,
    ).fetchall()
    return [(row_to_memory(r[:-1]), bool(r[-1])) for r in rows]


def supersedes_links(conn: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """(src, dst) of every `supersedes` link, oldest first."""
    rows = conn.execute("SELECT src, dst FROM links WHERE relation = 'supersedes' ORDER BY seq").fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def links_by_source(conn: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[str, str, dict[str, Any]]]]:
    """src -> [(relation, dst, metadata)] of every edge, oldest first."""
    out: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for src, rel, dst, meta in conn.execute(
        "SELECT src, relation, dst, metadata FROM links ORDER BY seq"
    ).fetchall():
        out.setdefault(str(src), []).append((str(rel), str(dst), json.loads(meta) if meta else {}))
    return out


def touching_seqs(conn: duckdb.DuckDBPyConnection, ids: Collection[str], below: int) -> set[int]:
    """The seqs below `below` of every entry that touches one of `ids`."""
    if not ids:
        return set()
    rows = conn.execute(
        "SELECT DISTINCT seq FROM touches WHERE seq < ? AND memory_id IN (SELECT unnest(?))",
        [below, sorted(ids)],
    ).fetchall()
    return {int(r[0]) for r in rows}


# -- policies ------------------------------------------------------------------------


def own_policies(conn: duckdb.DuckDBPyConnection, namespaces: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The policies these namespaces set themselves (namespaces without one are left out)."""
    if not namespaces:
        return {}
    rows = conn.execute(
        f"SELECT namespace, policy FROM policies WHERE namespace IN ({', '.join('?' * len(namespaces))})",
        list(namespaces),
    ).fetchall()
    return {str(ns): json.loads(p) for ns, p in rows}


def all_own_policies(conn: duckdb.DuckDBPyConnection) -> dict[str, dict[str, Any]]:
    """Every policy a namespace set itself, by namespace."""
    return {
        str(ns): json.loads(p) for ns, p in conn.execute("SELECT namespace, policy FROM policies").fetchall()
    }


# -- atomisations ----------------------------------------------------------------------


def latest_atoms(conn: duckdb.DuckDBPyConnection, memory_id: str) -> list[str]:
    """The atoms of the latest completed atomisation of `memory_id`."""
    row = conn.execute(
        "SELECT detail FROM atomisations WHERE source_id = ? AND status = 'completed' "
        "ORDER BY seq DESC LIMIT 1",
        [memory_id],
    ).fetchone()
    if row is None:
        return []
    return list(json.loads(row[0]).get("atom_ids", []))


def pending_atomisations(conn: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Requests with no completion or failure after them, oldest first: {seq, source_id, **request}."""
    rows = conn.execute(
        """SELECT r.seq, r.source_id, r.detail FROM atomisations r
           WHERE r.status = 'requested' AND NOT EXISTS (
               SELECT 1 FROM atomisations d
               WHERE d.status IN ('completed', 'failed')
                 AND (d.request_seq = r.seq OR (d.source_id = r.source_id AND d.seq > r.seq)))
           ORDER BY r.seq"""
    ).fetchall()
    return [{"seq": r[0], "source_id": r[1], **json.loads(r[2])} for r in rows]


def unfinished_atoms(conn: duckdb.DuckDBPyConnection, source_id: str) -> list[Memory]:
    """Atoms of `source_id` that no completed atomisation lists and nobody archived, oldest first.

    What an interrupted atomisation left: a re-run reuses them or archives them.
    """
    done: set[str] = set()
    for (detail,) in conn.execute(
        "SELECT detail FROM atomisations WHERE source_id = ? AND status = 'completed'", [source_id]
    ).fetchall():
        done.update(json.loads(detail).get("atom_ids", []))
    rows = conn.execute(
        f"SELECT {MEMORY_SELECT} FROM memories m WHERE m.atom_of = ? AND m.archived_at IS NULL "
        "ORDER BY m.stored_seq",
        [source_id],
    ).fetchall()
    return [m for m in map(row_to_memory, rows) if m["id"] not in done]


def unarchived_completions(
    conn: duckdb.DuckDBPyConnection, source_id: str | None = None
) -> list[dict[str, Any]]:
    """Latest completed atomisations whose parent was neither archived nor restored since.

    A writer stopped between `atomisation.completed` and the parent's archive
    leaves one: `{seq, source_id, **completion}`, oldest first.
    """
    rows = conn.execute(
        """SELECT a.seq, a.source_id, a.detail FROM atomisations a
           WHERE a.status = 'completed' AND (? IS NULL OR a.source_id = ?)
             AND a.seq = (SELECT max(b.seq) FROM atomisations b
                          WHERE b.source_id = a.source_id AND b.status = 'completed')
             AND NOT EXISTS (SELECT 1 FROM touches t
                             WHERE t.memory_id = a.source_id AND t.seq > a.seq
                               AND t.type IN ('memory.archived', 'memory.restored'))
           ORDER BY a.seq""",
        [source_id, source_id],
    ).fetchall()
    return [{"seq": r[0], "source_id": r[1], **json.loads(r[2])} for r in rows]


def atomisation_counts(conn: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """How many atomisation records of each status (requested, completed, failed)."""
    rows = dict(conn.execute("SELECT status, count(*) FROM atomisations GROUP BY status").fetchall())
    return {s: int(rows.get(s, 0)) for s in ("requested", "completed", "failed")}


# -- migrations ------------------------------------------------------------------------


def migration_snapshot_sizes(conn: duckdb.DuckDBPyConnection) -> list[int]:
    """The snapshot (checkpoint size) of every `migration.started`, newest first."""
    rows = conn.execute(
        "SELECT detail FROM migrations WHERE type = 'migration.started' ORDER BY seq DESC"
    ).fetchall()
    sizes = [json.loads(r[0]).get("snapshot_size") for r in rows]
    return [int(s) for s in sizes if isinstance(s, int) and not isinstance(s, bool)]


def migration_undo_ids(conn: duckdb.DuckDBPyConnection, snapshot_size: int) -> list[str]:
    """The memories a rollback to `snapshot_size` would put back, sorted."""
    rows = conn.execute(
        "SELECT DISTINCT memory_id FROM migration_undo WHERE seq >= ? ORDER BY memory_id", [snapshot_size]
    ).fetchall()
    return [str(r[0]) for r in rows]


def existing_ids(conn: duckdb.DuckDBPyConnection, ids: Collection[str]) -> set[str]:
    """Which of these ids the memories table holds.

    The ids go in as a registered Arrow table (`fold.id_set`): bound as one list parameter,
    6,000 ids cost DuckDB about 40 times as much (an import asks this of every line).
    """
    if not ids:
        return set()
    with id_set(conn, "ml_existing_ids", ids) as wanted:
        return {str(r[0]) for r in conn.execute(f"SELECT id FROM memories WHERE id IN {wanted}").fetchall()}
