"""Recall modes and their fusion: BM25, vector, and both fused by reciprocal rank fusion.

`rank` is the ranking other parts of mnemolog call (recall, context packs):
BM25 candidates from `recall.rank_bm25`, vector candidates from
`vectors.search`, both under the same filters (the archive guard included
unless `include_archived`), fused by `rrf`:

    score(d) = Σ_r  w_r / (k + rank_r(d))        rank 1-based, over the rankers that found d

with weights and k configurable (`Fusion`). Each ranker contributes its top
`depth` candidates (at least FUSION_DEPTH); a memory one ranker did not
find gets nothing from it. Ties break by the newest memory first. `rrf` is
a pure function of the two rankings, and both rankings are deterministic
functions of the projection and the query, so the fused order is too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import duckdb
import numpy as np

from mnemolog.projections import bm25, vectors
from mnemolog.projections.memories import Memory
from mnemolog.projections.recall import SCORE_SCALE, Filters, parse, rank_bm25, with_rows

Mode = Literal["bm25", "vector", "hybrid"]
MODES: Final[tuple[str, ...]] = ("bm25", "vector", "hybrid")
FUSION_DEPTH: Final = 50


@dataclass(frozen=True)
class Fusion:
    """RRF parameters. The defaults were chosen on LoCoMo (docs/recall.md)."""

    k: int = 60
    bm25_weight: float = 1.0
    vector_weight: float = 1.0
    depth: int = FUSION_DEPTH


@dataclass(frozen=True)
class Ranked:
    """One result with where each ranker put it (1-based; None: not among its candidates)."""

    doc: int
    score: float
    bm25_rank: int | None = None
    vector_rank: int | None = None
    bm25_score: float | None = None
    distance: float | None = None

    def explain(self) -> dict[str, Any]:
        return {
            "bm25_rank": self.bm25_rank,
            "vector_rank": self.vector_rank,
            "bm25_score": self.bm25_score,
            "cosine_distance": self.distance,
            "fused_score": self.score,
        }


def rrf(
    rankings: Mapping[str, Sequence[int]], weights: Mapping[str, float], k: int
) -> list[tuple[int, float, dict[str, int]]]:
    """Reciprocal rank fusion: (doc, fused score, {ranker: 1-based rank}), best first.

    Contributions are added in the order of `rankings`, so the sum (and the
    order of docs) is the same on every run.
    """
    scores: dict[int, float] = {}
    ranks: dict[int, dict[str, int]] = {}
    for name, ranking in rankings.items():
        w = weights.get(name, 1.0)
        for i, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + w / (k + i)
            ranks.setdefault(doc, {})[name] = i
    order = sorted(scores, key=lambda d: (-scores[d], -d))
    return [(d, scores[d], ranks[d]) for d in order]


def rank(
    conn: duckdb.DuckDBPyConnection,
    query: str,
    query_vector: np.ndarray | None,
    filters: Filters,
    limit: int,
    *,
    mode: Mode,
    fusion: Fusion = Fusion(),
    meta: vectors.Meta | None = None,
    use_index: bool = False,
) -> list[Ranked]:
    """The `limit` best memories for `query` in `mode` (vector modes need `query_vector` and `meta`)."""
    if mode not in MODES:
        raise ValueError(f"unknown recall mode {mode!r}")
    want_bm25 = mode in ("bm25", "hybrid")
    want_vec = mode in ("vector", "hybrid")
    depth = limit if mode != "hybrid" else max(limit, fusion.depth)
    lexical: list[tuple[int, int]] = []
    if want_bm25:
        parsed = parse(conn, query)
        copy = bm25.index_for(conn, parsed.position) if parsed.terms else None
        lexical = rank_bm25(conn, parsed, filters, depth, copy=copy)
    near: list[tuple[int, float]] = []
    if want_vec and query_vector is not None and meta is not None:
        near = vectors.search(conn, query_vector, filters, depth, meta=meta, use_index=use_index)
    if mode == "bm25":
        return [
            Ranked(d, s / SCORE_SCALE, bm25_rank=i, bm25_score=s / SCORE_SCALE)
            for i, (d, s) in enumerate(lexical, start=1)
        ]
    if mode == "vector":
        return [
            Ranked(d, 1.0 - dist, vector_rank=i, distance=dist) for i, (d, dist) in enumerate(near, start=1)
        ]
    lex = dict(lexical)
    dist = dict(near)
    fused = rrf(
        {"bm25": [d for d, _ in lexical], "vector": [d for d, _ in near]},
        {"bm25": fusion.bm25_weight, "vector": fusion.vector_weight},
        fusion.k,
    )
    return [
        Ranked(
            d,
            score,
            bm25_rank=r.get("bm25"),
            vector_rank=r.get("vector"),
            bm25_score=lex[d] / SCORE_SCALE if d in lex else None,
            distance=dist.get(d),
        )
        for d, score, r in fused[:limit]
    ]


def with_memories(conn: duckdb.DuckDBPyConnection, ranked: list[Ranked]) -> list[tuple[Memory, Ranked]]:
    """The memory rows of a ranking, in its order."""
    rows = {m["stored_seq"]: m for m, _ in with_rows(conn, [(r.doc, 0) for r in ranked])}
    return [(rows[r.doc], r) for r in ranked if r.doc in rows]
