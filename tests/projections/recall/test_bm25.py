"""BM25 scoring over posting arrays, and the process-local index copy kept equal to the tables."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemolog.projections.db import load_fts
from mnemolog.projections.recall import bm25
from mnemolog.projections.recall import query as q
from mnemolog.projections.recall.text import install_macros
from tests.projections.kit import new_home, open_sub


def tp(docs: list[int], tf: list[int], dl: list[int]) -> bm25.TermPostings:
    return bm25.TermPostings(
        np.asarray(docs, np.int64), np.asarray(tf, np.float64), np.asarray(dl, np.float64)
    )


def reference(
    postings: list[bm25.TermPostings], n: int, total: int, k1: float = 1.2, b: float = 0.5
) -> dict[int, int]:
    """BM25 written out in plain Python, term by term (k1 1.2 and b 0.5 are the defaults)."""
    avgdl = max(total, 1) / max(n, 1)
    out: dict[int, int] = {}
    for p in postings:
        df = len(p.docs)
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for d, tf, dl in zip(p.docs, p.tf, p.dl, strict=True):
            raw = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)) * 1e11
            out[int(d)] = out.get(int(d), 0) + math.floor(raw + 0.5)
    return out


@pytest.mark.parametrize(("k1", "b"), [(1.2, 0.75), (0.9, 0.3), (2.0, 1.0), (1.5, 0.0)])
def test_k1_and_b_are_parameters_of_the_formula(k1: float, b: float) -> None:
    a = tp([1, 2, 5], [1, 3, 1], [4, 10, 4])
    c = tp([2, 7], [2, 1], [10, 3])
    got = dict(bm25.score([a, c], 10, 60, limit=None, k1=k1, b=b))
    assert got == reference([a, c], 10, 60, k1, b)
    # b weighs length: with b = 0 a long and a short memory with one match score the same.
    if b == 0.0:
        assert got[1] == got[5] and got[7] > 0


def test_scores_match_the_formula_and_ties_go_to_the_newest() -> None:
    a = tp([1, 2, 5], [1, 3, 1], [4, 10, 4])
    b = tp([2, 7], [2, 1], [10, 3])
    got = bm25.score([a, b], 10, 60, limit=None)
    ref = reference([a, b], 10, 60)
    assert dict(got) == ref
    assert [d for d, _ in got][:1] == [2]  # holds both terms
    assert [d for d, _ in got if d in (1, 5)] == [5, 1]  # equal scores: newest first


def test_require_all_exclude_and_limit() -> None:
    a = tp([1, 2, 3], [1, 1, 1], [2, 2, 2])
    b = tp([2, 3], [1, 1], [2, 2])
    assert [d for d, _ in bm25.score([a, b], 5, 10, limit=None, require_all=True)] == [3, 2]
    assert bm25.score([a, bm25.EMPTY], 5, 10, limit=None, require_all=True) == []
    excluded = bm25.score([a], 5, 10, limit=None, exclude=np.asarray([3], np.int64))
    assert [d for d, _ in excluded] == [2, 1]
    # The scores of the others do not change when some are excluded.
    assert dict(excluded) == {d: s for d, s in bm25.score([a], 5, 10, limit=None) if d != 3}
    assert [d for d, _ in bm25.score([a], 5, 10, limit=2)] == [3, 2]
    assert bm25.score([], 5, 10, limit=3) == []


@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 40), st.integers(1, 9), st.integers(1, 50)), max_size=12),
        min_size=1,
        max_size=4,
    ),
    st.integers(1, 8),
)
def test_any_postings_score_as_the_reference(terms: list[list[tuple[int, int, int]]], limit: int) -> None:
    postings = []
    for rows in terms:
        uniq = {d: (tf, dl) for d, tf, dl in rows}
        postings.append(tp(list(uniq), [v[0] for v in uniq.values()], [v[1] for v in uniq.values()]))
    ref = reference(postings, 50, 50 * 20)
    got = bm25.score(postings, 50, 50 * 20, limit=limit)
    want = sorted(ref.items(), key=lambda x: (-x[1], -x[0]))[:limit]
    assert got == want


WORDS = ["deploy", "failed", "kafka", "queue", "rollback", "disk", "full", "alert", "the", "of", "cats"]


def as_set(p: bm25.TermPostings) -> set[tuple[int, float, float]]:
    return set(zip(p.docs.tolist(), p.tf.tolist(), p.dl.tolist(), strict=True))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["store", "update", "archive"]),
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),
            st.integers(0, 50),
        ),
        min_size=1,
        max_size=14,
    )
)
def test_the_copy_holds_what_the_tables_hold(tmp_path_factory: pytest.TempPathFactory, ops: list) -> None:
    home = new_home(tmp_path_factory.mktemp("h") / "home")
    ids: list[str] = []
    with open_sub(home, long_lived=True, worker=False) as s:
        for i, (op, words, pick) in enumerate(ops):
            text = " ".join(words)
            if op == "store" or not ids:
                ids.append(s.store(text, title=words[0] if i % 2 else None)["id"])
            elif op == "update":
                s.update(ids[pick % len(ids)], content=text)
            else:
                s.archive(ids[pick % len(ids)])
            with s.projections.session() as conn:
                parsed = q.parse(conn, " ".join(WORDS))
                for _ in range(bm25.BUILD_AFTER):
                    copy = bm25.index_for(conn, parsed.position)
                assert copy is not None
                fetched = bm25.fetch_postings(conn, parsed.terms)
                held = copy.postings(parsed.terms)
                assert [as_set(p) for p in held] == [as_set(p) for p in fetched]
                bm25.forget(conn) if i % 5 == 4 else None  # reload now and then


def test_recall_answers_the_same_with_and_without_the_copy(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    with open_sub(home, long_lived=True, worker=False) as s:
        for i in range(30):
            s.store(" ".join(WORDS[j % len(WORDS)] for j in range(i, i + 5)), namespace="a" if i % 2 else "b")
        first = [s.recall("kafka queue disk", limit=7) for _ in range(bm25.BUILD_AFTER + 2)]
        assert all(r == first[0] for r in first)
        m = s.store("kafka queue disk kafka queue disk")
        s.archive(first[0][0]["id"])
        after = s.recall("kafka queue disk", limit=7)
        assert after[0]["id"] == m["id"]
        assert first[0][0]["id"] not in [r["id"] for r in after]
        with s.projections.session() as conn:
            bm25.forget(conn)
        assert s.recall("kafka queue disk", limit=7) == after  # the SQL read: the same answer
        filtered = s.recall("kafka queue disk", limit=5, namespace="a")
        assert filtered and all(r["namespace"] == "a" for r in filtered)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=80))
def test_ascii_queries_split_here_as_the_macros_split_them(text: str) -> None:
    words = q.ascii_words(text)
    assert words is not None
    row = _macro_conn().execute("SELECT ml_words(?)", [text]).fetchone()
    assert row is not None
    assert words == list(row[0])
    assert q.ascii_words(text + "é") is None


_CONN: list[duckdb.DuckDBPyConnection] = []


def _macro_conn() -> duckdb.DuckDBPyConnection:
    if not _CONN:
        conn = duckdb.connect()
        load_fts(conn)
        install_macros(conn)
        _CONN.append(conn)
    return _CONN[0]


def test_parse_gives_the_macros_terms_with_or_without_a_noted_position(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    queries = [
        "The Deploys FAILED, again!",
        "what message queue did we pick",
        "résumé café",
        "x" * 70,
        "it's",
    ]
    with open_sub(home, long_lived=True, worker=False) as s:
        s.store("anything")
        with s.projections.session() as conn:
            for text in queries:
                assert bm25.known_position(conn) is not None
                fast = q.parse(conn, text)
                row = conn.execute("SELECT ml_terms(?), ml_words(?)", [text, text]).fetchone()
                assert row is not None
                assert fast.terms == list(dict.fromkeys(row[0]))
                assert fast.words == list(dict.fromkeys(row[1]))
                bm25.note_position(conn, None)
                slow = q.parse(conn, text)
                assert (slow.terms, slow.words) == (fast.terms, fast.words)
                assert slow.position == fast.position
                s.projections.catch_up(conn)


def test_a_project_filter_ranks_the_same_with_the_copy_as_by_sql(tmp_path: Path) -> None:
    # A context pack's tiers ask for one project or for none: with a copy of the index the
    # other projects' memories are left out as the guard's are, without a statement per rank.
    home = new_home(tmp_path / "h")
    with open_sub(home, long_lived=True, worker=False) as s:
        s.register_project("p-a")
        s.register_project("p-b")
        ids = [
            s.store(
                " ".join(WORDS[j % len(WORDS)] for j in range(i, i + 4)),
                project=("p-a", "", "p-b")[i % 3],
                source=f"s{i // 6}",  # neighbours, which must pass the filter to lend
            )["id"]
            for i in range(36)
        ]
        s.archive(ids[4])
        with s.projections.session() as conn:
            parsed = q.parse(conn, "kafka queue disk alert")
            bm25.forget(conn)
            for project in ("p-a", "", "p-b", "p-none"):
                f = q.Filters(project=project)
                by_sql = q.rank_lexical(conn, parsed, f, 10, neighbour_weight=0.7, neighbour_decay=0.5)
                plain_sql = q.rank_bm25(conn, parsed, f, 10)
                for _ in range(bm25.BUILD_AFTER):
                    copy = bm25.index_for(conn, parsed.position)
                assert copy is not None and q.by_exclusion(f, copy) and not q.by_exclusion(f, None)
                kw = {"neighbour_weight": 0.7, "neighbour_decay": 0.5, "copy": copy}
                assert q.rank_lexical(conn, parsed, f, 10, **kw) == by_sql, project  # type: ignore[arg-type]
                assert q.rank_bm25(conn, parsed, f, 10, copy=copy) == plain_sql, project
                assert (project == "p-none") == (not by_sql)
                bm25.forget(conn)


def test_the_copy_outlives_a_recorded_pack_but_not_a_store(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    with open_sub(home, long_lived=True, worker=False) as s:
        for i in range(20):
            s.store(" ".join(WORDS[j % len(WORDS)] for j in range(i, i + 4)))
        for _ in range(bm25.BUILD_AFTER + 1):
            before = s.recall("kafka queue", limit=5)
        with s.projections.session() as conn:
            copy = bm25.current_copy(conn)
            assert copy is not None and copy.rows and copy.left_out
            rows, left_out = dict(copy.rows), set(copy.left_out)
            was = copy.position
        pack = s.build_context("kafka queue", record=True)
        assert pack["seq"] is not None
        with s.projections.session() as conn:
            position = bm25.known_position(conn)
            assert position is not None and position != was  # the pack moved the log on
            # The copy follows its own record (it changed no memory), kept as it is.
            assert bm25.index_for(conn, position) is copy and copy.position == position
            # Kept (the pack's own ranking may have added to them): no memory changed.
            assert rows.items() <= copy.rows.items() and left_out <= set(copy.left_out)
        assert s.recall("kafka queue", limit=5) == before
        m = s.store("kafka queue kafka queue")
        with s.projections.session() as conn:
            position = bm25.known_position(conn)
            assert position is not None and bm25.index_for(conn, position) is copy
            assert not copy.rows and not copy.left_out  # a store: what was read goes
        after = s.recall("kafka queue", limit=5)
        assert after[0]["id"] == m["id"]
        with s.projections.session() as conn:
            bm25.forget(conn)
        assert s.recall("kafka queue", limit=5) == after  # the SQL read: the same answer
