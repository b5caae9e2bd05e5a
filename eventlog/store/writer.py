"""The single writer: appends, segment rolls, checkpoints, and refusing to build on a bad log.

One process at a time writes, under an exclusive lock on `log/.lock` that is
held only while a batch is written. Every batch starts by bringing the
writer's view up to date with the disk (another process may have appended),
so any number of processes can append and the log stays one contiguous
chain. An append returns only once its entry is durable (`group_commit`
holds the durability policies).

A writer refuses (VerificationError, exit 8, check `log_diverged`) to append
or to sign a checkpoint when the log on disk:
- is shorter than, or differs from, what this writer has seen and
  acknowledged (entries cut off behind a live writer, or replaced);
- does not hold, with the same root, the newest checkpoint in `log/` and the
  high-water marks kept outside it (`recovery.check_anchor`, on open and
  whenever the log changed under it), or has no checkpoint at all past its
  genesis entry;
- has bytes, since the last checkpoint, that no longer hash to what was
  written (checked before every checkpoint is signed).
Once it has refused it refuses for good: it never signs over such a log.

Every checkpoint it signs is stored in `log/checkpoints/`, copied to the
high-water marks, and handed to `checkpoint_listeners` (callables taking
the note bytes; they must return quickly — witnesses queue the work).
With a `CheckpointPolicy`, a thread publishes checkpoints periodically.

Recovery on open: a trailing partial entry in the last segment (a crash
mid-write, never acknowledged) is moved aside to `log/torn/`, cut off, and
reported in `recovered`. Anything else that does not parse is damage.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from mnemolog.eventlog.errors import LogMoved, MnemologError, SignerError, StorageError, VerificationError
from mnemolog.eventlog.format.entry import ZERO_HASH, Entry, leaf_hash, make_entry, sign_raw
from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.format.note import MAX_NOTE_BYTES, Checkpoint, peek_checkpoint
from mnemolog.eventlog.store import recovery
from mnemolog.eventlog.store.checkpointer import PeriodicCheckpointer
from mnemolog.eventlog.store.checkpoints import (
    CHECKPOINT_DIR,
    CheckpointPolicy,
    checkpoint_name,
    store_note,
    write_high_water,
)
from mnemolog.eventlog.store.fsio import atomic_write, fsync_dir, read_regular, write_all
from mnemolog.eventlog.store.group_commit import (
    IDLE_SLICE,
    MAX_PAYLOAD_BYTES,
    Batch,
    Durability,
    GroupCommit,
    Pending,
    Receipt,
    Ticket,
    run_batch,
)
from mnemolog.eventlog.store.index import IndexRecord, IndexWriter
from mnemolog.eventlog.store.lock import FileLock
from mnemolog.eventlog.store.recovery import TornTail, WriterState
from mnemolog.eventlog.store.segments import segment_name
from mnemolog.eventlog.verify.trust import GENESIS_TYPE, ROTATION_TYPE, genesis_log_id, origin_for

__all__ = [
    "IDLE_SLICE",
    "MAX_PAYLOAD_BYTES",
    "CheckpointListener",
    "Clock",
    "Durability",
    "LogWriter",
    "Receipt",
    "Ticket",
    "TornTail",
    "system_clock",
]

Clock = Callable[[], int]
CheckpointListener = Callable[[bytes], None]
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
MAX_WARNINGS = 100


def system_clock() -> int:
    """Microseconds since the Unix epoch, UTC."""
    return time.time_ns() // 1000


def segment_file(first_seq: int) -> str:
    return segment_name(first_seq)


class LogWriter:
    def __init__(
        self,
        log_dir: Path,
        keys: Sequence[SigningKey],
        *,
        durability: Durability | None = None,
        clock: Clock = system_clock,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        lock_timeout: float = 30.0,
        checkpoint_on_close: bool = True,
        progress: bool | None = None,
        checkpoint_policy: CheckpointPolicy | None = None,
        high_water: Sequence[Path] = (),
        checkpoint_listeners: Iterable[CheckpointListener] = (),
        key_loader: Callable[[], Sequence[SigningKey]] | None = None,
        accept_rollback: bool = False,
    ) -> None:
        self.dir = log_dir
        self._dir_s = str(log_dir)
        self.durability = durability or Durability()
        self.clock = clock
        self.segment_bytes = segment_bytes
        self.checkpoint_on_close = checkpoint_on_close
        self.recovered: list[TornTail] = []
        # Called with every checkpoint note this writer stores (see the module docstring).
        self.checkpoint_listeners: list[CheckpointListener] = list(checkpoint_listeners)
        # Things that went wrong without failing an append (a derived index, a listener).
        self.warnings: list[str] = []
        self.high_water = list(high_water)
        self._progress = progress
        self._keys = list(keys)
        self._key_loader = key_loader
        self._signer: SigningKey | None = None
        self._lock = FileLock(log_dir / ".lock", lock_timeout, "log writer lock", fair=True)
        # Checkpoint files and high-water marks are written under their own lock, so that
        # appends continue while a checkpoint is being made durable.
        self._cp_lock = FileLock(log_dir / ".checkpoint.lock", lock_timeout, "checkpoint lock")
        self._mutex = threading.RLock()  # one batch at a time within this process
        self._st = WriterState()
        self._index: IndexWriter | None = None
        self._seg_fd: int | None = None
        self._seg_ino = 0
        self._index_stale = False
        self._seen = (0, ZERO_HASH)  # size and last leaf of the log as this writer last checked it
        self._signed_upto = 0  # bytes of entries below this were checked before a signature
        self._covered = 0  # the largest checkpoint size known to be stored
        self._diverged: VerificationError | None = None
        # A divergence that only the periodic checkpointer saw (no caller was told): `close` raises it.
        self._unreported: VerificationError | None = None
        self._told = False
        self._closed = False
        self._appended = False
        # An operator accepted that the log lost entries: checkpoints it no longer matches are set
        # aside on open, and the high-water marks may move back with the first checkpoint signed.
        self._accepting_rollback = accept_rollback
        self.set_aside: list[str] = []
        self._origin = ""
        if not (log_dir / segment_file(0)).exists():
            raise StorageError(f"no log at {log_dir} (run `mnemolog init`)", file=str(log_dir))
        try:
            with self._mutex, self._lock:
                self._reload()
        except BaseException:
            self._release_files()
            raise
        group = self.durability.mode == "group"
        self._group = GroupCommit(self.durability, self._commit_items) if group else None
        self._checkpointer = (
            PeriodicCheckpointer(checkpoint_policy, self._periodic_checkpoint, self._warn, self._covered)
            if checkpoint_policy is not None
            else None
        )

    # -- creating a log ----------------------------------------------------

    @classmethod
    def create(
        cls,
        log_dir: Path,
        key: SigningKey,
        *,
        clock: Clock = system_clock,
        log_id: bytes | None = None,
        extra: dict[str, Any] | None = None,
    ) -> tuple[Entry, bytes]:
        """Write the genesis entry and the first checkpoint; return both."""
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / CHECKPOINT_DIR).mkdir(exist_ok=True)
        lock = FileLock(log_dir / ".lock", 10.0, "log writer lock")
        with lock:
            seg0 = log_dir / segment_file(0)
            if seg0.exists() and seg0.stat().st_size > 0:
                raise StorageError(f"a log already exists at {log_dir}", file=str(seg0))
            lid = log_id or os.urandom(16)
            ts = clock()
            data: dict[str, Any] = {
                "log_id": lid,
                "public_key": key.public_key,
                "key_name": key.name,
                "created_at": ts,
                **(extra or {}),
            }
            genesis = make_entry(
                seq=0, ts=ts, type_=GENESIS_TYPE, tv=1, data=data, prev=ZERO_HASH, signer=key
            )
            fd = os.open(seg0, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                write_all(fd, genesis.raw)
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(log_dir)
            idx = IndexWriter(log_dir)
            idx.reset_to(0)
            idx.append([(0, 0, len(genesis.raw), genesis.leaf, True)])
            idx.close()
            cp = Checkpoint(origin_for(lid), 1, genesis.leaf)
            raw = cp.sign(key)
            atomic_write(log_dir / CHECKPOINT_DIR / checkpoint_name(1), raw)
        return genesis, raw

    # -- state -------------------------------------------------------------

    @property
    def size(self) -> int:
        return self._st.next_seq

    @property
    def key(self) -> SigningKey:
        if self._signer is None:
            raise SignerError("no signing key matches the log's current key")
        return self._signer

    def _warn(self, message: str) -> None:
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(message)

    def take_warnings(self) -> list[str]:
        """The warnings gathered since the last call (and forget them)."""
        out, self.warnings = self.warnings, []
        return out

    def _reload(self) -> None:
        """Rebuild the in-memory view from disk and hold it to what is signed; caller holds the lock."""
        if self._seg_fd is not None:
            os.close(self._seg_fd)
            self._seg_fd = None
        for attempt in (0, 1):
            if self._index is not None:
                self._index.close()
            idx = IndexWriter(self.dir)
            self._index = idx
            if attempt:
                idx.reset_to(0)  # every leaf and location from the segments themselves
            loaded = recovery.load(self.dir, idx, self._progress)
            st = loaded.state
            try:
                self._check_seen(st, idx)
                marks, accepting = self.high_water, self._accepting_rollback and self._seen[0] == 0
                if accepting:
                    self.set_aside = recovery.set_aside_rolled_back(self.dir, idx, st.next_seq)
                    marks = []
                anchor = recovery.check_anchor(
                    self.dir, idx, st, marks, loaded.rehashed_from, require_checkpoint=not accepting
                )
                break
            except (VerificationError, recovery.IndexDoubt) as exc:
                # A damaged index can look like a damaged log: decide once it is rebuilt.
                if attempt == 0 and loaded.rehashed_from > 0:
                    continue
                if isinstance(exc, recovery.IndexDoubt):
                    raise recovery.diverged(f"the log cannot be read where it was written: {exc}") from exc
                raise
        self._index_stale = False
        self._pick_signer(st)  # before any cut: a writer without its key changes nothing
        if loaded.cut is not None:
            self.recovered.append(recovery.cut_tail(self.dir, loaded.cut, st.next_seq))
        self._st = st
        self._seen = (st.next_seq, st.prev)
        self._origin = origin_for(genesis_log_id(recovery.entry_at(self.dir, idx, 0)))
        if anchor is not None:
            self._covered = max(self._covered, anchor.size)
            self._signed_upto = max(self._signed_upto, anchor.size)
        self._seg_fd = os.open(self.dir / segment_file(st.seg_first), os.O_WRONLY | os.O_APPEND)
        self._seg_ino = os.fstat(self._seg_fd).st_ino

    def _check_seen(self, st: WriterState, idx: IndexWriter) -> None:
        """The log must still hold every entry this writer has seen, unchanged."""
        n, leaf = self._seen
        if n == 0:
            return
        if st.next_seq < n:
            raise recovery.diverged(
                f"the log on disk has {st.next_seq} entries, fewer than the {n} this writer has "
                "acknowledged or seen (entries were cut off)",
                seq=st.next_seq,
                expected=n,
                found=st.next_seq,
            )
        loc = idx.location(n - 1)
        raw = recovery.read_raw(self.dir, loc.segment, loc.offset, loc.length)
        if len(raw) != loc.length or leaf_hash(raw) != leaf:
            raise recovery.diverged(
                f"entry {n - 1} on disk is not the entry this writer acknowledged or saw there "
                "(the log was replaced)",
                seq=n - 1,
                expected=leaf.hex(),
                found=leaf_hash(raw).hex(),
            )

    def _pick_signer(self, st: WriterState) -> None:
        for attempt in range(2):
            for k in self._keys:
                if k.kid == st.kid:
                    self._signer = k
                    return
            if attempt == 0 and self._key_loader is not None:
                # Another process may have rotated the key (`key rotate` beside a server).
                try:
                    fresh = list(self._key_loader())
                except MnemologError:
                    break
                self._keys += [k for k in fresh if all(k.kid != o.kid for o in self._keys)]
        raise SignerError(
            f"the log's current key is {st.kid.hex()} but this writer holds "
            f"{', '.join(k.kid.hex() for k in self._keys) or 'no key'}: the key was rotated by "
            "another process, or the home's keys/signing.key is not the log's key; restart this "
            "process after `mnemolog key show` confirms keys/signing.key holds the current key",
            expected=st.kid.hex(),
            found=[k.kid.hex() for k in self._keys],
        )

    def _sync_with_disk(self) -> None:
        """Caller holds the lock: reload if the log changed since our last batch.

        Another writer either grew our segment or (having rolled) created the
        segment named for our next seq; it may also have rebuilt the index.
        Someone may have cut or replaced our segment. A few cheap system calls
        tell, so the check costs little per batch.
        """
        if self._diverged is not None:
            raise self._diverged
        assert self._index is not None
        st = self._st
        try:
            s = os.stat(os.path.join(self._dir_s, segment_file(st.seg_first)))
            same = s.st_size == st.seg_size and s.st_ino == self._seg_ino
        except OSError:
            same = False
        if (
            same
            and not self._index_stale
            and self._index.intact()
            and not os.path.exists(os.path.join(self._dir_s, segment_file(st.next_seq)))
        ):
            return
        try:
            self._reload()
        except VerificationError as exc:
            self._diverged = exc
            raise

    # -- appending -----------------------------------------------------------

    def _commit_items(self, items: list[Pending]) -> list[Receipt]:
        """Sign, write and sync `items` under the lock (the group committer's and fsync mode's path)."""
        with self._mutex, self._lock:
            try:
                self._sync_with_disk()
            except VerificationError:
                self._told, self._unreported = True, None  # the caller (or its ticket) has it
                raise
            self._check_expected(items)
            receipts = self._write_batch(items)
            self._mark_acknowledged()
        if self._checkpointer is not None:
            self._checkpointer.appended(receipts[-1].seq + 1)
        return receipts

    def _write_batch(self, batch: list[Pending]) -> list[Receipt]:
        st = self._st
        assert self._index is not None and self._seg_fd is not None
        if st.seg_size >= self.segment_bytes:
            self._roll()
        signer = self.key
        buf = bytearray()
        records: list[IndexRecord] = []
        receipts: list[Receipt] = []
        seq, prev, last_ts = st.next_seq, st.prev, st.last_ts
        next_signer = signer
        for p in batch:
            ts = max(self.clock(), last_ts)
            raw, leaf = sign_raw(seq, ts, p.type, p.tv, p.data_enc, prev, next_signer)
            records.append((st.seg_first, st.seg_size + len(buf), len(raw), leaf, p.new_key is not None))
            buf += raw
            receipts.append(Receipt(seq, ts, p.type, leaf))
            seq, prev, last_ts = seq + 1, leaf, ts
            if p.new_key is not None:
                next_signer = p.new_key
        try:
            write_all(self._seg_fd, bytes(buf))
            os.fdatasync(self._seg_fd)
        except OSError as exc:
            # Nothing of this batch was acknowledged: take back whatever reached the file.
            try:
                os.ftruncate(self._seg_fd, st.seg_size)
                os.fsync(self._seg_fd)
            except OSError:
                pass
            raise StorageError(f"appending to the log failed: {exc}") from exc
        # Durable from here on: the entries are acknowledged whatever happens to the index,
        # which is derived data and is rebuilt from the segments before the next batch.
        st.next_seq, st.prev, st.last_ts = seq, prev, last_ts
        st.seg_size += len(buf)
        self._seen = (seq, prev)
        self._appended = True
        try:
            self._index.append(records)
        except OSError as exc:
            self._index_stale = True
            self._warn(
                f"entries {receipts[0].seq}..{seq - 1} are durable, but writing the index failed "
                f"({exc}); it is rebuilt from the segments before the next write"
            )
        if next_signer is not signer:
            self._signer = next_signer
            if next_signer not in self._keys:
                self._keys.append(next_signer)
        st.kid = self.key.kid
        return receipts

    def _check_expected(self, items: list[Pending]) -> None:
        """Refuse, writing nothing, if an entry would not get the seq its payload was built for."""
        first = self._st.next_seq
        for i, p in enumerate(items):
            if p.expect_seq is not None and p.expect_seq != first + i:
                raise LogMoved(
                    f"entry prepared for seq {p.expect_seq} would be written at seq {first + i}: "
                    "another process appended meanwhile; nothing was written (retry)",
                    seq=first + i,
                    expected=p.expect_seq,
                    found=first + i,
                )

    def _mark_acknowledged(self) -> None:
        """Move the high-water marks up to what this batch made durable, before acknowledging it.

        A checkpoint in `log/checkpoints/` comes on the periodic schedule, but an
        entry is acknowledged now: were the marks to wait for that checkpoint, the
        log could be cut back inside the interval and still verify. So every
        batch of a writer with a checkpoint policy (every writer a home opens)
        signs a checkpoint note of the new size (no file in `log/`, no witness:
        only the marks: one more small synced file per batch, which group
        commit amortises), and `log verify` and every writer's open then hold
        the log to it. A writer without a policy moves the marks with its
        checkpoints only. Caller holds the writer lock; the marks are written
        under the checkpoint lock, as checkpoints' are.
        """
        if self._checkpointer is None or not self.high_water or self._index_stale or self._accepting_rollback:
            return
        assert self._index is not None
        n = self._st.next_seq
        raw = Checkpoint(self._origin, n, self._index.root(n)).sign(self.key)
        with self._cp_lock:
            for hw in self.high_water:
                try:
                    write_high_water(hw, raw, n)
                except (OSError, MnemologError) as exc:
                    self._warn(
                        f"entries up to {n - 1} are durable but moving the high-water mark {hw} failed: {exc}"
                    )

    def _roll(self) -> None:
        st = self._st
        path = self.dir / segment_file(st.next_seq)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fsync_dir(self.dir)
        if self._seg_fd is not None:
            os.close(self._seg_fd)
        self._seg_fd = fd
        self._seg_ino = os.fstat(fd).st_ino
        st.seg_first = st.next_seq
        st.seg_size = 0

    def _enqueue(self, items: list[Pending]) -> list[Ticket]:
        if self._group is not None:
            return self._group.enqueue(items)
        if self._closed:
            raise StorageError("the log writer is closed")
        batch = Batch(items)
        run_batch(batch, self._commit_items)
        return [Ticket(batch, i) for i in range(len(items))]

    def submit(self, type_: str, data: dict[str, Any], tv: int = 1) -> Ticket:
        """Queue an append; the ticket's `result()` returns once the entry is durable."""
        return self._enqueue([Pending(type_, tv, data)])[0]

    def append(self, type_: str, data: dict[str, Any], tv: int = 1) -> Receipt:
        """Append one entry; returns once it is durable."""
        if self._group is None:
            if self._closed:
                raise StorageError("the log writer is closed")
            return self._commit_items([Pending(type_, tv, data)])[0]
        return self.submit(type_, data, tv).result()

    def append_many(
        self, items: Iterable[tuple[str, dict[str, Any], int]], *, first_seq: int | None = None
    ) -> list[Receipt]:
        """Append several entries in order; returns once all are durable.

        With `first_seq`, the entries must get seqs first_seq, first_seq + 1, …
        (their payloads point at each other by seq): LogMoved, and nothing is
        written, if another process appended first.
        """
        pending = [Pending(t, tv, d) for t, d, tv in items]
        if not pending:
            return []
        if first_seq is not None:
            for i, p in enumerate(pending):
                p.expect_seq = first_seq + i
        if self._group is None:
            if self._closed:
                raise StorageError("the log writer is closed")
            return self._commit_items(pending)
        return [t.result() for t in self._enqueue(pending)]

    def rotate_key(self, new_key: SigningKey, extra: dict[str, Any] | None = None) -> Receipt:
        """Append `key.rotated` (signed by the current key); later entries use `new_key`."""
        if new_key.kid == self.key.kid:
            raise SignerError("the new key is the current key")
        data = {
            "public_key": new_key.public_key,
            "key_name": new_key.name,
            "rotated_at": self.clock(),
            **(extra or {}),
        }
        return self._enqueue([Pending(ROTATION_TYPE, 1, data, new_key=new_key)])[0].result()

    def flush(self) -> None:
        """Wait until everything submitted so far is durable."""
        if self._group is not None:
            self._group.flush()

    # -- checkpoints and closing --------------------------------------------

    def checkpoint(self) -> tuple[Checkpoint, bytes]:
        """Sign a checkpoint of everything submitted so far and store it (idempotent per size).

        The checkpoint is signed under the writer lock, after the log on disk
        was held to what this writer saw and every entry since the last
        signature was re-hashed; it is written, copied to the high-water
        marks and handed to the listeners after the lock is released.
        """
        self.flush()
        try:
            return self._checkpoint_now()
        except VerificationError:
            with self._mutex:
                self._told, self._unreported = True, None  # the caller has it
            raise

    def _periodic_checkpoint(self) -> int:
        # What is durable now, without waiting for appends still queued: the periodic
        # checkpointer must not fall behind a producer that keeps the queue full.
        try:
            return self._checkpoint_now()[0].size
        except VerificationError as exc:
            # Seen by the background thread only: `close` says it, so the process does not
            # end as if all were well (a server's exit status is often all anyone reads).
            with self._mutex:  # ordered with the callers' `_told`
                if not self._told:
                    self._unreported = exc
            raise

    def _checkpoint_now(self) -> tuple[Checkpoint, bytes]:
        with self._mutex, self._lock:
            self._sync_with_disk()
            assert self._index is not None
            n = self._st.next_seq
            try:
                try:
                    recovery.check_tail_bytes(self.dir, self._index, max(self._signed_upto - 1, 0), n)
                except recovery.IndexDoubt:
                    # The index, not the log, may be what changed: rebuild the view, look again.
                    self._index_stale = True
                    self._sync_with_disk()
                    assert self._index is not None
                    n = self._st.next_seq
                    recovery.check_tail_bytes(self.dir, self._index, max(self._signed_upto - 1, 0), n)
            except recovery.IndexDoubt as exc:
                self._diverged = recovery.diverged(f"the log cannot be read where it was written: {exc}")
                raise self._diverged from exc
            except VerificationError as exc:
                self._diverged = exc
                raise
            path = self.dir / CHECKPOINT_DIR / checkpoint_name(n)
            if path.exists():
                raw = read_regular(path, MAX_NOTE_BYTES)
                cp = peek_checkpoint(raw, str(path))
            else:
                cp = Checkpoint(self._origin, n, self._index.root(n))
                raw = cp.sign(self.key)
            self._signed_upto = n
        with self._cp_lock:
            if not path.exists():
                store_note(path, raw)
            backwards, self._accepting_rollback = self._accepting_rollback, False
            for hw in self.high_water:
                try:
                    write_high_water(hw, raw, n, allow_backwards=backwards)
                except (OSError, MnemologError) as exc:
                    self._warn(f"the checkpoint of size {n} is stored but copying it to {hw} failed: {exc}")
        self._covered = max(self._covered, n)
        if self._checkpointer is not None:
            self._checkpointer.covered(n)
        for listener in list(self.checkpoint_listeners):
            try:
                listener(raw)
            except Exception as exc:
                self._warn(f"a checkpoint listener failed: {exc!r}")
        return cp, raw

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._checkpointer is not None:
                self._checkpointer.close()
            if self._group is not None:
                self._group.close()
            if self.checkpoint_on_close and self._diverged is None and self._grew():
                try:
                    self.checkpoint()
                except SignerError as exc:
                    # The log's key moved on without this process (rotated elsewhere, key
                    # removed): whoever holds the current key signs; closing must still
                    # release the lock and the files, and the store that needed the key
                    # has already reported the same error.
                    self._warn(f"no checkpoint at close: {exc.message}")
        finally:
            self._release_files()
        if self._unreported is not None:
            d = self._unreported
            raise d.restated(
                f"closing the log writer: {d.message} (seen by the periodic checkpointer; nothing "
                "was signed after it)"
            ) from d

    def _release_files(self) -> None:
        if self._seg_fd is not None:
            os.close(self._seg_fd)
            self._seg_fd = None
        if self._index is not None:
            self._index.close()
        self._lock.close()
        self._cp_lock.close()

    def _grew(self) -> bool:
        return self._appended and self._st.next_seq > self._covered

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
