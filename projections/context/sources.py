"""Where a pack's rows come from: the named queries that turn the projection into assembly input.

`candidates(conn, query, project, cfg, rank)` gathers everything `assemble`
may rank, as plain rows. This is the one place that knows which tables hold
them, so a richer source swaps in here without touching the assembly.

- State (tier 1): the project's trusted state, the newest version of each
  (category, key) that is current or invalidated (an invalidated one is
  listed as excluded, `invalid`).
- Memories: each ranked tier draws its own candidates, so one tier cannot
  crowd another out. `rank` is the recall policy (the substrate passes the
  one `recall` uses; BM25 recall when none is given). Project memories
  (tier 3) are ranked *with the project filter*, so thirty memories of
  another project cannot push the project's own out of the candidates;
  global memories (tiers 2 and 4) are ranked with the "no project" filter.
  Tier 4 also takes the global memories of the domains the query evokes,
  whatever their words, so knowledge earned on another project enters by
  its domain. And the always-wanted ones: pinned notes and the newest
  identity and preference memories.
- Chunks (tier 5): ranked by the recall policy's mode, BM25 or hybrid (BM25
  over heading path and text fused with the chunks' vectors), the project's
  best ones included (`store.chunk_candidates`).

A memory the ranker returned is a *hit*: recall found it relevant to the
query, even when its fused score is the lowest of its candidates (0 after
hybrid recall's normalisation).

What a memory row says beyond its columns:

- pinned: `metadata.vault.pinned` is true (a vault import or an update set it);
- expires_at: `metadata.vault.expires_at` (YYYY-MM-DD): the memory is valid
  through that day and expired from the next midnight UTC on;
- status: `superseded` when a `supersedes` link points at it, else `active`;
  memories the archive guard hides are not candidates at all.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import duckdb

from mnemolog.projections import standing
from mnemolog.projections.context import store
from mnemolog.projections.context.assemble import ChunkRow, MemoryRow, StateRow, evoked_domains
from mnemolog.projections.context.config import PackConfig
from mnemolog.projections.knowledge import queries as kq
from mnemolog.projections.memory.model import MEMORY_SELECT, Memory, row_to_memory
from mnemolog.projections.recall.hybrid import Fusion
from mnemolog.projections.recall.query import Filters, recall
from mnemolog.projections.schema import visible

if TYPE_CHECKING:
    import numpy as np
else:
    from mnemolog.projections.lazymod import numpy as np

#: A recall ranking: (memory, score) best first for (query, filters, limit).
Ranker = Callable[[str, Filters, int], list[tuple[Memory, float]]]


def bm25_ranker(conn: duckdb.DuckDBPyConnection) -> Ranker:
    """BM25 recall on this connection (what a pack ranks with when no policy is given)."""
    return lambda query, filters, limit: recall(conn, query, filters, limit)


@dataclass(frozen=True)
class Candidates:
    state: list[StateRow]
    memories: list[MemoryRow]
    chunks: list[ChunkRow]


def _vault(m: Memory) -> dict[str, Any]:
    v = (m.get("metadata") or {}).get("vault")
    return v if isinstance(v, dict) else {}


def expiry_us(value: Any) -> int | None:
    """The first microsecond at which a memory valid through `value` (YYYY-MM-DD) has expired."""
    if not isinstance(value, str):
        return None
    try:
        day = dt.date.fromisoformat(value)
    except ValueError:
        return None
    nxt = day + dt.timedelta(days=1)
    return int(dt.datetime(nxt.year, nxt.month, nxt.day, tzinfo=dt.UTC).timestamp()) * 1_000_000


def _superseded(conn: duckdb.DuckDBPyConnection, ids: Iterable[str]) -> set[str]:
    wanted = set(ids)
    if not wanted:
        return set()
    # Every superseded memory, kept while no memory-changing entry is folded (links are such
    # entries): the statement's rows for any ids are this set's members among them.
    every: frozenset[str] = standing.kept(
        conn,
        "superseded",
        None,
        lambda: frozenset(
            str(r[0])
            for r in conn.execute("SELECT DISTINCT dst FROM links WHERE relation = 'supersedes'").fetchall()
        ),
    )
    return wanted & every


def _fetch(conn: duckdb.DuckDBPyConnection, ids: list[str]) -> list[Memory]:
    if not ids:
        return []
    rows = conn.execute(
        f"SELECT {MEMORY_SELECT} FROM memories m WHERE m.id IN ({', '.join('?' * len(ids))})", ids
    ).fetchall()
    return [row_to_memory(r) for r in rows]


# The always-wanted memories depend on the memories only, not on the query: they are kept
# per (log, number of events that can change a memory), so packs between writes skip the
# scans. Counts only grow, so an equal key means no such event has been folded since.
_ALWAYS_CACHE: dict[tuple[Any, ...], list[Memory]] = {}


def _always(conn: duckdb.DuckDBPyConnection, kinds: tuple[str, ...], limit: int) -> list[Memory]:
    """Pinned memories, and the newest identity/preference ones (wanted whatever the query)."""
    key = (*standing.memory_state(conn), kinds, limit)
    hit = _ALWAYS_CACHE.get(key)
    if hit is None:
        hit = _always_now(conn, kinds, limit)
        if len(_ALWAYS_CACHE) >= 16:
            _ALWAYS_CACHE.clear()
        _ALWAYS_CACHE[key] = hit
    return [dict(m) for m in hit]  # type: ignore[misc]


def _always_now(conn: duckdb.DuckDBPyConnection, kinds: tuple[str, ...], limit: int) -> list[Memory]:
    # Ids first (a narrow scan), rows second: a top-N over whole rows would carry every
    # matching memory's text through the sort.
    ids = [
        str(r[0])
        for r in conn.execute(
            f"""SELECT m.id FROM memories m
                WHERE contains(m.metadata, '"pinned":true') AND {visible("m")}
                  AND coalesce(json_extract(m.metadata, '$.vault.pinned')::BOOLEAN, false)
                ORDER BY m.id LIMIT 1000"""
        ).fetchall()
    ]
    if kinds:
        ids += [
            str(r[0])
            for r in conn.execute(
                f"""SELECT m.id FROM memories m
                    WHERE m.kind IN (SELECT unnest(?::VARCHAR[])) AND {visible("m")}
                    ORDER BY m.stored_seq DESC LIMIT ?""",
                [list(kinds), limit],
            ).fetchall()
        ]
    return _fetch(conn, list(dict.fromkeys(ids)))


def to_row(m: Memory, score: float, superseded: set[str], hit: bool = False) -> MemoryRow:
    v = _vault(m)
    extra: dict[str, Any] = dict(m)
    project = extra.get("project")
    domains = extra.get("domains")
    status = extra.get("status")
    return MemoryRow(
        id=m["id"],
        kind=m["kind"],
        content=m["content"],
        project=project if isinstance(project, str) else "",
        domains=tuple(d for d in domains if isinstance(d, str)) if isinstance(domains, list) else (),
        status="superseded" if m["id"] in superseded else (status if isinstance(status, str) else "active"),
        archived=False,
        pinned=v.get("pinned") is True,
        expires_at=expiry_us(v.get("expires_at")),
        score=score,
        hit=hit,
    )


def domain_memories(conn: duckdb.DuckDBPyConnection, domains: Iterable[str], limit: int) -> list[Memory]:
    """Active, visible global memories of any of ``domains``: most domains matched, then newest."""
    wanted = sorted({d.lower() for d in domains})
    if not wanted:
        return []
    ids = [
        str(r[0])
        for r in conn.execute(
            f"""SELECT m.id FROM memories m
                WHERE m.project = '' AND m.status = 'active' AND {visible("m")}
                  AND list_has_any(list_transform(m.domains, d -> lower(d)), ?::VARCHAR[])
                ORDER BY len(list_intersect(list_transform(m.domains, d -> lower(d)), ?::VARCHAR[])) DESC,
                         m.stored_seq DESC
                LIMIT ?""",
            [wanted, wanted, limit],
        ).fetchall()
    ]
    return _fetch(conn, ids)


def memory_candidates(
    conn: duckdb.DuckDBPyConnection,
    query: str,
    project: str | None,
    cfg: PackConfig,
    rank: Ranker | None = None,
) -> list[MemoryRow]:
    """Every memory a pack may rank: per-tier recall hits, evoked-domain ones, the always-wanted."""
    rank = rank or bm25_ranker(conn)
    scored: dict[str, tuple[Memory, float, bool]] = {}
    for scope in ("", project) if project else ("",):
        for m, s in rank(query, Filters(project=scope), cfg.candidates):
            scored[m["id"]] = (m, s, True)
    for m in domain_memories(conn, evoked_domains(query, dict(cfg.domain_terms)), cfg.candidates):
        scored.setdefault(m["id"], (m, 0.0, False))
    for m in _always(conn, cfg.identity_kinds, cfg.candidates):
        scored.setdefault(m["id"], (m, 0.0, False))
    gone = _superseded(conn, scored)
    return [to_row(m, s, gone, hit) for m, s, hit in scored.values()]


def state_rows(conn: duckdb.DuckDBPyConnection, project: str | None) -> list[StateRow]:
    """The project's state: the newest version of each entry, current (enters) or invalidated (listed)."""
    if not project:
        return []
    # Kept while no memory-changing entry is folded (state events are such entries).
    return list(standing.kept(conn, "state_rows", project, lambda: tuple(_state_rows(conn, project))))


def _state_rows(conn: duckdb.DuckDBPyConnection, project: str) -> list[StateRow]:
    newest: dict[tuple[str, str], dict[str, Any]] = {}
    for r in kq.state_entries(conn, project, history=True):
        newest[(r["category"], r["key"])] = r  # ordered by seq within an entry: the last is the newest
    return [
        StateRow(project=project, category=c, key=k, value=r["value"], active=r["state"] == "current")
        for (c, k), r in newest.items()
        if r["state"] in ("current", "invalid")
    ]


def candidates(
    conn: duckdb.DuckDBPyConnection,
    query: str,
    project: str | None,
    cfg: PackConfig,
    rank: Ranker | None = None,
    *,
    query_vector: np.ndarray | None = None,
    fusion: Fusion | None = None,
) -> Candidates:
    """What a pack for ``query`` may hold; ``project`` is canonical (the caller resolved any alias).

    ``query_vector`` (the recall policy's, when it ranks hybrid) ranks the chunks hybrid too,
    with ``fusion``; without it they are ranked by BM25.
    """
    # The memories first: their ranking brings the BM25 copy to the engine's position, whose
    # memory generation the state rows are then kept under (no statement to read it).
    memories = memory_candidates(conn, query, project, cfg, rank)
    return Candidates(
        state=state_rows(conn, project),
        memories=memories,
        chunks=store.chunk_candidates(
            conn, query, project, cfg.candidates, query_vector=query_vector, fusion=fusion
        ),
    )
