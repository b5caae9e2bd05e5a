"""The writer lock: exclusive across threads and processes, timeouts, and fairness to waiters."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mnemolog.eventlog.errors import LockTimeout
from mnemolog.eventlog.store.lock import FileLock

# Processes, locks and timing bounds: run alone, not beside other tests under xdist.
pytestmark = pytest.mark.serial


def test_reentrant_and_exclusive_between_threads(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / ".lock", 0.2)
    with lock, lock:
        assert lock.held
        other = FileLock(tmp_path / ".lock", 0.1)
        box: list[BaseException] = []
        t = threading.Thread(target=lambda: _try(other, box))
        t.start()
        t.join()
        assert isinstance(box[0], LockTimeout)
    assert not lock.held


def _try(lock: FileLock, box: list[BaseException]) -> None:
    try:
        lock.acquire()
    except BaseException as exc:
        box.append(exc)


HOLD = """
import sys, time
from pathlib import Path
from mnemolog.eventlog.store.lock import FileLock
lock = FileLock(Path(sys.argv[1]), 5, fair=True)
lock.acquire()
print("held", flush=True)
time.sleep(float(sys.argv[2]))
lock.release()
"""


def test_exclusive_between_processes_and_released_on_exit(tmp_path: Path) -> None:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / ".lock"), "0.5"], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    with pytest.raises(LockTimeout) as ei:
        FileLock(tmp_path / ".lock", 0.1).acquire()
    assert "another process holds it" in ei.value.message
    t0 = time.monotonic()
    with FileLock(tmp_path / ".lock", 5):
        assert time.monotonic() - t0 < 3
    p.wait()


def test_a_fair_lock_steps_aside_for_a_waiter(tmp_path: Path) -> None:
    """A process taking the lock back to back does not starve another one."""
    path = tmp_path / ".lock"
    stop = time.monotonic() + 1.0
    hog = FileLock(path, 5, fair=True)
    # (Threads of one process exclude each other with a thread lock first: the waiter is a process.)
    code = (
        "import time, sys\nfrom pathlib import Path\nfrom mnemolog.eventlog.store.lock import FileLock\n"
        "w = FileLock(Path(sys.argv[1]), 5, fair=True)\nt0 = time.monotonic()\nw.acquire()\n"
        "print(time.monotonic() - t0, flush=True)\nw.release()\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    while time.monotonic() < stop and p.poll() is None:
        hog.acquire()
        time.sleep(0.0005)  # a batch
        hog.release()
    out, _ = p.communicate(timeout=10)
    hog.close()
    assert p.returncode == 0
    assert float(out) < 0.9, "the waiter only got the lock once the hog stopped"
