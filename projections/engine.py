"""Keeping the projection database in step with the log: open, catch up, rebuild.

Every session first catches up: it checks that the log still holds the entry
the projection last applied (same log id, the seq still present, the same
leaf hash), and otherwise refuses to serve with ProjectionDiverged: a
projection that silently followed a replaced or truncated log would answer
for history that no longer exists. It then folds the entries after it, each
batch of CATCH_UP_BATCH entries in one transaction together with the new
position (seq, leaf hash, and the log's root there), so a crash at any moment
leaves the tables at some applied prefix of the log and the next session
continues from there. A database written by another SCHEMA_VERSION is
rebuilt.

`rebuild` starts from an empty database file (dropping tables would leave
the old file's size behind) and replays the whole log in batches of
REBUILD_BATCH entries (one transaction up to there), then sorts the index:
the postings its last batch tokenises are held back (`Shared.bulk`) and
written once, sorted, with the rest, not appended to the delta and copied again.
Over a log that no longer holds the recorded position (`rollback()`), the
substrate refuses to rebuild unless the operator accepts the rollback, which
records it in the log first: the projection is the last witness of it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import duckdb

from mnemolog.eventlog.errors import StorageError, VerificationError
from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.progress import Progress
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.verify.trust import GENESIS_TYPE, ROTATION_TYPE
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.projections import schema
from mnemolog.projections.context.fold import ContextFold
from mnemolog.projections.db import ProjectionStore
from mnemolog.projections.embedding import vectors
from mnemolog.projections.embedding.cache import EmbedCache
from mnemolog.projections.embedding.fold import EmbeddingFold
from mnemolog.projections.erasure.fold import ErasureFold
from mnemolog.projections.fold import Fold, FoldPass, IndexStats, RepeatedId, Upcast
from mnemolog.projections.knowledge.fold import KnowledgeFold
from mnemolog.projections.memory.fold import MemoryFold
from mnemolog.projections.recall import bm25
from mnemolog.projections.recall.text import install_macros
from mnemolog.projections.tenancy.fold import TenancyFold

#: Every read model's fold, in the order each entry visits them. The order matters where a
#: fold reads another's table: the embedding fold reads which vectors an erasure drops from
#: the memory and context rows before their folds drop them; the knowledge fold reads whether
#: the memory fold applied a promotion, rejection or reinforcement (`fold.changed_memory`).
FOLDS: tuple[type[Fold], ...] = (
    EmbeddingFold,
    MemoryFold,
    KnowledgeFold,
    ContextFold,
    TenancyFold,
    ErasureFold,
)
#: Event types no fold reads: they are about the log itself (its keys, its history, how it was
#: carried), not about anything a read model shows. They are counted in event_counts.
IGNORED: frozenset[str] = frozenset(
    {GENESIS_TYPE, ROTATION_TYPE, v.LOG_ROLLBACK_ACCEPTED, v.HEADS_COMMITTED, v.LOG_NOT_CARRIED}
)
#: Tables the engine keeps itself: the recorded position.
ENGINE_TABLES = ("proj_state",)

CATCH_UP_BATCH = 50_000
# A rebuild's batch: each commits; all but the last append the postings they tokenise to the
# delta, the last holds its own back and writes them with the rest, sorted, once (`bulk`).
# Up to this many entries (a home of 100k memories), a rebuild is one transaction that never
# writes the delta; what the last batch holds (about 3 M postings at most) costs memory:
# 864 against 571 MiB peak at 100k memories (docs/performance.md, "Rebuild (seventh pass)").
REBUILD_BATCH = 131_072
SIGN_CHECK_ALL = 4096  # a catch-up of at most this many entries checks every signature
NOTHING_APPLIED = -1


class ProjectionDiverged(StorageError):
    """The projection was built from a log that is not this one any more: rebuild (exit 6)."""

    slug = "projection_diverged"


@dataclass(frozen=True)
class State:
    """The projection's recorded position: the last applied seq and leaf, the log id, the index statistics."""

    version: int
    last_seq: int
    last_leaf: bytes
    log_id: bytes
    stats: IndexStats
    last_root: bytes = b""  # the log's root at last_seq + 1 (empty before anything applied)


class Rollback(NamedTuple):
    """A position the home recorded that the log no longer holds."""

    old_size: int
    old_root: bytes | None
    new_size: int
    new_root: bytes
    source: str


class RollbackRefused(VerificationError):
    """`rebuild` would move the projection backwards over a rolled-back log (exit 8)."""

    slug = "rollback_refused"


def read_state(conn: duckdb.DuckDBPyConnection) -> State | None:
    """The recorded position, or None when there is none this version can read."""
    try:
        row = conn.execute(
            "SELECT version, last_seq, last_leaf, log_id, docs, total_len, main_rows, delta_rows, "
            "last_root FROM proj_state"
        ).fetchall()
    except duckdb.Error:
        return None  # no table, or an older version's columns
    if len(row) != 1:
        return None
    r = row[0]
    return State(
        int(r[0]),
        int(r[1]),
        bytes(r[2]),
        bytes(r[3]),
        IndexStats(int(r[4]), int(r[5]), int(r[6]), int(r[7])),
        bytes(r[8]),
    )


class Projections:
    """The projection database of a home, kept in step with its log (see the module docstring)."""

    def __init__(
        self,
        directory: Path,
        log: Log,
        upcast: Upcast,
        *,
        hold: bool = False,
        idle_release_ms: int = 250,
        progress: bool | None = None,
        memory_limit: str | None = None,
        cache: EmbedCache | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        self.log = log
        self.upcast = upcast
        self.progress = progress
        self._known: tuple[int, State] | None = None
        # (attachment, seq) up to which the vector tables were last made to follow the memories.
        self._followed: tuple[int, int] | None = None
        # A projection of a log prefix (substrate.asof) borrows the home's cache: vectors are
        # content-addressed, so the prefix's memories find theirs without asking a model.
        # `cache_dir`: another home's embedding cache (an audit's scratch re-fold reads the home's).
        self._own_cache = cache is None
        self.cache = (
            cache if cache is not None else EmbedCache(cache_dir if cache_dir is not None else directory)
        )
        self.store = ProjectionStore(
            directory,
            on_connect=install_macros,
            on_attach=self._on_attach,
            hold=hold,
            idle_release_ms=idle_release_ms,
            memory_limit=memory_limit,
        )

    def _on_attach(self, conn: duckdb.DuckDBPyConnection) -> None:
        vectors.attached(conn)
        # A new file, or one of another schema version: start it over (catch-up fills it).
        st = read_state(conn)
        if st is None or st.version != schema.SCHEMA_VERSION:
            self._reset(conn)
        else:
            self._remember(st)

    def _remember(self, st: State | None) -> None:
        # While the file stays attached this process holds the lock, so nothing but this
        # engine changes proj_state: the state it last wrote or read is still the state.
        self._known = (self.store.attachments + (0 if self.store.attached else 1), st) if st else None

    def _read(self, conn: duckdb.DuckDBPyConnection) -> State | None:
        if self._known is not None and self._known[0] == self.store.attachments:
            return self._known[1]
        return read_state(conn)

    def close(self) -> None:
        self.store.close()
        if self._own_cache:
            self.cache.close()

    def follow_vectors(self, conn: duckdb.DuckDBPyConnection, seq: int) -> vectors.SyncResult:
        """Bring the vector tables up to the memories at `seq` (once per attachment and seq)."""
        key = (self.store.attachments, seq)
        if self._followed == key:
            return vectors.SyncResult()
        result = vectors.follow(conn, self.cache)
        self._followed = key
        return result

    @contextmanager
    def session(self, stop: int | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection whose tables reflect every entry in the log right now (or its first `stop`)."""
        with self.store.session() as conn:
            self.catch_up(conn, stop=stop)
            yield conn

    @contextmanager
    def raw_session(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection without catching up (for status and diagnostics)."""
        with self.store.session() as conn:
            yield conn

    def _check(self, st: State, size: int) -> None:
        log = self.log
        if st.log_id != log.log_id:
            raise ProjectionDiverged(
                f"the projection was built from log {st.log_id.hex()}, but the home's log is "
                f"{log.log_id.hex()}: the log was replaced; run `mnemolog rebuild`",
                expected=st.log_id.hex(),
                found=log.log_id.hex(),
            )
        if st.last_seq == NOTHING_APPLIED:
            return
        if st.last_seq < size and log.leaf(st.last_seq) == st.last_leaf:
            return
        at = self._applied_elsewhere(st, size)
        if at is not None:
            # The log holds the very entry and root the projection recorded, at another seq:
            # only the record's seq is wrong (rewound, or damaged). The log lost nothing.
            raise ProjectionDiverged(
                f"the projection records entry {st.last_seq} as the last it applied, but the entry "
                f"and root it recorded are the log's at seq {at}: the projection's state is stale "
                "or damaged, not the log; run `mnemolog rebuild` (no rollback is recorded)",
                check="projection.stale",
                seq=st.last_seq,
                expected=at,
                found=st.last_seq,
            )
        if st.last_seq >= size:
            raise ProjectionDiverged(
                f"the projection has applied entry {st.last_seq} but the log has only {size} "
                "entries: the log was truncated or rolled back; check it with `mnemolog log verify` "
                "(a rebuild refuses to erase this evidence unless given --accept-rollback)",
                seq=st.last_seq,
                found=size,
            )
        leaf = log.leaf(st.last_seq)
        raise ProjectionDiverged(
            f"entry {st.last_seq} in the log is not the one the projection applied "
            "(leaf hash differs), and the log holds that entry nowhere: the log was rewritten; "
            "check it with `mnemolog log verify` "
            "(a rebuild refuses to erase this evidence unless given --accept-rollback)",
            seq=st.last_seq,
            expected=st.last_leaf.hex(),
            found=leaf.hex(),
        )

    def _applied_elsewhere(self, st: State, size: int) -> int | None:
        """The seq at which the log holds the leaf and root the projection recorded, if not at its own.

        A real rollback or fork leaves the projection's recorded entry (leaf
        hash) and root out of the log: the entries it applied are gone. A
        record whose seq alone was changed still names an entry the log holds,
        with the log's root after it. Read from the index's leaf hashes (the
        tail past them one entry at a time); only on this disagreeing path.
        """
        log = self.log
        hit: int | None = None
        indexed = min(log.indexed, size)
        step = 1 << 16
        for lo in range(0, indexed, step):
            hi = min(lo + step, indexed)
            buf = log.index.leaves(lo, hi)
            i = buf.find(st.last_leaf)
            while i >= 0 and i % 32:
                i = buf.find(st.last_leaf, i + 1)
            if i >= 0:
                hit = lo + i // 32
                break
        if hit is None:
            hit = next((q for q in range(indexed, size) if log.leaf(q) == st.last_leaf), None)
        if hit is None or hit == st.last_seq:
            return None
        return hit if not st.last_root or log.root(hit + 1) == st.last_root else None

    def catch_up(
        self,
        conn: duckdb.DuckDBPyConnection,
        *,
        compact: bool = False,
        stop: int | None = None,
        signed_here: Mapping[int, bytes] | None = None,
        opened_here: Mapping[int, tuple[bytes, dict[str, Any]]] | None = None,
        settle: bool = True,
    ) -> int:
        """Fold what the projection has not seen yet; return how many entries were applied.

        `compact=True` sorts the whole index at the end whatever its state (rebuild);
        `stop` folds only the first `stop` entries of the log; `signed_here`: the leaf
        hashes of entries this process's writer just appended (`KeySchedule.admit`);
        `opened_here` (seq -> (leaf hash, the values its writer sealed)): what the fold takes
        instead of opening the box of an entry read back with that leaf hash (`FoldPass`);
        `settle=False` leaves the end-of-catch-up work (the index compaction) to a later
        catch-up: a bulk import defers it to its last batch, so that the main index is
        rewritten once for the whole import, not once per batch.
        """
        log = self.log
        size = log.refresh()
        if stop is not None:
            size = min(size, stop)
        st = self._read(conn)
        if st is None or st.version != schema.SCHEMA_VERSION:
            st = self._reset(conn)
        self._check(st, size)
        start = st.last_seq + 1
        if start >= size:
            bm25.note_position(conn, (st.last_seq, st.log_id, st.stats.docs, st.stats.total_len))
            self.follow_vectors(conn, st.last_seq)
            return 0
        prog = Progress(
            "replaying log", size - start, enabled=self.progress if size - start > 10_000 else False
        )
        stats = st.stats
        applied = 0
        step = REBUILD_BATCH if compact else CATCH_UP_BATCH
        try:
            for lo in range(start, size, step):
                hi = min(lo + step, size)
                batch = functools.partial(
                    self._apply_batch,
                    conn,
                    lo,
                    hi,
                    size,
                    stats,
                    compact,
                    signed_here=signed_here,
                    opened_here=opened_here,
                    settle=settle,
                )
                try:
                    stats, last = batch(careful=False)
                except RepeatedId:
                    # A bulk insert met a repeated id (a hostile or replayed log): the batch
                    # was rolled back; redo it with the slower insert that skips repeats.
                    stats, last = batch(careful=True)
                if last is not None:
                    root = self.log.root(last.seq + 1)
                    self._remember(State(st.version, last.seq, last.leaf, st.log_id, stats, root))
                applied += hi - lo
                prog.advance(hi - lo)
        except BaseException:
            self._known = None
            bm25.note_position(conn, None)
            raise
        finally:
            prog.close()
        known = self._known[1] if self._known else None
        if known is not None:
            # Recall reads the position from here instead of asking proj_state again.
            bm25.note_position(conn, (known.last_seq, known.log_id, known.stats.docs, known.stats.total_len))
            self.follow_vectors(conn, known.last_seq)
        return applied

    def _apply_batch(
        self,
        conn: duckdb.DuckDBPyConnection,
        lo: int,
        hi: int,
        size: int,
        stats: IndexStats,
        compact: bool,
        *,
        careful: bool,
        signed_here: Mapping[int, bytes] | None = None,
        opened_here: Mapping[int, tuple[bytes, dict[str, Any]]] | None = None,
        settle: bool = True,
    ) -> tuple[IndexStats, Entry | None]:
        """Fold entries lo..hi-1 and record the position, in one transaction."""
        last_batch = hi == size
        fold = FoldPass(
            conn,
            self.upcast,
            replace(stats),
            FOLDS,
            careful=careful,
            opened=opened_here,
            bulk=compact and last_batch,
        )
        # Nothing is folded (and so served) that the key history did not sign: an entry a
        # rogue key appended after the last checkpoint fails here, before any table changes.
        # Key ids are compared for every entry; signatures (~0.1 ms each) for every entry of
        # an everyday catch-up, and in a bulk one (a rebuild) for those past the newest
        # checkpoint: `log verify` checks the rest against the signed roots.
        keys = self.log.key_schedule(lo)
        covered = lo if hi - lo <= SIGN_CHECK_ALL else max(lo, *self.log.checkpoint_sizes())
        conn.execute("BEGIN TRANSACTION")
        try:
            last = fold.apply(
                keys.admit(self.log.iter_entries(lo, hi), signatures_from=covered, signed_here=signed_here)
            )
            # Compaction only at the end: within a long catch-up the delta would
            # otherwise be merged (and the main table rewritten) over and over.
            if last_batch and (settle or compact):
                fold.settle(force=compact)
            if last is not None:
                self._save_state(conn, last.seq, last.leaf, self.log.root(last.seq + 1), fold.stats)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return fold.stats, last

    def _save_state(
        self, conn: duckdb.DuckDBPyConnection, seq: int, leaf: bytes, root: bytes, s: IndexStats
    ) -> None:
        conn.execute(
            """UPDATE proj_state SET last_seq = ?, last_leaf = ?, docs = ?, total_len = ?,
                   main_rows = ?, delta_rows = ?, last_root = ?""",
            [seq, leaf, s.docs, s.total_len, s.main_rows, s.delta_rows, root],
        )

    def _reset(self, conn: duckdb.DuckDBPyConnection) -> State:
        """Empty tables of this version, positioned before the first entry of the current log."""
        st = State(schema.SCHEMA_VERSION, NOTHING_APPLIED, b"", self.log.log_id, IndexStats())
        conn.execute("BEGIN TRANSACTION")
        try:
            schema.drop_all(conn)
            vectors.distrust_index(conn)  # the vector tables went too
            schema.create(conn)
            conn.execute(
                "INSERT INTO proj_state VALUES (?, ?, ?, ?, 0, 0, 0, 0, ?)",
                [st.version, st.last_seq, st.last_leaf, st.log_id, b""],
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            self._known = None
            raise
        self._remember(st)
        return st

    def rollback(self) -> Rollback | None:
        """The projection's recorded position when the log no longer holds it, else None.

        Shorter than the entry the projection last applied, or another entry
        at that seq: the log was rolled back or rewritten, and replaying it
        over the projection would erase the last trace of what was there.
        Unless the log holds the recorded entry and root at another seq: then
        the projection's record is wrong, not the log, and nothing is offered
        for signing. A
        projection of another log altogether (another log id) is no rollback
        of this one: the home's trust anchor judges that.
        """
        try:
            with self.raw_session() as conn:
                st = read_state(conn)
        except StorageError:
            return None  # an unreadable database records nothing (the rebuild replaces it)
        size = self.log.refresh()
        if st is None or st.version != schema.SCHEMA_VERSION or st.last_seq == NOTHING_APPLIED:
            return None
        if size == 0 or st.log_id != self.log.log_id:
            return None
        if st.last_seq < size and self.log.leaf(st.last_seq) == st.last_leaf:
            return None
        if self._applied_elsewhere(st, size) is not None:
            return None  # a stale or damaged projection (see `_check`): the rebuild replaces it
        return Rollback(st.last_seq + 1, st.last_root or None, size, self.log.root(size), "projection")

    def rewrite(self) -> None:
        """The projection as it is, copied into a new database file (no deleted row survives in it).

        What `forget` does after an erasure: the rows are already gone, so a
        copy of the live ones replaces a refold of the whole log. The HNSW
        index is dropped before the copy and built again in the new file.
        """
        had: list[bool] = []

        def before(conn: duckdb.DuckDBPyConnection) -> None:
            if vectors.has_index(conn):
                had.append(True)
                vectors.drop_index(conn)

        def after(conn: duckdb.DuckDBPyConnection) -> None:
            if had:
                vectors.build_index(conn)

        self.store.rewrite(before, after)

    def rebuild(self, stop: int | None = None) -> int:
        """Replay the whole log (or its first `stop` entries) into a new database file."""
        with self.store.session(fresh=True) as conn:
            self._reset(conn)
            n = self.catch_up(conn, compact=True, stop=stop)
            conn.execute("CHECKPOINT")
            return n
