"""The agent folder through the API: promotions, persona files, run logs, hand edits kept, validation."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from mnemolog.eventlog.errors import NotFound, UsageError
from mnemolog.projections.vault.validate import errors, validate_vault
from mnemolog.substrate.api import Substrate
from tests.projections.kit import FakeClock, new_home, open_sub

LONG = " ".join(
    f"Step {i}: the deploy at 09:{i:02d} restarted worker pool {i} after the queue depth alarm fired."
    for i in range(40)
)


@pytest.fixture
def sub(tmp_path: Path) -> Iterator[Substrate]:
    s = open_sub(new_home(tmp_path / "home"), clock=FakeClock())
    yield s
    s.close()


def test_promotions_fill_persona_files_index_and_survive_hand_edits(sub: Substrate, tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    pref = sub.store("Give the number first, then the reasoning", kind="feedback")["id"]
    who = sub.store("Mechanical/optical engineer at Atomaste", kind="user")["id"]
    sub.promote_to_persona(pref)
    sub.promote_to_persona(who, file="USER.md", section="Role and context")
    first = sub.render_agent_folder(vault, "atlas")
    assert sorted(first["written"]) == [
        f"atlas/{f}" for f in ("IDENTITY.md", "SOUL.md", "USER.md", "model.md", "tools.md")
    ]
    user = (vault / "atlas" / "USER.md").read_text()
    today = datetime.datetime.fromtimestamp(FakeClock().now / 1e6, datetime.UTC).date().isoformat()
    assert f"- Mechanical/optical engineer at Atomaste (promoted {today} from user_" in user
    soul = vault / "atlas" / "SOUL.md"
    assert "Give the number first" in soul.read_text()
    soul.write_text(soul.read_text().replace("<!-- one paragraph: communication style -->", "Dry and brief."))
    later = sub.store("Never propose a meeting before 10:00", kind="feedback")["id"]
    sub.promote_to_persona(later)
    second = sub.render_agent_folder(vault, "atlas")
    text = soul.read_text()
    assert "Dry and brief." in text and "Never propose a meeting" in text
    assert second["written"] == ["atlas/SOUL.md"] and second["kept_edits"] == []
    # INDEX lists promotions (the notes render beside the persona files).
    from mnemolog.substrate.vault import service as v

    v.render(sub, vault, "atlas")
    index = (vault / "atlas" / "memory" / "INDEX.md").read_text()
    section = index.split("## Recently Promoted to Persona\n", 1)[1].split("\n\n", 1)[0]
    assert section.count(f"promoted {today}") == 3
    assert errors(validate_vault(vault)) == []


def test_atomisations_become_run_log_lines(sub: Substrate, tmp_path: Path) -> None:
    m = sub.store(LONG, kind="observation")["id"]
    sub.atomise(m, curator="rules")
    sub.render_agent_folder(tmp_path / "vault", "atlas")
    (done,) = [e for e in sub.log.iter_entries() if e.type == "atomisation.completed"]
    day = datetime.datetime.fromtimestamp(done.ts / 1e6, datetime.UTC).date()
    logs = sorted((tmp_path / "vault" / "atlas" / "logs").rglob("*.jsonl"))
    assert [p.relative_to(tmp_path / "vault" / "atlas").as_posix() for p in logs] == [
        f"logs/{day:%Y-%m}/{day.isoformat()}.jsonl"
    ]
    (line,) = [json.loads(x) for x in logs[0].read_text().splitlines()]
    assert line["model"] == "rules" and line["status"] == "ok" and line["trigger"] == "manual"
    assert line["summary"].startswith(f"atomise {m}: ") and line["event_seq"] == done.seq
    assert line["ts"].startswith(day.isoformat())
    assert errors(validate_vault(tmp_path / "vault")) == []


def test_promote_refuses_unknown_targets(sub: Substrate) -> None:
    m = sub.store("x y z", kind="user")["id"]
    with pytest.raises(UsageError):
        sub.promote_to_persona(m, file="NOTES.md", section="x")
    with pytest.raises(UsageError):
        sub.promote_to_persona(m, file="USER.md", section="Nope")
    with pytest.raises(UsageError):
        sub.promote_to_persona(m, file="USER.md")
    with pytest.raises(NotFound):
        sub.promote_to_persona("01NOSUCHMEMORY000000000000")


def test_captured_days_become_journal_files_with_what_was_promoted(sub: Substrate, tmp_path: Path) -> None:
    from mnemolog.substrate.vault import service as v

    i = sub.capture(
        "How do we calibrate the polisher?",
        "We decided to always calibrate the polisher with the Preston coefficient kp = 1.2e-13 "
        "before each run.",
        project="p06",
        client="claude",
    )
    sub.extract(pending=True, extractor="rules")
    (cand,) = sub.candidates()
    sub.promote(cand["id"])
    other = sub.capture("Is the coolant at 22 °C?", "I am not sure; someone should check.", project="p06")
    root = tmp_path / "vault"
    v.render(sub, root, "atlas")
    report = sub.render_agent_folder(root, "atlas")
    (captured,) = [e for e in sub.log.iter_entries() if e.seq == i["seq"]]
    day = datetime.datetime.fromtimestamp(captured.ts / 1e6, datetime.UTC).date()
    path = f"atlas/journal/{day:%Y-%m}/{day.isoformat()}.md"
    assert path in report["written"]
    text = (root / path).read_text()
    assert text.startswith(f"# {day.isoformat()} — atlas journal\n")
    happened = text.split("## What happened\n", 1)[1].split("##", 1)[0]
    assert f"· p06 · claude · `{i['id']}`: How do we calibrate the polisher? →" in happened
    # (read from every day: the two captures may straddle midnight UTC)
    every_day = "".join(p.read_text() for p in sorted((root / "atlas" / "journal").rglob("*.md")))
    assert f"`{other['id']}`: Is the coolant at 22 °C? →" in every_day
    note = next(p.name for p in (root / "atlas" / "memory").glob("decision_*.md"))
    for section in ("Captured to memory", "Decisions made"):
        body = text.split(f"## {section}\n", 1)[1].split("##", 1)[0]
        assert f"- {note} — We decided to always calibrate the polisher" in body, section
    assert errors(validate_vault(root)) == []
    # A person's line around the managed regions survives the next render.
    (root / path).write_text(text.replace("## Open questions\n", "## Open questions\nAsk Bob.\n"))
    assert path not in sub.render_agent_folder(root, "atlas")["written"]
    assert "Ask Bob.\n" in (root / path).read_text()


def test_no_interactions_no_journal(sub: Substrate, tmp_path: Path) -> None:
    sub.store("Nothing was captured", kind="observation")
    sub.render_agent_folder(tmp_path / "vault", "atlas")
    assert not (tmp_path / "vault" / "atlas" / "journal").exists()


def test_extraction_and_triage_calls_become_run_log_lines(sub: Substrate, tmp_path: Path) -> None:
    sub.capture(
        "How do we calibrate the polisher?",
        "We decided to always calibrate the polisher with kp = 1.2e-13 before each run.",
        project="p06",
    )
    sub.extract(pending=True, extractor="rules")
    sub.triage(pending=True, triager="rules")
    sub.render_agent_folder(tmp_path / "vault", "atlas")
    lines = [
        json.loads(x)
        for p in sorted((tmp_path / "vault" / "atlas" / "logs").rglob("*.jsonl"))
        for x in p.read_text().splitlines()
    ]
    by_type = {e.seq: e.type for e in sub.log.iter_entries()}
    calls = [(by_type[x["event_seq"]], x["model"], x["status"]) for x in lines]
    assert calls == [("candidate.extracted", "rules", "ok"), ("candidate.triaged", "rules", "ok")]
    assert lines[0]["summary"].endswith(": 1 candidate(s) (rules)")
    assert "promote" in lines[1]["summary"]
    assert all(isinstance(x["input_tokens"], int) and isinstance(x["output_tokens"], int) for x in lines)
    assert errors(validate_vault(tmp_path / "vault")) == []
    # The table is a projection like any other: rebuilt from the log, it is the same.
    sub.rebuild()
    again = [
        json.loads(x)
        for p in sorted((tmp_path / "vault" / "atlas" / "logs").rglob("*.jsonl"))
        for x in p.read_text().splitlines()
    ]
    assert again == lines
