"""`import --from` and `export --to` as an operator runs them: JSON, text, exit codes, nothing partial."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.projections.kit import log_digest, new_home
from tests.support.cli import Cli

DATA = Path(__file__).parents[2] / "substrate" / "data" / "imports"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    new_home(tmp_path / "home")
    return tmp_path / "home"


def test_import_from_mem0_then_again_then_promote(cli: Cli, home: Path) -> None:
    r = cli.ok(home, "import", "--from", "mem0", str(DATA / "mem0.json"))["import"]
    assert (r["format"], r["status"], r["imported"]) == ("mem0", "candidate", 3)
    again = cli.ok(home, "import", "--from", "mem0", str(DATA / "mem0.json"))["import"]
    assert (again["imported"], again["skipped_existing"]) == (0, 3)
    found = cli.ok(home, "list", "--status", "candidate", "--namespace", "users")["memories"]
    assert sorted(m["namespace"] for m in found) == ["users/arjun", "users/dev"]
    assert cli.ok(home, "recall", "TechCorp")["results"] == []  # a candidate is not recalled
    # They wait in the triage queue like extraction's candidates, and triage decides them.
    queued = cli.ok(home, "candidates", "list", "--status", "pending")
    listed = queued.get("candidates", queued.get("memories", []))
    assert {m["id"] for m in listed} >= {m["id"] for m in found}
    triaged = cli.ok(home, "triage", "--pending", "--triager", "rules", "--dry-run")
    assert {r["id"] for r in triaged["results"]} >= {m["id"] for m in found}
    cli.ok(home, "promote", found[0]["id"])
    assert [m["id"] for m in cli.ok(home, "recall", found[0]["content"].split()[0])["results"]][:1] == [
        found[0]["id"]
    ]


def test_trust_and_the_text_output(cli: Cli, home: Path) -> None:
    p = cli(home, "import", "--from", "basic-memory", str(DATA / "basic-memory"), "--trust")
    assert p.code == 0, p.stderr
    assert p.stdout.strip() == "imported 4 memories from 4 items in 1 batches as active memories"
    assert len(cli.ok(home, "list", "--namespace", "notes")["memories"]) == 4


def test_dry_run_prints_the_mapping_and_writes_nothing(cli: Cli, home: Path) -> None:
    before = log_digest(home)
    p = cli(home, "import", "--from", "claude", str(DATA / "claude_conversations.json"), "--dry-run")
    assert p.code == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 3 and all(line.startswith("+ ") for line in lines[:2])
    assert "chats/claude" in lines[0] and "claude:c1a2b3c4-0000-4000-8000-000000000001" in lines[0]
    assert "nothing written (dry run)" in lines[2]
    r = cli.ok(home, "import", "--from", "chatgpt", str(DATA / "chatgpt_conversations.json"), "--dry-run")[
        "import"
    ]
    assert r["dry_run"] is True and len(r["mapping"]) == 2
    assert log_digest(home) == before


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--from", "mem0", "missing.json"], 64),
        (["--from", "evernote", "x.json"], 64),
        (["--trust", "x.jsonl"], 64),
        (["--from", "letta", "DIR"], 64),
        (["--from", "chatgpt", "BAD"], 65),
    ],
)
def test_refusals_exit_with_their_code_and_write_nothing(
    cli: Cli, home: Path, tmp_path: Path, args: list[str], code: int
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('[{"id": "c", "mapping": {"n": {"message": {"author": {"role": 1}, "content": {}}}}}]')
    args = [str(tmp_path / a) if a == "missing.json" else a for a in args]
    args = [str(tmp_path) if a == "DIR" else str(bad) if a == "BAD" else a for a in args]
    before = log_digest(home)
    p = cli(home, "import", *args, json=True)
    assert p.code == code, p.stdout + p.stderr
    if code != 2:
        err = json.loads(p.stdout)
        assert err["ok"] is False and err["exit_code"] == code
    if code == 65:
        assert "[0].mapping['n'].message.author.role" in err["message"] and str(bad) in err["message"]
    assert log_digest(home) == before


def test_a_bad_item_is_named_on_stderr_without_json(cli: Cli, home: Path, tmp_path: Path) -> None:
    doc = json.loads((DATA / "mem0.json").read_text())
    doc["results"][1]["memory"] = "   "
    f = tmp_path / "m.json"
    f.write_text(json.dumps(doc))
    p = cli(home, "import", "--from", "mem0", str(f))
    assert p.code == 65
    assert "item 2 (mem0:6a3d9e2f-8b5c-4d4e-af90-1b2c3d4e5f60): content is empty" in p.stderr
    assert p.stdout_bytes == b""


def test_export_jsonl_round_trips_through_import(cli: Cli, home: Path, tmp_path: Path) -> None:
    cli.ok(home, "import", "--from", "letta", str(DATA / "letta.af"), "--trust")
    cli.ok(home, "store", "elsewhere", "-n", "team/x", "--title", "T", "--tag", "a")
    out = tmp_path / "all.jsonl"
    r = cli.ok(home, "export", "--to", "jsonl", str(out))["export"]
    assert (r["memories"], r["files"]) == (4, 1)
    fresh = tmp_path / "fresh"
    new_home(fresh)
    assert cli.ok(fresh, "import", str(out))["import"]["imported"] == 4

    def contents(h: Path) -> list[tuple[Any, ...]]:
        ms = cli.ok(h, "list", "--limit", "100")["memories"]
        keys = ("id", "content", "namespace", "kind", "title", "tags", "source", "metadata", "created_at")
        return sorted(tuple(json.dumps(m[k], sort_keys=True) for k in keys) for m in ms)

    assert contents(fresh) == contents(home)


def test_export_basic_memory_of_a_namespace_and_refusals(cli: Cli, home: Path, tmp_path: Path) -> None:
    cli.ok(home, "store", "kept", "-n", "team/x", "--title", "Kept note")
    cli.ok(home, "store", "not this one", "-n", "other")
    out = tmp_path / "notes"
    p = cli(home, "export", "--to", "basic-memory", "--namespace", "team", str(out))
    assert p.code == 0, p.stderr
    assert p.stdout.strip() == f"exported 1 memories to {out} (basic-memory, 1 file(s))"
    note = (out / "team" / "x" / "kept-note.md").read_text()
    assert "title: Kept note" in note and note.endswith("# Kept note\n\nkept\n")
    again = cli(home, "export", "--to", "basic-memory", str(out), json=True)
    assert again.code == 64 and "not empty" in json.loads(again.stdout)["message"]
    assert cli(home, "export", str(tmp_path / "x"), json=True).code == 64  # --to is required
