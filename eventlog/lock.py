"""An exclusive advisory file lock (flock) with a timeout, safe across threads.

flock locks belong to the open file description, so threads of one process
would share it; a threading lock in front makes the lock exclusive between
threads too. The OS drops the lock when the process dies, so a killed writer
never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path
from types import TracebackType

from mnemolog.eventlog.errors import LockTimeout, StorageError


class FileLock:
    """`keep_open=True` keeps the lock file open between acquisitions (two system
    calls per cycle instead of four, for a writer that locks per batch); such a
    lock must be `close()`d."""

    def __init__(
        self, path: Path, timeout: float = 30.0, what: str = "lock", *, keep_open: bool = False
    ) -> None:
        self.path = path
        self.timeout = timeout
        self.what = what
        self.keep_open = keep_open
        self._thread_lock = threading.RLock()
        self._fd: int | None = None
        self._open_fd: int | None = None  # kept between acquisitions when keep_open
        self._depth = 0

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
        fd = self._open_fd
        if fd is None:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                self._thread_lock.release()
                raise StorageError(f"cannot open {self.what} {self.path}: {exc}") from exc
            if self.keep_open:
                self._open_fd = fd
        delay = 0.001
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
                time.sleep(delay)
                delay = min(delay * 2, 0.02)
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
            if self._open_fd is not None and self._depth == 0:
                os.close(self._open_fd)
                self._open_fd = None

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
