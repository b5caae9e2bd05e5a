"""Killed commands leave nothing a later command keeps: replay build directories, vault temp files.

A killed replay never leaves a copy of the private key anywhere; the next
replay removes abandoned build directories; the next vault render removes
the temp files a killed render left beside the files it manages.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mnemolog.projections.vault.render import MANIFEST_NAME
from mnemolog.substrate.home import Home
from tests.projections.kit import new_home
from tests.support.cli import Cli

EXE = Path(sys.executable).with_name("mnemolog")


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.fixture(scope="module")
def source(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> tuple[Home, Path]:
    root = tmp_path_factory.mktemp("leftovers")
    home = new_home(root / "home")
    for i in range(40):
        assert cli(home, "store", f"memory {i} about harbours and ships").code == 0
    export = root / "log.cbor"
    assert cli(home, "log", "export", "-o", str(export)).code == 0
    return home, export


def key_copies(directory: Path, secret: bytes) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file() and secret in p.read_bytes()]


def test_abandoned_replay_directories_are_removed_by_the_next_replay(
    cli: Cli, source: tuple[Home, Path], tmp_path: Path
) -> None:
    home, export = source
    stale = tmp_path / f".new.replay-{dead_pid()}-abcd1234"
    (stale / "keys").mkdir(parents=True)
    (stale / "keys" / "signing.key").write_bytes(home.signing_key_path.read_bytes())
    old_style = tmp_path / ".new.replay-x1y2z3"
    old_style.mkdir()
    live = tmp_path / f".new.replay-{os.getpid()}-inprogress"
    live.mkdir()
    other = tmp_path / ".other.replay-1-zz"
    other.mkdir()
    ran = cli(
        None,
        "replay",
        str(export),
        "--home",
        str(tmp_path / "new"),
        "--signing-key",
        str(home.signing_key_path),
    )
    code, out = ran.code, ran.output
    assert code == 0, out
    assert not stale.exists() and not old_style.exists()
    assert live.exists() and other.exists()  # a replay still running, and another home's
    assert (tmp_path / "new" / "keys" / "signing.key").read_bytes() == home.signing_key_path.read_bytes()


@pytest.mark.slow
def test_a_killed_replay_never_leaves_a_copy_of_the_private_key(
    cli: Cli, source: tuple[Home, Path], tmp_path: Path
) -> None:
    home, export = source
    secret = home.signing_key_path.read_bytes().strip().split(b"+")[-1]
    rng = random.Random(7)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOLOG_")}
    deadline = time.monotonic() + 120
    kills = 0
    for attempt in range(8):
        if time.monotonic() > deadline:
            break
        target = tmp_path / f"new{attempt}"
        p = subprocess.Popen(
            [
                str(EXE),
                "replay",
                str(export),
                "--home",
                str(target),
                "--signing-key",
                str(home.signing_key_path),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.2, 2.5))
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        p.wait()
        leftovers = [d for d in tmp_path.iterdir() if d.name.startswith(f".{target.name}.replay-")]
        for d in leftovers:
            assert key_copies(d, secret) == [], f"a killed replay left the private key in {d}"
    # Whatever was killed, a new replay to each target cleans up and succeeds.
    for attempt in range(8):
        target = tmp_path / f"new{attempt}"
        if target.exists():
            continue
        ran = cli(
            None, "replay", str(export), "--home", str(target), "--signing-key", str(home.signing_key_path)
        )
        code, out = ran.code, ran.output
        assert code == 0, out
        assert not [d for d in tmp_path.iterdir() if d.name.startswith(f".{target.name}.replay-")]
    assert kills >= 0


def test_a_killed_render_leaves_temp_files_that_the_next_render_removes(
    cli: Cli, source: tuple[Home, Path], tmp_path: Path
) -> None:
    home, _ = source
    vault = tmp_path / "vault"
    ran = cli(home, "vault", "render", str(vault), "--agent", "bot")
    code, out = ran.code, ran.output
    assert code == 0, out
    agent = vault / "bot"
    note = next((agent / "memory").glob("*.md"))
    pid = dead_pid()
    leftovers = [
        note.with_name(f".{note.name}.{pid}.tmp"),
        agent / "memory" / f".INDEX.md.{pid}.tmp",
        agent / f".{MANIFEST_NAME}.{pid}.tmp",
    ]
    for p in leftovers:
        p.write_bytes(b"half a file")
    kept = [
        note.with_name(f".{note.name}.{os.getpid()}.tmp"),  # a render in progress
        agent / "memory" / f".not-ours.md.{pid}.tmp",  # no file of the vault
        agent / "notes.txt",
    ]
    for p in kept:
        p.write_bytes(b"keep me")
    ran = cli(home, "vault", "render", str(vault), "--agent", "bot")
    code, out = ran.code, ran.output
    assert code == 0, out
    assert [p for p in leftovers if p.exists()] == []
    assert all(p.exists() for p in kept)
