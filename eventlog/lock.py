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
    def __init__(self, path: Path, timeout: float = 30.0, what: str = "lock") -> None:
        self.path = path
        self.timeout = timeout
        self.what = what
        self._thread_lock = threading.RLock()
        self._fd: int | None = None
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
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            self._thread_lock.release()
            raise StorageError(f"cannot open {self.what} {self.path}: {exc}") from exc
        delay = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
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
            os.close(self._fd)
            self._fd = None
        self._thread_lock.release()

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
