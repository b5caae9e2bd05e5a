"""Decay is safe by default: what a person put there stays, references count, and decay can be undone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemolog.projections.knowledge import DAY_US
from mnemolog.substrate.api import Substrate
from tests.projections.kit import FakeClock, new_home, open_sub

from .knowledge_kit import statuses

T0 = 4_000_000_000_000_000
YEAR_AHEAD = T0 + 365 * DAY_US

DECISION = "Decision: we keep the 18-point whiffletree for the M1 mirror support."


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def sub(tmp_path: Path, clock: FakeClock) -> Iterator[Substrate]:
    s = open_sub(new_home(tmp_path / "home"), clock=clock)
    s.register_project("p04-gigabit", aliases=["p04"])
    yield s
    s.close()


def promoted_candidate(sub: Substrate) -> dict[str, Any]:
    """A memory the loop proposed and triage promoted: the kind decay is for."""
    sub.capture("What did we decide?", DECISION, project="p04")
    sub.extract(pending=True, extractor="rules")
    out = sub.triage(pending=True, triager="rules")
    assert out["promoted"] == 1, out
    (m,) = sub.list(project="p04")
    assert m["status"] == "active" and m["promoted_at"] is not None
    return m


def test_a_pinned_user_memory_and_direct_stores_survive_a_year(sub: Substrate) -> None:
    pinned = sub.store(
        "I want answers in metric units", kind="user", confidence=0.5, metadata={"vault": {"pinned": True}}
    )
    feedback = sub.store("Do not summarise the diff back to me", kind="feedback", confidence=0.4)
    note = sub.store("The lab's interferometer is a Zygo Verifire", confidence=0.4)
    loop = promoted_candidate(sub)
    announced: list[list[dict[str, Any]]] = []
    out = sub.decay(now=YEAR_AHEAD, announce=announced.append)
    assert [r["id"] for r in out["superseded"]] == [loop["id"]]
    assert announced == [out["superseded"]]  # listed, then written
    assert out["exempt"] == {"pinned": 1, "kind": 1, "stored": 1, "in_pack": 0}
    for m in (pinned, feedback, note):
        assert sub.get(m["id"])["status"] == "active"
    assert sub.get(loop["id"])["status"] == "superseded"


def test_exemptions_are_configuration(tmp_path: Path, clock: FakeClock) -> None:
    home = new_home(tmp_path / "home")
    with home.config_path.open("a") as f:
        f.write("\n[knowledge.decay]\nexempt_pinned = false\nexempt_kinds = []\nexempt_stored = false\n")
    with open_sub(home, clock=clock) as s:
        pinned = s.store("I want answers in metric units", kind="user", metadata={"vault": {"pinned": True}})
        out = s.decay(now=YEAR_AHEAD)
        assert [r["id"] for r in out["superseded"]] == [pinned["id"]]
        assert out["policy"]["exempt_kinds"] == []


def test_a_dry_run_lists_and_writes_nothing(sub: Substrate) -> None:
    loop = promoted_candidate(sub)
    size = sub.log.refresh()
    announced: list[list[dict[str, Any]]] = []
    out = sub.decay(now=YEAR_AHEAD, dry_run=True, announce=announced.append)
    assert [r["id"] for r in announced[0]] == [loop["id"]]
    assert announced[0][0]["title"] and announced[0][0]["kind"] == "decision"
    assert out["superseded_count"] == 1
    assert sub.log.refresh() == size
    assert sub.get(loop["id"])["status"] == "active"


def test_a_context_pack_inclusion_is_a_reference(sub: Substrate) -> None:
    loop = promoted_candidate(sub)
    pack = sub.build_context("whiffletree M1 mirror support", project="p04-gigabit")
    shown = [e["id"] for t in pack["tiers"] for e in t["entries"]]
    assert loop["id"] in shown
    out = sub.decay(now=YEAR_AHEAD)
    assert out["superseded_count"] == 0
    assert out["exempt"]["in_pack"] == 1
    assert sub.get(loop["id"])["status"] == "active"


def test_a_decayed_memory_is_restored_and_recalled_again(sub: Substrate, clock: FakeClock) -> None:
    loop = promoted_candidate(sub)
    sub.decay(now=YEAR_AHEAD)
    assert sub.recall("whiffletree M1 mirror") == []
    clock.now = YEAR_AHEAD + DAY_US
    back = sub.restore(loop["id"], "still true: the review confirmed it")
    assert back["status"] == "active"
    assert back["reference_count"] == 1  # bringing it back is a use of it
    assert [m["id"] for m in sub.recall("whiffletree M1 mirror")] == [loop["id"]]
    (e,) = [e for e in sub.log.iter_entries(0) if e.type == "memory.reinstated"]
    assert (e.data["id"], e.data["by"]) == (loop["id"], "person")
    assert e.data["reason"] == "still true: the review confirmed it"
    # Referenced now: the next run, however late, leaves it alone.
    assert sub.decay(now=YEAR_AHEAD + 3 * 365 * DAY_US)["superseded_count"] == 0
    # Restoring an active memory writes nothing.
    size = sub.log.refresh()
    assert sub.restore(loop["id"])["status"] == "active"
    assert sub.log.refresh() == size
    before = statuses(sub)
    sub.rebuild()
    assert statuses(sub) == before


def test_restore_undoes_a_persons_supersession_and_an_archive_together(sub: Substrate) -> None:
    m = sub.store("The polishing lap is replaced every 40 hours")
    sub.supersede(m["id"], reason="wrong figure")
    sub.archive(m["id"])
    back = sub.restore(m["id"])
    assert back["status"] == "active" and back["archived_at"] is None
    types = [e.type for e in sub.log.iter_entries(0)][-2:]
    assert types == ["memory.reinstated", "memory.restored"]
