"""The chunks' BM25 from a connection's copy of their index gives what the statement gives:
the same scores (the same floats), the same best `limit`, the same project's best."""

from __future__ import annotations

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.projections.context import store

VOCAB = ["alpha", "beta", "gamma", "delta", "eps", "zeta"]

CHUNK = st.tuples(
    st.sampled_from(["a", "b", ""]),  # project
    st.integers(1, 2_000),  # dl
    st.dictionaries(st.sampled_from(VOCAB), st.integers(1, 40), min_size=1, max_size=4),  # tf by term
)


def home(chunks: list[tuple[str, int, dict[str, int]]]) -> duckdb.DuckDBPyConnection:
    conn = duckdb.connect()
    conn.execute("CREATE TABLE ctx_chunks(doc BIGINT, project VARCHAR, dl INTEGER)")
    conn.execute("CREATE TABLE ctx_chunk_postings(term VARCHAR, doc BIGINT, tf INTEGER, dl INTEGER)")
    conn.execute("CREATE TABLE proj_state(log_id BLOB)")
    conn.execute("INSERT INTO proj_state VALUES ('\\x01'::BLOB)")
    for i, (project, dl, tfs) in enumerate(chunks):
        doc = (i // 3 + 1) * 2**20 + i % 3  # an entry's seq and the chunk's index
        conn.execute("INSERT INTO ctx_chunks VALUES (?, ?, ?)", [doc, project, dl])
        for term, tf in tfs.items():
            conn.execute("INSERT INTO ctx_chunk_postings VALUES (?, ?, ?, ?)", [term, doc, tf, dl])
    return conn


@settings(max_examples=150, deadline=None)
@given(
    st.lists(CHUNK, min_size=1, max_size=25),
    st.lists(st.sampled_from([*VOCAB, "absent"]), min_size=1, max_size=5),
    st.sampled_from([None, "", "a", "b", "c"]),
    st.integers(1, 12),
)
def test_the_copy_scores_as_the_statement(
    chunks: list[tuple[str, int, dict[str, int]]], terms: list[str], project: str | None, limit: int
) -> None:
    conn = home(chunks)
    try:
        store._chunk_uses[id(conn)] = store.CHUNK_COPY_AFTER  # keep a copy at once
        copy = store._chunk_copy(conn)
        assert copy is not None
        want = store._sql_bm25(conn, list(dict.fromkeys(terms)), project, limit)
        got = store._copy_scores(copy, list(dict.fromkeys(terms)), project, limit)
        assert got == want
    finally:
        store.forget_chunks(conn)
        conn.close()


def test_the_copy_follows_the_chunks() -> None:
    conn = home([("a", 10, {"alpha": 1}), ("b", 20, {"alpha": 2, "beta": 1})])
    try:
        store._chunk_uses[id(conn)] = store.CHUNK_COPY_AFTER
        first = store._chunk_copy(conn)
        assert first is not None and store._chunk_copy(conn) is first  # unchanged: kept
        # A new version's chunks (a later seq) and a removal each give a new copy.
        conn.execute("INSERT INTO ctx_chunks VALUES (?, 'a', 5)", [9 * 2**20])
        conn.execute("INSERT INTO ctx_chunk_postings VALUES ('gamma', ?, 1, 5)", [9 * 2**20])
        second = store._chunk_copy(conn)
        assert second is not None and second is not first and "gamma" in second.postings
        conn.execute("DELETE FROM ctx_chunk_postings WHERE doc = ?", [9 * 2**20])
        conn.execute("DELETE FROM ctx_chunks WHERE doc = ?", [9 * 2**20])
        third = store._chunk_copy(conn)
        assert third is not None and "gamma" not in third.postings
        assert store._copy_scores(third, ["alpha"], None, 5) == store._sql_bm25(conn, ["alpha"], None, 5)
    finally:
        store.forget_chunks(conn)
        conn.close()


def test_rows_from_the_copy_are_the_rows_of_the_table() -> None:
    conn = home([("a", 10, {"alpha": 1}), ("b", 20, {"alpha": 2}), ("", 5, {"beta": 1})])
    conn.execute("ALTER TABLE ctx_chunks ADD COLUMN chunk_id VARCHAR DEFAULT 'c'")
    conn.execute("ALTER TABLE ctx_chunks ADD COLUMN text VARCHAR DEFAULT 't'")
    conn.execute("ALTER TABLE ctx_chunks ADD COLUMN name VARCHAR DEFAULT 'n'")
    conn.execute("ALTER TABLE ctx_chunks ADD COLUMN heading_path VARCHAR[] DEFAULT ['h']")
    conn.execute("UPDATE ctx_chunks SET chunk_id = 'c' || doc, text = 'text of ' || doc")
    try:
        store._chunk_uses[id(conn)] = store.CHUNK_COPY_AFTER
        copy = store._chunk_copy(conn)
        assert copy is not None
        docs = [int(d) for d in copy.docs] + [12345]  # one that is no chunk: no row, either way
        scores = {d: float(i % 2) for i, d in enumerate(docs)}  # ties: the older chunk first
        plain = store._rows(conn, scores)
        assert store._rows(conn, scores, copy) == plain  # read, and kept
        assert len(copy.rows) == 3
        assert store._rows(conn, scores, copy) == plain  # from the copy
        assert store._rows(conn, dict(list(scores.items())[:2]), copy) == store._rows(
            conn, dict(list(scores.items())[:2])
        )
    finally:
        store.forget_chunks(conn)
        conn.close()


def test_within_question_reads_once_per_question() -> None:
    from mnemolog.projections import vecmatrix

    calls: list[int] = []

    def count() -> int:
        calls.append(1)
        return 7

    assert vecmatrix.within_question(("k",), count) == 7
    assert vecmatrix.within_question(("k",), count) == 7 and len(calls) == 2
    with vecmatrix.one_question():
        assert vecmatrix.within_question(("k",), count) == 7
        assert vecmatrix.within_question(("k",), count) == 7
    assert len(calls) == 3
    vecmatrix.within_question(("k",), count)
    assert len(calls) == 4
