"""Recall's neighbour context, dates as words, expiry, supersedes links and "nothing matched".

Neighbours: memories stored one after another from one source (or atoms of one
parent) in one namespace. A memory gains α times its best shown neighbour's
BM25 score, so the answer turn after a question turn is found by the
question's words; memories of no common source never gain anything.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import replace
from pathlib import Path

import pytest

from mnemolog.cli.agents import operations
from mnemolog.eventlog.errors import BadInput
from mnemolog.projections.recall import hybrid
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.embedding.service import parse_fusion
from tests.projections.kit import new_home, open_sub
from tests.support.fake_embedder import FakeEmbedder

ASK = "Caroline: which instrument did you pick up this spring?"
ANSWER = "Melanie: the violin, I practise every evening"
CHAT = "Caroline: lovely weather at the lake today"


def us(*ymd: int) -> int:
    return int(datetime.datetime(*ymd, 12, tzinfo=datetime.UTC).timestamp()) * 1_000_000


class Clock:
    """A settable clock: memories are stored on the day it says."""

    def __init__(self) -> None:
        self.now = us(2023, 5, 8)

    def __call__(self) -> int:
        self.now += 1
        return self.now


@pytest.fixture
def sub(tmp_path: Path) -> Substrate:
    return open_sub(new_home(tmp_path / "h"), long_lived=True, worker=False, clock=Clock())


def ids(sub: Substrate, query: str, **kw: object) -> list[str]:
    return [m["id"] for m in sub.recall(query, mode="bm25", limit=10, **kw)]  # type: ignore[arg-type]


def test_an_answer_without_the_query_terms_is_found_through_its_neighbour(sub: Substrate) -> None:
    with sub:
        ask = sub.store(ASK, source="chat/1")["id"]
        answer = sub.store(ANSWER, source="chat/1")["id"]
        chat = sub.store(CHAT, source="chat/1")["id"]
        for _ in range(4):  # the third recall on a connection builds the numpy copy: same answers
            got = sub.recall("instrument", mode="bm25", explain=True)
            assert [m["id"] for m in got] == [ask, answer]
            own = got[0]["explain"]["bm25_score"]
            e = got[1]["explain"]
            assert e["neighbour_id"] == ask and e["neighbour_contribution"] == pytest.approx(
                0.7 * own, abs=1e-10
            )
            assert got[1]["score"] == pytest.approx(e["neighbour_contribution"], abs=1e-10)
            assert got[0]["explain"]["neighbour_contribution"] == 0
        assert chat not in ids(sub, "instrument")  # its neighbour (the answer) has no term either
        sub.fusion = replace(sub.fusion, neighbour_weight=0.0)
        assert ids(sub, "instrument") == [ask]


def test_an_atom_s_neighbours_are_its_siblings(sub: Substrate) -> None:
    parts = [
        "## Tuesday\n\nCaroline asked which instrument Melanie had picked up this spring, after the "
        "concert at the lake with all of their friends and family.",
        "## Wednesday\n\nMelanie said the violin, and that she practises every evening before dinner "
        "with her kids, who sing along badly but happily.",
        "## Thursday\n\nThey talked about the weather, the garden, the new bakery in town and the cost "
        "of bread, butter and coffee these days.",
    ]
    with sub:
        m = sub.store("\n\n".join(parts))
        atoms = sub.atomise(m["id"], curator="rules", max_atom_tokens=50).atom_ids
        assert len(atoms) == 3
        got = sub.recall("instrument", mode="bm25", explain=True)
        assert [x["id"] for x in got] == atoms[:2]  # the parent is archived; Thursday has no lift
        assert got[1]["explain"]["neighbour_id"] == atoms[0]


def test_memories_of_no_common_source_are_not_neighbours(sub: Substrate) -> None:
    with sub:
        ask = sub.store(ASK, source="chat/1")["id"]
        sub.store(ANSWER, source="chat/2")  # stored next, but another conversation
        sub.store(ANSWER)  # no source at all
        sub.store(ANSWER, source="chat/1", namespace="elsewhere")  # same source, another namespace
        got = sub.recall("instrument", mode="bm25", explain=True)
        assert [m["id"] for m in got] == [ask]
        assert got[0]["explain"]["neighbour_contribution"] == 0


def test_a_memory_two_places_away_lends_at_the_decayed_share(sub: Substrate) -> None:
    with sub:
        ask = sub.store(ASK, source="chat/1")["id"]
        sub.store(CHAT, source="chat/1")
        answer = sub.store("Melanie: the violin is my instrument now", source="chat/1")["id"]
        for _ in range(4):  # the third recall on a connection builds the numpy copy: same answers
            got = {m["id"]: m["explain"] for m in sub.recall("which instrument", mode="bm25", explain=True)}
            e = got[answer]
            assert e["neighbour_id"] == ask  # two places away, through the chat between them
            own = got[ask]["bm25_score"] - got[ask]["neighbour_contribution"]
            assert e["neighbour_contribution"] == pytest.approx(0.7 * 0.5 * own, abs=1e-10)
        sub.fusion = replace(sub.fusion, neighbour_decay=0.0)
        got = {m["id"]: m["explain"] for m in sub.recall("which instrument", mode="bm25", explain=True)}
        assert got[answer]["neighbour_contribution"] == 0


def test_hybrid_lifts_a_candidate_by_its_neighbour_s_fused_score_within_a_source(tmp_path: Path) -> None:
    with open_sub(new_home(tmp_path / "f"), long_lived=True, worker=False, embedder=FakeEmbedder()) as s:
        ask = s.store(ASK, source="chat/1")["id"]
        answer = s.store(ANSWER, source="chat/1")["id"]
        alone = s.store(ASK)["id"]  # the same question with no source: no neighbour, no lift
        got = {m["id"]: m for m in s.recall("which instrument", mode="hybrid", explain=True, limit=10)}
        lift = {k: got[k]["explain"]["fused_neighbour_contribution"] for k in (ask, answer)}
        # Each lends the other γ times its fused score before any lift.
        for me, other in ((ask, answer), (answer, ask)):
            assert got[me]["explain"]["fused_neighbour_seq"] == got[other]["stored_seq"]
            before = got[other]["score"] - lift[other]
            assert lift[me] == pytest.approx(hybrid.FUSED_NEIGHBOUR_WEIGHT * before, abs=1e-12)
            assert lift[me] > 0
        assert got[alone]["explain"]["fused_neighbour_contribution"] == 0
        assert got[alone]["explain"]["fused_neighbour_seq"] is None
        s.fusion = replace(s.fusion, fused_neighbour_weight=0.0)
        plain = {m["id"]: m for m in s.recall("which instrument", mode="hybrid", explain=True, limit=10)}
        assert plain[answer]["score"] == pytest.approx(got[answer]["score"] - lift[answer], abs=1e-12)


def test_adjacency_is_within_the_source_and_skips_other_sources(sub: Substrate) -> None:
    with sub:
        ask = sub.store(ASK, source="chat/1")["id"]
        sub.store(CHAT, source="chat/2")  # interleaved: not part of chat/1's sequence
        answer = sub.store(ANSWER, source="chat/1")["id"]
        assert ids(sub, "instrument") == [ask, answer]


def test_a_hidden_neighbour_contributes_nothing(sub: Substrate) -> None:
    with sub:
        ask = sub.store(ASK, source="chat/1")["id"]
        answer = sub.store(ANSWER, source="chat/1")["id"]
        sub.archive(ask)
        assert ids(sub, "instrument") == []
        assert ids(sub, "instrument", include_archived=True) == [ask, answer]


def test_a_date_is_found_by_its_month_and_year(sub: Substrate, tmp_path: Path) -> None:
    lines = [
        {
            "id": "01H00000000000000000000001",
            "content": "went hiking with the dogs",
            "created_at": us(2023, 5, 8),
        },
        {
            "id": "01H00000000000000000000002",
            "content": "went skiing with the dogs",
            "created_at": us(2024, 1, 2),
        },
    ]
    src = tmp_path / "dated.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with sub:
        sub.import_jsonl(src, progress=False)
        may = lines[0]["id"]
        assert ids(sub, "what did we do in May 2023") == [may]
        assert ids(sub, "8 May") == [may]
        assert ids(sub, "skiing in January") == [lines[1]["id"]]
        # Search's keywords are the memory's own words: the date is not one.
        assert sub.search("May") == []


def test_expired_memories_are_hidden_unless_asked(sub: Substrate) -> None:
    with sub:
        gone = sub.store("pump seal spec", metadata={"vault": {"expires_at": "2000-01-31"}})["id"]
        kept = sub.store("pump seal spec v2", metadata={"vault": {"expires_at": "2999-01-31"}})["id"]
        assert ids(sub, "pump seal") == [kept]
        assert [m["id"] for m in sub.search("pump seal")] == [kept]
        assert [m["id"] for m in sub.list()] == [kept]
        assert set(ids(sub, "pump seal", include_expired=True)) == {gone, kept}
        assert {m["id"] for m in sub.search("pump seal", include_expired=True)} == {gone, kept}
        assert {m["id"] for m in sub.list(include_expired=True)} == {gone, kept}
        # Valid through its day: expired from the next midnight UTC, as context packs read it.
        sub.clock.now = us(2000, 1, 31)  # type: ignore[attr-defined]
        assert set(ids(sub, "pump seal")) == {gone, kept}


def test_the_target_of_a_supersedes_link_leaves_default_recall(sub: Substrate) -> None:
    with sub:
        old = sub.store("the deploy runs at 02:00")["id"]
        new = sub.store("the deploy runs at 03:00")["id"]
        sub.link(new, old, "supersedes")
        assert ids(sub, "deploy runs") == [new]
        assert [m["id"] for m in sub.list()] == [new]
        assert set(ids(sub, "deploy runs", statuses=["active", "superseded"])) == {old, new}


def test_nothing_relevant_is_no_hit_and_min_score_is_a_floor(tmp_path: Path) -> None:
    with open_sub(new_home(tmp_path / "e"), long_lived=True, worker=False, embedder=FakeEmbedder()) as s:
        hit = s.store("the pump seal leaks under thermal load")["id"]
        for i in range(3):
            s.store(f"an unrelated note about lunch number {i}")
        got = s.recall("pump seal", mode="hybrid", explain=True)
        assert got and got[0]["id"] == hit
        assert all(m["score"] > 0 for m in got)
        assert all(m["explain"]["fused_score"] > 0 for m in got)
        top = got[0]["score"]
        assert [m["id"] for m in s.recall("pump seal", mode="hybrid", min_score=top)] == [hit]
        best = s.recall("pump seal", mode="bm25")[0]["score"]
        assert [m["id"] for m in s.recall("pump seal", mode="bm25", min_score=best)] == [hit]
        assert s.recall("pump seal", mode="bm25", min_score=best * 1.01) == []
        out = operations.invoke(s, "memory_recall", {"query": "pump seal", "mode": "bm25"})
        assert out["matched"] is True
        out = operations.invoke(s, "memory_recall", {"query": "zebra", "mode": "bm25"})
        assert out["matched"] is False and out["results"] == []
        out = operations.invoke(s, "memory_search", {"query": "zebra"})
        assert out["matched"] is False


def test_every_mode_hides_expired_and_superseded_memories(tmp_path: Path) -> None:
    with open_sub(new_home(tmp_path / "v"), long_lived=True, worker=False, embedder=FakeEmbedder()) as s:
        kept = s.store("pump seal spec")["id"]
        gone = s.store("pump seal spec", metadata={"vault": {"expires_at": "2000-01-31"}})["id"]
        old = s.store("pump seal spec, first draft")["id"]
        s.link(kept, old, "supersedes")
        for mode in ("bm25", "vector", "hybrid"):
            for _ in range(4):  # the third recall on a connection builds the numpy copy
                got = {m["id"] for m in s.recall("pump seal spec", mode=mode, limit=50)}  # type: ignore[arg-type]
                assert got == {kept}, mode
            wide = s.recall(
                "pump seal spec", mode=mode, include_expired=True, statuses=["active", "superseded"]
            )  # type: ignore[arg-type]
            assert {m["id"] for m in wide} == {kept, gone, old}, mode


def test_recall_settings_are_read_from_the_recall_table() -> None:
    got = parse_fusion(
        {"k1": 0.9, "b": 0.3, "neighbour_weight": 0, "neighbour_decay": 0.25, "fused_neighbour_weight": 0}
    )
    assert (got.k1, got.b, got.neighbour_weight) == (0.9, 0.3, 0.0)
    assert (got.neighbour_decay, got.fused_neighbour_weight) == (0.25, 0.0)
    base = parse_fusion(None)
    assert (base.k1, base.b, base.neighbour_weight) == (1.2, 0.5, hybrid.NEIGHBOUR_WEIGHT)
    assert (base.neighbour_decay, base.fused_neighbour_weight) == (0.5, 0.2)
    for bad in ({"b": 1.5}, {"k1": -1}, {"neighbour_weight": "high"}, {"neighbour_decay": 2}):
        with pytest.raises(BadInput):
            parse_fusion(bad)
