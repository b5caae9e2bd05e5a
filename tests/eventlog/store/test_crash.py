"""Crash safety: a child appending in a loop is SIGKILLed at random moments, many times.

After every kill the log reopens, every entry the child acknowledged (it
prints each receipt's seq after append() returns) is there, the chain
verifies, and a torn tail, if the kill left one, is cut and reported. A test
hook the child installs (tests/support/slow_writes.py) writes each batch in
small pieces with pauses, so that kills land inside writes and torn tails
really happen; the test counts them.
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

from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.writer import LogWriter
from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.eventlog.verify.verifier import verify_log

# Processes, locks and timing bounds: run alone, not beside other tests under xdist.
pytestmark = pytest.mark.serial

CHILD = Path(__file__).resolve().parent.parent / "child.py"
REPO = Path(__file__).resolve().parents[3]
KEY = SigningKey(bytes([7]) * 32, "key-7")
KILLS_PER_MODE = 28
MNEMOLOG = [sys.executable, "-m", "mnemolog.cli.main"]


def _env(chunk: int = 512, pause: float = 0.0004) -> dict[str, str]:
    env = dict(os.environ)
    env["TEST_WRITE_CHUNK"] = str(chunk)
    env["TEST_WRITE_PAUSE"] = str(pause)
    env["PYTHONPATH"] = str(REPO)
    env.pop("MNEMOLOG_HOME", None)
    return env


def _spawn(log_dir: Path, mode: str, size: int, threads: int, tag: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, str(CHILD), "append", str(log_dir), "--mode", mode, "--size", str(size)]
    cmd += ["--threads", str(threads), "--tag", tag]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())


def _kill_at_random(p: subprocess.Popen[str], rng: random.Random) -> list[int]:
    # Wait for the child to be appending, then let it run a random while.
    assert p.stdout is not None
    first = p.stdout.readline()
    if not first:
        _, err = p.communicate()
        raise AssertionError(f"child died before appending: {err}")
    time.sleep(rng.uniform(0.0, 0.12))
    p.send_signal(signal.SIGKILL)
    rest, _ = p.communicate(timeout=30)
    assert p.returncode == -signal.SIGKILL
    return [int(line) for line in (first + rest).split()]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fsync", "group"])
def test_sigkill_at_random_moments(tmp_path: Path, mode: str) -> None:
    log_dir = tmp_path / "log"
    LogWriter.create(log_dir, KEY)
    rng = random.Random(f"crash-{mode}")
    acked: set[int] = set()
    torn = 0
    for k in range(KILLS_PER_MODE):
        size = rng.choice([2000, 6000, 20000])
        p = _spawn(log_dir, mode, size, threads=1 if mode == "fsync" else 3, tag=f"k{k}")
        seqs = _kill_at_random(p, rng)
        assert len(seqs) == len(set(seqs)) and not (set(seqs) & acked)
        acked |= set(seqs)
        # Reopen: a torn tail (if any) is cut and reported; acknowledged entries are all there.
        with LogWriter(log_dir, [KEY]) as w:
            torn += len(w.recovered)
            for t in w.recovered:
                assert t.length > 0 and Path(t.saved_to).exists()
            size_now = w.size
        assert max(acked) < size_now
        with Log(log_dir) as log:
            assert log.size == size_now
            for s in rng.sample(sorted(acked), min(5, len(acked))):
                assert log.entry(s).type == "note.added"
        r = verify_log(log_dir, processes=1, policy=TRUST_GENESIS)
        assert r.entries == size_now and r.torn_tail is None
    print(f"{mode}: {KILLS_PER_MODE} kills, {torn} torn tails, {len(acked)} acknowledged entries")
    assert torn >= 5, f"only {torn} torn tails in {KILLS_PER_MODE} kills: the kills are not landing in writes"
    recovery = (log_dir / "recovery.log").read_text().splitlines()
    assert len(recovery) == torn
    # Acknowledged entries are exactly where their receipts said.
    with Log(log_dir) as log:
        tags = {e.seq: e.data["tag"] for e in log.iter_entries(1)}
    assert acked <= set(tags)


@pytest.mark.slow
def test_torn_tail_is_reported_by_the_cli(tmp_path: Path) -> None:
    """The same recovery through `mnemolog`, which reports the cut on stderr."""
    from mnemolog.substrate.home import Home, init_home

    home = tmp_path / "home"
    init_home(home, key_name="crash")
    h = Home(home)
    key = h.signing_keys()[0]
    rng = random.Random(3)
    reported = 0
    for _ in range(8):
        cmd = [sys.executable, "-c", _CLI_CHILD.format(log=str(h.log_dir), key=str(h.signing_key_path))]
        p = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(256, 0.001)
        )
        seqs = _kill_at_random(p, rng)
        cli = subprocess.run(
            [*MNEMOLOG, "--home", str(home), "log", "append", "note.after", "--data", "{}"],
            capture_output=True,
            text=True,
            check=False,
            env={
                k: v for k, v in os.environ.items() if not k.startswith("MNEMOLOG_") or k == "MNEMOLOG_EMBED"
            },
        )
        assert cli.returncode == 0, cli.stderr
        assert "Traceback" not in cli.stderr
        if "recovery: cut a torn tail" in cli.stderr:
            reported += 1
        with Log(h.log_dir) as log:
            assert max(seqs) < log.size
    assert reported >= 2
    assert key.kid == h.signing_keys()[0].kid
    verify_log(h.log_dir, policy=TRUST_GENESIS)


_CLI_CHILD = """
import sys
from tests.support import slow_writes
slow_writes.install_from_env()
from pathlib import Path
from mnemolog.eventlog.format.keys import load_private_key
from mnemolog.eventlog.store.writer import LogWriter
w = LogWriter(Path({log!r}), [load_private_key(Path({key!r}))])
i = 0
while True:
    r = w.append("note.added", {{"i": i, "pad": "q" * 4000}})
    sys.stdout.write(f"{{r.seq}}\\n")
    sys.stdout.flush()
    i += 1
"""
