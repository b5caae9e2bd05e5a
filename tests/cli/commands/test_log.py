"""`mnemolog log ...`, `key ...`, `init` on good and bad input.

Bad input (a garbage segment, a non-canonical entry, a wrong or missing key,
a huge CBOR length header, an empty home, a truncated checkpoint, stray
files) gets a clear message and the right exit code (the README's table), never a
traceback, and never changes a committed byte: the segments, checkpoints
and keys are hashed before and after every failing command.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import cbor2
import pytest

from mnemolog.eventlog.format.keys import SigningKey, write_private_key
from mnemolog.eventlog.store.segments import split_items
from tests.support.cli import Cli

OK, NOT_FOUND, STORAGE, VERIFY, USAGE, BAD_INPUT = 0, 2, 6, 8, 64, 65


def committed(home: Path) -> dict[str, bytes]:
    """What must never change: segments, checkpoints, private keys."""
    out = {}
    for sub in ("log", "log/checkpoints", "keys"):
        d = home / sub
        if d.is_dir():
            for p in sorted(d.iterdir()):
                if p.is_file() and (p.suffix in (".seg", ".key") or sub == "log/checkpoints"):
                    out[str(p.relative_to(home))] = p.read_bytes()
    return out


def unchanged(before: dict[str, bytes], after: dict[str, bytes]) -> bool:
    """Every committed byte is still there: files may only grow (appends) or be added."""
    for name, data in before.items():
        now = after.get(name)
        if now is None or not (now == data or (name.endswith(".seg") and now.startswith(data))):
            return False
    return True


@pytest.fixture(scope="module")
def template(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("tpl") / "home"
    ran = cli(home, "init", "--key-name", "cli-test")
    code, _, err = ran.code, ran.stdout, ran.stderr
    assert code == OK, err
    for i in range(4):
        ran = cli(home, "log", "append", "note.added", "--data", json.dumps({"i": i, "text": "x" * i}))
        code, _, err = ran.code, ran.stdout, ran.stderr
        assert code == OK, err
    return home


@pytest.fixture
def home(template: Path, tmp_path: Path) -> Path:
    h = tmp_path / "home"
    shutil.copytree(template, h)
    return h


# -- the good path ---------------------------------------------------------------


def test_init_and_everyday_commands(cli: Cli, home: Path) -> None:
    code, doc = cli.json(home, "log", "show")
    assert code == OK and doc["size"] == 5 and [e["seq"] for e in doc["entries"]] == [0, 1, 2, 3, 4]
    assert doc["entries"][1]["data"] == {"i": 0, "text": ""}
    code, doc = cli.json(home, "log", "show", "--from", "2", "--to", "3", "--type", "note.added")
    assert [e["seq"] for e in doc["entries"]] == [2, 3]
    code, doc = cli.json(home, "log", "tail", "-n", "2")
    assert [e["seq"] for e in doc["entries"]] == [3, 4]
    code, doc = cli.json(home, "log", "verify")
    assert code == OK and doc["entries"] == 5 and doc["latest_checkpoint"] == 5
    code, doc = cli.json(home, "log", "verify", "--hashes-only")
    assert code == OK and doc["hashes_only"] is True
    code, doc = cli.json(home, "log", "prove", "2")
    assert code == OK and doc["tree_size"] == 5 and doc["proof"]
    code, doc = cli.json(home, "log", "consistency", "2", "5")
    assert code == OK and doc["old_size"] == 2
    code, doc = cli.json(home, "key", "show")
    assert code == OK and doc["name"] == "cli-test" and len(doc["history"]) == 1
    code, doc = cli.json(home, "key", "rotate")
    assert code == OK and doc["seq"] == 5
    code, doc = cli.json(home, "log", "append", "note.added", "--data", '{"after": "rotation"}')
    assert code == OK and doc["seq"] == 6
    code, doc = cli.json(home, "log", "checkpoint")
    assert code == OK and doc["size"] == 7
    code, doc = cli.json(home, "log", "verify")
    assert code == OK and doc["keys"] == 2
    ran = cli(home, "log", "verify")
    code, out, _ = ran.code, ran.stdout, ran.stderr
    assert code == OK and out.startswith("ok: 7 entries")


def test_usage_and_input_errors(cli: Cli, home: Path) -> None:
    before = committed(home)
    assert cli.json(home, "log", "append", "memory.stored", "--data", "{}")[0] == USAGE
    assert cli.json(home, "log", "append", "note.added", "--data", "[1, 2]")[0] == BAD_INPUT
    assert cli.json(home, "log", "append", "note.added", "--data", "{not json")[0] == BAD_INPUT
    assert cli.json(home, "log", "append", "note.Bad", "--data", "{}")[0] == BAD_INPUT
    assert cli.json(home, "log", "prove", "99")[0] == NOT_FOUND
    assert cli.json(home, "log", "consistency", "4", "2")[0] == USAGE
    assert cli.json(home, "log", "consistency", "2", "99")[0] == NOT_FOUND
    assert cli(home, "log", "show", "--from", "-1").code == USAGE
    assert cli(home, "log", "nonsense").code == USAGE
    assert committed(home) == before


# -- bad input ---------------------------------------------------------------------

SEG0 = "log/00000000000000000000.seg"


def _items(home: Path) -> tuple[bytes, list[tuple[int, int]]]:
    buf = (home / SEG0).read_bytes()
    return buf, [(s, e) for s, e, _ in split_items(buf).items]


def garbage_segment(home: Path) -> None:
    buf, items = _items(home)
    s, e = items[2]
    (home / SEG0).write_bytes(buf[:s] + random.Random(s).randbytes(e - s) + buf[e:])


def garbage_appended(home: Path) -> None:
    with open(home / SEG0, "ab") as f:
        f.write(b"\x00\x01\x02 not an entry")


def non_canonical_entry(home: Path) -> None:
    buf, items = _items(home)
    s, e = items[4]
    m = cbor2.loads(buf[s:e])
    (home / SEG0).write_bytes(buf[:s] + cbor2.dumps(dict(reversed(list(m.items())))) + buf[e:])


def huge_length_header(home: Path) -> None:
    with open(home / SEG0, "ab") as f:
        f.write(b"\xa9\x61v\x01\x62ts\x1b" + bytes(8) + b"\x62tv\x01\x63kid\x5b\x7f" + b"\xff" * 7)


def huge_length_inside(home: Path) -> None:
    buf, items = _items(home)
    s, e = items[3]
    raw = buf[s:e]
    i = raw.index(b"\x64data") + 5
    (home / SEG0).write_bytes(buf[: s + i] + b"\xbb\x7f\xff\xff\xff\xff\xff\xff\xff" + buf[s + i + 1 :])


def truncated_checkpoint(home: Path) -> None:
    p = home / "log" / "checkpoints" / f"{5:020d}"
    p.write_bytes(p.read_bytes()[:40])


def stray_checkpoint(home: Path) -> None:
    (home / "log" / "checkpoints" / "backup.txt").write_text("x")


def missing_segment(home: Path) -> None:
    (home / SEG0).unlink()


BAD_LOGS: dict[str, tuple[Callable[[Path], None], dict[str, int]]] = {
    # name: (damage, {command: exit code})
    # Damage inside indexed entries: the writer reads only the last one (verify reads all).
    "garbage_segment": (garbage_segment, {"verify": VERIFY, "hashes": VERIFY, "show": None, "append": OK}),
    "garbage_appended": (garbage_appended, {"verify": VERIFY, "append": VERIFY, "checkpoint": VERIFY}),
    "non_canonical_entry": (non_canonical_entry, {"verify": VERIFY, "hashes": VERIFY}),
    "huge_length_header": (huge_length_header, {"verify": VERIFY, "append": VERIFY, "show": OK}),
    "huge_length_inside": (huge_length_inside, {"verify": VERIFY, "hashes": VERIFY, "show": None}),
    "truncated_checkpoint": (truncated_checkpoint, {"verify": VERIFY, "prove": BAD_INPUT, "show": OK}),
    "stray_checkpoint": (stray_checkpoint, {"verify": VERIFY, "show": OK}),
    "missing_segment": (missing_segment, {"verify": STORAGE, "show": STORAGE, "append": STORAGE}),
}

COMMANDS = {
    "verify": ("log", "verify"),
    "hashes": ("log", "verify", "--hashes-only"),
    "append": ("log", "append", "note.added", "--data", "{}"),
    "checkpoint": ("log", "checkpoint"),
    "show": ("log", "show"),
    "prove": ("log", "prove", "1"),
}


@pytest.mark.parametrize("case", sorted(BAD_LOGS))
def test_bad_logs(cli: Cli, home: Path, case: str) -> None:
    damage, expect = BAD_LOGS[case]
    damage(home)
    before = committed(home)
    for name, want in expect.items():
        code, doc = cli.json(home, *COMMANDS[name])
        if want is not None:
            assert code == want, (case, name, doc)
        else:
            assert code in (OK, VERIFY, BAD_INPUT), (case, name, doc)
        if code == VERIFY:
            assert doc["details"].get("check"), doc
        # The text form says the same on stderr, in one or two lines.
        ran = cli(home, *COMMANDS[name])
        tcode, _out, err = ran.code, ran.stdout, ran.stderr
        assert tcode == code
        if code:
            assert err.startswith("mnemolog: ") and len(err.splitlines()) <= 2
        after = committed(home)
        assert unchanged(before, after), (case, name)
        before = after


def test_missing_key(cli: Cli, home: Path) -> None:
    (home / "keys" / "signing.key").unlink()
    before = committed(home)
    code, doc = cli.json(home, "log", "append", "note.added", "--data", "{}")
    assert code == STORAGE and "no private key" in doc["message"]
    assert cli.json(home, "key", "rotate")[0] == STORAGE
    assert cli.json(home, "log", "verify")[0] == OK  # verification needs no private key
    assert cli.json(home, "key", "show")[0] == OK
    assert committed(home) == before


def test_key_readable_by_others_is_refused(cli: Cli, home: Path) -> None:
    key = home / "keys" / "signing.key"
    os.chmod(key, 0o644)
    before = committed(home)
    code, doc = cli.json(home, "log", "append", "note.added", "--data", "{}")
    assert code == STORAGE and "0600" in doc["message"]
    assert cli.json(home, "log", "checkpoint")[0] == STORAGE
    assert committed(home) == before


@pytest.mark.parametrize("content", [b"garbage\n", b"", b"PRIVATE+KEY+x+00000000+AQ==\n", b"\xff\xfe"])
def test_malformed_key(cli: Cli, home: Path, content: bytes) -> None:
    key = home / "keys" / "signing.key"
    key.write_bytes(content)
    os.chmod(key, 0o600)
    before = committed(home)
    code, doc = cli.json(home, "log", "append", "note.added", "--data", "{}")
    assert code == STORAGE and "signing.key" in doc["message"]
    assert committed(home) == before


def test_key_of_another_log(cli: Cli, home: Path) -> None:
    write_private_key(home / "keys" / "signing.key", SigningKey.generate("intruder"))
    before = committed(home)
    code, doc = cli.json(home, "log", "append", "note.added", "--data", "{}")
    assert code == STORAGE and "current key" in doc["message"]
    assert cli.json(home, "key", "rotate")[0] == STORAGE
    assert cli.json(home, "log", "verify")[0] == OK
    assert committed(home) == before


@pytest.mark.parametrize(
    "command", [COMMANDS["verify"], COMMANDS["show"], COMMANDS["append"], ("key", "show")]
)
def test_empty_or_missing_home(cli: Cli, tmp_path: Path, command: tuple[str, ...]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for h in (empty, tmp_path / "missing"):
        code, doc = cli.json(h, *command)
        assert code == STORAGE and "mnemolog init" in doc["message"], doc
    assert list(empty.iterdir()) == []
    assert not (tmp_path / "missing").exists()


def test_init_refuses_to_overwrite(cli: Cli, home: Path) -> None:
    before = committed(home)
    code, doc = cli.json(home, "init")
    assert code == STORAGE and "already" in doc["message"]
    assert committed(home) == before


def test_harmless_stray_files(cli: Cli, home: Path) -> None:
    (home / "log" / "README.txt").write_text("notes")
    (home / "log" / "00000000000000000000.seg.bak").write_bytes(b"\x00")
    (home / "log" / "index" / "junk").write_bytes(b"junk")
    assert cli.json(home, "log", "verify")[0] == OK
    assert cli.json(home, "log", "append", "note.added", "--data", "{}")[0] == OK
    assert cli.json(home, "log", "verify")[0] == OK


def test_index_deleted_or_scrambled(cli: Cli, home: Path) -> None:
    shutil.rmtree(home / "log" / "index")
    code, doc = cli.json(home, "log", "show")
    assert code == OK and doc["size"] == 5
    assert cli.json(home, "log", "prove", "3")[0] == OK
    assert cli.json(home, "log", "verify")[0] == OK
    for p in (home / "log" / "index").glob("*"):
        p.write_bytes(os.urandom(p.stat().st_size))
    assert cli.json(home, "log", "show")[0] == OK
    assert cli.json(home, "log", "append", "note.added", "--data", "{}")[0] == OK
    code, doc = cli.json(home, "log", "verify")
    assert code == OK and doc["entries"] == 6


def test_real_process_exit_codes(cli: Cli, home: Path) -> None:
    """The same through a real `python -m mnemolog.cli.main`: exit status, stderr, no traceback."""
    garbage_appended(home)
    p = cli.process(home, "log", "verify")
    assert p.code == VERIFY and "check=" in p.stderr
    p = cli.process(home, "log", "append", "note.x", "--data", "{}")
    assert p.code == VERIFY and "refusing to append" in p.stderr
