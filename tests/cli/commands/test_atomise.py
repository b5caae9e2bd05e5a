"""`mnemolog atomise`, `policy`, `worker`: envelopes and docs/curators.md's exit codes, via the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.substrate.atomise.test_service import POST_MORTEM
from tests.support.cli import Cli


@pytest.fixture
def home(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("MNEMOLOG_OLLAMA_MODEL", raising=False)
    h = tmp_path / "home"
    code, _ = cli.json(h, "init")
    assert code == 0
    return h


def stored(cli: Cli, home: Path, text: str, *extra: str) -> str:
    code, out = cli.json(home, "store", "-", *extra, stdin=text)
    assert code == 0, out
    return str(out["memory"]["id"])


def test_atomise_envelope_and_repeat(cli: Cli, home: Path) -> None:
    pid = stored(cli, home, POST_MORTEM)
    code, env = cli.json(home, "atomise", pid, "--curator", "rules", "--max-atom-tokens", "60")
    assert code == 0
    assert set(env) >= {"source_id", "atom_ids", "atom_count", "archived_at"}
    assert env["source_id"] == pid and env["atom_count"] == len(env["atom_ids"]) >= 2
    code, again = cli.json(home, "atomise", pid, "--curator", "rules")
    assert code == 1 and again["already_atomised"] is True and again["atom_ids"] == env["atom_ids"]
    code, forced = cli.json(home, "atomise", pid, "--curator", "rules", "--force")
    assert code == 0 and not set(forced["atom_ids"]) & set(env["atom_ids"])


@pytest.mark.parametrize(
    ("args", "code", "slug"),
    [
        (["atomise", "01ABCDEFGHJKMNPQRSTVWXYZ00", "--curator", "rules"], 2, "not_found"),
        (["atomise", "01ABCDEFGHJKMNPQRSTVWXYZ00", "--curator", "ollama"], 3, "TIER_LOCKED"),
        (["atomise", "X", "--max-atom-tokens", "49"], 64, "usage"),
        (["atomise", "X", "--max-atom-tokens", "1001"], 64, "usage"),
        (["atomise", "X", "--curator", "gpt"], 64, "usage"),
        (["atomise"], 64, "usage"),
        (["atomise", "X", "--pending"], 64, "usage"),
    ],
)
def test_atomise_errors(cli: Cli, home: Path, args: list[str], code: int, slug: str) -> None:
    got, out = cli.json(home, *args)
    assert got == code
    assert out["ok"] is False and out["error"] == slug and out["exit_code"] == code


def test_source_too_small_is_informational(cli: Cli, home: Path) -> None:
    sid = stored(cli, home, "One short sentence.")
    code, out = cli.json(home, "atomise", sid, "--curator", "rules")
    assert code == 1 and out["error"] == "source_too_small"


def test_policy_set_get_clear_and_deferred_pending(cli: Cli, home: Path) -> None:
    code, out = cli.json(
        home, "policy", "set", "team", "--auto-atomise-mode", "deferred", "--threshold", "100",
        "--curator", "rules", "--max-atom-tokens", "60",
    )  # fmt: skip
    assert code == 0 and out["policy"]["auto_atomise_mode"] == "deferred"
    code, out = cli.json(home, "policy", "get", "team/sub")
    assert out["sources"]["auto_atomise_mode"] == "team" and out["own"] is None
    code, st = cli.json(home, "store", "-", "--namespace", "team/sub", stdin=POST_MORTEM)
    assert st["memory"]["atomise_outcome"] == "requested"
    code, stats = cli.json(home, "stats")
    assert stats["stats"]["atomisation"]["pending"] == 1
    code, out = cli.json(home, "atomise", "--pending")
    assert code == 0 and [p["outcome"] for p in out["processed"]] == ["atomised"]
    code, out = cli.json(home, "worker", "run", "--once")
    assert code == 0 and out["processed"] == 0
    code, stats = cli.json(home, "stats")
    assert stats["stats"]["atomisation"] == {"requested": 1, "completed": 1, "failed": 0, "pending": 0}
    code, out = cli.json(home, "policy", "clear", "team")
    assert code == 0 and out["sources"]["auto_atomise_mode"] == "(default)"
    code, out = cli.json(home, "policy", "clear", "team")
    assert code == 2


def test_policy_bad_input(cli: Cli, home: Path) -> None:
    assert cli.json(home, "policy", "set", "team")[0] == 64  # nothing to set
    assert cli.json(home, "policy", "set", "bad namespace!", "--write", "none")[0] == 65
    assert cli.json(home, "policy", "set", "team", "--max-retries", "11")[0] == 64


def test_write_none_refuses_with_exit_5(cli: Cli, home: Path) -> None:
    assert cli.json(home, "policy", "set", "ro", "--write", "none")[0] == 0
    code, out = cli.json(home, "store", "x", "--namespace", "ro/a")
    assert code == 5 and out["error"] == "governance_refused"


def test_log_verify_with_a_pinned_key(cli: Cli, home: Path, tmp_path: Path) -> None:
    code, key = cli.json(home, "key", "show")
    assert cli.json(home, "log", "verify", "--trusted-key", key["vkey"])[0] == 0
    other = tmp_path / "other"
    assert cli.json(other, "init")[0] == 0
    code, out = cli.json(home, "log", "verify", "--trusted-key", cli.json(other, "key", "show")[1]["vkey"])
    assert code == 8 and out["details"]["check"] == "trust.key"
