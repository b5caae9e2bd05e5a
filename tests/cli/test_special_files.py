"""Special files where mnemolog reads: commands end promptly with a documented exit code naming the path.

Each case runs in a real process (`cli.process`) with a timeout: a FIFO in place of a file
would block an open forever and /dev/zero would be read without end.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mnemolog.eventlog.store.log import CHECKPOINT_DIR
from tests.projections.kit import new_home
from tests.support.cli import Cli

TIMEOUT = 60


@pytest.fixture(scope="module")
def base(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("special") / "home"
    new_home(home)
    for i in range(3):
        cli.ok(home, "store", f"memory {i} about harbours")
    return home


@pytest.fixture
def home(base: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "home"
    shutil.copytree(base, copy, ignore=shutil.ignore_patterns(".lock", ".want-*"))
    return copy


def newest_checkpoint(home: Path) -> Path:
    return max((home / "log" / CHECKPOINT_DIR).iterdir())


def test_a_fifo_as_the_newest_checkpoint(cli: Cli, home: Path) -> None:
    cp = newest_checkpoint(home)
    cp.unlink()
    os.mkfifo(cp)
    p = cli.process(home, "log", "verify", timeout=TIMEOUT)
    assert p.code == 8 and cp.name in p.stderr
    for args in (["store", "one more memory"], ["recall", "harbours"]):
        p = cli.process(home, *args, timeout=TIMEOUT)
        assert p.code in (0, 6, 8), p.stderr


def test_a_fifo_config(cli: Cli, home: Path) -> None:
    (home / "config.toml").unlink()
    os.mkfifo(home / "config.toml")
    p = cli.process(home, "stats", timeout=TIMEOUT)
    assert p.code == 6 and "config.toml" in p.stderr and "FIFO" in p.stderr


def test_verify_bundle_of_dev_zero(cli: Cli, home: Path) -> None:
    p = cli.process(home, "verify-bundle", "/dev/zero", timeout=TIMEOUT)
    assert p.code in (6, 8, 65) and "/dev/zero" in p.stderr


def test_replay_of_dev_zero(cli: Cli, home: Path, tmp_path: Path) -> None:
    p = cli.process(home, "replay", "/dev/zero", "--home", str(tmp_path / "new"), timeout=TIMEOUT)
    assert p.code == 65 and "/dev/zero" in p.stderr
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("command", [["log", "verify"], ["verify-bundle", "b.tar"]])
def test_a_trusted_key_of_dev_zero(cli: Cli, home: Path, command: list[str]) -> None:
    p = cli.process(home, *command, "--trusted-key", "/dev/zero", timeout=TIMEOUT)
    assert p.code in (6, 64, 65)


def test_a_fifo_as_an_index_file(cli: Cli, home: Path) -> None:
    idx = home / "log" / "index" / "loc"
    idx.unlink()
    os.mkfifo(idx)
    for args in (["store", "x y z"], ["stats"]):
        p = cli.process(home, *args, timeout=TIMEOUT)
        assert p.code == 6 and "index/loc" in p.stderr, p.stderr
    p = cli.process(home, "log", "verify", timeout=TIMEOUT)  # reads never need the index
    assert p.code == 0, p.stderr


def test_a_fifo_as_a_segment(cli: Cli, home: Path) -> None:
    seg = home / "log" / "00000000000000000000.seg"
    seg.unlink()
    os.mkfifo(seg)
    for args in (["stats"], ["log", "verify"], ["store", "x"]):
        p = cli.process(home, *args, timeout=TIMEOUT)
        assert p.code in (6, 8) and "00000000000000000000.seg" in p.stderr, p.stderr


# -- output paths: a FIFO or a device named with -o is refused, never replaced ------------


def _special_outputs(tmp_path: Path) -> list[Path]:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    # A link to a device stands in for the device: were the guard to fail, the link would
    # be replaced, never /dev/null itself (tests may run as root).
    link = tmp_path / "out.dev"
    link.symlink_to("/dev/null")
    (tmp_path / "out.dir").mkdir()
    return [fifo, link, tmp_path / "out.dir"]


def _one_id(cli: Cli, home: Path) -> str:
    return str(cli.ok(home, "list")["memories"][0]["id"])


@pytest.mark.parametrize("command", ["log-export", "bundle"])
def test_an_output_that_is_not_a_regular_file_is_refused(
    cli: Cli, home: Path, tmp_path: Path, command: str
) -> None:
    memory_id = _one_id(cli, home) if command == "bundle" else ""
    for out in _special_outputs(tmp_path):
        before = os.lstat(out)
        if command == "bundle":
            p = cli.process(
                home, "export-forensic-bundle", "--memory-id", memory_id, "-o", str(out), timeout=TIMEOUT
            )
        else:
            p = cli.process(home, "log", "export", "-o", str(out), timeout=TIMEOUT)
        assert str(out) in p.stderr, p.stderr
        if out.name == "out.dir":  # click refuses a directory itself, as a usage error
            assert p.code == 64, p.stderr
        else:
            assert p.code == 6 and "not a regular file" in p.stderr, p.stderr
        after = os.lstat(out)
        assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_an_output_over_a_regular_file_still_replaces_it(cli: Cli, home: Path, tmp_path: Path) -> None:
    out = tmp_path / "export.bin"
    out.write_bytes(b"old")
    p = cli.process(home, "log", "export", "-o", str(out), timeout=TIMEOUT)
    assert p.code == 0, p.stderr
    assert out.stat().st_size > 3


# -- inputs: import reads through the guard ------------------------------------------------


def test_import_of_special_files(cli: Cli, home: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero"), tmp_path):
        p = cli.process(home, "import", str(path), timeout=TIMEOUT)
        assert p.code == 64 and str(path) in p.stderr, p.stderr


def test_import_of_malformed_and_truncated_files(cli: Cli, home: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"content": "fine"}\n{"content": "trunc')
    p = cli.process(home, "import", str(bad), timeout=TIMEOUT)
    assert p.code == 65 and "line 2" in p.stdout + p.stderr, p.stderr
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00" * 100)
    p = cli.process(home, "import", str(binary), timeout=TIMEOUT)
    assert p.code == 65


def test_import_of_an_oversized_file_is_refused_before_reading(cli: Cli, home: Path, tmp_path: Path) -> None:
    from mnemolog.substrate.memory.importer import MAX_IMPORT_BYTES

    big = tmp_path / "big.jsonl"
    with open(big, "wb") as f:
        f.truncate(MAX_IMPORT_BYTES + 1)  # sparse: nothing is written to disk
    p = cli.process(home, "import", str(big), timeout=TIMEOUT)
    assert p.code == 64 and str(big) in p.stderr and "split the file" in p.stderr, p.stderr


def test_an_import_that_grows_past_its_bound_is_refused(tmp_path: Path) -> None:
    import io

    from mnemolog.eventlog.errors import UsageError
    from mnemolog.substrate.memory.importer import _lines

    data = b'{"content": "a line"}\n' * 100
    with pytest.raises(UsageError, match="split the file"):
        list(_lines(io.BytesIO(data), 1000, tmp_path / "f.jsonl"))
    assert len(list(_lines(io.BytesIO(data), len(data), tmp_path / "f.jsonl"))) == 100
    # One endless line (what /dev/zero would have been): skipped in bounded reads, then refused.
    endless = io.BytesIO(b"x" * (1 << 22))
    with pytest.raises(UsageError):
        list(_lines(endless, 1 << 21, tmp_path / "f.jsonl"))


@pytest.mark.parametrize(
    "command",
    [
        ["import", "{x}"],
        ["verify-bundle", "{x}"],
        ["replay", "{x}", "--home", "{new}"],
        ["ingest", "{x}"],
        ["log", "verify", "--trusted-key", "{x}"],
        ["verify-bundle", "b.tar", "--trusted-key", "{x}"],
    ],
)
def test_every_user_named_input_refuses_a_fifo(
    cli: Cli, home: Path, tmp_path: Path, command: list[str]
) -> None:
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    args = [a.format(x=fifo, new=tmp_path / "new") for a in command]
    p = cli.process(home, *args, timeout=TIMEOUT)  # a FIFO opened for reading would block without a writer
    assert p.code in (6, 64, 65), p.stderr
    if command[0] != "ingest":  # ingest lists what it skipped on stdout
        assert str(fifo) in p.stderr, p.stderr
    assert fifo.is_fifo() and not (tmp_path / "new").exists()
