"""Recall modes and their fusion: BM25, vector, and both fused by a weighted sum of normalised scores.

`rank` is the ranking other parts of mnemolog call (recall, context packs):
BM25 candidates from `recall.rank_bm25`, vector candidates from
`vectors.search`, both under the same filters (the archive guard included
unless `include_archived`): each ranker's top `depth` (at least
FUSION_DEPTH). Two fusions (`Fusion.method`):

  * "convex" (the default): over the union of the candidates,

        score(d) = w_bm25 * bm25(d) / max bm25  +  w_vector * (cos(d) - min cos) / (max cos - min cos)

    with the maxima and minima over the candidates; a candidate BM25 did not
    find scores 0 there, and every candidate's cosine is its exact one (a
    memory without a vector yet takes the minimum). Scores keep what ranks
    throw away: how far ahead a strong keyword match is.
  * "rrf", reciprocal rank fusion: score(d) = Σ_r w_r / (k + rank_r(d)),
    rank 1-based, over the rankers that found d.

The defaults were measured on LoCoMo (docs/recall.md): reciprocal rank fusion
of BM25 with an embedder weaker than BM25 loses to BM25 alone (it lets the
weaker ranker's every candidate in at full rank weight), the weighted sum
does not. Ties break by the newest memory first. Both fusions are pure
functions of the two candidate lists and their scores, which are
deterministic functions of the projection and the query, so the fused order
is too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

import duckdb

from mnemolog.projections.embedding import vectors
from mnemolog.projections.memory.model import Memory
from mnemolog.projections.recall import bm25
from mnemolog.projections.recall.query import (
    SCORE_SCALE,
    Filters,
    Lexical,
    neighbours,
    parse,
    rank_lexical,
    with_rows,
)

if TYPE_CHECKING:
    import numpy as np
else:
    from mnemolog.projections.lazymod import numpy as np

Mode = Literal["bm25", "vector", "hybrid"]
MODES: Final[tuple[str, ...]] = ("bm25", "vector", "hybrid")
FUSION_DEPTH: Final = 50
#: α: a memory's BM25 score gains α times the best of its neighbours' (recall.rank_lexical).
NEIGHBOUR_WEIGHT: Final = 0.7
#: The share at which the memories two places away count as neighbours (0: only the adjacent).
NEIGHBOUR_DECAY: Final = 0.5
#: γ: in convex fusion, a candidate's fused score gains γ times the best fused score of its
#: adjacent candidates, so a neighbour that the embedding found lifts it too (`smooth`).
FUSED_NEIGHBOUR_WEIGHT: Final = 0.2
#: In hybrid recall, a memory none of whose words (nor its neighbours') the query holds is a hit
#: only when its cosine reaches this. Fused scores cannot say it: they are normalised per query,
#: so the least similar candidate always fuses to 0 however close it is. Measured with both
#: offline embedders: related texts 0.21-0.60, unrelated ones -0.05-0.15 (docs/recall.md).
MIN_COSINE: Final = 0.2


FusionMethod = Literal["convex", "rrf"]


@dataclass(frozen=True)
class Fusion:
    """How recall ranks (`[recall]` in config.toml): BM25's k1 and b, the neighbour weight α and
    the second ring's share, and how hybrid recall fuses (method, weights, RRF's k, candidates
    per ranker, the fused neighbour weight γ).

    The defaults were chosen on LoCoMo conversations 0-3 (docs/recall.md).
    """

    method: FusionMethod = "convex"
    bm25_weight: float = 0.7
    vector_weight: float = 0.3
    k: int = 60
    depth: int = FUSION_DEPTH
    k1: float = bm25.K1
    b: float = bm25.B
    neighbour_weight: float = NEIGHBOUR_WEIGHT
    neighbour_decay: float = NEIGHBOUR_DECAY
    fused_neighbour_weight: float = FUSED_NEIGHBOUR_WEIGHT
    min_cosine: float = MIN_COSINE


@dataclass(frozen=True)
class Ranked:
    """One result with where each ranker put it (1-based; None: not among its candidates)."""

    doc: int
    score: float
    bm25_rank: int | None = None
    vector_rank: int | None = None
    bm25_score: float | None = None
    distance: float | None = None
    # α · the best neighbour's BM25 score, included in bm25_score; and that neighbour's doc.
    neighbour: float | None = None
    neighbour_doc: int | None = None
    # γ · the best adjacent candidate's fused score, included in score (hybrid, convex); its doc.
    fused_neighbour: float | None = None
    fused_neighbour_doc: int | None = None

    def explain(self) -> dict[str, Any]:
        """Where each ranker put this result and what it scored (None: not among its candidates)."""
        return {
            "bm25_rank": self.bm25_rank,
            "vector_rank": self.vector_rank,
            "bm25_score": self.bm25_score,
            "neighbour_contribution": self.neighbour,
            "neighbour_seq": self.neighbour_doc,
            "cosine_distance": self.distance,
            "fused_neighbour_contribution": self.fused_neighbour,
            "fused_neighbour_seq": self.fused_neighbour_doc,
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


def convex(
    lexical: Sequence[tuple[int, float]],
    cosines: Mapping[int, float],
    near: Sequence[int],
    weights: tuple[float, float],
) -> list[tuple[int, float]]:
    """The weighted sum of normalised scores (see the module docstring): (doc, score), best first.

    `lexical` is BM25's (doc, score) list, `near` the vector ranker's docs;
    `cosines` the cosine of every candidate that has a vector.

    Plain Python: on the hundred-odd candidates of a recall, numpy's per-call cost was
    most of the fusion. The arithmetic is the same IEEE double operations, one element at
    a time, so the scores are the same floats.
    """
    bm = dict(lexical)
    cands = sorted(bm.keys() | set(near))
    if not cands:
        return []
    b = [bm.get(d, 0.0) for d in cands]
    known = [cosines[d] for d in cands if d in cosines]
    floor = min(known) if known else 0.0
    c = [cosines.get(d, floor) for d in cands]
    top = max(b)
    bn = [x / top for x in b] if top > 0 else b
    lo = min(c)
    span = max(c) - lo
    cn = [(x - lo) / span for x in c] if span > 0 else [0.0] * len(c)
    w_b, w_v = weights
    scored = [(d, w_b * x + w_v * y) for d, x, y in zip(cands, bn, cn, strict=True)]
    scored.sort(key=lambda t: (-t[1], -t[0]))
    return scored


def smooth(
    fused: Sequence[tuple[int, float]], adjacent: Mapping[int, tuple[int, int]], weight: float
) -> list[tuple[int, float, float, int | None]]:
    """Neighbour context on fused scores: (doc, score + γ · the best adjacent candidate's score,
    that contribution, its doc), best first, newest first on ties.

    `adjacent` gives each candidate's neighbours before and after (-1: none),
    as BM25's neighbour term reads them; only candidates lend (every candidate
    passed the query's filters). A memory with no neighbour among the
    candidates keeps its score. Run on the fused scores of the union, before
    the cut: the vector side's evidence reaches a neighbour as BM25's does.
    """
    score = dict(fused)
    out: list[tuple[int, float, float, int | None]] = []
    for d, s in fused:
        best, best_doc = 0.0, None
        for n in adjacent.get(d, (-1, -1)):
            if n >= 0 and n in score and score[n] > best:
                best, best_doc = score[n], n
        add = weight * best
        out.append((d, s + add, add, best_doc if add > 0 else None))
    out.sort(key=lambda t: (-t[1], -t[0]))
    return out


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
    min_score: float | None = None,
    in_scope: bool = False,
) -> list[Ranked]:
    """The `limit` best memories for `query` in `mode` (vector modes need `query_vector` and `meta`).

    A memory with no relevance is never a hit. In bm25 mode that is a score
    of 0 (none of the query's terms, in it or its neighbours). In hybrid
    mode a memory without such a match needs a cosine of at least
    `fusion.min_cosine` (its fused score says nothing: normalised per query,
    the least similar candidate fuses to 0 however close it is). Vector
    mode, asked for by name, keeps its nearest candidates. `min_score`, when
    given, is a floor on the score in every mode. `in_scope`: every memory
    the filters select is wanted whatever its relevance, ranked (a context
    pack's own project), so neither floor applies.
    """
    return rank_with_copy(
        conn,
        query,
        query_vector,
        filters,
        limit,
        mode=mode,
        fusion=fusion,
        meta=meta,
        use_index=use_index,
        min_score=min_score,
        in_scope=in_scope,
    )[0]


def rank_with_copy(
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
    min_score: float | None = None,
    in_scope: bool = False,
) -> tuple[list[Ranked], bm25.MemoryIndex | None]:
    """`rank`, and the connection's copy of the BM25 index it ranked with (None: none yet, or
    no BM25 side), whose row cache `with_memories` reads the results' rows from."""
    ranked, copy = _rank(
        conn, query, query_vector, filters, limit, mode=mode, fusion=fusion, meta=meta, use_index=use_index
    )
    if not in_scope:
        ranked = [
            r for r in ranked if _relevant(r, mode, fusion) and (min_score is None or r.score >= min_score)
        ]
    return ranked, copy


def _relevant(r: Ranked, mode: Mode, fusion: Fusion) -> bool:
    if mode == "vector":
        return True
    if r.bm25_score is not None and r.bm25_score > 0:
        return True
    return mode == "hybrid" and r.distance is not None and 1.0 - r.distance >= fusion.min_cosine


def _rank(
    conn: duckdb.DuckDBPyConnection,
    query: str,
    query_vector: np.ndarray | None,
    filters: Filters,
    limit: int,
    *,
    mode: Mode,
    fusion: Fusion,
    meta: vectors.Meta | None,
    use_index: bool,
) -> tuple[list[Ranked], bm25.MemoryIndex | None]:
    if mode not in MODES:
        raise ValueError(f"unknown recall mode {mode!r}")
    want_bm25 = mode in ("bm25", "hybrid")
    want_vec = mode in ("vector", "hybrid")
    depth = limit if mode != "hybrid" else max(limit, fusion.depth)
    lexical: list[Lexical] = []
    copy: bm25.MemoryIndex | None = None
    if want_bm25:
        parsed = parse(conn, query)
        copy = bm25.index_for(conn, parsed.position) if parsed.terms else None
        lexical = rank_lexical(
            conn,
            parsed,
            filters,
            depth,
            copy=copy,
            k1=fusion.k1,
            b=fusion.b,
            neighbour_weight=fusion.neighbour_weight,
            neighbour_decay=fusion.neighbour_decay,
        )
    near: list[tuple[int, float]] = []
    if not want_bm25 and (position := bm25.known_position(conn)) is not None:
        # Vector mode has no BM25 side, but the connection's copy of the index (built once it
        # has been asked for a few times) keeps the excluded sets and the rows it reads.
        copy = bm25.index_for(conn, position)
    scored: dict[int, float] = {}  # exact distances of BM25 candidates the vector side did not rank
    if want_vec and query_vector is not None and meta is not None:
        # Convex fusion scores every BM25 candidate by its cosine: one pass gives both.
        also = [x.doc for x in lexical] if mode == "hybrid" and fusion.method == "convex" else []
        near, scored = vectors.search_with(
            conn, query_vector, filters, depth, also, meta=meta, use_index=use_index
        )
    if mode == "bm25":
        return [
            Ranked(
                x.doc,
                x.score / SCORE_SCALE,
                bm25_rank=i,
                bm25_score=x.score / SCORE_SCALE,
                neighbour=x.neighbour / SCORE_SCALE,
                neighbour_doc=x.neighbour_doc,
            )
            for i, x in enumerate(lexical, start=1)
        ], copy
    if mode == "vector":
        return [
            Ranked(d, 1.0 - dist, vector_rank=i, distance=dist) for i, (d, dist) in enumerate(near, start=1)
        ], copy
    lex = {x.doc: x for x in lexical}
    ranks_b = {x.doc: i for i, x in enumerate(lexical, start=1)}
    ranks_v = {d: i for i, (d, _) in enumerate(near, start=1)}
    dist = dict(near)
    lifted: dict[int, tuple[float, int | None]] = {}
    if fusion.method == "rrf":
        fused = [
            (d, sc)
            for d, sc, _ in rrf(
                {"bm25": [x.doc for x in lexical], "vector": [d for d, _ in near]},
                {"bm25": fusion.bm25_weight, "vector": fusion.vector_weight},
                fusion.k,
            )
        ]
    else:
        dist.update(scored)
        fused = convex(
            [(x.doc, x.score / SCORE_SCALE) for x in lexical],
            {d: 1.0 - x for d, x in dist.items()},
            list(ranks_v),
            (fusion.bm25_weight, fusion.vector_weight),
        )
        if fusion.fused_neighbour_weight > 0 and fused:
            adjacent = neighbours(conn, [d for d, _ in fused], copy)
            smoothed = smooth(fused, adjacent, fusion.fused_neighbour_weight)
            fused = [(d, sc) for d, sc, _, _ in smoothed]
            lifted = {d: (add, by) for d, _, add, by in smoothed}
    return [
        Ranked(
            d,
            score,
            bm25_rank=ranks_b.get(d),
            vector_rank=ranks_v.get(d),
            bm25_score=lex[d].score / SCORE_SCALE if d in lex else None,
            distance=dist.get(d),
            neighbour=lex[d].neighbour / SCORE_SCALE if d in lex else None,
            neighbour_doc=lex[d].neighbour_doc if d in lex else None,
            fused_neighbour=lifted[d][0] if d in lifted else None,
            fused_neighbour_doc=lifted[d][1] if d in lifted else None,
        )
        for d, score in fused[:limit]
    ], copy


def with_memories(
    conn: duckdb.DuckDBPyConnection, ranked: list[Ranked], copy: bm25.MemoryIndex | None = None
) -> list[tuple[Memory, Ranked]]:
    """The memory rows of a ranking, in its order (from the row cache of `copy` when it has them)."""
    rows = {m["stored_seq"]: m for m, _ in with_rows(conn, [(r.doc, 0) for r in ranked], copy)}
    return [(rows[r.doc], r) for r in ranked if r.doc in rows]
