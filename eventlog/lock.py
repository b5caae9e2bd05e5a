"""An exclusive advisory file lock (flock) with a timeout, safe across threads.

flock locks belong to the open file description, so threads of one process
would share it; a threading lock in front makes the lock exclusive between
threads too. The OS drops the lock when the process dies, so a killed writer
never leaves a stale lock behind.

Waiting is polling (flock cannot time out), and a process that takes the lock
again and again, batch after batch, would win nearly every race against a
poller. A `fair` lock therefore lets waiters announce themselves with a shared
lock on a sibling file (`<name>.wait`); a holder that has had the lock for a
while without a break steps aside once for them.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path
from types import TracebackType

from mnemolog.eventlog.errors import LockTimeout, StorageError

FAIR_QUANTUM = 0.005  # seconds a fair lock may be retaken back to back while others wait
FAIR_PAUSE = 0.002  # how long it then steps aside (more than a waiter's longest poll)
MAX_POLL = 0.001


class FileLock:
    """`keep_open=True` keeps the lock file open between acquisitions (two system
    calls per cycle instead of four, for a writer that locks per batch); such a
    lock must be `close()`d. `fair=True` (implies keep_open) shares the lock with
    other processes that wait for it, at a small cost when they do."""

    def __init__(
        self,
        path: Path,
        timeout: float = 30.0,
        what: str = "lock",
        *,
        keep_open: bool = False,
        fair: bool = False,
    ) -> None:
        self.path = path
        self.timeout = timeout
        self.what = what
        self.keep_open = keep_open or fair
        self.fair = fair
        self._thread_lock = threading.RLock()
        self._fd: int | None = None
        self._open_fd: int | None = None  # kept between acquisitions when keep_open
        self._wait_fd: int | None = None
        self._run_start = 0.0  # when this process last took the lock after waiting or a pause
        self._depth = 0

    def _open(self, path: Path) -> int:
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open {self.what} {path}: {exc}") from exc

    def _others_wait(self) -> bool:
        """Whether another process holds the shared 'waiting' lock."""
        assert self._wait_fd is not None
        try:
            fcntl.flock(self._wait_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self._wait_fd, fcntl.LOCK_UN)
        return False

    def acquire(self, timeout: float | None = None) -> None:
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        if not self._thread_lock.acquire(timeout=max(limit, 0.0)):
            raise LockTimeout(
                f"timed out after {limit:.1f}s waiting for the {self.what} ({self.path})",
                file=str(self.path),
            )
        if self._depth:
            self._depth += 1
            return
        try:
            fd = self._open_fd
            if fd is None:
                fd = self._open(self.path)
                if self.keep_open:
                    self._open_fd = fd
            if self.fair and self._wait_fd is None:
                self._wait_fd = self._open(self.path.with_name(self.path.name + ".wait"))
        except BaseException:
            self._thread_lock.release()
            raise
        if self.fair and time.monotonic() - self._run_start > FAIR_QUANTUM and self._others_wait():
            time.sleep(FAIR_PAUSE)  # step aside once: a waiter polls at least this often
            self._run_start = time.monotonic()
        delay = 0.00005
        announced = False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        if not self.keep_open:
                            os.close(fd)
                        self._thread_lock.release()
                        raise LockTimeout(
                            f"timed out after {limit:.1f}s waiting for the {self.what} "
                            f"({self.path}); another process holds it",
                            file=str(self.path),
                        ) from None
                    if self.fair and not announced:
                        assert self._wait_fd is not None
                        try:
                            fcntl.flock(self._wait_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                            announced = True
                        except BlockingIOError:
                            pass  # a holder is looking right now; announce on the next round
                    time.sleep(delay)
                    delay = min(delay * 2, MAX_POLL)
        finally:
            if announced:
                assert self._wait_fd is not None
                fcntl.flock(self._wait_fd, fcntl.LOCK_UN)
        if announced:
            self._run_start = time.monotonic()
        self._fd = fd
        self._depth = 1

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            if self._fd != self._open_fd:
                os.close(self._fd)
            self._fd = None
        self._thread_lock.release()

    def close(self) -> None:
        """Close a kept-open lock file (the lock must not be held)."""
        with self._thread_lock:
            if self._depth == 0:
                for fd in (self._open_fd, self._wait_fd):
                    if fd is not None:
                        os.close(fd)
                self._open_fd = self._wait_fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
