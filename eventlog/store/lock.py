"""The one file lock of mnemolog: an exclusive flock with a timeout, and waiters that announce themselves.

Used for the log writer lock (`log/.lock`), checkpoints, the projection
database (`projections/.lock`), migrations and the worker. The OS drops a
flock when the process dies, so a killed holder never leaves a stale lock,
and a killed waiter never leaves a stale announcement.

- Threads: flock locks belong to the open file description, so threads of
  one process would share one. By default (`per_thread=True`) a re-entrant
  threading lock in front makes the lock exclusive between threads too. A
  lock owned by the process instead (`per_thread=False`: the caller orders
  its threads, and any thread may release it, as the projection store's idle
  timer does) is not re-entrant: taking it twice is an error.
- Waiting is polling (flock cannot time out). One fairness mechanism serves
  every lock: a waiter that `announce`s itself holds a shared lock on a
  sibling file (`<name>.wait`) while it waits, and `others_waiting()` tells a
  holder that someone does. What a holder does about it is its policy: a
  `fair` lock (the writer, which retakes its lock batch after batch) steps
  aside once when it has held the lock a while; the projection store lets go
  of its open database.
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
    """`keep_open=True` keeps the lock file open between acquisitions (two system calls per
    cycle instead of four, for a writer that locks per batch); such a lock must be
    `close()`d. `announce=True` makes waiters announce themselves (see the module
    docstring); `fair=True` implies it and keep_open, and steps aside for them."""

    def __init__(
        self,
        path: Path,
        timeout: float = 30.0,
        what: str = "lock",
        *,
        keep_open: bool = False,
        fair: bool = False,
        announce: bool = False,
        per_thread: bool = True,
    ) -> None:
        self.path = path
        self.timeout = timeout
        self.what = what
        self.keep_open = keep_open or fair
        self.fair = fair
        self.announce = announce or fair
        self.per_thread = per_thread
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
            raise StorageError(f"cannot open {self.what} {path}: {exc}", file=str(path)) from exc

    def _wait_file(self) -> int:
        if self._wait_fd is None:
            self._wait_fd = self._open(self.path.with_name(self.path.name + ".wait"))
        return self._wait_fd

    def others_waiting(self) -> bool:
        """Whether another process (or another lock object) announced that it waits for this lock."""
        try:
            fd = self._wait_file()
        except StorageError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False

    def acquire(self, timeout: float | None = None) -> None:
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        if self.per_thread:
            if not self._thread_lock.acquire(timeout=max(limit, 0.0)):
                raise LockTimeout(
                    f"timed out after {limit:.1f}s waiting for the {self.what} ({self.path})",
                    file=str(self.path),
                )
            if self._depth:
                self._depth += 1
                return
        elif self._fd is not None:
            raise StorageError(f"the {self.what} is already held by this process", file=str(self.path))
        try:
            self._take(limit, deadline)
        except BaseException:
            if self.per_thread:
                self._thread_lock.release()
            raise

    def _take(self, limit: float, deadline: float) -> None:
        fd = self._open_fd
        if fd is None:
            fd = self._open(self.path)
            if self.keep_open:
                self._open_fd = fd
        if self.announce:
            self._wait_file()
        if self.fair and time.monotonic() - self._run_start > FAIR_QUANTUM and self.others_waiting():
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
                        raise LockTimeout(
                            f"timed out after {limit:.1f}s waiting for the {self.what} "
                            f"({self.path}); another process holds it",
                            file=str(self.path),
                        ) from None
                    if self.announce and not announced:
                        try:
                            fcntl.flock(self._wait_file(), fcntl.LOCK_SH | fcntl.LOCK_NB)
                            announced = True
                        except BlockingIOError:
                            pass  # a holder is looking right now; announce on the next round
                    time.sleep(delay)
                    delay = min(delay * 2, MAX_POLL)
        finally:
            if announced:
                fcntl.flock(self._wait_file(), fcntl.LOCK_UN)
        if announced:
            self._run_start = time.monotonic()
        self._fd = fd
        self._depth = 1

    def release(self) -> None:
        if self.per_thread:
            self._depth -= 1
            if self._depth == 0:
                self._unlock()
            self._thread_lock.release()
            return
        self._depth = 0
        self._unlock()

    def _unlock(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            if fd != self._open_fd:
                os.close(fd)

    def close(self) -> None:
        """Close the files a lock keeps open (a kept-open lock, the announcement file)."""
        with self._thread_lock:
            if self._fd is None:
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
