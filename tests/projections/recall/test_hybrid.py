"""Recall modes and reciprocal rank fusion: the formula, the archive guard in every mode, replay."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemolog.curators.base import TierLocked
from mnemolog.curators.embedding.embedder import EmbedderFailed
from mnemolog.eventlog.errors import BadInput, UsageError
from mnemolog.projections.recall import hybrid
from mnemolog.projections.recall.hybrid import MODES
from mnemolog.projections.recall.query import Filters
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import Home
from tests.projections.kit import new_home, open_sub
from tests.support.fake_embedder import FakeEmbedder


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


def ranking(
    sub: Substrate, query: str, mode: hybrid.Mode, include_archived: bool = False
) -> list[tuple[str, float]]:
    return [(m["id"], m["score"]) for m in sub.recall(query, mode=mode, include_archived=include_archived)]


def vector_rows(sub: Substrate) -> list[tuple[int, bytes, list[float]]]:
    with sub.projections.session() as conn:
        return [
            (int(d), bytes(h), list(v))
            for d, h, v in conn.execute("SELECT * FROM vectors ORDER BY doc").fetchall()
        ]


OPS = st.lists(
    st.tuples(
        st.sampled_from(["store", "store", "archive", "restore", "update", "tag"]),
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
def test_guard_holds_in_every_mode_and_replay_gives_the_same_vectors_and_rankings(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, list[str], int]]
) -> None:
    home = new_home(tmp_path_factory.mktemp("h") / "home")
    ids: list[str] = []
    fake = FakeEmbedder()
    with open_sub(home, long_lived=True, worker=False, embedder=fake) as s:
        for op, words, pick in ops:
            if op == "store" or not ids:
                ids.append(s.store(" ".join(words))["id"])
            elif op == "archive":
                s.archive(ids[pick % len(ids)])
            elif op == "restore":
                s.restore(ids[pick % len(ids)])
            elif op == "tag":
                s.update(ids[pick % len(ids)], tags=words)
            else:
                s.update(ids[pick % len(ids)], content=" ".join(words))
        hidden = {m["id"] for m in s.list(limit=1000, include_archived=True) if m["archived_at"] is not None}
        query = "kafka queue bus"
        before = {}
        for mode in MODES:
            got = ranking(s, query, mode)
            assert not hidden & {i for i, _ in got}, mode
            with_archived = {i for i, _ in ranking(s, query, mode, include_archived=True)}
            assert {i for i, _ in got} <= with_archived
            before[mode] = got
        incremental = vector_rows(s)
        fake.unreachable = True  # the rebuild takes every vector from the cache
        s.rebuild()
        assert vector_rows(s) == incremental
        fake.unreachable = False
        for mode in MODES:
            assert ranking(s, query, mode) == before[mode], mode


def test_convex_fusion_normalises_over_the_candidates() -> None:
    got = hybrid.convex([(1, 10.0), (2, 5.0)], {1: 0.2, 2: 0.6, 3: 0.4}, [2, 3], (0.7, 0.3))
    assert [d for d, _ in got] == [1, 2, 3]
    scores = dict(got)
    assert scores[1] == pytest.approx(0.7)  # best BM25, lowest cosine
    assert scores[2] == pytest.approx(0.35 + 0.3)
    assert scores[3] == pytest.approx(0.15)  # no BM25 match: its cosine alone
    assert hybrid.convex([], {}, [], (0.7, 0.3)) == []
    tie = hybrid.convex([], {5: 0.5, 9: 0.5}, [5, 9], (0.7, 0.3))
    assert [d for d, _ in tie] == [9, 5]  # equal scores: the newer memory first
    missing = dict(hybrid.convex([(4, 1.0)], {5: 0.9, 6: 0.1}, [5, 6], (0.5, 0.5)))
    assert missing[4] == pytest.approx(0.5)  # no vector yet: the lowest cosine


def test_the_fusion_is_configured_per_home(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    with home.config_path.open("a") as f:
        f.write('\n[recall]\nfusion = "rrf"\nk = 10\nvector_weight = 2\n')
    with open_sub(home, embedder=FakeEmbedder()) as s:
        assert s.fusion == hybrid.Fusion(method="rrf", k=10, vector_weight=2.0)
        q = "we chose kafka as the event bus"
        s.store(q)
        e = s.recall(q, explain=True)[0]["explain"]
        assert e["fusion"] == "rrf" and e["fused_score"] == pytest.approx(0.7 / 11 + 2 / 11)
    with home.config_path.open("a") as f:
        f.write("fusion_x = 1\n")
    with pytest.raises(BadInput, match="unknown key"):
        open_sub(Home(home.root))  # a fresh Home: the first one keeps the config it read


def test_explain_names_both_ranks(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    with open_sub(home, embedder=FakeEmbedder()) as s:
        q = "we chose kafka as the event bus"
        a = s.store(q)["id"]
        s.store("the disk is full")
        report = s.recall_report(q, explain=True)
        assert report["mode"] == "hybrid" and report["fallback"] is None
        top = report["results"][0]
        assert top["id"] == a
        e = top["explain"]
        assert e["mode"] == "hybrid" and e["bm25_rank"] == 1 and e["vector_rank"] == 1
        assert e["fused_score"] == pytest.approx(1.0)  # first in both: 0.7 * 1 + 0.3 * 1
        assert e["fusion"] == "convex"
        assert e["cosine_distance"] == pytest.approx(0.0, abs=1e-6)
        assert "explain" not in s.recall(q)[0]
    with pytest.raises(ValueError, match="unknown recall mode"):
        hybrid.rank(None, "x", None, Filters(), 1, mode="fuzzy")  # type: ignore[arg-type]


def test_modes_need_an_embedder_and_the_default_falls_back(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    fake = FakeEmbedder()
    with open_sub(home, embedder=fake) as s:
        s.store("kafka is the event bus")
        fake.unreachable = True
        report = s.recall_report("kafka bus")
        assert report["mode"] == "bm25" and "could not be embedded" in str(report["fallback"])
        assert [m["content"] for m in report["results"]] == ["kafka is the event bus"]
        with pytest.raises(EmbedderFailed):
            s.recall("kafka bus", mode="hybrid")
        s.set_embedder("off")
        assert s.recall_report("kafka bus")["mode"] == "bm25"
        for mode in ("vector", "hybrid"):
            with pytest.raises(TierLocked) as info:
                s.recall("kafka bus", mode=mode)  # type: ignore[arg-type]
            assert info.value.exit_code == 3
        with pytest.raises(UsageError):
            s.recall("kafka bus", mode="fuzzy")  # type: ignore[arg-type]
