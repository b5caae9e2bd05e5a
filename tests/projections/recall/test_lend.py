"""The neighbour term as arrays (`query.lend`) gives what the loops it replaced gave, for any
pool, adjacency, scores and filters: the same scores, parts, lending neighbour and order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.projections.recall import bm25
from mnemolog.projections.recall import query as q


def loops(
    own: dict[int, int],
    base: list[int],
    nb_of: dict[int, tuple[int, int]],
    allowed: set[int],
    alpha: float,
    decay: float,
    limit: int,
) -> list[q.Lexical]:
    """The neighbour term as `rank_lexical` computed it before it was vectorised (sets, dicts
    and a loop over every member's ring)."""

    def neighbours(docs: list[int]) -> dict[int, tuple[int, int]]:
        return {d: nb_of.get(d, (-1, -1)) for d in docs}

    def allow(docs: list[int]) -> set[int]:
        return {d for d in docs if d in allowed}

    ok = set(base)
    nb = neighbours(sorted(ok))
    joined = sorted({n for pair in nb.values() for n in pair if n >= 0} - ok)
    ok |= allow(joined)
    nb.update(neighbours([d for d in joined if d in ok]))
    if decay > 0:
        first = sorted({n for d in ok for n in nb[d] if n >= 0} - nb.keys())
        nb.update(neighbours(first))

    def ring(d: int) -> list[tuple[int, float]]:
        p, n = nb.get(d, (-1, -1))
        out = [(p, 1.0), (n, 1.0)]
        if decay > 0:
            out += [(nb[p][0] if p >= 0 else -1, decay), (nb[n][1] if n >= 0 else -1, decay)]
        return out

    rings = {d: ring(d) for d in ok}
    outer = sorted({n for r in rings.values() for n, _ in r if n >= 0} - ok)
    shown = ok | allow(outer)
    out: list[q.Lexical] = []
    for d in ok:
        best, best_doc = 0.0, None
        for n, w in rings[d]:
            if n >= 0 and n in shown and w * own.get(n, 0) > best:
                best, best_doc = w * own[n], n
        add = int(np.floor(alpha * best + 0.5))
        total = own.get(d, 0) + add
        if total > 0:
            out.append(q.Lexical(d, total, own.get(d, 0), add, best_doc if add else None))
    out.sort(key=lambda x: (-x.score, -x.doc))
    return out[:limit]


# Scores from a small set, so that ties (between memories and between ring members) are common.
SCORES = st.sampled_from([1, 2, 3, 7, 10, 10**11, 123_456_789_012, 3 * 10**11 + 1])


@settings(max_examples=400, deadline=None)
@given(
    groups=st.lists(st.integers(1, 8), min_size=1, max_size=8),
    matched=st.data(),
    alpha=st.sampled_from([0.7, 0.5, 1.0, 0.3333, 2.0]),
    decay=st.sampled_from([0.0, 0.5, 0.25, 1.0, 0.7]),
    limit=st.integers(1, 12),
    pool=st.integers(1, 30),
)
def test_lend_gives_what_the_loops_gave(
    groups: list[int], matched: st.DataObject, alpha: float, decay: float, limit: int, pool: int
) -> None:
    # Docs 1..n interleaved among groups (stored order), some with no group (no neighbours).
    n = sum(groups) + 4
    docs = list(range(1, n + 1))
    owner = matched.draw(st.lists(st.integers(-1, len(groups) - 1), min_size=n, max_size=n))
    nb_of: dict[int, tuple[int, int]] = {}
    for g in range(len(groups)):
        members = [d for d, o in zip(docs, owner, strict=True) if o == g]
        for i, d in enumerate(members):
            nb_of[d] = (members[i - 1] if i else -1, members[i + 1] if i + 1 < len(members) else -1)
    own = matched.draw(st.dictionaries(st.sampled_from(docs), SCORES, max_size=n))
    hidden = set(matched.draw(st.lists(st.sampled_from(docs), max_size=n // 2)))
    allowed = set(docs) - hidden
    uniq = np.asarray(sorted(own), dtype=np.int64)
    tot = np.asarray([float(own[d]) for d in sorted(own)], dtype=np.float64)
    live = np.asarray([d in allowed for d in sorted(own)], dtype=bool)
    base = uniq[bm25.best(uniq, tot, np.flatnonzero(live), pool)]
    table = np.asarray(sorted(nb_of), dtype=np.int64)
    prev = np.asarray([nb_of[d][0] for d in sorted(nb_of)], dtype=np.int64)
    nxt = np.asarray([nb_of[d][1] for d in sorted(nb_of)], dtype=np.int64)

    def lookup(ds: bm25.I64) -> tuple[bm25.I64, bm25.I64]:
        if not len(table) or not len(ds):
            return np.full(len(ds), -1, np.int64), np.full(len(ds), -1, np.int64)
        at = np.minimum(np.searchsorted(table, ds), len(table) - 1)
        found = table[at] == ds
        return np.where(found, prev[at], -1), np.where(found, nxt[at], -1)

    def allow(ds: bm25.I64) -> bm25.I64:
        return ds[np.isin(ds, np.asarray(sorted(allowed), dtype=np.int64))]

    live_own = {d: s for d, s in own.items() if d in allowed}  # as `full` held them: excluded left out
    want = loops(live_own, base.tolist(), nb_of, allowed, alpha, decay, limit)
    got = (
        q.lend(uniq, tot, live, base, lookup, allow, alpha=alpha, decay=decay, limit=limit)
        if len(base)
        else []
    )
    assert got == want
    for x in got:
        assert type(x.score) is int and type(x.own) is int and type(x.neighbour) is int


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.dictionaries(st.integers(0, 30), st.tuples(st.integers(1, 9), st.integers(1, 50)), max_size=12),
        min_size=1,
        max_size=4,
    ),
    st.sets(st.integers(0, 30), max_size=10),
    st.one_of(st.none(), st.integers(1, 8)),
    st.booleans(),
)
def test_score_excludes_requires_and_cuts_as_the_reference(
    terms: list[dict[int, tuple[int, int]]], exclude: set[int], limit: int | None, require_all: bool
) -> None:
    """`score` (now `totals` and `best`) against plain Python: scores, exclusion, every term, cut."""
    postings = [
        bm25.TermPostings(
            np.asarray(list(t), np.int64),
            np.asarray([v[0] for v in t.values()], np.float64),
            np.asarray([v[1] for v in t.values()], np.float64),
        )
        for t in terms
    ]
    ref: dict[int, int] = {}
    held: dict[int, int] = {}
    for p in postings:
        df = len(p.docs)
        idf = np.log1p((40 - df + 0.5) / (df + 0.5))
        for d, tf, dl in zip(p.docs.tolist(), p.tf.tolist(), p.dl.tolist(), strict=True):
            raw = idf * tf * (1.2 + 1.0) / (tf + 1.2 * (1.0 - 0.5 + 0.5 * dl / 20.0)) * bm25.SCORE_SCALE
            ref[d] = ref.get(d, 0) + int(np.floor(raw + 0.5))
            held[d] = held.get(d, 0) + 1
    want = [
        (d, s)
        for d, s in sorted(ref.items(), key=lambda x: (-x[1], -x[0]))
        if d not in exclude and (not require_all or (held[d] == len(terms) and all(terms)))
    ][:limit]
    ex = np.asarray(sorted(exclude), np.int64)
    assert bm25.score(postings, 40, 800, limit=limit, require_all=require_all, exclude=ex) == want


def test_one_question_computes_a_question_s_scores_once_and_only_while_it_lasts() -> None:
    calls: list[int] = []

    def compute() -> tuple[bm25.I64, bm25.F64, bm25.I64]:
        calls.append(1)
        return np.asarray([1], np.int64), np.asarray([5.0]), np.asarray([1], np.int64)

    bm25.shared_totals(("k",), compute)
    bm25.shared_totals(("k",), compute)
    assert len(calls) == 2  # outside: every call computes
    with bm25.one_question():
        a = bm25.shared_totals(("k",), compute)
        with bm25.one_question():  # nested: the outer memo stands
            b = bm25.shared_totals(("k",), compute)
        bm25.shared_totals(("other",), compute)
    assert a is b and len(calls) == 4
    bm25.shared_totals(("k",), compute)
    assert len(calls) == 5
