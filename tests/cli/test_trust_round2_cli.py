"""Issue 23's attacks on trust, second round, run through the command line as an attacker would.

- a false back-chain pointer the honest writer was tricked into signing (a
  `touches` row hidden during an update) fails `log verify` (8,
  `backchain.pointer`), and the writer no longer signs it;
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner

from mnemolog.cli.main import cli

OK, VERIFY = 0, 8


def run(home: Path, *args: str) -> tuple[int, dict[str, Any]]:
    r = CliRunner().invoke(cli, ["--home", str(home), "--json", *args])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.stdout + r.stderr
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert doc["ok"] is (r.exit_code == 0)
    return r.exit_code, doc


def ok(home: Path, *args: str) -> dict[str, Any]:
    code, doc = run(home, *args)
    assert code == OK, doc
    return doc


def fails(home: Path, check: str, *args: str) -> dict[str, Any]:
    code, doc = run(home, *args)
    assert code == VERIFY, doc
    assert doc["details"]["check"] == check, doc
    return doc


def sql(home: Path, query: str, *params: Any) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(home / "projections" / "mnemolog.duckdb"))
    try:
        return con.execute(query, list(params)).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("trust2") / "home"
    ok(home, "init", "--key-name", "trust2-test")
    return home


@pytest.fixture
def home(template: Path, tmp_path: Path) -> Path:
    h = tmp_path / "home"
    shutil.copytree(template, h)
    return h


def store(home: Path, text: str) -> str:
    return str(ok(home, "store", text)["memory"]["id"])


def test_a_hidden_touch_cannot_make_the_writer_sign_a_false_pointer(home: Path) -> None:
    mid = store(home, "the failover runbook lives in the wiki")
    ok(home, "update", mid, "--title", "runbook")
    # The attack: hide the memory's newest touch from the projection, have the honest
    # writer update it, put the row back. The old writer signed touch_prev skipping it.
    (row,) = sql(
        home, "SELECT memory_id, seq, type FROM touches WHERE memory_id = ? ORDER BY seq DESC LIMIT 1", mid
    )
    sql(home, "DELETE FROM touches WHERE memory_id = ? AND seq = ?", mid, row[1])
    code, doc = run(home, "update", mid, "--title", "runbook v2")
    # Refused before anything is signed, naming the entry the projection hid.
    assert code == VERIFY and doc["details"]["check"] == "projection.head", doc
    assert doc["details"]["seq"] == row[1]
    assert "back_chains" in ok(home, "log", "verify")["checks"]
    sql(home, "INSERT INTO touches VALUES (?, ?, ?)", *row)
    ok(home, "update", mid, "--title", "runbook v3")
    assert ok(home, "log", "verify")["back_chains"]["pointers_checked"] == 3
