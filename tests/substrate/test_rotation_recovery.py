"""Key rotation survives a kill at every step: the next open finishes or rolls it back from the log.

Each step is killed for real (os._exit in a child process, so no cleanup
runs), then a fresh process opens the home. A rotation the log holds is
finished (the new key signs, the old one is retired); one it does not hold is
rolled back (the incoming key, which signed nothing, is removed). Either way
the home works, every history key has its .pub, and no private key is left in
a temp file. A loop of real SIGKILLs at random moments checks the same.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mnemolog.eventlog.format.keys import load_private_key
from mnemolog.eventlog.store.log import Log
from tests.projections.kit import new_home
from tests.support.cli import Cli

EXE = Path(sys.executable).with_name("mnemolog")

CHILD = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    import mnemolog.eventlog.store.fsio as fsio
    import mnemolog.eventlog.store.writer as writer
    import mnemolog.substrate.home as hm

    root, step = Path(sys.argv[1]), sys.argv[2]

    def die():
        os._exit(137)

    if step == "writing next.key":
        real_fsync = os.fsync
        def fsync(fd):
            where = os.readlink(f"/proc/self/fd/{fd}")
            if where.endswith(".tmp") and "next.key" in where:
                die()
            return real_fsync(fd)
        fsio.os.fsync = fsync
    elif step == "next.key saved":
        hm.write_public_key = lambda *a, **k: die()
    elif step == "next .pub saved":
        writer.LogWriter.rotate_key = lambda *a, **k: die()
    elif step == "rotation in the log":
        real_rotate = writer.LogWriter.rotate_key
        def rotate(self, *a, **k):
            real_rotate(self, *a, **k)
            die()
        writer.LogWriter.rotate_key = rotate
    elif step in ("old key retired", "new key in place"):
        real_replace = os.replace
        seen = []
        def replace(src, dst, *a, **k):
            real_replace(src, dst, *a, **k)
            seen.append(dst)
            if "retired" in str(dst) and step == "old key retired":
                die()
            if str(dst).endswith("signing.key") and step == "new key in place":
                die()
        hm.os.replace = replace
    home = hm.Home(root)
    w = home.open_writer()
    home.rotate_key(w)
    w.close()
    print("no kill")
    """
)

STEPS = {
    "writing next.key": "rolled back",
    "next.key saved": "rolled back",
    "next .pub saved": "rolled back",
    "rotation in the log": "finished",
    "old key retired": "finished",
    "new key in place": "finished",
}


def history(home: Path) -> list[str]:
    with Log(home / "log") as log:
        return [ep.key.kid.hex() for ep in log.key_history()]


def check_settled(home: Path) -> None:
    """The invariants of a home with no rotation in progress."""
    keys = home / "keys"
    kids = history(home)
    assert load_private_key(keys / "signing.key").kid.hex() == kids[-1]
    assert not (keys / "next.key").exists()
    assert [p.name for p in keys.iterdir() if p.name.endswith(".tmp")] == []
    for kid in kids:
        assert (keys / f"{kid}.pub").is_file(), f"no .pub for history key {kid}"
    for kid in kids[:-1]:
        assert (keys / "retired" / f"{kid}.key").is_file(), f"retired key {kid} missing"
    pubs = {p.stem for p in keys.glob("*.pub")}
    assert pubs == set(kids), "a .pub for a key the log never announced"


@pytest.mark.parametrize("step", list(STEPS))
def test_a_kill_at_every_step_of_a_rotation(cli: Cli, tmp_path: Path, step: str) -> None:
    home = new_home(tmp_path / "home").root
    before = history(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOLOG_")}
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(home), step], capture_output=True, text=True, env=env, check=False
    )
    assert child.returncode == 137, child.stdout + child.stderr
    if step == "writing next.key":
        assert list((home / "keys").glob(".next.key.*.tmp")), "the kill left a temp key file"
    p = cli(home, "--json", "store", "after the kill")
    assert p.code == 0, p.stderr
    after = history(home)
    if STEPS[step] == "finished":
        assert len(after) == len(before) + 1
    else:
        assert after == before
    check_settled(home)
    assert cli(home, "log", "verify").code == 0
    assert cli(home, "key", "rotate").code == 0
    check_settled(home)
    assert cli(home, "log", "verify").code == 0


def test_a_history_key_without_its_pub_gets_it_back(cli: Cli, tmp_path: Path) -> None:
    home = new_home(tmp_path / "home").root
    assert cli(home, "key", "rotate").code == 0
    kid = history(home)[-1]
    (home / "keys" / f"{kid}.pub").unlink()
    (home / "keys" / "next.key").write_bytes(b"")  # anything unsettled sends the next open through recovery
    (home / "keys" / "next.key").unlink()
    os.rename(home / "keys" / "signing.key", home / "keys" / "retired" / f"{kid}.key")
    p = cli(home, "store", "x")
    assert p.code == 0, p.stderr
    assert "key recovery" in p.stderr
    check_settled(home)


def test_the_current_key_nowhere_is_a_signer_error_naming_it(cli: Cli, tmp_path: Path) -> None:
    home = new_home(tmp_path / "home").root
    (home / "keys" / "signing.key").unlink()
    p = cli(home, "store", "x")
    assert p.code == 6 and "signing.key" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow
def test_sigkill_loop_during_rotations(cli: Cli, tmp_path: Path) -> None:
    home = new_home(tmp_path / "home").root
    rng = random.Random(11)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOLOG_")}
    deadline = time.monotonic() + 240
    for _ in range(12):
        if time.monotonic() > deadline:
            break
        p = subprocess.Popen(
            [str(EXE), "--home", str(home), "key", "rotate"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.05, 1.5))
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait()
        q = cli(home, "--json", "store", "after a kill")  # the next open recovers
        assert q.code == 0, q.stderr
        assert json.loads(q.stdout)["ok"] is True
        check_settled(home)
    assert cli(home, "log", "verify").code == 0
