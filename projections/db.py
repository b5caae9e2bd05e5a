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

import functools
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, cast

import duckdb

from mnemolog.eventlog.errors import BadInput, LockTimeout, StorageError
from mnemolog.eventlog.store.fsio import fsync_dir
from mnemolog.eventlog.store.lock import FileLock

DB_NAME = "mnemolog.duckdb"
CATALOG = "proj"
MEMORY_LIMIT = "1GB"
ROW_GROUP_SIZE = 16_384
YIELD_MAX_S = 5.0


# Parameters are bound as SQL literals, not through DuckDB's Python binding.
# The binding asks the import system for pandas twice per parameter (to
# recognise pandas.NA and NaT); without pandas installed every ask walks
# sys.path again, which cost more than the statements themselves (a store
# 41 -> 64 ms, a recall 23 -> 43 ms). A library must not teach the host's
# import system to fail fast either (a None in sys.modules breaks pyarrow
# for the whole process), so the values are rendered here instead: exact,
# typed literals for the few Python types our statements bind, and the
# ordinary binding for anything else.
_PLACEHOLDERS = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|/\*.*?\*/|\?""", re.S)


@functools.lru_cache(maxsize=1024)
def _split(sql: str) -> tuple[str, ...]:
    """`sql` cut at its `?` placeholders (never inside strings, identifiers or comments)."""
    parts: list[str] = []
    start = 0
    for m in _PLACEHOLDERS.finditer(sql):
        if m.group() == "?":
            parts.append(sql[start : m.start()])
            start = m.end()
    parts.append(sql[start:])
    return tuple(parts)


class _Unbindable(Exception):
    pass


def _text(value: str) -> str:
    if "\x00" in value:
        # The SQL parser reads a C string: a NUL inside a literal would end the statement.
        return "(" + " || chr(0) || ".join(_text(part) for part in value.split("\x00")) + ")"
    return "'" + value.replace("'", "''") + "'"


def sql_literal(value: Any) -> str:
    """`value` as a DuckDB literal of the type the Python binding would give it."""
    if value is None:
        return "NULL"
    if value is True:
        return "TRUE"
    if value is False:
        return "FALSE"
    if isinstance(value, int):
        if -(2**63) <= value < 2**63:
            return f"CAST({int(value)} AS BIGINT)"
        raise _Unbindable
    if isinstance(value, float):
        # From text: a numeric literal is parsed as a DECIMAL first, whose conversion to
        # DOUBLE can round the last bit; the text of repr() always reads back exactly.
        return f"CAST('{float(value)!r}' AS DOUBLE)"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BadInput(
                f"text is not valid Unicode: lone surrogate U+{ord(value[exc.start]):04X} at character "
                f"{exc.start}",
                found=ascii(value)[:200],
            ) from None
        return _text(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return "CAST('" + "".join(f"\\x{b:02X}" for b in bytes(value)) + "' AS BLOB)"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(sql_literal(v) for v in value) + "]"
    raise _Unbindable


def bind(sql: str, params: Sequence[Any]) -> str | None:
    """`sql` with each `?` replaced by its parameter's literal; None when one cannot be rendered."""
    parts = _split(sql)
    if len(parts) - 1 != len(params):
        return None  # let DuckDB report the mismatch in its own words
    try:
        literals = [sql_literal(p) for p in params]
    except _Unbindable:
        return None
    out = [parts[0]]
    for lit, part in zip(literals, parts[1:], strict=True):
        out.append(lit)
        out.append(part)
    return "".join(out)


class Connection:
    """A DuckDB connection whose `execute` binds positional parameters as literals.

    Everything else is the underlying connection's own method.
    """

    __slots__ = ("_conn", "_in_txn", "_text", "_undo_text", "_vss")

    def __init__(
        self,
        conn: duckdb.DuckDBPyConnection,
        text: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
    ) -> None:
        self._conn = conn
        # Set up the tokenizer (fts's stem, the ml_ macros) before the first statement that
        # names them: a process that only reads rows (`mnemolog get`) never pays for it.
        self._text = text
        self._in_txn = False
        # The macros are catalog entries: set up inside a transaction that is then rolled
        # back, they vanish with it, so the set-up is owed again after that ROLLBACK.
        self._undo_text: Callable[[duckdb.DuckDBPyConnection], None] | None = None
        # The vss extension (HNSW indexes) likewise: loaded by the first statement that names
        # HNSW, or when a file holding such an index is attached (`load_vss_now`).
        self._vss = True

    def load_vss_now(self) -> None:
        """Load the vss extension now, unless it is loaded already (once per instance)."""
        if self._vss:
            load_vss(self._conn)
            self._vss = False

    def load_vss_if_indexed(self) -> None:
        """Load the vss extension now if the attached projection file holds an HNSW index."""
        if self._vss and self._conn.execute(HNSW_INDEXES).fetchone() is not None:
            self.load_vss_now()

    def execute(self, query: str, parameters: object = None) -> duckdb.DuckDBPyConnection:
        head = query[:32].lstrip()[:8].upper()  # a prefix: statements can carry megabytes of literals
        if head.startswith("BEGIN"):
            self._in_txn = True
        elif head.startswith(("COMMIT", "END")):
            self._in_txn, self._undo_text = False, None
        elif head.startswith("ROLLBACK"):
            self._in_txn = False
            if self._undo_text is not None:
                self._text, self._undo_text = self._undo_text, None
        if self._text is not None and ("ml_" in query or "stem(" in query):
            text, self._text = self._text, None
            try:
                text(cast(duckdb.DuckDBPyConnection, self))
            except BaseException:
                self._text = text  # the next statement that needs it tries again
                raise
            if self._in_txn:
                self._undo_text = text
        if self._vss and "USING HNSW" in query:
            self.load_vss_now()
        if parameters is None:
            return self._conn.execute(query)
        if isinstance(parameters, list | tuple):
            bound = bind(query, parameters)
            if bound is not None:
                return self._conn.execute(bound)
        return self._conn.execute(query, parameters)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


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

    An instance loads it once, when it is first needed (`Connection.load_vss_now`):
    before a statement that names HNSW, before attaching a file whose write-ahead
    log may hold index changes to replay, and right after attaching a file that
    holds an HNSW index (such a file reads without it, but its vector table
    cannot be written, and a vector search would scan instead of using the
    index). `mnemolog get` on a home below the HNSW threshold never loads it.
    """
    path = _extension_path("duckdb_extension_vss", "vss")
    try:
        conn.execute(f"LOAD '{path}'" if path is not None else "LOAD vss")
        # HNSW indexes live in the projection file; mnemolog never trusts one across a crash
        # (projections/embedding/vectors.py checks and rebuilds it from the stored vectors).
        conn.execute("SET hnsw_enable_experimental_persistence = true")
    except duckdb.Error as exc:
        raise StorageError(
            "cannot load DuckDB's vss extension; install duckdb-extension-vss "
            f"matching duckdb {duckdb.__version__}: {exc}"
        ) from exc


#: Whether the attached projection file holds an HNSW index (known without the vss extension).
HNSW_INDEXES: Final = (
    f"SELECT 1 FROM duckdb_indexes() WHERE database_name = '{CATALOG}' "
    "AND upper(sql) LIKE '%USING HNSW%' LIMIT 1"
)


class ProjectionStore:
    """The projection database of one directory, opened under the projection lock.

    A store keeps one in-memory DuckDB instance for its lifetime (the fts
    extension and the tokenizer macros are loaded into it once, before the
    first statement that names `stem` or an `ml_` object: loading fts alone
    costs about 25 ms, the macros as much again, and a process that only
    reads rows needs neither) and attaches the database file to it for a
    session, detaching it to let go. `on_connect` runs with fts, once per
    instance; `on_attach` after each attach.
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
            except (duckdb.IOException, duckdb.FatalException) as exc:
                # A full disk, a failed write or read: DuckDB may have invalidated the
                # instance, so it is dropped; the next session starts a fresh one.
                self._drop_instance()
                raise StorageError(
                    f"the projection database {self.path} failed: {exc} (it is derived data: "
                    "`mnemolog rebuild` recreates it from the log)",
                    file=str(self.path),
                ) from exc
            finally:
                self._depth -= 1
                self._last_used = time.monotonic()
                if self._depth == 0 and (not self.hold or self._others_waiting()):
                    self._release()

    def rewrite(
        self,
        before: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
        after: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
    ) -> None:
        """Copy every live row into a new database file and put it in the old one's place.

        Deleted rows can survive in a database file's free pages and its WAL:
        a copy (COPY FROM DATABASE) holds only the live ones, and costs a
        fraction of refolding the log. The lock is held throughout; `before`
        runs on the old file, `after` on the new one.
        """
        with self._mutex:
            if self._depth:
                raise StorageError("cannot rewrite the projection database inside a session")
            with self.session() as conn:
                if before is not None:
                    before(conn)
                conn.execute("CHECKPOINT")
                tmp = Path(f"{self.path}.rewrite")
                for suffix in ("", ".wal"):
                    Path(f"{tmp}{suffix}").unlink(missing_ok=True)
                name = str(tmp).replace("'", "''")
                conn.execute(f"ATTACH '{name}' AS proj_rewrite (ROW_GROUP_SIZE {ROW_GROUP_SIZE})")
                try:
                    conn.execute(f"COPY FROM DATABASE {CATALOG} TO proj_rewrite")
                    conn.execute("CHECKPOINT proj_rewrite")
                finally:
                    conn.execute("DETACH DATABASE IF EXISTS proj_rewrite")
                self._detach(conn)
                if self._base is None:
                    raise StorageError(f"the projection database {self.path} could not be detached")
                os.replace(tmp, self.path)
                for p in (Path(f"{self.path}.wal"), Path(f"{tmp}.wal")):
                    p.unlink(missing_ok=True)
                fsync_dir(self.dir)
                self._attach(conn)
                self.attachments += 1
                self.on_attach(conn)
                if after is not None:
                    after(conn)

    @property
    def attached(self) -> bool:
        return self._conn is not None

    def _ensure_open(self, fresh: bool = False) -> duckdb.DuckDBPyConnection:
        if self._conn is not None:
            return self._conn
        self._check_layout()
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
            on_connect = self.on_connect

            def text(conn: duckdb.DuckDBPyConnection) -> None:
                load_fts(conn)
                if on_connect is not None:
                    on_connect(conn)

            # The wrapper is what every caller holds; it types as a connection.
            raw = duckdb.connect(":memory:", config=config)
            self._base = cast(duckdb.DuckDBPyConnection, Connection(raw, text))
        return self._base

    def _drop_instance(self) -> None:
        base, self._base, self._conn = self._base, None, None
        try:
            if base is not None:
                base.close()
        except duckdb.Error:
            pass
        finally:
            self._lock.release()

    def _private_files(self) -> None:
        # DuckDB creates its files with the process's umask; under umask 000 they would be
        # world-writable. They are ours alone.
        for p in (self.path, Path(f"{self.path}.wal")):
            try:
                mode = os.stat(p).st_mode
                if mode & 0o077:
                    os.chmod(p, stat.S_IMODE(mode) & 0o700)
            except OSError:
                continue

    def _check_layout(self) -> None:
        """The directory, and the database file if there is one, must be what they claim (exit 6)."""
        advice = "projections are derived data: move it away and `mnemolog rebuild` recreates them"
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise StorageError(
                f"the projection directory {self.dir} cannot be used ({exc.strerror}); {advice}",
                file=str(self.dir),
            ) from exc
        if not self.dir.is_dir():
            raise StorageError(f"{self.dir} is not a directory; {advice}", file=str(self.dir))
        for path in (self.path, Path(f"{self.path}.wal")):
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(mode):
                raise StorageError(f"{path} is not a regular file; {advice}", file=str(path))

    def _attach(self, base: duckdb.DuckDBPyConnection) -> None:
        # Attached with a smaller row group than DuckDB's 122,880 rows: the sorted
        # postings are pruned by row group, and big groups make a recall read
        # several times the rows it needs.
        path = str(self.path).replace("'", "''")
        conn = base if isinstance(base, Connection) else None
        if conn is not None and os.path.exists(f"{self.path}.wal"):
            conn.load_vss_now()  # a replayed log may hold HNSW index changes
        last: Exception | None = None
        # Another process may have just let go of the lock while DuckDB's own
        # file lock is still held for a moment: retry briefly.
        for attempt in range(50):
            try:
                base.execute(f"ATTACH '{path}' AS {CATALOG} (ROW_GROUP_SIZE {ROW_GROUP_SIZE})")
                base.execute(f"USE {CATALOG}")
                self._private_files()
                if conn is not None:
                    conn.load_vss_if_indexed()
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
