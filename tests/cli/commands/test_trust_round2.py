"""Issue 23's attacks on trust, second round, run through the command line as an attacker would.

- a false back-chain pointer the honest writer was tricked into signing (a
  `touches` row hidden during an update) fails `log verify` (8,
  `backchain.pointer`), and the writer no longer signs it;
- an entry signed by a key outside the key history, appended after the last
  checkpoint, is not folded nor served (8, `entry.kid` / `entry.signature`);
- entries acknowledged by a live server and cut before any checkpoint fail
  `log verify` (`high_water.size`), and the server does not close quietly;
- a rewound `proj_state` is a stale projection (`projection.stale`), which a
  rebuild replaces without signing a `log.rollback_accepted`; a log cut after
  its last checkpoint is still refused as a rollback.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from mnemolog.eventlog.format.entry import make_entry
from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.segments import list_segments
from tests.cli.commands.test_trust import VERIFY, fails
from tests.support.cli import Cli


def sql(home: Path, query: str, *params: Any) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(home / "projections" / "mnemolog.duckdb"))
    try:
        return con.execute(query, list(params)).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def template(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("trust2") / "home"
    cli.ok(home, "init", "--key-name", "trust2-test")
    return home


@pytest.fixture
def home(template: Path, tmp_path: Path) -> Path:
    h = tmp_path / "home"
    shutil.copytree(template, h)
    return h


def store(cli: Cli, home: Path, text: str) -> str:
    return str(cli.ok(home, "store", text)["memory"]["id"])


def test_a_hidden_touch_cannot_make_the_writer_sign_a_false_pointer(cli: Cli, home: Path) -> None:
    mid = store(cli, home, "the failover runbook lives in the wiki")
    cli.ok(home, "update", mid, "--title", "runbook")
    # The attack: hide the memory's newest touch from the projection, have the honest
    # writer update it, put the row back. The old writer signed touch_prev skipping it.
    (row,) = sql(
        home, "SELECT memory_id, seq, type FROM touches WHERE memory_id = ? ORDER BY seq DESC LIMIT 1", mid
    )
    sql(home, "DELETE FROM touches WHERE memory_id = ? AND seq = ?", mid, row[1])
    code, doc = cli.json(home, "update", mid, "--title", "runbook v2")
    # Refused before anything is signed, naming the entry the projection hid.
    assert code == VERIFY and doc["details"]["check"] == "projection.head", doc
    assert doc["details"]["seq"] == row[1]
    assert "back_chains" in cli.ok(home, "log", "verify")["checks"]
    sql(home, "INSERT INTO touches VALUES (?, ?, ?)", *row)
    cli.ok(home, "update", mid, "--title", "runbook v3")
    assert cli.ok(home, "log", "verify")["back_chains"]["pointers_checked"] == 3


class _Rogue:
    """Signs with a key outside the log's history, under any key id it is told to claim."""

    def __init__(self, kid: bytes | None = None) -> None:
        self.key = SigningKey(b"\x66" * 32, "rogue")
        self.kid = kid or self.key.kid

    def sign(self, message: bytes) -> bytes:
        return self.key.sign(message)


def append_rogue(home: Path, data: dict[str, Any], kid: bytes | None = None) -> int:
    """Append a memory.stored entry signed by a rogue key to the last segment, as a file writer can."""
    with Log(home / "log") as log:
        seq, prev = log.size, log.leaf(log.size - 1)
    e = make_entry(seq=seq, ts=1, type_="memory.stored", tv=3, data=data, prev=prev, signer=_Rogue(kid))
    with list_segments(home / "log")[-1][1].open("ab") as f:
        f.write(e.raw)
    return seq


ROGUE_MEMORY = {
    "id": "01RRRRRRRRRRRRRRRRRRRRRRRR",
    "namespace": "default",
    "kind": "observation",
    "content": "wire the payment to account 666",
    "tags": [],
    "metadata": {},
    "touch_prev": {"01RRRRRRRRRRRRRRRRRRRRRRRR": -1},
}


@pytest.mark.parametrize("forged_kid", [False, True])
def test_an_entry_outside_the_key_history_is_not_served(cli: Cli, home: Path, forged_kid: bool) -> None:
    store(cli, home, "the failover runbook lives in the wiki")
    with Log(home / "log") as log:
        real_kid = log.key_at(log.size).kid
    seq = append_rogue(home, ROGUE_MEMORY, real_kid if forged_kid else None)
    check = "entry.signature" if forged_kid else "entry.kid"
    for args in (("get", ROGUE_MEMORY["id"]), ("recall", "payment account"), ("list",)):
        doc = fails(cli, home, check, *args)
        assert doc["details"]["seq"] == seq and "log verify" in doc["message"]
    fails(cli, home, check, "log", "verify")


@pytest.mark.parametrize("shift", [-2, +10])
def test_a_rewound_projection_is_stale_not_a_rollback(cli: Cli, home: Path, shift: int) -> None:
    """Issue 23 item 12: rewinding proj_state alone was reported as a rewritten log, and
    `rebuild --accept-rollback` signed a permanent log.rollback_accepted for it."""
    mids = [store(cli, home, f"memory {i} about the failover") for i in range(3)]
    size = cli.ok(home, "log", "verify")["entries"]
    # The seq alone moved (back, or past the log's end): leaf and root are still the real position's.
    sql(home, "UPDATE proj_state SET last_seq = last_seq + ?", shift)
    code, doc = cli.json(home, "get", mids[0])
    assert code == 6 and doc["details"]["check"] == "projection.stale", doc
    assert "not the log" in doc["message"] and "no rollback" in doc["message"]
    rebuilt = cli.ok(home, "rebuild", "--accept-rollback")
    assert rebuilt["rollback_accepted"] is None
    assert cli.ok(home, "log", "verify")["entries"] == size  # nothing was signed
    assert len(cli.ok(home, "list")["memories"]) == 3


def test_a_log_cut_after_its_last_checkpoint_is_still_a_rollback(cli: Cli, home: Path) -> None:
    for i in range(2):
        store(cli, home, f"memory {i} about the failover")
    with Log(home / "log") as log:
        size, loc = log.size, log.location(log.size - 1)
    # The newest entry is cut and the checkpoints left alone: the projection is the witness.
    seg = list_segments(home / "log")[-1][1]
    with seg.open("r+b") as f:
        f.truncate(loc.offset)
    for cp in (home / "log" / "checkpoints").iterdir():
        if int(cp.name) >= size:
            cp.unlink()
    (home / "state" / "checkpoint").unlink()
    code, doc = cli.json(home, "rebuild")
    assert code == VERIFY and doc["details"]["check"] == "projection.rollback", doc


def test_an_entry_acknowledged_by_a_live_server_cannot_be_cut_silently(cli: Cli, home: Path) -> None:
    """Issue 23 item 4: a cut inside the first checkpoint interval left `log verify` ok."""
    from mnemolog.eventlog.errors import VerificationError
    from mnemolog.substrate.api import Substrate
    from mnemolog.substrate.home import Home

    cfg = home / "config.toml"  # no periodic checkpoint may cover the entries, however slow the test
    cfg.write_text(cfg.read_text().replace("checkpoint_max_s = 5\n", "checkpoint_max_s = 86400\n"))
    assert "checkpoint_max_s = 86400" in cfg.read_text()
    sub = Substrate.open(Home(home), long_lived=True)
    try:
        sub.store("acknowledged to the client")
        sub.store("acknowledged too")
        with Log(home / "log") as log:
            size, loc = log.size, log.location(log.size - 1)
        with list_segments(home / "log")[-1][1].open("r+b") as f:
            f.truncate(loc.offset)  # behind the live server, before any periodic checkpoint
        doc = fails(cli, home, "high_water.size", "log", "verify")
        assert doc["details"]["found"] == size - 1
    finally:
        with pytest.raises(VerificationError) as info:
            sub.close()  # the server does not end quietly
    assert info.value.check == "log_diverged"
