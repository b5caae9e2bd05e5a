"""Recall modes and reciprocal rank fusion: the formula, the archive guard in every mode, replay."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemolog.projections import hybrid
from mnemolog.projections import vectors as vx
from mnemolog.projections.recall import Filters
from mnemolog.substrate.api import Substrate
from tests.projections.kit import new_home, open_sub
from tests.projections.test_vectors import DIM, Counting, fake_vec


def test_rrf_formula_and_ties() -> None:
    fused = hybrid.rrf({"bm25": [1, 2, 3], "vector": [3, 4]}, {"bm25": 1.0, "vector": 2.0}, 10)
    got = {d: s for d, s, _ in fused}
    assert got[3] == pytest.approx(1 / 13 + 2 / 11)
    assert got[1] == pytest.approx(1 / 11)
    assert got[4] == pytest.approx(2 / 12)
    assert [d for d, _, _ in fused] == [3, 4, 1, 2]
    assert fused[0][2] == {"bm25": 3, "vector": 1}
    tie = hybrid.rrf({"a": [5], "b": [9]}, {}, 60)
    assert [d for d, _, _ in tie] == [9, 5]  # equal scores: the newer memory first


def ranking(sub: Substrate, query: str, mode: str, filters: Filters | None = None) -> list[tuple[str, float]]:
    with sub.projections.session() as conn:
        meta = vx.read_meta(conn)
        got = hybrid.rank(
            conn,
            query,
            fake_vec(query),
            filters or Filters(),
            10,
            mode=mode,
            meta=meta,  # type: ignore[arg-type]
        )
        return [(m["id"], r.score) for m, r in hybrid.with_memories(conn, got)]


def sync(sub: Substrate) -> None:
    with sub.projections.session() as conn:
        vx.sync(conn, Counting(), vx.configure(conn, "fake/m@1", DIM))


OPS = st.lists(
    st.tuples(
        st.sampled_from(["store", "store", "archive", "restore", "update"]),
        st.lists(
            st.sampled_from(["kafka", "queue", "disk", "deploy", "failed", "bus"]), min_size=1, max_size=4
        ),
        st.integers(0, 30),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS)
def test_guard_holds_in_every_mode_and_replay_gives_the_same_rankings(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, list[str], int]]
) -> None:
    home = new_home(tmp_path_factory.mktemp("h") / "home")
    ids: list[str] = []
    with open_sub(home, long_lived=True, worker=False) as s:
        for op, words, pick in ops:
            if op == "store" or not ids:
                ids.append(s.store(" ".join(words))["id"])
            elif op == "archive":
                s.archive(ids[pick % len(ids)])
            elif op == "restore":
                s.restore(ids[pick % len(ids)])
            else:
                s.update(ids[pick % len(ids)], content=" ".join(words))
            sync(s)  # incremental: after every command
        hidden = {m["id"] for m in s.list(limit=1000, include_archived=True) if m["archived_at"] is not None}
        query = "kafka queue bus"
        before = {}
        for mode in hybrid.MODES:
            got = ranking(s, query, mode)
            assert not hidden & {i for i, _ in got}, mode
            with_archived = {i for i, _ in ranking(s, query, mode, Filters(include_archived=True))}
            assert {i for i, _ in got} <= with_archived
            before[mode] = got
        s.rebuild()
        sync(s)  # from the cache, in one go
        for mode in hybrid.MODES:
            assert ranking(s, query, mode) == before[mode], mode


def test_explain_names_both_ranks(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    with open_sub(home) as s:
        a = s.store("we chose kafka as the event bus")["id"]
        s.store("the disk is full")
        sync(s)
        with s.projections.session() as conn:
            meta = vx.read_meta(conn)
            got = hybrid.rank(
                conn, "we chose kafka as the event bus", fake_vec("we chose kafka as the event bus"),
                Filters(), 5, mode="hybrid", meta=meta,
            )  # fmt: skip
            top, r = hybrid.with_memories(conn, got)[0]
        assert top["id"] == a
        e = r.explain()
        assert e["bm25_rank"] == 1 and e["vector_rank"] == 1
        assert e["fused_score"] == pytest.approx(2 / 61)
        assert e["cosine_distance"] == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="unknown recall mode"):
        hybrid.rank(None, "x", None, Filters(), 1, mode="fuzzy")  # type: ignore[arg-type]
