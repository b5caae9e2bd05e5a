"""The DuckDB adapter: one projection database file shared by every process of a home.

DuckDB lets one process at a time open a file read-write. Every process that
reads or folds projections therefore takes `projections/.lock` (an exclusive
flock) before it opens the file and lets go when it is done; nothing touches
DuckDB without it. A long-running process (an MCP server, a worker) keeps the
connection open between calls for speed, and releases it

  * as soon as another process announces that it is waiting (it creates
    `projections/.want-<pid>` before blocking on the lock), checked after
    every session, and
  * after `idle_release_ms` without a session, from a timer thread,

so CLI commands in other processes never wait long. Reopening costs a few
milliseconds, and the caller's catch-up brings the tables up to the log.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from mnemolog.eventlog.errors import LockTimeout, StorageError
from mnemolog.eventlog.lock import FileLock

DB_NAME = "mnemolog.duckdb"


def _extension_path(module: str, name: str) -> str | None:
    try:
        mod = __import__(module)
    except ImportError:
        return None
    base = Path(mod.__file__ or "").parent / "extensions" / f"v{duckdb.__version__}"
    path = base / f"{name}.duckdb_extension"
    return str(path) if path.exists() else None


def load_fts(conn: duckdb.DuckDBPyConnection) -> None:
    """Load the fts extension (for stem()) from the duckdb-extension-fts wheel."""
    path = _extension_path("duckdb_extension_fts", "fts")
    try:
        if path is not None:
            conn.execute(f"LOAD '{path}'")
        else:
            conn.execute("LOAD fts")
    except duckdb.Error as exc:
        raise StorageError(
            "cannot load DuckDB's fts extension; install duckdb-extension-fts "
            f"matching duckdb {duckdb.__version__}: {exc}"
        ) from exc


class ProjectionStore:
    def __init__(
        self,
        directory: Path,
        *,
        on_open: Callable[[duckdb.DuckDBPyConnection], None],
        hold: bool = False,
        idle_release_ms: int = 250,
        lock_timeout: float = 60.0,
        threads: int | None = None,
    ) -> None:
        self.dir = directory
        self.path = directory / DB_NAME
        self.on_open = on_open
        self.hold = hold
        self.idle_release = idle_release_ms / 1000.0
        self.threads = threads
        self._lock = FileLock(directory / ".lock", lock_timeout, "projection lock")
        self._conn: duckdb.DuckDBPyConnection | None = None
        self._mutex = threading.RLock()
        self._last_used = 0.0
        self._depth = 0
        self._closed = False
        self._timer: threading.Thread | None = None
        self._want = directory / f".want-{os.getpid()}"

    # -- sessions ------------------------------------------------------------

    @contextmanager
    def session(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The connection, with the lock held, for the duration of the block."""
        with self._mutex:
            if self._closed:
                raise StorageError("the projection store is closed")
            self._depth += 1
            try:
                conn = self._ensure_open()
                yield conn
            finally:
                self._depth -= 1
                self._last_used = time.monotonic()
                if self._depth == 0 and (not self.hold or self._others_waiting()):
                    self._release()

    def _ensure_open(self) -> duckdb.DuckDBPyConnection:
        if self._conn is not None:
            return self._conn
        self.dir.mkdir(parents=True, exist_ok=True)
        if not self._try_lock():
            self._want.touch()
            try:
                self._lock.acquire()
            finally:
                self._want.unlink(missing_ok=True)
        try:
            conn = self._connect()
        except BaseException:
            self._lock.release()
            raise
        try:
            self.on_open(conn)
        except BaseException:
            conn.close()
            self._conn = None
            self._lock.release()
            raise
        if self.hold:
            self._start_timer()
        return conn

    def _try_lock(self) -> bool:
        try:
            self._lock.acquire(timeout=0.0)
        except LockTimeout:
            return False
        return True

    def _connect(self) -> duckdb.DuckDBPyConnection:
        config: dict[str, Any] = {}
        if self.threads:
            config["threads"] = self.threads
        last: Exception | None = None
        # Another process may have just released the lock while DuckDB's own
        # file lock is still held for a moment: retry briefly.
        for attempt in range(50):
            try:
                conn = duckdb.connect(str(self.path), config=config)
                break
            except duckdb.IOException as exc:
                last = exc
                time.sleep(min(0.005 * (attempt + 1), 0.05))
        else:
            raise StorageError(f"cannot open {self.path}: {last}", file=str(self.path))
        load_fts(conn)
        self._conn = conn
        return conn

    def _others_waiting(self) -> bool:
        try:
            with os.scandir(self.dir) as it:
                return any(e.name.startswith(".want-") and e.name != self._want.name for e in it)
        except FileNotFoundError:
            return False

    def _release(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
                self._lock.release()

    def _start_timer(self) -> None:
        if self._timer is not None and self._timer.is_alive():
            return
        self._timer = threading.Thread(target=self._idle_loop, daemon=True, name="projection-idle")
        self._timer.start()

    def _idle_loop(self) -> None:
        while True:
            time.sleep(max(self.idle_release / 4, 0.01))
            with self._mutex:
                if self._closed or self._conn is None:
                    return
                idle = time.monotonic() - self._last_used
                if self._depth == 0 and (idle >= self.idle_release or self._others_waiting()):
                    self._release()
                    return

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            self._release()

    def delete_database(self) -> None:
        """Remove the database files (for rebuild); caller must not hold a session."""
        with self._mutex:
            self._release()
            with self._lock:
                for suffix in ("", ".wal"):
                    p = Path(str(self.path) + suffix)
                    p.unlink(missing_ok=True)
