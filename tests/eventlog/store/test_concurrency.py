"""Several processes on one log: appenders and a key rotator make one contiguous, valid log;
a reader polling while a writer appends never sees a partial entry."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
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
SEEDS = "7,8,9,10,11"
KEYS = [SigningKey(bytes([int(s)]) * 32, f"key-{s}") for s in SEEDS.split(",")]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOLOG_") or k == "MNEMOLOG_EMBED"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[3])
    env.update(extra)
    return env


def _child(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or _env(),
    )


def _finish(p: subprocess.Popen[str]) -> list[int]:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    return [int(x) for x in out.split()]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fsync", "group"])
@pytest.mark.parametrize("rotating", [False, True], ids=["two-appenders", "two-appenders-and-a-rotator"])
def test_processes_appending_at_once(tmp_path: Path, mode: str, rotating: bool) -> None:
    log_dir = tmp_path / "log"
    LogWriter.create(log_dir, KEYS[0])
    count = 600 if mode == "fsync" else 400
    threads = "1" if mode == "fsync" else "3"
    common = ["--mode", mode, "--count", str(count), "--threads", threads, "--seeds", SEEDS, "--size", "300"]
    a = _child("append", str(log_dir), *common, "--tag", "a")
    b = _child("append", str(log_dir), *common, "--tag", "b")
    rot = _child("rotate", str(log_dir), "--seeds", SEEDS, "--pause", "0.15") if rotating else None
    seqs_a, seqs_b = _finish(a), _finish(b)
    seqs_r = _finish(rot) if rot else []
    per = count * int(threads)
    assert len(seqs_a) == len(seqs_b) == per
    everything = seqs_a + seqs_b + seqs_r
    assert len(set(everything)) == len(everything)
    assert sorted(everything) == list(range(1, 1 + len(everything)))
    r = verify_log(log_dir, policy=TRUST_GENESIS)
    assert r.entries == 1 + len(everything)
    with Log(log_dir) as log:
        tags = {e.seq: e.data.get("tag") for e in log.iter_entries(1) if e.type == "note.added"}
        kinds = [e.type for e in log.iter_entries(1)]
    assert {s for s, t in tags.items() if t == "a"} == set(seqs_a)
    assert {s for s, t in tags.items() if t == "b"} == set(seqs_b)
    order = [tags[s] for s in sorted(tags)]
    switches = sum(1 for x, y in itertools.pairwise(order) if x != y)
    print(f"{mode} rotating={rotating}: {switches} switches between the appenders")
    assert switches >= 4, "the two processes did not really append at the same time"
    if rotating:
        assert kinds.count("key.rotated") == len(KEYS) - 1 == len(seqs_r)
        assert r.keys == len(KEYS)
        # The rotations landed between appends, not after them all.
        assert min(seqs_r) < max(seqs_a + seqs_b) - 10


@pytest.mark.slow
def test_a_reader_never_sees_a_partial_entry(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    LogWriter.create(log_dir, KEYS[0])
    stop = tmp_path / "stop"
    reader = _child("read", str(log_dir), "--stop-file", str(stop))
    # Large entries, each written in many small pieces with pauses: the reader
    # polls while entries are half written.
    writer = _child(
        "append",
        str(log_dir),
        "--count",
        "40",
        "--size",
        "200000",
        "--no-checkpoint",
        env=_env(TEST_WRITE_CHUNK="8192", TEST_WRITE_PAUSE="0.0005"),
    )
    acked = _finish(writer)
    stop.write_text("done")
    out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, out + err
    seen, polls = (int(x) for x in out.split())
    assert seen == 41 and acked == list(range(1, 41))
    assert polls > 40  # it really was reading while the writer wrote
