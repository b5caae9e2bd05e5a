"""A full disk: every write path exits 6 naming the path, leaves no temp file and loses nothing acknowledged.

Two ways to fill the disk: a real 16 MiB tmpfs (needs the right to mount;
skipped otherwise) and, everywhere, os.write failing with ENOSPC for files
under the home or the vault (DuckDB's own writes are not Python's: the
tmpfs test covers those).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.projections.kit import new_home
from tests.support.cli import Cli


def temps(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tmp") or ".replay-" in p.name]


def memories(cli: Cli, home: Path) -> set[str]:
    r = cli(home, "list", "--limit", "1000", json=True)
    assert r.code == 0, r.output
    return {m["id"] for m in json.loads(r.stdout)["memories"]}


# -- injected ENOSPC ------------------------------------------------------------------


@pytest.fixture
def full_under(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """Paths under which every os.write fails with ENOSPC (append to the list to fill them)."""
    roots: list[Path] = []
    real = os.write

    def write(fd: int, data: Any) -> int:
        try:
            where = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            where = ""
        if any(where.startswith(str(r)) for r in roots):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    yield roots


@pytest.fixture
def home(cli: Cli, tmp_path: Path) -> Path:
    h = new_home(tmp_path / "home").root
    for i in range(5):
        r = cli(h, "store", f"memory {i} about the harbour")
        assert r.code == 0
    return h


@pytest.mark.parametrize(
    "command",
    [
        ["key", "rotate"],
        ["vault", "render", "{vault}"],
        ["log", "checkpoint"],
        ["store", "one more memory"],
        ["rebuild"],
    ],
)
def test_injected_enospc(
    cli: Cli, home: Path, tmp_path: Path, full_under: list[Path], command: list[str]
) -> None:
    vault = tmp_path / "vault"
    args = [a.replace("{vault}", str(vault)) for a in command]
    if command[0] == "log":
        cli(home, "store", "so that a new checkpoint is due")
    acknowledged = memories(cli, home)
    keys_before = sorted(p.name for p in (home / "keys").iterdir())
    full_under.extend([home, vault])
    r = cli(home, *args)
    full_under.clear()
    out = r.stdout + r.stderr
    assert "Traceback" not in out and "internal error" not in out
    if r.code != 0:  # rebuild writes only through DuckDB, which Python's os.write does not see
        assert r.code == 6, out
        assert "No space left on device" in out and (str(home) in out or str(vault) in out), out
    assert temps(home) == [] and (not vault.exists() or temps(vault) == [])
    # Nothing acknowledged is lost, and the home works once there is room again.
    assert memories(cli, home) >= acknowledged
    assert cli(home, "log", "verify").code == 0
    if command == ["key", "rotate"]:
        assert sorted(p.name for p in (home / "keys").iterdir()) == keys_before
    r = cli(home, *args)
    assert r.code == 0, r.stdout + r.stderr


# -- a real full disk -----------------------------------------------------------------------


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(disk: Path, leave_kib: int = 0) -> None:
    """Take every free byte of the disk but `leave_kib` KiB."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize - leave_kib * 1024
    with open(disk / f"filler-{len(list(disk.glob('filler-*')))}", "wb") as f:
        while free > 0:
            try:
                f.write(b"\0" * min(free, 1 << 20))
            except OSError:
                break
            free -= 1 << 20


@pytest.mark.slow
def test_a_real_full_disk(cli: Cli, disk: Path) -> None:
    home = disk / "home"
    assert cli(home, "init").code == 0
    stored = set()
    for i in range(10):
        p = cli(home, "--json", "store", f"memory {i} about the harbour at dawn")
        assert p.code == 0
        stored.add(json.loads(p.stdout)["memory"]["id"])
    shutil.rmtree(home / "projections")
    (home / "projections").mkdir(mode=0o700)
    for leave in (0, 64, 256):
        for args in (
            ["rebuild"],
            ["vault", "render", str(disk / "vault")],
            ["key", "rotate"],
            ["store", "x y"],
        ):
            for f in disk.glob("filler-*"):
                f.unlink()
            fill(disk, leave)
            p = cli(home, *args)
            assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
            assert p.code in (0, 6), p.stderr
            if p.code == 6:
                assert str(disk) in p.stderr, p.stderr
            elif args[0] == "store":
                stored.add(p.stdout.strip().removeprefix("stored "))
            assert temps(disk) == [], temps(disk)
    for f in disk.glob("filler-*"):
        f.unlink()
    assert cli(home, "log", "verify").code == 0
    assert cli(home, "rebuild").code == 0
    p = cli(home, "--json", "list", "--limit", "1000")
    listed = {m["id"] for m in json.loads(p.stdout)["memories"]}
    assert stored <= listed  # nothing acknowledged was lost
