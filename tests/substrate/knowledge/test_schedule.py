"""The scheduled run of long-lived processes: extraction, then triage, marked trigger "cron"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemolog.eventlog.errors import BadInput
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.knowledge.config import Schedule, parse_knowledge
from mnemolog.substrate.knowledge.service import seconds_until
from tests.projections.kit import FakeClock, new_home, open_sub

LESSON = "We decided to always calibrate the polisher with kp = 1.2e-13 before each run."


@pytest.fixture
def sub(tmp_path: Path) -> Iterator[Substrate]:
    s = open_sub(new_home(tmp_path / "home"), clock=FakeClock())
    yield s
    s.close()


def test_the_default_is_every_day_at_three_utc() -> None:
    assert parse_knowledge({}).schedule == Schedule(enabled=True, at_minute=180)
    cfg = parse_knowledge({"knowledge": {"schedule": {"at": "23:59", "enabled": False}}})
    assert cfg.schedule == Schedule(enabled=False, at_minute=23 * 60 + 59)


@pytest.mark.parametrize(
    "table",
    [
        {"at": "3:00"},
        {"at": "24:00"},
        {"at": "03:60"},
        {"at": 300},
        {"at": "03:00 UTC"},
        {"enabled": "yes"},
        {"when": "03:00"},
        {"at": "０３:００"},
    ],
)
def test_a_bad_schedule_is_refused_naming_the_key(table: dict[str, object]) -> None:
    with pytest.raises(BadInput) as info:
        parse_knowledge({"knowledge": {"schedule": table}})
    assert info.value.exit_code == 65 and "knowledge.schedule" in info.value.message


@given(st.floats(min_value=0, max_value=4e9), st.integers(min_value=0, max_value=1439))
def test_the_next_run_is_within_a_day_and_on_the_minute(now: float, at: int) -> None:
    wait = seconds_until(now, at)
    assert 0 < wait <= 86_400
    assert round((now + wait) % 86_400, 3) % 86_400 == pytest.approx(at * 60.0, abs=1e-3)


def test_a_scheduled_run_extracts_then_triages_and_marks_its_events(sub: Substrate, tmp_path: Path) -> None:
    sub.capture("How do we calibrate the polisher?", LESSON, project="p06")
    before = sub.log.size
    run = sub.knowledge.scheduled_run()
    assert run["extract"]["candidates"] == 1 and run["triage"]["candidates"] == 1
    written = [e for e in sub.log.iter_entries() if e.seq >= before]
    model_calls = [e for e in written if e.type in ("candidate.extracted", "candidate.triaged")]
    assert [e.type for e in model_calls] == ["candidate.extracted", "candidate.triaged"]
    assert all(e.data["trigger"] == "cron" for e in model_calls)
    # A call a person makes carries no trigger (and reads as manual).
    sub.capture("Is the coolant at 22 °C?", "We decided to keep the coolant at 22 °C.", project="p06")
    sub.extract(pending=True)
    (manual,) = [
        e for e in sub.log.iter_entries() if e.seq > model_calls[-1].seq and e.type == "candidate.extracted"
    ]
    assert "trigger" not in manual.data
    stats = sub.stats()["knowledge"]
    assert stats["calls"] == {"cron": {"ok": 2, "error": 0}, "manual": {"ok": 1, "error": 0}}
    assert stats["scheduled"] == {"runs": 1, "failures": 0, "last_failure": None}
    sub.render_agent_folder(tmp_path / "vault", "atlas")
    logs = sorted((tmp_path / "vault" / "atlas" / "logs").rglob("*.jsonl"))
    lines = [json.loads(x) for p in logs for x in p.read_text().splitlines()]
    assert sorted(x["trigger"] for x in lines) == ["cron", "cron", "manual"]


def test_nothing_pending_is_no_failure_and_a_failure_is_counted(sub: Substrate, tmp_path: Path) -> None:
    assert sub.knowledge.scheduled_run()["extract"] == {"pending": 0}
    assert sub.stats()["knowledge"]["scheduled"]["failures"] == 0
    # A configured model that is not there: the extraction fails, triage still runs.
    home = new_home(tmp_path / "other")
    with home.config_path.open("a") as f:
        f.write('\n[knowledge]\nextractor = "ollama"\n')
    with open_sub(home, clock=FakeClock()) as s:
        s.capture("How do we calibrate the polisher?", LESSON, project="p06")
        run = s.knowledge.scheduled_run()
        assert "error" in run["extract"] and run["triage"] == {"pending": 0}
        scheduled = s.stats()["knowledge"]["scheduled"]
        assert scheduled["failures"] == 1 and scheduled["last_failure"].startswith("extract: ")


def test_the_schedule_runs_in_its_own_thread_and_stops_with_the_home(sub: Substrate) -> None:
    import threading
    import time

    sub.capture("How do we calibrate the polisher?", LESSON, project="p06")
    at = sub.knowledge.settings.schedule.at_minute * 60.0
    ticks = iter([at - 0.05])  # the first wait ends at once; after it, a day away
    sub.knowledge.start_nightly(now=lambda: next(ticks, at))
    deadline = time.monotonic() + 60
    while not sub.knowledge.scheduled_runs and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sub.knowledge.scheduled_runs and sub.knowledge.scheduled_runs[0]["extract"]["candidates"] == 1
    sub.knowledge.stop_daily()
    assert not any(t.name == "mnemolog-nightly" for t in threading.enumerate())
