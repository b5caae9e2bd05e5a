"""The attacks on a home's log, as an attacker with write access to the files would run them.

Each test reproduces an attack from the issue "verification that cannot be
fooled" through the command line and checks that it is now detected (exit 8
naming the check) or refused, and that a refused command changes nothing:
- appending after damage (`store`, `log append`, `log checkpoint` after a flipped byte);
- rollback: every checkpoint deleted, the last segment deleted with its
  checkpoints, the high-water mark deleted, an older copy of the whole home
  put back (caught by the copy of the high-water mark outside the home);
- a foreign log copied into a home;
- one trust rule for pinned keys: a key under another name fails in
  `log verify` and `verify-bundle` alike (8), a malformed key is a usage
  error (64) in both.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import cbor2
import pytest

from mnemolog.eventlog.format.keys import SigningKey, VerifierKey
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.segments import list_segments
from tests.support.cli import Cli

OK, USAGE, VERIFY = 0, 64, 8


def fails(cli: Cli, home: Path, check: str, *args: str) -> dict[str, Any]:
    code, doc = cli.json(home, *args)
    assert code == VERIFY, doc
    assert doc["details"]["check"] == check, doc
    return doc


def committed(home: Path) -> dict[str, bytes]:
    out = {}
    for p in sorted((home / "log").rglob("*")):
        if p.is_file() and (p.suffix == ".seg" or p.parent.name == "checkpoints"):
            out[str(p.relative_to(home))] = p.read_bytes()
    return out


@pytest.fixture(scope="module")
def template(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("trust") / "home"
    cli.ok(home, "init", "--key-name", "trust-test")
    cfg = home / "config.toml"
    cfg.write_text(cfg.read_text().replace("segment_bytes = 67108864", "segment_bytes = 4096"))
    for i in range(12):
        cli.ok(home, "log", "append", "note.added", "--data", json.dumps({"i": i, "text": "t" * 600}))
    assert len(list_segments(home / "log")) >= 2
    return home


@pytest.fixture
def home(template: Path, tmp_path: Path) -> Path:
    h = tmp_path / "home"
    shutil.copytree(template, h)
    return h


def flip_text_byte(home: Path, seq: int) -> None:
    with Log(home / "log") as log:
        loc = log.location(seq)
        raw = log.raw(seq)
    at = loc.offset + raw.index(cbor2.loads(raw)["data"]["text"].encode())
    seg = home / "log" / f"{loc.segment:020d}.seg"
    b = bytearray(seg.read_bytes())
    b[at] ^= 0x01
    seg.write_bytes(bytes(b))


# -- appending after damage ---------------------------------------------------------------


def test_no_command_appends_or_signs_after_a_flipped_byte(cli: Cli, home: Path) -> None:
    cli.ok(home, "log", "verify")
    flip_text_byte(home, 12)
    fails(cli, home, "checkpoint.root", "log", "verify")
    before = committed(home)
    for args in (
        ("log", "append", "note.added", "--data", "{}"),
        ("log", "checkpoint"),
        ("store", "a memory written after the damage"),
    ):
        code, doc = cli.json(home, *args)
        assert code == VERIFY, (args, doc)
        assert doc["details"]["check"] == "log_diverged", (args, doc)
        assert committed(home) == before, args


# -- rollback -------------------------------------------------------------------------------


def test_a_log_without_any_checkpoint_fails(cli: Cli, home: Path) -> None:
    for p in (home / "log" / "checkpoints").iterdir():
        p.unlink()
    fails(cli, home, "checkpoint.missing", "log", "verify")
    fails(cli, home, "checkpoint.missing", "log", "verify", "--hashes-only")


def test_deleting_the_last_segment_with_its_checkpoints_is_caught(cli: Cli, home: Path) -> None:
    segs = list_segments(home / "log")
    first, last = segs[-1]
    last.unlink()
    for p in (home / "log" / "checkpoints").iterdir():
        if int(p.name) > first:
            p.unlink()
    shutil.rmtree(home / "log" / "index")
    doc = fails(cli, home, "high_water.size", "log", "verify")
    assert doc["details"]["found"] == first and doc["details"]["expected"] == 13
    # Without the home's record the shortened log is self-consistent: the mark is what remembers.
    assert cli.json(home, "log", "verify", "--trust-genesis")[0] == OK
    code, doc = cli.json(home, "log", "append", "note.added", "--data", "{}")
    assert code == VERIFY and doc["details"]["check"] == "log_diverged"
    # A rebuild would erase the last trace of the lost entries: refused unless accepted, and then
    # the acceptance is itself a signed entry naming what was lost.
    fails(cli, home, "projection.rollback", "rebuild")
    before = committed(home)
    doc = cli.ok(home, "rebuild", "--accept-rollback")
    acc = doc["rollback_accepted"]
    assert (acc["old_size"], acc["new_size"]) == (13, first) and acc["source"].endswith("state/checkpoint")
    assert all(committed(home).get(k) == v for k, v in before.items() if k.endswith(".seg"))
    assert acc["set_aside"] == [] or all("rolled-back" in p for p in acc["set_aside"])
    shown = cli.ok(home, "log", "show", "--type", "log.rollback_accepted")["entries"]
    assert [e["seq"] for e in shown] == [first] and shown[0]["data"]["old_size"] == 13
    verified = cli.ok(home, "log", "verify")
    assert verified["entries"] == first + 1 and verified["high_water"][0]["size"] == first + 1
    cli.ok(home, "log", "append", "note.added", "--data", "{}")


def test_a_missing_high_water_mark_is_a_failure(cli: Cli, home: Path) -> None:
    (home / "state" / "checkpoint").unlink()
    fails(cli, home, "high_water.missing", "log", "verify")


def test_an_older_copy_of_the_whole_home_is_caught_by_the_copy_outside(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside" / "mark"
    cfg = home / "config.toml"
    cfg.write_text(cfg.read_text().replace("[trust]\n", f'[trust]\nhigh_water_copy = "{outside}"\n'))
    cli.ok(home, "log", "checkpoint")
    assert outside.exists()
    old = tmp_path / "old"
    shutil.copytree(home, old)
    for i in range(3):
        cli.ok(home, "log", "append", "note.later", "--data", json.dumps({"i": i}))
    shutil.rmtree(home)
    shutil.copytree(old, home)  # state/ included: only the copy outside the home remembers
    doc = fails(cli, home, "high_water.size", "log", "verify")
    assert doc["details"]["file"] == str(outside)


# -- a foreign log -----------------------------------------------------------------------------


@pytest.fixture
def other(cli: Cli, tmp_path: Path) -> Path:
    h = tmp_path / "other"
    cli.ok(h, "init", "--key-name", "other-home")
    cli.ok(h, "log", "append", "note.added", "--data", "{}")
    return h


def test_a_foreign_log_copied_into_a_home_fails(cli: Cli, home: Path, other: Path) -> None:
    doc = cli.ok(home, "log", "verify")
    assert doc["trust"]["anchor"] == "home" and doc["trust"]["log_id"]
    shutil.rmtree(home / "log")
    shutil.copytree(other / "log", home / "log")
    fails(cli, home, "trust.log_id", "log", "verify")
    # With the other home's keys as well, the log id still gives it away.
    for p in (other / "keys").glob("*.pub"):
        shutil.copy(p, home / "keys" / p.name)
    fails(cli, home, "trust.log_id", "log", "verify")
    # Anchored explicitly elsewhere, it is the other home's perfectly good log: the report says how.
    doc = cli.ok(home, "log", "verify", "--trust-genesis")
    assert doc["trust"]["anchor"] == "genesis" and "trust on first use" in doc["trust"]["note"]
    # Pinned on the other home's key, the log verifies, but this home's high-water mark says
    # it is not the log this home signed.
    vkey = cli.ok(other, "key", "show")["vkey"]
    fails(cli, home, "high_water.origin", "log", "verify", "--trusted-key", vkey)


def test_a_foreign_log_in_a_home_without_a_log_id_is_caught_by_its_keys(
    cli: Cli, home: Path, other: Path
) -> None:
    cfg = home / "config.toml"
    cfg.write_text("\n".join(x for x in cfg.read_text().splitlines() if not x.startswith("id = ")) + "\n")
    (home / "state" / "checkpoint").unlink()
    assert cli.ok(home, "log", "verify")["trust"]["anchor"] == "home"
    shutil.rmtree(home / "log")
    shutil.copytree(other / "log", home / "log")
    fails(cli, home, "trust.genesis_key", "log", "verify")


# -- one rule for pinned keys -------------------------------------------------------------------


def test_pinned_keys_follow_one_rule_everywhere(cli: Cli, home: Path, tmp_path: Path) -> None:
    mem = cli.ok(home, "store", "a memory to put in a bundle")["memory"]["id"]
    bundle = tmp_path / "b.tar"
    cli.ok(home, "export-forensic-bundle", "--memory-id", mem, "-o", str(bundle))
    vkey = cli.ok(home, "key", "show")["vkey"]
    assert cli.ok(home, "log", "verify", "--trusted-key", vkey)["trust"]["pinned"] is True
    assert cli.ok(home, "verify-bundle", str(bundle), "--trusted-key", vkey)["trust"]["pinned"] is True
    # The same public key under another name is another key, in both.
    name, hash_, b64 = vkey.split("+", 2)
    renamed = VerifierKey("renamed", VerifierKey.from_vkey(vkey).public_key).vkey()
    stranger = SigningKey.generate("stranger").verifier.vkey()
    for bad in (renamed, stranger):
        fails(cli, home, "trust.key", "log", "verify", "--trusted-key", bad)
        fails(cli, home, "trust.key", "verify-bundle", str(bundle), "--trusted-key", bad)
    # A malformed key is a usage error in both.
    keyfile = tmp_path / "garbage.pub"
    keyfile.write_text("not a key\n")
    for bad in ("not+a+key", f"{name}+{hash_}+{b64[:-3]}", str(keyfile), str(tmp_path / "missing.pub")):
        for args in (("log", "verify"), ("verify-bundle", str(bundle))):
            code, doc = cli.json(home, *args, "--trusted-key", bad)
            assert code == USAGE, (args, bad, doc)
