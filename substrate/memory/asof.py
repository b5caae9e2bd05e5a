"""Reading the memories as they stood at an earlier point of the log (`recall --as-of`).

A point is a log position SEQ (the entries 0..SEQ, inclusive: the log as it
stood once entry SEQ was appended) or an ISO 8601 UTC time (the entries up to
the last one, in log order, whose ts is at or before it). Either resolves to
one seq, and the answer says which (`as_of: {"seq": N, "ts": ...}`).

The prefix is folded by the engine's own catch-up (`Projections.session(stop=)`),
so there is no second fold: into a DuckDB file in a directory of its own
under the home's projection cache directory, removed when it is replaced or
the substrate closes. Its vectors come from the home's embedding cache, which
is content-addressed, so the memories embedded then need no model call. The
last such projection is kept per process, keyed by (log id, seq, leaf hash at
seq), so repeated questions about one moment fold once. None of this takes
the home's projection lock, the log's writer lock or the private key.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import secrets
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from mnemolog.eventlog.errors import UsageError
from mnemolog.eventlog.store.fsio import pid_alive
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.vocabulary.events import iso_time
from mnemolog.projections.embedding.cache import EmbedCache
from mnemolog.projections.engine import Projections
from mnemolog.projections.fold import Upcast
from mnemolog.projections.recall import bm25
from mnemolog.substrate.home import Home

ASOF_DIR = "asof"
_DIGITS = re.compile(r"[0-9]+")
EXPECTED = "a log position (an integer seq) or an ISO 8601 UTC time such as 2026-12-04T17:00:00Z"


@dataclass(frozen=True)
class AsOf:
    """The point answered at: the last entry included (`seq`) and its timestamp (µs since the epoch)."""

    seq: int
    ts: int

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "ts": iso_time(self.ts)}


def parse(value: object) -> int | dt.datetime:
    """A seq (int) or an aware UTC datetime; anything else is a usage error (exit 64)."""
    if isinstance(value, bool):
        raise UsageError(f"as_of must be {EXPECTED}; found {value!r}", field="as_of", found=repr(value))
    if isinstance(value, int):
        return value
    if not isinstance(value, str) or not value.strip():
        raise UsageError(
            f"as_of must be {EXPECTED}; found {value!r}"[:300], field="as_of", found=repr(value)[:40]
        )
    text = value.strip()
    if _DIGITS.fullmatch(text) or (text.startswith("-") and _DIGITS.fullmatch(text[1:])):
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"as_of must be {EXPECTED}; found {text[:40]!r}", field="as_of", found=text[:40]
        ) from None
    # A time without an offset would be read in some local zone: the log's timestamps are UTC.
    if when.tzinfo is None or when.utcoffset() != dt.timedelta(0):
        raise UsageError(
            f"as_of must be a UTC time (ending in Z or +00:00); found {text[:40]!r}",
            field="as_of",
            found=text[:40],
        )
    return when


def resolve(log: Log, point: int | dt.datetime) -> AsOf:
    """The seq a point names in this log, checked against its size (usage errors name it)."""
    size = log.refresh()
    if isinstance(point, int):
        if point < 0:
            raise UsageError(
                f"as_of {point} is before genesis: the log has {size} entries (seqs 0..{size - 1})",
                field="as_of",
                found=point,
                log_size=size,
            )
        if point >= size:
            raise UsageError(
                f"as_of {point} is beyond the log's end: the log has {size} entries (seqs 0..{size - 1})",
                field="as_of",
                found=point,
                log_size=size,
            )
        return AsOf(point, log.entry(point).ts)
    us = int(point.timestamp() * 1_000_000)
    # The longest prefix of entries stamped at or before the time: the log as it stood then,
    # even if a writer's clock once stepped back (later entries never join an earlier prefix).
    last: AsOf | None = None
    for e in log.iter_entries(0, size):
        if e.ts > us:
            break
        last = AsOf(e.seq, e.ts)
    if last is None:
        first = AsOf(0, log.entry(0).ts).to_json()["ts"] if size else "none"
        raise UsageError(
            f"as_of {point.isoformat()} is before the log's first entry ({first}); "
            f"the log has {size} entries",
            field="as_of",
            found=point.isoformat(),
            log_size=size,
        )
    return last


class AsOfProjections:
    """The last as-of projection of this process (see the module docstring). Thread-safe."""

    def __init__(self, home: Home, upcast: Upcast, cache: EmbedCache) -> None:
        self.home = home
        self.upcast = upcast
        self.cache = cache
        self._lock = threading.RLock()
        self._log: Log | None = None
        self._current: tuple[tuple[bytes, int, bytes], Projections, Path] | None = None
        self._conn: duckdb.DuckDBPyConnection | None = None  # the current one's (its bm25 copy)
        self.folds = 0  # how many prefixes were folded (tests: the cache works)

    @property
    def log(self) -> Log:
        # A reader of its own: the fold must not move the substrate's log reader under it.
        with self._lock:
            if self._log is None:
                self._log = self.home.open_log()
            return self._log

    @contextmanager
    def session(self, at: AsOf) -> Iterator[tuple[duckdb.DuckDBPyConnection, Projections]]:
        """A connection whose tables are the fold of entries 0..at.seq, and its engine."""
        with self._lock:
            proj = self._projection(at)
            with proj.session(stop=at.seq + 1) as conn:
                self._conn = conn
                yield conn, proj

    def _projection(self, at: AsOf) -> Projections:
        log = self.log
        key = (log.log_id, at.seq, log.leaf(at.seq))
        if self._current is not None and self._current[0] == key:
            return self._current[1]
        self._drop()
        parent = self.home.projections_path() / ASOF_DIR
        parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _sweep(parent)
        path = parent / f"{os.getpid()}-{secrets.token_hex(4)}"
        proj = Projections(path, log, self.upcast, cache=self.cache, progress=False)
        self._current = (key, proj, path)
        self.folds += 1
        return proj

    def _drop(self) -> None:
        if self._current is None:
            return
        _, proj, path = self._current
        self._current = None
        conn, self._conn = self._conn, None
        try:
            if conn is not None:
                # The numpy copy of the index is keyed by the connection's id, which a later
                # connection may reuse.
                bm25.forget(conn)
                bm25.note_position(conn, None)
            proj.close()
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        with self._lock:
            self._drop()
            if self._log is not None:
                self._log.close()
                self._log = None


def _sweep(parent: Path) -> None:
    """Remove the directories of processes that ended without removing theirs (killed)."""
    for p in parent.iterdir():
        pid = p.name.split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)
