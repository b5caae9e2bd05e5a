"""Keeping the projection database in step with the log: open, catch up, rebuild.

Every session first catches up: it checks that the log still holds the entry
the projection last applied (same seq, same leaf hash; otherwise it refuses
to serve and points at `mnemolog rebuild`), then folds the entries after it,
each batch in one transaction together with the new position. A database
written by another schema version, or for another log, is rebuilt.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb

from mnemolog.eventlog.errors import StorageError
from mnemolog.eventlog.log import Log
from mnemolog.eventlog.progress import Progress
from mnemolog.projections import schema
from mnemolog.projections.db import ProjectionStore
from mnemolog.projections.fold import Fold, Upcast
from mnemolog.projections.text import install_macros

CATCH_UP_BATCH = 50_000


class ProjectionDiverged(StorageError):
    slug = "projection_diverged"


@dataclass(frozen=True)
class State:
    version: int
    last_seq: int
    last_leaf: bytes
    log_id: bytes


def read_state(conn: duckdb.DuckDBPyConnection) -> State | None:
    try:
        row = conn.execute(
            "SELECT version, last_seq, last_leaf, log_id FROM proj_state WHERE name = ?",
            [schema.STATE_NAME],
        ).fetchone()
    except duckdb.CatalogException:
        return None
    if row is None:
        return None
    return State(int(row[0]), int(row[1]), bytes(row[2]), bytes(row[3]))


class Projections:
    def __init__(
        self,
        directory: Path,
        log: Log,
        upcast: Upcast,
        *,
        hold: bool = False,
        idle_release_ms: int = 250,
        progress: bool | None = None,
    ) -> None:
        self.log = log
        self.upcast = upcast
        self.progress = progress
        self.store = ProjectionStore(
            directory, on_open=self._on_open, hold=hold, idle_release_ms=idle_release_ms
        )

    def _on_open(self, conn: duckdb.DuckDBPyConnection) -> None:
        install_macros(conn)
        schema.create(conn)

    def close(self) -> None:
        self.store.close()

    @contextmanager
    def session(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection whose tables reflect every entry in the log right now."""
        with self.store.session() as conn:
            self.catch_up(conn)
            yield conn

    @contextmanager
    def raw_session(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection without catching up (for status and diagnostics)."""
        with self.store.session() as conn:
            yield conn

    def catch_up(self, conn: duckdb.DuckDBPyConnection) -> int:
        """Fold what the projection has not seen yet; return how many entries were applied."""
        log = self.log
        size = log.refresh()
        st = read_state(conn)
        if st is None or st.version != schema.SCHEMA_VERSION or st.log_id != log.log_id:
            self._reset(conn)
            start = 0
        else:
            if st.last_seq >= size:
                raise ProjectionDiverged(
                    f"the projection has applied entry {st.last_seq} but the log has only {size} "
                    "entries: the log was replaced or truncated; run `mnemolog rebuild`",
                    seq=st.last_seq,
                )
            leaf = log.leaf(st.last_seq)
            if leaf != st.last_leaf:
                raise ProjectionDiverged(
                    f"entry {st.last_seq} in the log is not the one the projection applied "
                    "(leaf hash differs); run `mnemolog rebuild`",
                    seq=st.last_seq,
                    expected=st.last_leaf.hex(),
                    found=leaf.hex(),
                )
            start = st.last_seq + 1
        if start >= size:
            return 0
        prog = Progress(
            "replaying log", size - start, enabled=self.progress if size - start > 10_000 else False
        )
        applied = 0
        try:
            for lo in range(start, size, CATCH_UP_BATCH):
                hi = min(lo + CATCH_UP_BATCH, size)
                conn.execute("BEGIN TRANSACTION")
                try:
                    fold = Fold(conn, self.upcast)
                    last = fold.apply(log.iter_entries(lo, hi))
                    if fold.needs_compaction():
                        fold.compact()
                    if last is not None:
                        self._save_state(conn, last.seq, last.leaf)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                applied += hi - lo
                prog.advance(hi - lo)
        finally:
            prog.close()
        return applied

    def _save_state(self, conn: duckdb.DuckDBPyConnection, seq: int, leaf: bytes) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO proj_state VALUES (?, ?, ?, ?, ?)",
            [schema.STATE_NAME, schema.SCHEMA_VERSION, seq, leaf, self.log.log_id],
        )

    def _reset(self, conn: duckdb.DuckDBPyConnection) -> None:
        schema.drop_all(conn)
        schema.create(conn)

    def rebuild(self) -> int:
        """Drop every projection table and replay the whole log."""
        with self.store.session() as conn:
            self._reset(conn)
            n = self.catch_up(conn)
            # Leave the index fully sorted, as an incremental history would after compaction.
            conn.execute("BEGIN TRANSACTION")
            Fold(conn, self.upcast).compact()
            conn.execute("COMMIT")
            conn.execute("CHECKPOINT")
            return n
