"""The recall policy: which mode ranks a question, and the ranking itself, for every caller.

`recall` (and `recall_report`) and context packs ask the same question of
the same memories, so they go through this one module: one question ranks
the same through `recall` and through a pack.

- `plan` decides the mode. Asked for one, that one (a vector mode on a home
  without an embedder is TierLocked, exit 3). Asked for none: hybrid when
  the home's recorded embedder embeds and it has vectors, else bm25; and if
  the query cannot be embedded now, bm25 with the reason in `fallback`. The
  query is embedded here, outside the projection lock, because a remote
  embedder may take a while.
- `rank` ranks under filters inside a session, falling back to bm25 when the
  home turned out to have no vectors (another process may have changed it
  between the two locks).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import duckdb

from mnemolog.curators.embedding.embedder import EmbedderFailed
from mnemolog.eventlog.errors import UsageError
from mnemolog.projections.embedding import vectors
from mnemolog.projections.memory.model import Memory
from mnemolog.projections.recall import hybrid
from mnemolog.projections.recall.query import Filters
from mnemolog.substrate.embedding.service import Embedding, require_vectors
from mnemolog.substrate.session import Session, Sessions

if TYPE_CHECKING:
    import numpy as np
else:
    from mnemolog.projections.lazymod import numpy as np


@dataclass(frozen=True)
class Plan:
    """The mode a question is ranked in, the one asked for, why they differ, the query's vector."""

    mode: hybrid.Mode
    requested: hybrid.Mode | None = None
    fallback: str | None = None
    query_vector: np.ndarray | None = None


def check_mode(mode: str | None) -> hybrid.Mode | None:
    if mode is not None and mode not in hybrid.MODES:
        raise UsageError(f"unknown recall mode {mode!r}; expected one of {', '.join(hybrid.MODES)}")
    return mode  # type: ignore[return-value]


def _decide(
    conn: duckdb.DuckDBPyConnection, requested: hybrid.Mode | None
) -> tuple[hybrid.Mode, vectors.Recorded | None]:
    """The mode to use, and the recorded embedder when it is a vector mode (TierLocked without)."""
    rec = vectors.recorded(conn)
    meta = vectors.read_meta(conn)
    used: hybrid.Mode = requested or (
        "hybrid" if rec is not None and rec.embeds and meta is not None else "bm25"
    )
    if used == "bm25":
        return used, None
    return used, require_vectors(rec, used)


def plan_in(s: Session, embedding: Embedding, query: str, mode: str | None = None) -> Plan | None:
    """`plan`, decided in a session the caller holds and ranks in: None when the query's vector
    is not at hand (a model would be called: that is `plan`'s, outside the projection lock).

    A recall whose query vector is cached opens one session instead of two, and the plan is
    the one `plan` would make: the same reads, the same vector.
    """
    requested = check_mode(mode)
    if requested == "bm25":
        return Plan("bm25", requested)
    used, rec = _decide(s.conn, requested)
    if rec is None:
        return Plan("bm25", requested)
    vec = embedding.cached_query_vector(rec, query)
    return None if vec is None else Plan(used, requested, None, vec)


def plan(sessions: Sessions, embedding: Embedding, query: str, mode: str | None = None) -> Plan:
    """The mode for `query` (see the module docstring), with its vector when it needs one."""
    requested = check_mode(mode)
    if requested == "bm25":
        return Plan("bm25", requested)  # nothing to decide: no session, no vector tables read
    with sessions.session() as s:
        used, rec = _decide(s.conn, requested)
    if rec is None:
        return Plan("bm25", requested)
    try:
        return Plan(used, requested, None, embedding.query_vector(rec, query))
    except EmbedderFailed as exc:
        if requested is not None:
            raise
        return Plan("bm25", requested, f"the query could not be embedded: {exc.message}")


def rank(
    s: Session,
    p: Plan,
    query: str,
    filters: Filters,
    limit: int,
    fusion: hybrid.Fusion,
    *,
    min_score: float | None = None,
    in_scope: bool = False,
) -> tuple[Plan, list[tuple[Memory, hybrid.Ranked]]]:
    """The `limit` best memories under `filters` in the plan's mode (and the plan as it was used).

    A memory with no relevance is never a hit (hybrid.rank says what that means per mode);
    `min_score` is a floor on the score in every mode. `in_scope` keeps every memory the
    filters select, ranked (a pack's own project: in scope whatever the question).
    """
    # BM25 alone never reads the vector tables: their metadata is a statement per recall.
    meta = vectors.read_meta(s.conn) if p.mode != "bm25" else None
    if p.mode != "bm25" and meta is None:
        p = replace(p, mode="bm25", fallback=p.fallback or "the home has no vectors yet")
    use_index = meta is not None and p.mode != "bm25" and vectors.maintain_index(s.conn, meta)
    ranked, copy = hybrid.rank_with_copy(
        s.conn,
        query,
        p.query_vector if p.mode != "bm25" else None,
        filters,
        limit,
        mode=p.mode,
        fusion=fusion,
        meta=meta,
        use_index=use_index,
        min_score=min_score,
        in_scope=in_scope,
    )
    return p, hybrid.with_memories(s.conn, ranked, copy)


def prefix_vectors(conn: duckdb.DuckDBPyConnection, p: Plan) -> Plan:
    """The plan for a projection of a log prefix (`as_of`), whose vectors come from the cache only.

    When some of the prefix's memories have no vector in the embedding cache (embedded under
    a model the cache no longer holds, or never), the default mode ranks by bm25 and says why:
    a hybrid ranking that silently gave those memories the lowest cosine would not be the
    one the home gave then. A mode asked for by name is kept.
    """
    if p.mode == "bm25" or p.requested is not None:
        return p
    missing = vectors.pending_count(conn)
    if missing == 0:
        return p
    return replace(
        p,
        mode="bm25",
        query_vector=None,
        fallback=f"{missing} memories of that point have no vector in the embedding cache",
    )
