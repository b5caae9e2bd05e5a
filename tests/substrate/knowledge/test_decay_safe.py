"""Decay is safe by default: what a person put there stays, references count, and decay can be undone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemolog.projections.knowledge.rules import DAY_US
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.recall import hits as recall_hits
from tests.projections.kit import FakeClock, new_home, open_sub
from tests.substrate.knowledge_kit import statuses

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
    mid = promoted_candidate_of(sub, DECISION)
    m = sub.get(mid)
    assert m["status"] == "active" and m["promoted_at"] is not None
    return m


def promoted_candidate_of(sub: Substrate, text: str) -> str:
    """The id of the memory the loop promoted from one captured answer ``text``."""
    before = {m["id"] for m in sub.list(project="p04")}
    sub.capture("What did we decide?", text, project="p04")
    sub.extract(pending=True, extractor="rules")
    out = sub.triage(pending=True, triager="rules")
    assert out["promoted"] == 1, out
    (mid,) = {m["id"] for m in sub.list(project="p04")} - before
    return str(mid)


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
    assert out["exempt"] == {"pinned": 1, "kind": 1, "stored": 1, "in_pack": 0, "recalled": 0}
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


def test_a_recall_hit_is_a_reference(sub: Substrate) -> None:
    loop = promoted_candidate(sub)
    other = promoted_candidate_of(sub, "Decision: the polishing lap is pitch, not polyurethane.")
    assert [m["id"] for m in sub.recall("whiffletree mirror support", mode="bm25")][:1] == [loop["id"]]
    out = sub.decay(now=YEAR_AHEAD)
    assert out["exempt"]["recalled"] >= 1
    assert sub.get(loop["id"])["status"] == "active"
    assert sub.get(other)["status"] == "superseded"  # never recalled: the hint keeps only what was asked for


def test_a_look_into_the_past_is_not_a_reference(sub: Substrate) -> None:
    loop = promoted_candidate(sub)
    sub.recall("whiffletree mirror support", mode="bm25", as_of=sub.log.refresh() - 1)
    assert sub.decay(now=YEAR_AHEAD)["superseded_count"] == 1
    assert sub.get(loop["id"])["status"] == "superseded"


@pytest.mark.parametrize(
    "ledger",
    [
        b"\x00\xff garbage\n",
        b"01ARZ3NDEKTSV4RRFFQ69G5FAV\n",  # torn: no time
        b"01ARZ3NDEKTSV4RRFFQ69G5FAV 99999999999999999999999\n",  # oversized number
        b"not-an-id 12\n" * 10_000,
        "01ARZ3NDEKTSV4RRFFQ69G5FAV 12\n".encode("utf-16"),
    ],
)
def test_a_damaged_ledger_never_breaks_decay(sub: Substrate, ledger: bytes) -> None:
    loop = promoted_candidate(sub)
    (sub.home.state_dir / recall_hits.NAME).write_bytes(ledger)
    assert sub.decay(now=YEAR_AHEAD)["superseded_count"] == 1
    assert sub.get(loop["id"])["status"] == "superseded"


def test_a_ledger_that_is_a_directory_or_a_read_only_home_loses_only_the_hint(sub: Substrate) -> None:
    loop = promoted_candidate(sub)
    (sub.home.state_dir / recall_hits.NAME).mkdir()
    assert sub.recall("whiffletree mirror support", mode="bm25")[0]["id"] == loop["id"]
    assert sub.decay(now=YEAR_AHEAD)["exempt"]["recalled"] == 0


def test_the_ledger_is_compacted_to_the_last_hit_of_each_memory(tmp_path: Path) -> None:
    a, b = "01ARZ3NDEKTSV4RRFFQ69G5FAV", "01BX5ZZKBKACTAV9WEVGEMMVRZ"
    for t in range(3):
        recall_hits.note(tmp_path, [a, b, a, "../../etc/passwd"], t)
    assert recall_hits.last_hits(tmp_path) == {a: 2, b: 2}
    path = tmp_path / recall_hits.NAME
    assert path.read_text().count("\n") == 6  # duplicates within one recall are noted once
    recall_hits.compact(tmp_path, recall_hits.last_hits(tmp_path))
    assert path.read_text().count("\n") == 6  # below the bound: left alone
    with path.open("ab") as f:
        f.write(b"x" * (recall_hits.MAX_BYTES + 1))
    recall_hits.compact(tmp_path, {a: 2, b: 2})
    assert path.read_text() == f"{a} 2\n{b} 2\n"
