"""Reinforcement (short and long modes, the pool, the cap) and decay at fixed clocks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mnemolog.eventlog.errors import UsageError
from mnemolog.projections.knowledge.rules import DAY_US
from mnemolog.substrate.api import Substrate
from tests.projections.kit import FakeClock, new_home, open_sub
from tests.substrate.knowledge_kit import statuses

T0 = 4_000_000_000_000_000  # after the genesis entry: the log never lets time go back

SHORT = "The M1 support pad layout follows the CTE gradient map"
LONG = (
    "The polishing run on the sixteen inch pitch lap showed quilting above two hundred thirty four "
    "newtons because the lap pitch flows under sustained load and the facets print through into the "
    "mirror surface, which the interferometer measured as a fourteen nanometre ripple across the "
    "clear aperture"
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def sub(tmp_path: Path, clock: FakeClock) -> Iterator[Substrate]:
    home = new_home(tmp_path / "home")
    with home.config_path.open("a") as f:  # these tests decay memories stored directly, on purpose
        f.write("\n[knowledge.decay]\nexempt_stored = false\n")
    s = open_sub(home, clock=clock)
    s.register_project("p04-gigabit", aliases=["p04"])
    yield s
    s.close()


# -- reinforcement ---------------------------------------------------------------------------


def test_short_mode_reinforces_and_records_the_interaction(sub: Substrate) -> None:
    m = sub.store(SHORT, project="p04", confidence=0.6)
    out = sub.capture("layout?", "As before, the M1 support pad layout follows the CTE gradient map.",
                      project="p04", reinforce=True)  # fmt: skip
    assert [(r["id"], r["mode"]) for r in out["reinforced"]] == [(m["id"], "short")]
    got = sub.get(m["id"])
    assert got["confidence"] == pytest.approx(0.62)
    assert got["reference_count"] == 1 and got["last_referenced_at"] is not None
    (e,) = [e for e in sub.log.iter_entries(0) if e.type == "memory.reinforced"]
    assert e.data["interaction_id"] == out["id"]
    assert (e.data["confidence_before"], e.data["confidence"]) == (0.6, pytest.approx(0.62))
    assert e.data["policy"]["min_share"] == 0.7


def test_long_mode_needs_twelve_terms_and_a_third(sub: Substrate) -> None:
    m = sub.store(LONG, project="p04", confidence=0.5)
    partial = (
        "Quilting showed up again above two hundred thirty four newtons: the pitch flows under "
        "sustained load and the facets print through. Everything else was nominal."
    )
    out = sub.capture("run?", partial, project="p04", reinforce=True)
    assert [(r["id"], r["mode"]) for r in out["reinforced"]] == [(m["id"], "long")]
    assert out["reinforced"][0]["overlap"] >= 12
    too_little = "Quilting showed up above two hundred newtons again."
    assert sub.capture("run?", too_little, project="p04", reinforce=True)["reinforced"] == []


def test_the_pool_is_the_projects_memories_and_global_identity(sub: Substrate) -> None:
    mine = sub.store(SHORT, project="p04")
    other = sub.store(SHORT, project="p06-polisher")
    pref = sub.store("I prefer metric units in every report", kind="user")
    fact = sub.store("Metric units in every report are required by the customer")  # global, not identity
    candidate_like = sub.store(SHORT + " too", project="p04")
    sub.archive(candidate_like["id"])
    response = (
        "Sure: the M1 support pad layout follows the CTE gradient map, and I prefer metric units in every "
        "report as you asked; the customer requires metric units in every report."
    )
    out = sub.capture("q", response, project="p04", reinforce=True)
    assert sorted(r["id"] for r in out["reinforced"]) == sorted([mine["id"], pref["id"]])
    assert sub.get(other["id"])["reference_count"] == 0
    assert sub.get(fact["id"])["reference_count"] == 0


def test_confidence_is_capped_and_nothing_happens_without_reinforce(sub: Substrate) -> None:
    m = sub.store(SHORT, project="p04", confidence=0.99)
    sub.capture("q", SHORT, project="p04")
    assert sub.get(m["id"])["reference_count"] == 0
    for _ in range(2):
        sub.capture("q", SHORT, project="p04", reinforce=True)
    got = sub.get(m["id"])
    assert (got["confidence"], got["reference_count"]) == (1.0, 2)


def test_reinforcement_thresholds_are_configuration(tmp_path: Path, clock: FakeClock) -> None:
    home = new_home(tmp_path / "home")
    with home.config_path.open("a") as f:
        f.write("\n[knowledge.reinforce]\nmin_share = 1.0\nstep = 0.1\n")
    with open_sub(home, clock=clock) as s:
        m = s.store(SHORT, confidence=0.5, kind="user")
        assert (
            s.capture("q", "the M1 support pad layout follows the CTE map", reinforce=True)["reinforced"]
            == []
        )
        (r,) = s.capture("q", SHORT, reinforce=True)["reinforced"]
        assert r["id"] == m["id"] and r["confidence"] == pytest.approx(0.6)


# -- decay -------------------------------------------------------------------------------------


def test_decay_at_fixed_clocks(sub: Substrate) -> None:
    a = sub.store("An insight nobody has needed since", confidence=0.6)
    b = sub.store("A person's memory, stored without a confidence")
    c = sub.store(SHORT, project="p04", confidence=0.6)
    sub.capture("q", SHORT, project="p04", reinforce=True)  # c is referenced: it never decays
    # 0.6 * 0.97**22 = 0.307 and 0.6 * 0.97**23 = 0.298: gone on the 23rd day past the grace period.
    plan = sub.decay(now=T0 + (30 + 22) * DAY_US + DAY_US // 2, dry_run=True)
    assert (plan["checked"], plan["decaying"], plan["superseded_count"]) == (2, 2, 0)
    size = sub.log.refresh()
    assert sub.decay(now=T0 + (30 + 22) * DAY_US + DAY_US // 2)["superseded_count"] == 0
    assert sub.log.refresh() == size  # nothing changed state: nothing written
    out = sub.decay(now=T0 + (30 + 23) * DAY_US + DAY_US // 2)
    assert [r["id"] for r in out["superseded"]] == [a["id"]]
    assert out["superseded"][0]["confidence"] == pytest.approx(0.6 * 0.97**23)
    gone = sub.get(a["id"])
    assert (gone["status"], gone["confidence"]) == ("superseded", pytest.approx(0.6 * 0.97**23))
    assert sub.recall("insight nobody needed") == []
    (e,) = [e for e in sub.log.iter_entries(0) if e.type == "memory.superseded"]
    assert e.data["by"] == "decay" and e.data["now"] == T0 + (30 + 23) * DAY_US + DAY_US // 2
    assert e.data["policy"] == {
        "idle_days": 30,
        "daily_factor": 0.97,
        "floor": 0.3,
        "exempt_pinned": True,
        "exempt_kinds": ["user", "feedback"],
        "exempt_stored": False,
    }
    # b (no confidence: 1.0) goes on day 30 + 40; c never does.
    assert sub.decay(now=T0 + (30 + 39) * DAY_US + DAY_US // 2)["superseded_count"] == 0
    assert [r["id"] for r in sub.decay(now=T0 + (30 + 40) * DAY_US + DAY_US // 2)["superseded"]] == [b["id"]]
    assert sub.decay(now=T0 + 10_000 * DAY_US)["superseded_count"] == 0
    assert sub.get(c["id"])["status"] == "active"
    # Replay gives the same statuses and confidences.
    before = statuses(sub)
    sub.rebuild()
    assert statuses(sub) == before


def test_a_change_restarts_the_idle_clock(sub: Substrate, clock: FakeClock) -> None:
    a = sub.store("An insight touched later", confidence=0.6)
    clock.now = T0 + 40 * DAY_US
    sub.update(a["id"], title="retitled")
    assert sub.decay(now=T0 + (30 + 23) * DAY_US + DAY_US // 2)["checked"] == 0
    assert sub.decay(now=T0 + (40 + 30 + 23) * DAY_US + DAY_US // 2)["superseded_count"] == 1


def test_decay_thresholds_are_configuration(tmp_path: Path, clock: FakeClock) -> None:
    home = new_home(tmp_path / "home")
    with home.config_path.open("a") as f:
        f.write(
            "\n[knowledge.decay]\nidle_days = 1\ndaily_factor = 0.5\nfloor = 0.4\nexempt_stored = false\n"
        )
    with open_sub(home, clock=clock) as s:
        m = s.store("short-lived", confidence=0.9)
        # 0.9 * 0.5 = 0.45 after one day past the grace period; 0.225 after two.
        assert s.decay(now=T0 + 2 * DAY_US + DAY_US // 2)["superseded_count"] == 0
        out = s.decay(now=T0 + 3 * DAY_US + DAY_US // 2)
        assert [r["id"] for r in out["superseded"]] == [m["id"]]
        assert {k: out["policy"][k] for k in ("idle_days", "daily_factor", "floor", "exempt_stored")} == {
            "idle_days": 1,
            "daily_factor": 0.5,
            "floor": 0.4,
            "exempt_stored": False,
        }


def test_decay_refuses_a_bad_clock(sub: Substrate) -> None:
    with pytest.raises(UsageError):
        sub.decay(now=-1)


def test_long_lived_processes_run_decay_in_the_background(
    sub: Substrate, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    old = sub.store("An old insight", confidence=0.6)
    clock.now = T0 + 400 * DAY_US
    sub.knowledge.start_daily(first=0.0, every=3600.0)
    try:
        for _ in range(200):
            if sub.list(statuses=["superseded"]):
                break
            sub.knowledge._stop.wait(0.05)
    finally:
        sub.knowledge.stop_daily()
    assert len(sub.list(statuses=["superseded"])) == 1
    assert sub.knowledge.daily_errors == []
    assert any(f"decay: retiring {old['id']}" in r.getMessage() for r in caplog.records)
