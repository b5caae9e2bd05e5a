"""Persona files, journal and run logs: rendering, a person's edits kept, validation rules."""

from __future__ import annotations

import json
import os
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from mnemolog.projections.vault import journal, persona, regions, runlog
from mnemolog.projections.vault.agentfiles import write_agent_files
from mnemolog.projections.vault.journal import CapturedRow, InteractionRow, OpenQuestion, plan_journal
from mnemolog.projections.vault.persona import PersonaConfig, PersonaItem, plan_persona
from mnemolog.projections.vault.runlog import RunRecord, plan_runlogs
from mnemolog.projections.vault.validate import errors, validate_vault


def us(y: int, mo: int, d: int, h: int = 12, mi: int = 0) -> int:
    return int(datetime(y, mo, d, h, mi, tzinfo=UTC).timestamp() * 1_000_000)


ITEMS = [
    PersonaItem("01U", "user", "Mechanical/optical engineer at Atomaste", date(2026, 5, 6), "user_role.md"),
    PersonaItem("01F", "feedback", "Give the number first,\nthen the reasoning", date(2026, 5, 7)),
    PersonaItem("01D", "decision", "Never deploy on Fridays", date(2026, 5, 1)),
    PersonaItem(
        "01T", "knowledge", "No API keys", date(2026, 5, 2), file="USER.md", section="Things to avoid"
    ),
    PersonaItem("01X", "knowledge", "Bad target", date(2026, 5, 3), file="USER.md", section="Nope"),
]
CONFIG = PersonaConfig(
    model="qwen2.5:7b-instruct",
    context_budget="3000 chars",
    read_paths=["/srv/home"],
    write_paths=["/srv/vault/agent"],
    apis=["Ollama at http://127.0.0.1:11434: curation, extraction, triage"],
)


def region(text: str, name: str) -> str:
    return next(r.content(text) for r in regions.parse(text) if r.name == name)


def test_persona_items_go_where_their_kind_or_target_says() -> None:
    plan = plan_persona("atlas", ITEMS, CONFIG)
    assert set(plan) == {"IDENTITY.md", "SOUL.md", "USER.md", "tools.md", "model.md"}
    user = plan["USER.md"][1]
    assert user["user.role_and_context"] == (
        "- Mechanical/optical engineer at Atomaste (promoted 2026-05-06 from user_role.md)\n"
    )
    assert user["user.things_to_avoid"] == "- No API keys (promoted 2026-05-02 from memory 01T)\n"
    soul = plan["SOUL.md"][1]
    learned = persona.region_name("SOUL.md", "Things I've learned about how to advise / serve the operator")
    assert learned == "soul.things_i_ve_learned_about_how_to_advise_serve"
    assert soul[learned].startswith("- Give the number first, then the reasoning (promoted 2026-05-07")
    doctrine = plan["IDENTITY.md"][1]["identity.operating_doctrine"]
    assert doctrine.splitlines() == [
        "- Never deploy on Fridays (promoted 2026-05-01 from memory 01D)",
        "- Bad target (promoted 2026-05-03 from memory 01X)",
    ]
    assert (
        plan["model.md"][1]["model.default_model"]
        == "qwen2.5:7b-instruct\n(configured in the mnemolog home)\n"
    )
    assert plan["tools.md"][1]["tools.write_paths_own_folder_only"] == "- /srv/vault/agent\n"
    skeleton = plan["IDENTITY.md"][0]
    assert skeleton.startswith("# IDENTITY — atlas\n\n## Who I am\n<!-- one paragraph -->\n")
    assert persona.check_persona("IDENTITY.md", skeleton) == []


def test_first_render_writes_skeletons_and_a_rerender_keeps_every_hand_edit(tmp_path: Path) -> None:
    plan = plan_persona("atlas", ITEMS[:1], CONFIG)
    report = write_agent_files(tmp_path, "atlas", plan, {})
    assert sorted(report.written) == [f"atlas/{f}" for f in sorted(persona.PERSONA_FILES)]
    user = tmp_path / "atlas" / "USER.md"
    text = user.read_text()
    assert "user_role.md" in region(text, "user.role_and_context")
    # A person writes outside the regions, edits one region and deletes another.
    text = text.replace("<!-- bullets: hard nos -->\n", "- Never call before 9am (written by hand)\n")
    text = text.replace("(promoted 2026-05-06 from user_role.md)", "(my wording)")
    start = text.index("<!-- mnemolog:begin user.communication_preferences")
    end = text.index("<!-- mnemolog:end user.communication_preferences -->\n") + len(
        "<!-- mnemolog:end user.communication_preferences -->\n"
    )
    text = text[:start] + text[end:]
    user.write_text(text)
    report = write_agent_files(tmp_path, "atlas", plan_persona("atlas", ITEMS, CONFIG), {})
    after = user.read_text()
    assert "- Never call before 9am (written by hand)\n" in after
    assert "(my wording)" in after and "No API keys" in after
    assert report.kept_edits == ["atlas/USER.md: user.role_and_context"]
    assert report.missing_regions == ["atlas/USER.md: user.communication_preferences"]
    assert "atlas/USER.md" in report.written
    # Nothing changed since: nothing written.
    again = write_agent_files(tmp_path, "atlas", plan_persona("atlas", ITEMS, CONFIG), {})
    assert again.written == [] and again.unchanged == 5


def test_a_file_with_broken_markers_or_bad_bytes_is_left_alone(tmp_path: Path) -> None:
    plan = plan_persona("atlas", ITEMS, CONFIG)
    write_agent_files(tmp_path, "atlas", plan, {})
    soul = tmp_path / "atlas" / "SOUL.md"
    broken = soul.read_text().replace("<!-- mnemolog:end soul.voice -->\n", "", 1)
    soul.write_text(broken)
    model = tmp_path / "atlas" / "model.md"
    model.write_bytes(b"\xff\xfe not utf-8")
    report = write_agent_files(tmp_path, "atlas", plan_persona("atlas", [], PersonaConfig()), {})
    assert soul.read_text() == broken and model.read_bytes() == b"\xff\xfe not utf-8"
    assert any(c.startswith("atlas/SOUL.md: line") for c in report.conflicts)
    assert "atlas/model.md: not UTF-8; left alone" in report.conflicts
    problems = validate_vault(tmp_path)
    assert {(p.file, p.field) for p in errors(problems)} == {
        ("atlas/SOUL.md", "regions"),
        ("atlas/model.md", "file"),
    }


def interactions() -> list[InteractionRow]:
    return [
        InteractionRow(
            "01I2", us(2026, 5, 6, 23, 59), "late question\nwith lines", "late answer", "p06", "cli"
        ),
        InteractionRow(
            "01I1", us(2026, 5, 6, 9, 14), "how to calibrate?", "Preston kp from surface data", "p06"
        ),
        InteractionRow("01I3", us(2026, 5, 7, 0, 1), "next day", "ok"),
    ]


def test_journal_days_sections_and_captured_bridge() -> None:
    captured = [
        CapturedRow("01I1", "01M1", "decision", "Twyman-Green preferred", "decision_vendor_path.md"),
        CapturedRow("01I2", "01M2", "knowledge", "Zerodur CTE gradient dominates WFE"),
        CapturedRow("01UNKNOWN", "01M3", "fact", "ignored"),
    ]
    questions = [OpenQuestion("01I3", "01C1", "Is the quilting limit 234N?")]
    plan = plan_journal("atlas", interactions(), captured, questions)
    assert list(plan) == ["journal/2026-05/2026-05-06.md", "journal/2026-05/2026-05-07.md"]
    skeleton, regs = plan["journal/2026-05/2026-05-06.md"]
    assert skeleton.startswith("# 2026-05-06 — atlas journal\n\n## What happened\n")
    assert regs["journal.what_happened"].splitlines() == [
        "- 09:14 UTC · p06 · `01I1`: how to calibrate? → Preston kp from surface data",
        "- 23:59 UTC · p06 · cli · `01I2`: late question with lines → late answer",
    ]
    assert regs["journal.captured_to_memory"].splitlines() == [
        "- decision_vendor_path.md — Twyman-Green preferred",
        "- memory 01M2 — Zerodur CTE gradient dominates WFE",
    ]
    assert regs["journal.decisions_made"] == "- decision_vendor_path.md — Twyman-Green preferred\n"
    assert plan["journal/2026-05/2026-05-07.md"][1]["journal.open_questions"] == (
        "- candidate `01C1` (needs a person): Is the quilting limit 234N?\n"
    )


def records() -> list[RunRecord]:
    return [
        RunRecord(us(2026, 5, 6, 10), "manual", "rules", 0, 0, "ok", "atomise 01A: 3 atoms", seq=12),
        RunRecord(
            us(2026, 5, 6, 9),
            "cron",
            "qwen2.5:7b",
            812,
            203,
            "error",
            "extract 01I1",
            "timeout\nafter 30 s",
            9,
        ),
        RunRecord(us(2026, 5, 7, 1), "api", "qwen2.5:7b", 100, 20, "skipped", "triage 01C1", seq=20),
    ]


def test_run_logs_one_line_per_call_with_the_required_fields() -> None:
    files = plan_runlogs(records())
    assert list(files) == ["logs/2026-05/2026-05-06.jsonl", "logs/2026-05/2026-05-07.jsonl"]
    lines = [json.loads(x) for x in files["logs/2026-05/2026-05-06.jsonl"].decode().splitlines()]
    assert [list(x)[:7] for x in lines] == [list(runlog.REQUIRED)] * 2
    assert lines[0] == {
        "ts": "2026-05-06T09:00:00.000000Z",
        "trigger": "cron",
        "model": "qwen2.5:7b",
        "input_tokens": 812,
        "output_tokens": 203,
        "status": "error",
        "summary": "extract 01I1",
        "error": "timeout after 30 s",
        "event_seq": 9,
    }
    assert lines[1]["event_seq"] == 12
    with pytest.raises(ValueError):
        RunRecord(0, "hourly", "m", 0, 0, "ok", "x")
    with pytest.raises(ValueError):
        RunRecord(0, "cron", "m", 0, 0, "fine", "x")


def test_a_hand_edited_run_log_is_left_alone_until_deleted(tmp_path: Path) -> None:
    files = plan_runlogs(records())
    write_agent_files(tmp_path, "atlas", {}, files)
    p = tmp_path / "atlas" / "logs" / "2026-05" / "2026-05-07.jsonl"
    p.write_text(p.read_text() + '{"note": "mine"}\n')
    more = plan_runlogs([*records(), RunRecord(us(2026, 5, 7, 2), "cron", "m", 1, 1, "ok", "x", seq=30)])
    report = write_agent_files(tmp_path, "atlas", {}, more)
    assert report.conflicts == [
        "atlas/logs/2026-05/2026-05-07.jsonl: edited by hand; left alone (delete it to have it rewritten)"
    ]
    assert '"note": "mine"' in p.read_text()
    p.unlink()
    report = write_agent_files(tmp_path, "atlas", {}, more)
    assert report.written == ["atlas/logs/2026-05/2026-05-07.jsonl"]
    assert p.read_bytes() == more["logs/2026-05/2026-05-07.jsonl"]
    # Mnemolog's own earlier bytes are replaced as the log grows.
    grown = plan_runlogs([*records(), RunRecord(us(2026, 5, 7, 3), "cron", "m", 1, 1, "ok", "y", seq=31)])
    assert write_agent_files(tmp_path, "atlas", {}, grown).written == ["atlas/logs/2026-05/2026-05-07.jsonl"]


def test_a_rendered_agent_folder_is_valid(tmp_path: Path) -> None:
    captured = [CapturedRow("01I1", "01M1", "decision", "Twyman-Green preferred", "decision_vendor_path.md")]
    merged = {**plan_persona("atlas", ITEMS, CONFIG), **plan_journal("atlas", interactions(), captured)}
    write_agent_files(tmp_path, "atlas", merged, plan_runlogs(records()))
    problems = validate_vault(tmp_path)
    assert errors(problems) == []
    # The journal names a note that is not in memory/: a warning, not an error.
    assert [(p.file, p.field, p.severity) for p in problems] == [
        ("atlas/journal/2026-05/2026-05-06.md", "captured", "warning")
    ]


@pytest.mark.parametrize(
    ("rel", "data", "field"),
    [
        ("journal/2026-05/2026-5-6.md", "# x\n", "filename"),
        ("journal/2026-02/2026-02-30.md", "# 2026-02-30\n", "filename"),
        ("journal/2026-04/2026-05-06.md", "# 2026-05-06\n", "filename"),
        ("journal/2026-05/2026-05-06.md", "# May 6\n", "title"),
        ("journal/2026-05/2026-05-06.md", "# 2026-05-06\n<!-- mnemolog:begin a -->\n", "regions"),
        ("logs/2026-05/2026-05-06.jsonl", "not json\n", "line 1"),
        ("logs/2026-05/2026-05-06.jsonl", "[1]\n", "line 1"),
        ("logs/2026-05/2026-05-06.jsonl", '{"ts": "2026-05-06T09:00:00Z"}\n', "line 1.trigger"),
        (
            "logs/2026-05/2026-05-06.jsonl",
            json.dumps({**dict.fromkeys(runlog.REQUIRED, "x")}) + "\n",
            "line 1.ts",
        ),
        ("logs/bad.jsonl", "", "filename"),
        ("IDENTITY.md", "no title\n", "title"),
        ("USER.md", b"\xc3\x28", "file"),
    ],
)
def test_validation_names_what_is_wrong(tmp_path: Path, rel: str, data: str | bytes, field: str) -> None:
    p = tmp_path / "atlas" / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    found = [(x.file, x.field) for x in errors(validate_vault(tmp_path))]
    assert (f"atlas/{rel}", field) in found, found


def test_run_log_field_rules() -> None:
    good = json.loads(runlog.line(records()[0]))
    rel = "logs/2026-05/2026-05-06.jsonl"
    assert runlog.check_runlog(rel, json.dumps(good)) == []
    for key, value in [
        ("input_tokens", -1),
        ("output_tokens", True),
        ("status", "fine"),
        ("trigger", "hourly"),
        ("ts", "2026-05-06T09:00:00"),
        ("summary", "two\nlines"),
        ("model", 5),
        ("cache_hit", "yes"),
        ("event_seq", 1.5),
    ]:
        found = runlog.check_runlog(rel, json.dumps({**good, key: value}))
        assert [f for f, _, s in found if s == "error"] == [f"line 1.{key}"], (key, found)
    off_day = runlog.check_runlog(rel, json.dumps({**good, "ts": "2026-05-07T09:00:00+02:00"}))
    assert [(f, s) for f, _, s in off_day] == [("line 1.ts", "warning")]
    assert journal.check_journal("journal/2026-05/2026-05-06.md", "# 2026-05-06 — a journal\n", set()) == []


def test_a_fifo_in_logs_is_reported_without_blocking(tmp_path: Path) -> None:
    d = tmp_path / "atlas" / "logs" / "2026-05"
    d.mkdir(parents=True)
    os.mkfifo(d / "2026-05-06.jsonl")
    found = [(x.file, x.field) for x in errors(validate_vault(tmp_path))]
    assert ("atlas/logs/2026-05/2026-05-06.jsonl", "file") in found
