"""The DuckDB adapter: one projection database file shared by every process of a home.

DuckDB lets one process at a time open a file read-write. Every process that
reads or folds projections therefore takes `projections/.lock` (an exclusive
flock) before it opens the file and lets go when it is done; nothing touches
DuckDB without it. A long-running process (an MCP server, a worker) keeps the
connection open between calls for speed, and releases it

  * as soon as another process announces that it is waiting (the lock's
    waiters hold a shared lock on `projections/.lock.wait` while they wait:
    the one fairness mechanism of `eventlog.lock`), checked after every
    session, and
  * after `idle_release_ms` without a session, from a timer thread,

so CLI commands in other processes never wait long. A process that finds
someone else's announcement lets them go first instead of racing them for
the lock it just gave up (flock is not fair, and a busy holder would
otherwise win almost every time). An announcement ends with its process,
so a waiter that was killed announces nobody. Reopening costs a few
milliseconds, and the caller's catch-up brings the tables up to the log.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
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
CATALOG = "proj"
MEMORY_LIMIT = "1GB"
ROW_GROUP_SIZE = 16_384
YIELD_MAX_S = 5.0


class _NoPandas(importlib.abc.MetaPathFinder):
    """A finder that answers "no such module" for pandas before the path finders search."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname.partition(".")[0] == "pandas":
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)


def _fail_fast_missing_pandas() -> None:
    """Make DuckDB's per-parameter `import pandas` attempt fail without a search of sys.path.

    The Python binding tries to import pandas for every parameter it binds;
    when pandas is not installed, each failed import walks sys.path again,
    which cost 0.35 ms per statement, a third of a store. A finder placed
    first on sys.meta_path refuses pandas at once, exactly as the search
    would have refused it.

    Not a None entry in sys.modules, Python's other way to say "not
    importable": pyarrow's pandas check, run the first time it converts a
    numpy array, reads `__version__` from what the import returned and breaks
    on None; and priming pyarrow first would import it on every read.
    """
    if "pandas" not in sys.modules and importlib.util.find_spec("pandas") is None:
        sys.meta_path.insert(0, _NoPandas())


_fail_fast_missing_pandas()


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


def load_vss(conn: duckdb.DuckDBPyConnection) -> None:
    """Load the vss extension (HNSW indexes, array distances) from the duckdb-extension-vss wheel.

    Loaded before any file is attached: a database holding an HNSW index can
    only be opened by an instance that knows the index type.
    """
    path = _extension_path("duckdb_extension_vss", "vss")
    try:
        conn.execute(f"LOAD '{path}'" if path is not None else "LOAD vss")
        # HNSW indexes live in the projection file; mnemolog never trusts one across a crash
        # (projections/vectors.py checks and rebuilds it from the stored vectors).
        conn.execute("SET hnsw_enable_experimental_persistence = true")
    except duckdb.Error as exc:
        raise StorageError(
            "cannot load DuckDB's vss extension; install duckdb-extension-vss "
            f"matching duckdb {duckdb.__version__}: {exc}"
        ) from exc


class ProjectionStore:
    """The projection database of one directory, opened under the projection lock.

    A store keeps one in-memory DuckDB instance for its lifetime (the fts
    extension and the tokenizer macros are loaded into it once: loading fts
    alone costs about 25 ms) and attaches the database file to it for a
    session, detaching it to let go. `on_connect` runs once per instance,
    `on_attach` after each attach.
    """

    def __init__(
        self,
        directory: Path,
        *,
        on_attach: Callable[[duckdb.DuckDBPyConnection], None],
        on_connect: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
        hold: bool = False,
        idle_release_ms: int = 250,
        lock_timeout: float = 60.0,
        threads: int | None = None,
        memory_limit: str | None = None,
    ) -> None:
        self.dir = directory
        self.path = directory / DB_NAME
        self.on_attach = on_attach
        self.on_connect = on_connect
        self.hold = hold
        self.idle_release = idle_release_ms / 1000.0
        self.threads = threads
        self.memory_limit = memory_limit
        self.lock_timeout = lock_timeout
        # Owned by the process (the idle timer may let go of it), and its waiters announce
        # themselves: the one lock of eventlog.lock, with its one fairness mechanism.
        self._lock = FileLock(
            directory / ".lock", lock_timeout, "projection lock", announce=True, per_thread=False
        )
        self._base: duckdb.DuckDBPyConnection | None = None
        self._conn: duckdb.DuckDBPyConnection | None = None  # the base, while the file is attached
        self._mutex = threading.RLock()
        self._last_used = 0.0
        self._depth = 0
        self._closed = False
        self._timer: threading.Thread | None = None
        self.attachments = 0  # how many times the file was attached (tests, diagnostics)

    # -- sessions ------------------------------------------------------------

    @contextmanager
    def session(self, *, fresh: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """The connection, with the lock held, for the duration of the block.

        `fresh=True` deletes the database file first (under the lock), so the
        block starts from an empty database.
        """
        with self._mutex:
            if self._closed:
                raise StorageError("the projection store is closed")
            if fresh:
                if self._depth:
                    raise StorageError("cannot start a fresh projection database inside a session")
                self._release()
            self._depth += 1
            try:
                conn = self._ensure_open(fresh)
                yield conn
            finally:
                self._depth -= 1
                self._last_used = time.monotonic()
                if self._depth == 0 and (not self.hold or self._others_waiting()):
                    self._release()

    @property
    def attached(self) -> bool:
        return self._conn is not None

    def _ensure_open(self, fresh: bool = False) -> duckdb.DuckDBPyConnection:
        if self._conn is not None:
            return self._conn
        self.dir.mkdir(parents=True, exist_ok=True)
        base = self._instance()
        self._yield_to_waiters()
        if not self._try_lock():
            self._lock.acquire()  # announces itself while it waits
        try:
            if fresh:
                self._delete_files()
            self._attach(base)
            try:
                self.on_attach(base)
            except BaseException:
                self._detach(base)
                raise
        except BaseException:
            self._lock.release()
            raise
        self._conn = base
        self.attachments += 1
        if self.hold:
            self._start_timer()
        return base

    def _try_lock(self) -> bool:
        try:
            self._lock.acquire(timeout=0.0)
        except LockTimeout:
            return False
        return True

    def _yield_to_waiters(self) -> None:
        """Let processes already waiting for the lock have it first (for a bounded time)."""
        deadline = time.monotonic() + min(self.lock_timeout, YIELD_MAX_S)
        delay = 0.0005
        while self._others_waiting() and time.monotonic() < deadline:
            time.sleep(delay)
            delay = min(delay * 2, 0.01)

    def _instance(self) -> duckdb.DuckDBPyConnection:
        if self._base is None:
            # Bounded memory, spilling under the projections directory: a rebuild's final
            # sort of the whole index must not take the machine (or fill the cwd).
            config: dict[str, Any] = {
                "memory_limit": self.memory_limit or MEMORY_LIMIT,
                "temp_directory": str(self.dir / "duckdb.tmp"),
                # The only extension ever loaded is fts, by absolute path from the
                # duckdb-extension-fts wheel installed beside duckdb itself: whoever can
                # replace that file can replace duckdb's own library, so its signature
                # adds no trust here, while checking it (RSA over 11 MB) cost every
                # process 60-70 ms of CPU, the largest part of a `mnemolog get`.
                # Nothing else can LOAD: no SQL text comes from users.
                "allow_unsigned_extensions": "true",
            }
            if self.threads:
                config["threads"] = self.threads
            base = duckdb.connect(":memory:", config=config)
            try:
                load_fts(base)
                load_vss(base)
                if self.on_connect is not None:
                    self.on_connect(base)
            except BaseException:
                base.close()
                raise
            self._base = base
        return self._base

    def _attach(self, base: duckdb.DuckDBPyConnection) -> None:
        # Attached with a smaller row group than DuckDB's 122,880 rows: the sorted
        # postings are pruned by row group, and big groups make a recall read
        # several times the rows it needs.
        path = str(self.path).replace("'", "''")
        last: Exception | None = None
        # Another process may have just let go of the lock while DuckDB's own
        # file lock is still held for a moment: retry briefly.
        for attempt in range(50):
            try:
                base.execute(f"ATTACH '{path}' AS {CATALOG} (ROW_GROUP_SIZE {ROW_GROUP_SIZE})")
                base.execute(f"USE {CATALOG}")
                return
            except duckdb.IOException as exc:
                last = exc
                if "lock" not in str(exc).lower():
                    break
                time.sleep(min(0.005 * (attempt + 1), 0.05))
            except duckdb.Error as exc:
                last = exc
                break
        raise StorageError(
            f"cannot open the projection database {self.path}: {last} (it is derived data: "
            "`mnemolog rebuild` recreates it from the log)",
            file=str(self.path),
        )

    def _detach(self, base: duckdb.DuckDBPyConnection) -> None:
        try:
            base.execute("USE memory")
            base.execute(f"DETACH DATABASE IF EXISTS {CATALOG}")
        except duckdb.Error:
            # A detach that fails leaves the instance unusable: drop it, which
            # closes the file too; the next session starts a new one.
            self._base = None
            base.close()

    def _others_waiting(self) -> bool:
        return self._lock.others_waiting()

    def _release(self) -> None:
        if self._conn is not None:
            try:
                self._detach(self._conn)
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
            # Short polls: a waiting process should not wait for the idle timeout.
            time.sleep(max(min(self.idle_release / 4, 0.01), 0.001))
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
            self._lock.close()
            if self._base is not None:
                self._base.close()
                self._base = None

    def _delete_files(self) -> None:
        for suffix in ("", ".wal"):
            Path(str(self.path) + suffix).unlink(missing_ok=True)
