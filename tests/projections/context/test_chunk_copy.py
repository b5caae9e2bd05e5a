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
