"""Special files where mnemolog reads: commands end promptly with a documented exit code naming the path.

Each case runs in a real process with a timeout: a FIFO in place of a file
would block an open forever and /dev/zero would be read without end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mnemolog.eventlog.store.log import CHECKPOINT_DIR
from tests.projections.kit import new_home

EXE = Path(sys.executable).with_name("mnemolog")
TIMEOUT = 60


def mnemolog(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOLOG_")}
    try:
        return subprocess.run(
            [str(EXE), "--home", str(home), *args],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"`mnemolog {' '.join(args)}` hung")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("special") / "home"
    new_home(home)
    for i in range(3):
        assert mnemolog(home, "store", f"memory {i} about harbours").returncode == 0
    return home


@pytest.fixture
def home(base: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "home"
    shutil.copytree(base, copy, ignore=shutil.ignore_patterns(".lock", ".want-*"))
    return copy


def newest_checkpoint(home: Path) -> Path:
    return max((home / "log" / CHECKPOINT_DIR).iterdir())


def clean(p: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in p.stderr + p.stdout, p.stderr


def test_a_fifo_as_the_newest_checkpoint(home: Path) -> None:
    cp = newest_checkpoint(home)
    cp.unlink()
    os.mkfifo(cp)
    p = mnemolog(home, "log", "verify")
    clean(p)
    assert p.returncode == 8 and cp.name in p.stderr
    for args in (["store", "one more memory"], ["recall", "harbours"]):
        p = mnemolog(home, *args)
        clean(p)
        assert p.returncode in (0, 6, 8), p.stderr


def test_a_fifo_config(home: Path) -> None:
    (home / "config.toml").unlink()
    os.mkfifo(home / "config.toml")
    p = mnemolog(home, "stats")
    clean(p)
    assert p.returncode == 6 and "config.toml" in p.stderr and "FIFO" in p.stderr


def test_verify_bundle_of_dev_zero(home: Path) -> None:
    p = mnemolog(home, "verify-bundle", "/dev/zero")
    clean(p)
    assert p.returncode in (6, 8, 65) and "/dev/zero" in p.stderr


def test_replay_of_dev_zero(home: Path, tmp_path: Path) -> None:
    p = mnemolog(home, "replay", "/dev/zero", "--home", str(tmp_path / "new"))
    clean(p)
    assert p.returncode == 65 and "/dev/zero" in p.stderr
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("command", [["log", "verify"], ["verify-bundle", "b.tar"]])
def test_a_trusted_key_of_dev_zero(home: Path, command: list[str]) -> None:
    p = mnemolog(home, *command, "--trusted-key", "/dev/zero")
    clean(p)
    assert p.returncode in (6, 64, 65)


def test_a_fifo_as_an_index_file(home: Path) -> None:
    idx = home / "log" / "index" / "loc"
    idx.unlink()
    os.mkfifo(idx)
    for args in (["store", "x y z"], ["stats"]):
        p = mnemolog(home, *args)
        clean(p)
        assert p.returncode == 6 and "index/loc" in p.stderr, p.stderr
    p = mnemolog(home, "log", "verify")  # reads never need the index
    clean(p)
    assert p.returncode == 0, p.stderr


def test_a_fifo_as_a_segment(home: Path) -> None:
    seg = home / "log" / "00000000000000000000.seg"
    seg.unlink()
    os.mkfifo(seg)
    for args in (["stats"], ["log", "verify"], ["store", "x"]):
        p = mnemolog(home, *args)
        clean(p)
        assert p.returncode in (6, 8) and "00000000000000000000.seg" in p.stderr, p.stderr


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


def _one_id(home: Path) -> str:
    p = mnemolog(home, "list", "--json")
    assert p.returncode == 0, p.stderr
    return str(json.loads(p.stdout)["memories"][0]["id"])


@pytest.mark.parametrize("command", ["log-export", "bundle"])
def test_an_output_that_is_not_a_regular_file_is_refused(home: Path, tmp_path: Path, command: str) -> None:
    memory_id = _one_id(home) if command == "bundle" else ""
    for out in _special_outputs(tmp_path):
        before = os.lstat(out)
        if command == "bundle":
            p = mnemolog(home, "export-forensic-bundle", "--memory-id", memory_id, "-o", str(out))
        else:
            p = mnemolog(home, "log", "export", "-o", str(out))
        clean(p)
        assert str(out) in p.stderr, p.stderr
        if out.name == "out.dir":  # click refuses a directory itself, as a usage error
            assert p.returncode == 64, p.stderr
        else:
            assert p.returncode == 6 and "not a regular file" in p.stderr, p.stderr
        after = os.lstat(out)
        assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_an_output_over_a_regular_file_still_replaces_it(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "export.bin"
    out.write_bytes(b"old")
    p = mnemolog(home, "log", "export", "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert out.stat().st_size > 3


# -- inputs: import reads through the guard ------------------------------------------------


def test_import_of_special_files(home: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero"), tmp_path):
        p = mnemolog(home, "import", str(path))
        clean(p)
        assert p.returncode == 64 and str(path) in p.stderr, p.stderr


def test_import_of_malformed_and_truncated_files(home: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"content": "fine"}\n{"content": "trunc')
    p = mnemolog(home, "import", str(bad))
    clean(p)
    assert p.returncode == 65 and "line 2" in p.stdout + p.stderr, p.stderr
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00" * 100)
    p = mnemolog(home, "import", str(binary))
    clean(p)
    assert p.returncode == 65


def test_import_of_an_oversized_file_is_refused_before_reading(home: Path, tmp_path: Path) -> None:
    from mnemolog.substrate.memory.importer import MAX_IMPORT_BYTES

    big = tmp_path / "big.jsonl"
    with open(big, "wb") as f:
        f.truncate(MAX_IMPORT_BYTES + 1)  # sparse: nothing is written to disk
    p = mnemolog(home, "import", str(big))
    clean(p)
    assert p.returncode == 64 and str(big) in p.stderr and "split the file" in p.stderr, p.stderr


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
def test_every_user_named_input_refuses_a_fifo(home: Path, tmp_path: Path, command: list[str]) -> None:
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    args = [a.format(x=fifo, new=tmp_path / "new") for a in command]
    p = mnemolog(home, *args)  # a FIFO opened for reading would block without a writer
    clean(p)
    assert p.returncode in (6, 64, 65), p.stderr
    if command[0] != "ingest":  # ingest lists what it skipped on stdout
        assert str(fifo) in p.stderr, p.stderr
    assert fifo.is_fifo() and not (tmp_path / "new").exists()
