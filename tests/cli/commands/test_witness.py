"""A home and its witnesses over real HTTP on 127.0.0.1: `witness add|list|remove|sync|serve`,
checkpoints cosigned and kept in the note, a witness down while appends go on, `log verify` requiring
N cosignatures, a whole-home rollback that a witness makes visible, and the key-rotation overlap."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from mnemolog.eventlog.format.keys import VerifierKey
from mnemolog.eventlog.format.note import open_note, parse_note
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.witness.cosignature import CosignerVerifier, cosignatures
from mnemolog.eventlog.witness.protocol import AddCheckpoint
from mnemolog.substrate.witness import config as witness_config
from mnemolog.substrate.witness import service as witnessing
from tests.support.cli import Cli
from tests.support.witness import WitnessServer, unused_port

OK, INFO, NOT_FOUND, VERIFY, USAGE, BAD_INPUT = 0, 1, 2, 8, 64, 65


def append(cli: Cli, home: Path, n: int = 1) -> None:
    for i in range(n):
        assert cli(home, "log", "append", "note.added", "--data", json.dumps({"i": i})).code == OK


def log_identity(home: Path) -> tuple[str, VerifierKey]:
    with Log(home / "log") as log:
        return log.origin, log.key_at(log.size)


@pytest.fixture
def home(cli: Cli, tmp_path: Path) -> Path:
    h = tmp_path / "home"
    assert cli(h, "init").code == OK
    return h


def witness_for(home: Path, root: Path, name: str = "witness.test/w1", port: int = 0) -> WitnessServer:
    return WitnessServer(root, logs=[log_identity(home)], name=name, port=port)


def test_new_homes_name_the_log_key_after_the_origin(home: Path) -> None:
    origin, key = log_identity(home)
    assert key.name == origin


def test_checkpoint_is_cosigned_and_kept_in_a_valid_note(cli: Cli, home: Path, tmp_path: Path) -> None:
    with witness_for(home, tmp_path / "w") as w:
        assert cli(home, "witness", "add", "w1", w.url, w.vkey).code == OK
        append(cli, home, 3)
        code, doc = cli.json(home, "log", "checkpoint")
        assert code == OK and [r["status"] for r in doc["witnesses"]] == ["cosigned"]
        raw = (home / "log" / "checkpoints" / f"{doc['size']:020d}").read_bytes()
        assert raw.decode() == doc["note"]
        _, key = log_identity(home)
        open_note(raw, key)  # still opens with the log key
        assert len(parse_note(raw).signatures) == 2
        assert cli(home, "log", "verify").code == OK
        code, doc = cli.json(home, "log", "verify", "--witness-key", w.vkey)
        assert code == OK and doc["witnesses"]["cosignatures"][0]["name"] == "witness.test/w1"
        code, doc = cli.json(home, "witness", "list")
        assert doc["witnesses"][0]["cosigned"] == 4


def test_a_witness_down_never_blocks_appends(cli: Cli, home: Path, tmp_path: Path) -> None:
    w = witness_for(home, tmp_path / "w", port=unused_port())
    w.start()
    assert cli(home, "witness", "add", "w1", w.url, w.vkey).code == OK
    assert cli(home, "log", "checkpoint").code == OK
    w.stop()
    append(cli, home, 5)
    ran = cli(home, "log", "checkpoint")
    code, _out, err = ran.code, ran.stdout, ran.stderr
    assert code == OK and "unreachable" in err
    code, doc = cli.json(home, "log", "verify", "--witness-key", w.vkey)
    assert code == VERIFY and doc["details"]["check"] == "witness.quorum"
    # Back on the same address: the next checkpoint is cosigned with a proof from the last one it saw.
    w.start()
    append(cli, home, 2)
    code, doc = cli.json(home, "log", "checkpoint")
    assert doc["witnesses"][0]["status"] == "cosigned"
    assert w.witness.states[log_identity(home)[0]].size == doc["size"]
    assert cli(home, "log", "verify", "--witness-key", w.vkey).code == OK
    w.stop()


def test_verify_requires_n_cosignatures(cli: Cli, home: Path, tmp_path: Path) -> None:
    w1 = witness_for(home, tmp_path / "w1", "witness.test/w1").start()
    w2 = witness_for(home, tmp_path / "w2", "witness.test/w2").start()
    try:
        cli(home, "witness", "add", "w1", w1.url, w1.vkey)
        cli(home, "witness", "add", "w2", w2.url, w2.vkey)
        append(cli, home)
        assert cli(home, "log", "checkpoint").code == OK
        keys = ["--witness-key", w1.vkey, "--witness-key", w2.vkey]
        assert cli(home, "log", "verify", *keys).code == OK
        assert cli(home, "log", "verify", *keys, "--min-witnesses", "2").code == OK
        w2.stop()
        append(cli, home)
        assert cli(home, "log", "checkpoint").code == OK
        code, doc = cli.json(home, "log", "verify", *keys)
        assert code == VERIFY and doc["details"]["check"] == "witness.quorum"
        assert cli(home, "log", "verify", *keys, "--min-witnesses", "1").code == OK
        assert cli(home, "log", "verify", *keys, "--min-witnesses", "3").code == USAGE
        assert cli(home, "log", "verify", "--witness-key", "garbage").code == USAGE
        assert cli(home, "log", "verify", "--min-witnesses", "1").code == USAGE
    finally:
        w1.stop()
        w2.stop()


def test_entries_past_the_last_checkpoint_are_unwitnessed(cli: Cli, home: Path, tmp_path: Path) -> None:
    with witness_for(home, tmp_path / "w") as w:
        cli(home, "witness", "add", "w1", w.url, w.vkey)
        assert cli(home, "log", "checkpoint").code == OK
        # Add an entry and cut its checkpoint away: the log is longer than anything witnessed.
        append(cli, home)
        with Log(home / "log") as log:
            size = log.size
        (home / "log" / "checkpoints" / f"{size:020d}").unlink()
        code, doc = cli.json(home, "log", "verify", "--witness-key", w.vkey)
        assert code == VERIFY and doc["details"]["check"] == "witness.unwitnessed"
        assert doc["details"]["found"] == size - 1


def test_whole_home_rollback_is_visible_to_the_witness(cli: Cli, home: Path, tmp_path: Path) -> None:
    """Attack 3(d): a full copy of an older home verifies on its own, but its witness remembers more."""
    with witness_for(home, tmp_path / "w") as w:
        cli(home, "witness", "add", "w1", w.url, w.vkey)
        append(cli, home, 2)
        assert cli(home, "log", "checkpoint").code == OK
        backup = tmp_path / "backup"
        shutil.copytree(home, backup)
        append(cli, home, 4)
        code, doc = cli.json(home, "log", "checkpoint")
        assert doc["witnesses"][0]["status"] == "cosigned"
        shutil.rmtree(home)
        shutil.copytree(backup, home)
        # The restored home is self-consistent and even carries a cosignature.
        assert cli(home, "log", "verify", "--witness-key", w.vkey).code == OK
        code, doc = cli.json(home, "witness", "sync")
        assert code == VERIFY and doc["details"]["check"] == "witness.rollback"
        assert doc["details"]["witnesses"][0]["status"] == "ahead"
        # A new entry on the restored home: the witness refuses to go along.
        append(cli, home)
        # The alarm is a failed verification (issue 23 item 6), as for `witness sync`.
        ran = cli(home, "log", "checkpoint")
        code, _out, err = ran.code, ran.stdout, ran.stderr
        assert code == VERIFY and "ahead" in err
        # Growing past what the witness saw gives another tree: it refuses the proof.
        append(cli, home, 6)
        code, doc = cli.json(home, "log", "checkpoint")
        assert code == VERIFY and doc["details"]["check"] == "witness.rollback"
        assert doc["details"]["witnesses"][0]["status"] == "forked"
        assert list((w.root / "evidence").rglob("*.req"))


def test_background_publisher_retries_with_backoff(cli: Cli, home: Path, tmp_path: Path) -> None:
    w = witness_for(home, tmp_path / "w", port=unused_port())
    w.start()
    cli(home, "witness", "add", "w1", w.url, w.vkey)
    w.stop()
    append(cli, home, 3)
    settings = witness_config.load_settings(home)
    seen: list[str] = []
    pub = witnessing.BackgroundPublisher(
        witnessing.CheckpointPublisher(home / "log", home / "keys", settings),
        report=lambda r: seen.append(r.status),
    )
    try:
        with Log(home / "log") as log:
            size = log.checkpoint_sizes()[-1]
        pub.submit(size)
        deadline = time.monotonic() + 10
        while "unreachable" not in seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen == ["unreachable"]
        w.start()
        assert pub.wait_idle(30)
        assert seen == ["unreachable", "cosigned"]
        assert pub.results["w1"].size == size
    finally:
        pub.close()
        w.stop()


def test_rotation_overlap_keeps_an_old_key_witness_cosigning(cli: Cli, home: Path, tmp_path: Path) -> None:
    origin, old_key = log_identity(home)
    with WitnessServer(tmp_path / "w", logs=[(origin, old_key)]) as w:
        cli(home, "witness", "add", "w1", w.url, w.vkey)
        assert cli(home, "key", "rotate").code == OK
        append(cli, home)
        _code, doc = cli.json(home, "log", "checkpoint")
        assert doc["witnesses"][0]["status"] == "cosigned"
        note = parse_note(doc["note"].encode())
        assert {s.key_hash for s in note.signatures} >= {old_key.note_hash}
        assert cli(home, "log", "verify", "--witness-key", w.vkey).code == OK
        # With no overlap window the old-key witness refuses the new key's checkpoints.
        s = witness_config.load_settings(home)
        witness_config.save_settings(home, witness_config.WitnessSettings(s.witnesses, s.timeout_s, 0))
        append(cli, home)
        _code, doc = cli.json(home, "log", "checkpoint")
        assert doc["witnesses"][0]["status"] == "refused" and "403" in doc["witnesses"][0]["message"]


def test_witness_config_commands(cli: Cli, home: Path) -> None:
    vkey = "witness.test/w1+" + "0" * 8 + "+BAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    good = CosignerVerifier("witness.test/w1", bytes(32)).vkey()
    assert cli(home, "witness", "add", "w1", "http://127.0.0.1:1", vkey).code == USAGE  # bad hash
    assert cli(home, "witness", "add", "bad name", "http://127.0.0.1:1", good).code == USAGE
    assert cli(home, "witness", "add", "w1", "ftp://x", good).code == USAGE
    assert cli(home, "witness", "add", "w1", "http://127.0.0.1:1/", good).code == OK
    assert cli(home, "witness", "add", "w1", "http://127.0.0.1:2", good).code == USAGE  # same name
    assert cli(home, "witness", "add", "w2", "http://127.0.0.1:2", good).code == USAGE  # same key
    _code, doc = cli.json(home, "witness", "list")
    assert doc["witnesses"] == [{"name": "w1", "url": "http://127.0.0.1:1", "vkey": good, "cosigned": 0}]
    assert cli(home, "witness", "remove", "w2").code == NOT_FOUND
    assert cli(home, "witness", "remove", "w1").code == OK
    assert cli(home, "witness", "sync").code == INFO
    (home / "witnesses.toml").write_text("[witness.x]\nurl = 1\n")
    assert cli(home, "witness", "list").code == BAD_INPUT
    (home / "witnesses.toml").write_bytes(b"\xff\xfe")
    assert cli(home, "log", "checkpoint").code == BAD_INPUT


def test_witness_serve_as_a_process(home: Path, tmp_path: Path) -> None:
    origin, key = log_identity(home)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mnemolog.cli.main",
            "--json",
            "witness",
            "serve",
            "--dir",
            str(tmp_path / "w"),
            "--listen",
            "127.0.0.1:0",
            "--log",
            f"{origin}={key.vkey()}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        doc = json.loads(proc.stdout.readline())
        assert doc["ok"] and doc["loopback"] and doc["logs"] == [origin]
        with Log(home / "log") as log:
            raw = log.checkpoint_bytes(log.checkpoint_sizes()[-1])
        r = httpx.post(doc["url"] + "/add-checkpoint", content=AddCheckpoint(0, (), raw).encode(), timeout=10)
        assert r.status_code == 200 and r.content.startswith("— ".encode())
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) in (0, -signal.SIGINT, 130)


def test_bundles_carry_the_cosignatures_of_their_checkpoint(cli: Cli, home: Path, tmp_path: Path) -> None:
    from mnemolog.eventlog.bundle import verifier as bundle

    with witness_for(home, tmp_path / "w") as w:
        cli(home, "witness", "add", "w1", w.url, w.vkey)
        code, doc = cli.json(home, "store", "the deploy failed at noon")
        assert code == OK
        out = tmp_path / "b.tar"
        assert (
            cli(home, "export-forensic-bundle", "--memory-id", doc["memory"]["id"], "-o", str(out)).code == OK
        )
        code, rep = cli.json(home, "verify-bundle", str(out), "--witness-key", w.vkey)
        assert code == OK and rep["witnesses"]["cosignatures"][0]["name"] == "witness.test/w1"
        assert "witness_cosignatures" in rep["checks"]
        other = CosignerVerifier("witness.test/other", bytes(32)).vkey()
        code, rep = cli.json(home, "verify-bundle", str(out), "--witness-key", w.vkey, "--witness-key", other)
        assert code == VERIFY and rep["details"]["check"] == "witness.quorum"
        assert bundle.main([str(out), "--witness-key", w.vkey, "--json"]) == OK
        assert bundle.main([str(out), "--witness-key", other, "--json"]) == VERIFY
        assert bundle.main([str(out), "--witness-key", "nonsense", "--json"]) == USAGE


def test_a_long_lived_process_sends_its_checkpoints_and_never_waits(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    from mnemolog.substrate.api import Substrate

    w = witness_for(home, tmp_path / "w", port=unused_port())
    w.start()
    cli(home, "witness", "add", "w1", w.url, w.vkey)
    w.stop()  # down while the process appends
    with Substrate.open(home, long_lived=True, worker=False) as sub:
        for i in range(5):
            sub.store(f"memory {i} written while the witness is down")
        cp, _ = sub.writer.checkpoint()  # as the writer's periodic checkpoints do
        w.start()
        for i in range(3):
            sub.store(f"memory {i} written after it came back")
        cp2, _ = sub.writer.checkpoint()
        deadline = time.monotonic() + 60
        with Log(home / "log") as log:
            while time.monotonic() < deadline:
                if cosignatures(parse_note(log.checkpoint_bytes(cp2.size)), [w.witness.key.verifier]):
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the witness never cosigned the long-lived process's checkpoint")
        sub.store("one more, covered only by the checkpoint the process writes as it closes")
    # Closing sent the closing checkpoint as well.
    code, _ = cli.json(home, "log", "verify", "--witness-key", w.vkey)
    assert code == OK
    assert cp.size < cp2.size
    w.stop()
