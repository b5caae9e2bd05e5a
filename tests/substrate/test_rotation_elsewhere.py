"""A long-lived process (an MCP server) keeps writing after `key rotate` ran in another process.

Before: every store through the server failed with `signer_error` until it was
restarted. The writer now notices the `key.rotated` in the log, loads the
home's new key, and carries on; without the new key it refuses with a message
that says what to do.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mnemolog.eventlog.errors import SignerError
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.verify.verifier import verify_log
from tests.projections.kit import new_home, open_sub

EXE = Path(sys.executable).with_name("mnemolog")


def rotate(home: Path) -> str:
    argv = [str(EXE), "--home", str(home), "--json", "key", "rotate"]
    p = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr + p.stdout
    return p.stdout


def test_a_server_follows_a_rotation_made_by_the_cli(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    with open_sub(home, long_lived=True, worker=False) as server:
        first = server.store("written before the rotation")
        old = server.writer.key.kid
        rotate(home.root)
        second = server.store("written after the rotation, by the same server")
        assert server.writer.key.kid != old
    with Log(home.log_dir) as log:
        kinds = [(e.type, e.kid) for e in log.iter_entries()]
    assert [t for t, _ in kinds].count("key.rotated") == 1
    assert kinds[-1][1] != old  # the last entries are signed by the new key
    assert first["id"] != second["id"]
    verify_log(home.log_dir, policy=home.trust_anchor(), high_water=home.high_water_marks())


def test_a_server_without_the_new_key_says_what_to_do(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    with open_sub(home, long_lived=True, worker=False) as server:
        server.store("before")
        rotate(home.root)
        # The new key is gone from this home (kept elsewhere): the server cannot sign.
        shutil.move(home.signing_key_path, tmp_path / "elsewhere.key")
        with pytest.raises(SignerError) as info:
            server.store("after")
        assert "rotated by another process" in info.value.message and "restart" in info.value.message
    # Closing released the lock without signing: a fresh writer with the new key carries on.
    shutil.move(tmp_path / "elsewhere.key", home.signing_key_path)
    with open_sub(home, worker=False) as after:
        after.store("after, by a process holding the current key")
    verify_log(home.log_dir, policy=home.trust_anchor(), high_water=home.high_water_marks())


def test_close_without_the_key_does_not_raise_and_signs_nothing(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    server = open_sub(home, long_lived=True, worker=False).__enter__()
    server.store("before")
    rotate(home.root)
    shutil.move(home.signing_key_path, tmp_path / "elsewhere.key")
    server.writer._appended = True  # as if the periodic checkpointer had not caught up
    server.writer._covered = 0
    checkpoints_before = sorted(p.name for p in (home.log_dir / "checkpoints").iterdir())
    server.close()
    assert sorted(p.name for p in (home.log_dir / "checkpoints").iterdir()) == checkpoints_before
