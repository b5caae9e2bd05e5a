"""The context read model: document versions, chunk index and BM25, recorded packs, hostile payloads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.projections import schema
from mnemolog.projections.context import fold as cfold
from mnemolog.projections.context import store
from mnemolog.projections.db import load_fts
from mnemolog.projections.recall.text import install_macros


@pytest.fixture
def conn() -> Iterator[duckdb.DuckDBPyConnection]:
    c = duckdb.connect()
    load_fts(c)
    install_macros(c)
    schema.create(c)
    yield c
    c.close()


def ingested(
    doc: str, version: int, texts: list[str], project: str = "", path: str | None = None
) -> dict[str, Any]:
    return {
        "document_id": doc,
        "path": path or f"/docs/{doc}.md",
        "name": f"{doc}.md",
        "root": "/docs",
        "project": project,
        "sha256": f"{version:064x}",
        "size": sum(map(len, texts)),
        "encoding": "utf-8",
        "version": version,
        "chunks": [{"index": i, "heading_path": ["H", f"S{i}"], "text": t} for i, t in enumerate(texts)],
    }


def test_versions_replace_chunks_and_removal_drops_them(conn: duckdb.DuckDBPyConnection) -> None:
    cfold.fold_ingested(conn, 10, 1, ingested("A", 1, ["thermal drift of the polisher", "vendor notes"]))
    cfold.fold_ingested(conn, 11, 1, ingested("B", 1, ["thermal expansion of Zerodur"], project="p06"))
    hits = store.chunk_candidates(conn, "thermal drift", None, 10)
    assert [h.id for h in hits] == ["A/1/0", "B/1/0"]
    assert hits[0].heading_path == ("H", "S0") and hits[0].document == "A.md"
    cfold.fold_ingested(conn, 12, 2, ingested("A", 2, ["nothing about heat now"]))
    assert [h.id for h in store.chunk_candidates(conn, "thermal drift", None, 10)] == ["B/1/0"]
    assert store.chunk_count(conn) == 2
    doc = store.document_by_path(conn, "/docs/A.md")
    assert doc is not None and (doc.version, doc.chunks, doc.seq, doc.removed) == (2, 1, 12, False)
    cfold.fold_removed(conn, 13, {"document_id": "B", "path": "/docs/B.md"})
    assert store.chunk_candidates(conn, "thermal", None, 10) == []
    assert [d.document_id for d in store.documents_under(conn, "/docs")] == ["A"]
    b = store.document_by_path(conn, "/docs/B.md")
    assert b is not None and b.removed


def test_the_project_pass_finds_project_chunks_beyond_the_limit(conn: duckdb.DuckDBPyConnection) -> None:
    for i in range(5):
        cfold.fold_ingested(conn, 20 + i, 1, ingested(f"O{i}", 1, ["thermal thermal thermal"]))
    cfold.fold_ingested(
        conn, 30, 1, ingested("P", 1, ["thermal and a lot of other words here"], project="p06")
    )
    assert "P/1/0" not in [h.id for h in store.chunk_candidates(conn, "thermal", None, 3)]
    hits = store.chunk_candidates(conn, "thermal", "p06", 3)
    assert "P/1/0" in [h.id for h in hits] and len(hits) == 4
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_headings_and_names_are_searchable(conn: duckdb.DuckDBPyConnection) -> None:
    cfold.fold_ingested(conn, 1, 1, ingested("Calibration", 1, ["body text"]))
    assert [h.id for h in store.chunk_candidates(conn, "calibration", None, 5)] == ["Calibration/1/0"]
    assert store.chunk_candidates(conn, "the and of", None, 5) == []


def test_packs_and_members(conn: duckdb.DuckDBPyConnection) -> None:
    d = {
        "pack_id": "01P",
        "query": "q",
        "project": "p06",
        "sha256": "ab",
        "budget": 3000,
        "unit": "chars",
        "chars": 10,
        "tiers": [
            {"name": "state", "included": [{"source": "state", "id": "p06/status/a"}], "trimmed": []},
            {
                "name": "project",
                "included": [{"source": "memory", "id": "01M"}],
                "trimmed": [{"source": "memory", "id": "01N", "reason": "tier_share"}],
            },
        ],
    }
    cfold.fold_pack(conn, 40, 5, d)
    p = store.pack(conn, "01P")
    assert p is not None and (p.seq, p.project, p.budget) == (40, "p06", 3000)
    assert store.pack_memory_ids(conn, "01P") == ["01M"]
    why = store.packs_with(conn, "01N", 10)
    assert [(w["pack_id"], w["included"], w["reason"]) for w in why] == [("01P", False, "tier_share")]


_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.floats(),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=5),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            ["document_id", "path", "name", "version", "chunks", "project", "pack_id", "tiers", "size"]
        ),
        _junk,
    )
)
def test_folds_are_total_over_hostile_payloads(d: dict[str, Any]) -> None:
    c = _shared()
    seq = _SEQ.pop() + 1
    _SEQ.append(seq)
    cfold.fold_ingested(c, seq, 1, d)
    cfold.fold_removed(c, seq, d)
    cfold.fold_pack(c, seq, 1, d)
    store.chunk_candidates(c, "x", "p", 3)


_CONN: list[duckdb.DuckDBPyConnection] = []
_SEQ = [0]


def _shared() -> duckdb.DuckDBPyConnection:
    # One database for every example: loading fts per example would dominate the run.
    if not _CONN:
        c = duckdb.connect()
        load_fts(c)
        install_macros(c)
        schema.create(c)
        _CONN.append(c)
    return _CONN[0]


@pytest.mark.parametrize("method", ["convex", "rrf"])
def test_hybrid_chunks_take_words_or_a_close_meaning(conn: duckdb.DuckDBPyConnection, method: str) -> None:
    import numpy as np

    from mnemolog.projections.embedding import vectors
    from mnemolog.projections.recall import hybrid

    cfold.fold_ingested(conn, 10, 1, ingested("A", 1, ["thermal drift of the polisher"]))
    cfold.fold_ingested(conn, 11, 1, ingested("B", 1, ["quarterly invoices"], project="p06"))
    cfold.fold_ingested(conn, 12, 1, ingested("C", 1, ["spindle heat climbs"]))
    meta = vectors.configure(conn, "fake", 3)
    vecs = {10: [1.0, 0.2, 0.0], 11: [0.0, 1.0, 0.0], 12: [0.9, 0.1, 0.4]}
    for seq, v in vecs.items():
        conn.execute(
            "INSERT INTO chunk_vectors VALUES (?, ?, ?::VARCHAR::FLOAT[3])",
            [seq << schema.CHUNK_SHIFT, b"x", vectors.vector_literal(np.array(v, dtype=np.float32))],
        )
    q = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    fusion = hybrid.Fusion(method=method)  # type: ignore[arg-type]
    for project in (None, "p06"):
        hits = store.chunk_candidates(conn, "thermal drift", project, 10, query_vector=q, fusion=fusion)
        # A shares words, C only meaning (cosine above min_cosine); B neither, even for its project.
        assert [h.id for h in hits] == ["A/1/0", "C/1/0"] and all(h.hit for h in hits)
    assert meta.dim == 3
    # Without a query vector, words only.
    assert [h.id for h in store.chunk_candidates(conn, "thermal drift", None, 10)] == ["A/1/0"]
    strict = hybrid.Fusion(method=method, min_cosine=0.99)  # type: ignore[arg-type]
    hits = store.chunk_candidates(conn, "thermal drift", None, 10, query_vector=q, fusion=strict)
    assert [h.id for h in hits] == ["A/1/0"]


WORDS = ["thermal", "drift", "polisher", "zerodur", "vendor", "notes", "heat", "Kälte", "the", "of", "mirror"]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=12), st.sampled_from(["", "p06", "p07"])
        ),
        min_size=1,
        max_size=12,
    ),
    st.lists(st.lists(st.sampled_from([*WORDS, "absent"]), min_size=1, max_size=6), min_size=1, max_size=4),
    st.sampled_from([None, "p06", "p07"]),
)
def test_chunks_rank_the_same_from_the_copy_as_by_the_statement(
    docs: list[tuple[list[str], str]], queries: list[list[str]], project: str | None
) -> None:
    """Real text, parsed queries (ASCII from the stem cache, others by the macros, more than
    MAX_QUERY_TERMS by the statement): the copy and its row cache rank as the statement does."""
    c = duckdb.connect()
    load_fts(c)
    install_macros(c)
    schema.create(c)
    try:
        for i, (words, proj) in enumerate(docs):
            cfold.fold_ingested(c, 10 + i, 1, ingested(f"D{i}", 1, [" ".join(words)], project=proj))
        long = " ".join(f"word{i}" for i in range(store.MAX_QUERY_TERMS + 3)) + " thermal"
        for q in [" ".join(w) for w in queries] + [long]:
            store.forget_chunks(c)
            plain = [(h.id, h.score) for h in store.chunk_candidates(c, q, project, 3)]
            store._chunk_uses[id(c)] = store.CHUNK_COPY_AFTER
            for _ in range(2):  # the copy built, then its rows kept
                assert [(h.id, h.score) for h in store.chunk_candidates(c, q, project, 3)] == plain, q
    finally:
        store.forget_chunks(c)
        c.close()
