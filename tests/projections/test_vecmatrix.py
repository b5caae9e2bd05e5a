"""The in-memory vector matrix answers exactly as the SQL scan does: the same docs, order and floats."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemolog.projections import vecmatrix
from mnemolog.projections.embedding import vectors as vx
from mnemolog.projections.recall import bm25
from mnemolog.projections.recall.query import Filters
from mnemolog.substrate.api import Substrate
from tests.projections.kit import new_home, open_sub
from tests.support.fake_embedder import FakeEmbedder, fake_vec

TEXTS = [f"memory {i} about {w}" for i, w in enumerate(["pools", "queues", "locks", "caches"] * 15)]
NOW = 1_800_000_000_000_000  # µs, 2027: after the expired memory's day
FILTERS = [
    Filters(),
    Filters(include_archived=True),
    Filters(namespace="a"),
    Filters(kinds=("decision",)),
    Filters(expired_at=NOW),
    Filters(expired_at=NOW, include_archived=True, hide_superseded=True),
    # A context pack's tiers: one project, or none; with a copy, its sets filter the matrix too.
    Filters(project="p06-polisher"),
    Filters(project=""),
    Filters(project="p06-polisher", expired_at=NOW, hide_superseded=True),
]


def scan(conn: object, q: np.ndarray, f: Filters, limit: int, meta: vx.Meta) -> list[tuple[int, float]]:
    vecmatrix.forget(conn)  # type: ignore[arg-type]
    vecmatrix._uses[id(conn)] = -(10**9)  # never builds: the SQL scan
    try:
        return vx.search(conn, q, f, limit, meta=meta)  # type: ignore[arg-type]
    finally:
        vecmatrix._uses[id(conn)] = vecmatrix.BUILD_AFTER


@pytest.fixture(scope="module")
def sub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Substrate]:
    home = new_home(tmp_path_factory.mktemp("h"))
    with open_sub(home, embedder=FakeEmbedder()) as s:
        s.register_project("p06-polisher")
        ids = [
            s.store(
                t,
                namespace="a" if i % 3 else "b",
                kind="decision" if i % 4 == 0 else "observation",
                project="p06-polisher" if i % 5 == 0 else "",
            )["id"]
            for i, t in enumerate(TEXTS)
        ]
        s.store(TEXTS[0])  # a duplicate vector: an exact tie, broken by the newest doc
        s.archive(ids[1])
        s.store(TEXTS[2], metadata={"vault": {"expires_at": "2020-01-31"}})  # expired at NOW
        s.link(ids[3], ids[4], "supersedes")
        for _ in range(5):  # a BM25 copy at this position: its excluded sets filter the matrix
            s.recall("memory about pools", mode="bm25")
        yield s


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seeds=st.lists(st.integers(0, 10**6), min_size=1, max_size=4),
    near=st.sampled_from([*TEXTS, "unrelated"]),
    limit=st.integers(1, 70),
    which=st.integers(0, len(FILTERS) - 1),
)
def test_matrix_search_equals_the_sql_scan(
    sub: Substrate, seeds: list[int], near: str, limit: int, which: int
) -> None:
    rng = np.random.default_rng(seeds)
    q = (fake_vec(near) + np.float32(0.3) * rng.standard_normal(16).astype(np.float32)).astype(np.float32)
    with sub.projections.session() as conn:
        meta = vx.read_meta(conn)
        assert meta is not None
        f = FILTERS[which]
        want = scan(conn, q, f, limit, meta)
        vecmatrix._uses[id(conn)] = vecmatrix.BUILD_AFTER
        m = vecmatrix.for_search(conn, (meta.model_id, meta.dim, meta.synced_seq, meta.rows), meta.dim)
        assert m is not None
        assert bm25.current_copy(conn) is not None  # the default filters take the copy's sets
        assert vx.search(conn, q, f, limit, meta=meta) == want
        docs = [d for d, _ in want] + [10**9]
        assert vx.distances(conn, q, docs, meta=meta) == dict(want)


def test_the_matrix_follows_a_store(tmp_path: Path) -> None:
    with open_sub(new_home(tmp_path / "h"), embedder=FakeEmbedder(), long_lived=True) as s:
        for t in TEXTS[:10]:
            s.store(t)
        for _ in range(vecmatrix.BUILD_AFTER + 1):
            first = s.recall("memory 3 about pools", mode="vector", limit=1)
        new = s.store("a brand new memory")
        got = s.recall("a brand new memory", mode="vector", limit=1)
        assert got[0]["id"] == new["id"] and first


@pytest.mark.parametrize("dim", [16, 256, 1024])
def test_exact_distances_are_duckdbs_floats_for_any_number_of_rows(dim: int) -> None:
    # `exact` sums a dot product by reducing along the slow axis (one row alone takes cumsum):
    # every count of rows, at real dimensions, must give DuckDB's floats bit for bit.
    import duckdb

    rng = np.random.default_rng(dim)
    vecs = (rng.standard_normal((300, dim)) * rng.uniform(0.01, 50, (300, 1))).astype(np.float32)
    query = rng.standard_normal(dim).astype(np.float32)
    import pyarrow as pa

    con = duckdb.connect()
    con.register("t", pa.table({"i": np.arange(300), "vec": vx._arrow_vectors(vecs)}))
    con.execute(f"CREATE TABLE v AS SELECT i, vec::FLOAT[{dim}] AS vec FROM t")
    lit = vx.vector_literal(query)
    want = np.array(
        [
            r[0]
            for r in con.execute(
                f"SELECT array_cosine_distance(vec, ?::VARCHAR::FLOAT[{dim}]) FROM v ORDER BY i", [lit]
            ).fetchall()
        ]
    )
    sq = np.cumsum(vecs * vecs, axis=1, dtype=np.float32)[:, -1]
    m = vecmatrix.Matrix((), np.arange(300, dtype=np.int64), vecs, np.linalg.norm(vecs, axis=1), sq)
    for n in [1, 2, 3, 7, 8, 9, 64, 65, 300]:
        rows = rng.choice(300, n, replace=False).astype(np.int64)
        assert np.array_equal(m.exact(rows, query), want[rows]), n


def test_a_zero_query_scores_every_row() -> None:
    # No direction, no nearest: every row is scored exactly (as the scan would), none dropped.
    vecs = np.eye(4, dtype=np.float32) + np.float32(0.5)
    sq = np.cumsum(vecs * vecs, axis=1, dtype=np.float32)[:, -1]
    m = vecmatrix.Matrix((), np.arange(4, dtype=np.int64), vecs, np.linalg.norm(vecs, axis=1), sq)
    with np.errstate(all="ignore"):
        found, _ = m.search(np.zeros(4, np.float32), 2)
    assert len(found) == 2


def with_a_matrix(s: Substrate) -> tuple[list[Any], vx.Meta, vecmatrix.Matrix]:
    """Ten memories stored and recalled by vector until the connection keeps a matrix of them:
    the first answer, the vector metadata and the matrix."""
    for t in TEXTS[:10]:
        s.store(t)
    for _ in range(vecmatrix.BUILD_AFTER + 1):
        first = s.recall("memory 3 about pools", mode="vector", limit=3)
    with s.projections.session() as conn:
        meta = vx.read_meta(conn)
        assert meta is not None
        m = vecmatrix.current(conn, (meta.model_id, meta.dim, meta.synced_seq, meta.rows))
        assert m is not None
    return first, meta, m


def test_the_matrix_outlives_a_recorded_pack_but_not_a_store(tmp_path: Path) -> None:
    with open_sub(new_home(tmp_path / "h"), embedder=FakeEmbedder(), long_lived=True) as s:
        first, meta, m = with_a_matrix(s)
        s.build_context("memory about pools", record=True)
        with s.projections.session() as conn:
            moved = vx.read_meta(conn)
            assert moved is not None and moved.synced_seq > meta.synced_seq  # the pack was synced past
            kept = vecmatrix.current(conn, (moved.model_id, moved.dim, moved.synced_seq, moved.rows))
            assert kept is not None and kept.vecs is m.vecs  # the same rows: not loaded again
        assert s.recall("memory 3 about pools", mode="vector", limit=3) == first
        s.store("a brand new memory")
        with s.projections.session() as conn:
            now = vx.read_meta(conn)
            assert now is not None and now.rows == meta.rows + 1
            assert vecmatrix.current(conn, (now.model_id, now.dim, now.synced_seq, now.rows)) is None
        assert s.recall("a brand new memory", mode="vector", limit=1)[0]["content"] == "a brand new memory"


def test_chunk_search_from_the_matrix_equals_the_sql_scan(tmp_path: Path) -> None:
    # Chunks break ties the other way (the older chunk first): duplicated sections give exact ties.
    docs = tmp_path / "docs"
    for i in range(6):
        d = docs / ("mine" if i % 2 else "theirs")
        d.mkdir(parents=True, exist_ok=True)
        sections = [f"## Part {j}\n\n{TEXTS[(j + i // 2) % 6]}\n" for j in range(5)]
        (d / f"n{i}.md").write_text(f"# Note {i // 2}\n\n" + "\n".join(sections))  # twins
    with open_sub(new_home(tmp_path / "h"), embedder=FakeEmbedder(), long_lived=True) as s:
        s.register_project("p-a")
        s.ingest([docs / "mine"], project="p-a")
        s.ingest([docs / "theirs"])
        rng = np.random.default_rng(7)
        ties = 0
        with s.projections.session() as conn:
            meta = vx.read_meta(conn)
            assert meta is not None
            for i in range(30):
                q = (fake_vec(TEXTS[i % 12]) + np.float32(0.2 * (i % 3)) * rng.standard_normal(16)).astype(
                    np.float32
                )
                for project in (None, "p-a", "p-none"):
                    vecmatrix.forget(conn)
                    vecmatrix._uses[(id(conn), "chunk_vectors")] = -(10**9)  # the SQL scan
                    want = vx.chunk_search(conn, q, 1 + i % 12, meta=meta, project=project)
                    docs_all = [d for d, _ in want] + [7, 10**12]
                    want_d = vx.chunk_distances(conn, q, docs_all, meta=meta)
                    vecmatrix._uses[(id(conn), "chunk_vectors")] = vecmatrix.BUILD_AFTER
                    got = vx.chunk_search(conn, q, 1 + i % 12, meta=meta, project=project)
                    assert vx._chunk_matrix(conn, meta, use=False) is not None  # from the matrix
                    assert got == want, (i, project)
                    assert vx.chunk_distances(conn, q, docs_all, meta=meta) == want_d
                    assert (project == "p-none") == (not got)
                    ties += len(got) - len({x for _, x in got})
        assert ties  # equal distances were met, and ordered as SQL orders them


def test_the_matrix_outlives_letting_the_file_go(tmp_path: Path) -> None:
    # A long-lived process lets the projection file go when idle; attached again, the
    # metadata read afresh says the copy still holds, so the vectors are not loaded again.
    with open_sub(new_home(tmp_path / "h"), embedder=FakeEmbedder(), long_lived=True) as s:
        first, meta, m = with_a_matrix(s)
        store = s.projections.store
        before = store.attachments
        store._release()
        assert s.recall("memory 3 about pools", mode="vector", limit=3) == first
        assert store.attachments == before + 1
        with s.projections.session() as conn:
            again = vx.read_meta(conn)
            assert again == meta
            assert vecmatrix.current(conn, (meta.model_id, meta.dim, meta.synced_seq, meta.rows)) is m


def test_the_product_runs_on_one_blas_thread_and_gives_the_setting_back() -> None:
    import threading

    from threadpoolctl import ThreadpoolController

    from mnemolog.projections import vecmatrix

    def blas_threads() -> list[int]:
        return [p["num_threads"] for p in ThreadpoolController().info() if p["user_api"] == "blas"]

    before = blas_threads()
    with vecmatrix._one_blas_thread():
        assert all(n == 1 for n in blas_threads())
    assert blas_threads() == before

    # Threads taking turns: none may keep another's limit as "the setting" (serialised).
    def many() -> None:
        for _ in range(50):
            with vecmatrix._one_blas_thread():
                pass

    ts = [threading.Thread(target=many) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert blas_threads() == before
