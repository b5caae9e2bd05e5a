"""The single writer: appends, durability policies, segment rolls, torn-tail recovery.

One process at a time writes, under an exclusive lock on `log/.lock` that is
held only while a batch is written. Every batch starts by bringing the
writer's view up to date with the disk (another process may have appended),
so any number of processes can append and the log stays one contiguous
chain. An append returns only once its entry is durable: `fsync` mode writes
and syncs each append; `group` mode buffers appends for at most N entries or
T milliseconds and acknowledges them all after one sync.

Recovery on open: a trailing partial entry in the last segment (a crash
mid-write, never acknowledged) is moved aside to `log/torn/`, cut off, and
reported in `recovered`. Anything else that does not parse is damage: the
writer refuses to append after it and raises a VerificationError.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import cbor2

from mnemolog.eventlog.entry import (
    ZERO_HASH,
    Entry,
    check_type_name,
    encode_payload,
    entry_from_map,
    leaf_hash,
    make_entry,
    parse_entry,
    sign_raw,
)
from mnemolog.eventlog.errors import (
    DecodeError,
    MnemologError,
    SignerError,
    StorageError,
    VerificationError,
)
from mnemolog.eventlog.fsio import atomic_write, fsync_dir, open_regular, read_regular
from mnemolog.eventlog.index import IndexRecord, IndexWriter
from mnemolog.eventlog.keys import SigningKey, key_id
from mnemolog.eventlog.lock import FileLock
from mnemolog.eventlog.log import (
    CHECKPOINT_DIR,
    GENESIS_TYPE,
    ROTATION_TYPE,
    checkpoint_name,
    segment_file,
)
from mnemolog.eventlog.note import MAX_NOTE_BYTES, Checkpoint, origin_for, peek_checkpoint
from mnemolog.eventlog.progress import Progress
from mnemolog.eventlog.segments import MAX_ENTRY_BYTES, list_segments, read_file, split_items

Clock = Callable[[], int]
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
IDLE_SLICE = 0.0002  # seconds without a new append that end a group-commit wait
MAX_PAYLOAD_BYTES = MAX_ENTRY_BYTES - 4096  # room for the envelope and a long type name


def system_clock() -> int:
    """Microseconds since the Unix epoch, UTC."""
    return time.time_ns() // 1000


@dataclass(frozen=True)
class Durability:
    """`fsync`: each append is synced before it returns. `group`: appends are
    batched (at most `max_entries` or `max_ms`) and acknowledged after one sync."""

    mode: Literal["fsync", "group"] = "fsync"
    max_entries: int = 512
    max_ms: float = 5.0

    def __post_init__(self) -> None:
        if self.mode not in ("fsync", "group"):
            raise StorageError(f"unknown durability mode {self.mode!r} (fsync or group)")
        if self.max_entries < 1 or self.max_ms < 0:
            raise StorageError("group commit needs max_entries >= 1 and max_ms >= 0")


@dataclass(frozen=True, slots=True)
class Receipt:
    seq: int
    ts: int
    type: str
    leaf: bytes


@dataclass(frozen=True)
class TornTail:
    segment: str
    offset: int
    length: int
    saved_to: str
    reason: str

    def describe(self) -> str:
        return (
            f"cut a torn tail of {self.length} bytes at offset {self.offset} of "
            f"{self.segment} (an interrupted, unacknowledged write); saved to {self.saved_to}"
        )


class _Pending:
    __slots__ = ("data", "data_enc", "new_key", "tv", "type")

    def __init__(self, type_: str, tv: int, data: dict[str, Any], new_key: SigningKey | None = None) -> None:
        # Checked and encoded by the submitting thread, so the work overlaps the
        # committer's signing (libsodium runs without the GIL) and a bad payload
        # fails in its caller before anything is queued.
        check_type_name(type_)
        if isinstance(tv, bool) or not isinstance(tv, int) or not 0 <= tv < 2**32:
            raise DecodeError("an event type version is an unsigned integer", field="tv")
        self.type = type_
        self.tv = tv
        self.data = data
        self.new_key = new_key
        self.data_enc = encode_payload(data)
        if len(self.data_enc) > MAX_PAYLOAD_BYTES:
            # Readers and recovery take anything longer than an entry can be for damage.
            raise DecodeError(
                f"payload of {len(self.data_enc)} bytes is larger than an entry may carry "
                f"({MAX_PAYLOAD_BYTES} bytes)",
                field="data",
            )


class _Batch:
    """Appends committed together: one sync, one wake-up for all their waiters."""

    __slots__ = ("closed", "done", "error", "first_at", "items", "receipts")

    def __init__(self) -> None:
        self.items: list[_Pending] = []
        self.receipts: list[Receipt] = []
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.first_at = 0.0
        self.closed = False


class Ticket:
    """The handle `submit` returns; `result()` blocks until the entry is durable."""

    __slots__ = ("_batch", "_i")

    def __init__(self, batch: _Batch, i: int) -> None:
        self._batch = batch
        self._i = i

    def result(self, timeout: float | None = None) -> Receipt:
        if not self._batch.done.wait(timeout):
            raise StorageError("timed out waiting for an append to become durable")
        if self._batch.error is not None:
            raise self._batch.error
        return self._batch.receipts[self._i]

    def done(self) -> bool:
        return self._batch.done.is_set()


@dataclass
class _State:
    next_seq: int = 0
    prev: bytes = ZERO_HASH
    last_ts: int = 0
    seg_first: int = 0
    seg_size: int = 0
    kid: bytes = b""  # the key the next entry must be signed by
    next_key_pub: bytes | None = None
    checkpoints: list[int] = field(default_factory=list)


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
    ) -> None:
        self.dir = log_dir
        self._dir_s = str(log_dir)
        self.durability = durability or Durability()
        self.clock = clock
        self.segment_bytes = segment_bytes
        self.checkpoint_on_close = checkpoint_on_close
        self.recovered: list[TornTail] = []
        self._progress = progress
        self._keys = list(keys)
        self._signer: SigningKey | None = None
        self._lock = FileLock(log_dir / ".lock", lock_timeout, "log writer lock", fair=True)
        self._mutex = threading.RLock()  # one batch at a time within this process
        self._st = _State()
        self._index: IndexWriter | None = None
        self._seg_fd: int | None = None
        self._size_at_open = 0
        self._closed = False
        if not (log_dir / segment_file(0)).exists():
            raise StorageError(f"no log at {log_dir} (run `mnemolog init`)", file=str(log_dir))
        with self._mutex, self._lock:
            self._reload()
        self._size_at_open = self._st.next_seq
        self._cond = threading.Condition()
        self._batches: list[_Batch] = []
        self._thread: threading.Thread | None = None
        if self.durability.mode == "group":
            self._thread = threading.Thread(target=self._committer, daemon=True)
            self._thread.start()

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
                _write_all(fd, genesis.raw)
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

    def _reload(self) -> None:
        """Rebuild the in-memory view from disk; caller holds the lock."""
        if self._seg_fd is not None:
            os.close(self._seg_fd)
            self._seg_fd = None
        if self._index is not None:
            self._index.close()
        idx = IndexWriter(self.dir)
        self._index = idx
        segs = list_segments(self.dir)
        if not segs or segs[0][0] != 0:
            raise VerificationError(
                "the log has no first segment", check="segments.first", file=str(self.dir)
            )
        c = idx.n
        # Distrust an index whose last record points past its segment (lost on power failure)
        # or whose bytes no longer hash to the recorded leaf.
        if c > 0:
            loc = idx.location(c - 1)
            seg_path = self.dir / segment_file(loc.segment)
            ok = seg_path.exists() and loc.offset + loc.length <= seg_path.stat().st_size
            if ok:
                with open_regular(seg_path) as f:
                    raw = os.pread(f.fileno(), loc.length, loc.offset)
                ok = leaf_hash(raw) == idx.leaf(c - 1)
            # The next checkpoint's root is folded from the index's right-edge nodes:
            # they must give the root the latest checkpoint signed, or none is used.
            if ok:
                ok = self._index_matches_checkpoint(idx, c)
            if not ok:
                idx.reset_to(0)
                c = 0
        st = _State()
        if c > 0:
            loc = idx.location(c - 1)
            with open_regular(self.dir / segment_file(loc.segment)) as f:
                last = entry_from_map_raw(os.pread(f.fileno(), loc.length, loc.offset), c - 1)
            st.next_seq = c
            st.prev = last.leaf
            st.last_ts = last.ts
            st.seg_first = loc.segment
            st.seg_size = loc.offset + loc.length
            self._note_key(st, last)
            start_seg, start_off = loc.segment, loc.offset + loc.length
        else:
            start_seg, start_off = 0, 0
        # Index whatever the index does not cover yet, checking the chain as we go.
        later = [(f, p) for f, p in segs if f >= start_seg]
        torn: tuple[Path, int, bytes] | None = None
        prog = Progress("indexing log", enabled=self._progress)
        for i, (first, path) in enumerate(later):
            if first not in (start_seg, st.next_seq):
                raise VerificationError(
                    f"segment {path.name} should start at seq {st.next_seq}",
                    check="segments.name",
                    file=path.name,
                    expected=segment_file(st.next_seq),
                    found=path.name,
                )
            off = start_off if first == start_seg else 0
            buf = read_file(path, off)
            split = split_items(buf)
            records: list[IndexRecord] = []
            for s, e, value in split.items:
                try:
                    entry = entry_from_map(value, buf[s:e], f"entry {st.next_seq}")
                except DecodeError as exc:
                    raise VerificationError(
                        f"{path.name}: {exc.message} at offset {off + s}; "
                        "refusing to append after damaged bytes (run `mnemolog log verify`)",
                        check="segment.damage",
                        file=path.name,
                        seq=st.next_seq,
                    ) from exc
                self._check_continues(st, entry, path.name)
                records.append(
                    (first, off + s, e - s, entry.leaf, entry.type in (GENESIS_TYPE, ROTATION_TYPE))
                )
                st.next_seq += 1
                st.prev = entry.leaf
                st.last_ts = entry.ts
                self._note_key(st, entry)
                if len(records) >= 65536:
                    idx.append(records)
                    prog.advance(len(records))
                    records = []
            idx.append(records)
            prog.advance(len(records))
            st.seg_first = first
            st.seg_size = off + len(buf)
            if split.tail is not None:
                is_last = i == len(later) - 1
                if not (split.tail.torn and is_last):
                    raise VerificationError(
                        f"{path.name}: {split.tail.reason} at offset {off + split.tail.offset}; "
                        "refusing to append after damaged bytes (run `mnemolog log verify`)",
                        check="segment.damage",
                        file=path.name,
                        seq=st.next_seq,
                    )
                cut = off + split.tail.offset
                torn = (path, cut, buf[split.tail.offset :])
                st.seg_size = cut
        prog.close()
        sizes = _checkpoint_sizes(self.dir)
        # Checked before any cut: a "torn tail" reaching into checkpointed entries is damage.
        if sizes and sizes[-1] > st.next_seq:
            raise VerificationError(
                f"the log has {st.next_seq} entries but a checkpoint covers {sizes[-1]}: "
                "committed entries are missing (truncated log)",
                check="log.truncated",
                seq=st.next_seq,
                expected=sizes[-1],
                found=st.next_seq,
            )
        if torn is not None:
            self._cut_tail(*torn, st.next_seq)
        st.checkpoints = sizes
        self._st = st
        self._pick_signer()
        self._seg_fd = os.open(self.dir / segment_file(st.seg_first), os.O_WRONLY | os.O_APPEND)

    def _log_id(self) -> bytes:
        """The log id from the genesis entry, read from the segment (not through the index)."""
        with open_regular(self.dir / segment_file(0)) as f:
            try:
                cbor2.CBORDecoder(f).decode()
            except (cbor2.CBORError, ValueError, OverflowError, MemoryError, RecursionError) as exc:
                raise VerificationError(
                    "the genesis entry does not decode", check="genesis.decode", seq=0
                ) from exc
            end = f.tell()
            genesis = entry_from_map_raw(os.pread(f.fileno(), end, 0), 0)
        lid = genesis.data.get("log_id")
        if genesis.type != GENESIS_TYPE or not isinstance(lid, bytes) or len(lid) != 16:
            raise VerificationError(
                "entry 0 is not a genesis entry with a 16-byte log_id", check="genesis.data", seq=0
            )
        return lid

    def _index_matches_checkpoint(self, idx: IndexWriter, count: int) -> bool:
        """Whether the index's tree gives the root of the newest readable checkpoint it covers."""
        for size in reversed([n for n in _checkpoint_sizes(self.dir) if 0 < n <= count]):
            path = self.dir / CHECKPOINT_DIR / checkpoint_name(size)
            try:
                cp = peek_checkpoint(read_regular(path, MAX_NOTE_BYTES), str(path))
            except (OSError, MnemologError):
                continue  # damaged checkpoints are verify's to report; try an older one
            if cp.size != size:
                continue
            try:
                return idx.root(size) == cp.root
            except (OSError, IndexError, ValueError):
                return False
        return True

    def _note_key(self, st: _State, e: Entry) -> None:
        if (e.type == GENESIS_TYPE and e.seq == 0) or e.type == ROTATION_TYPE:
            pk = e.data.get("public_key")
        else:
            st.kid = e.kid
            return
        if not isinstance(pk, bytes) or len(pk) != 32:
            raise VerificationError(
                f"key event at seq {e.seq} lacks a 32-byte public_key; refusing to append "
                "(run `mnemolog log verify`)",
                check="key.event",
                seq=e.seq,
            )
        st.kid = key_id(pk)

    def _pick_signer(self) -> None:
        for k in self._keys:
            if k.kid == self._st.kid:
                self._signer = k
                return
        raise SignerError(
            f"the log's current key is {self._st.kid.hex()} but the loaded key is "
            f"{', '.join(k.kid.hex() for k in self._keys) or 'none'}",
            expected=self._st.kid.hex(),
            found=[k.kid.hex() for k in self._keys],
        )

    @staticmethod
    def _check_continues(st: _State, e: Entry, where: str) -> None:
        if e.seq != st.next_seq:
            raise VerificationError(
                f"{where}: entry has seq {e.seq}, expected {st.next_seq}",
                check="entry.seq",
                seq=st.next_seq,
                file=where,
                expected=st.next_seq,
                found=e.seq,
            )
        if e.prev != st.prev:
            raise VerificationError(
                f"{where}: entry {e.seq} does not chain to the previous entry",
                check="entry.prev",
                seq=e.seq,
                file=where,
                expected=st.prev.hex(),
                found=e.prev.hex(),
            )

    def _cut_tail(self, path: Path, offset: int, tail: bytes, seq: int) -> None:
        torn_dir = self.dir / "torn"
        torn_dir.mkdir(exist_ok=True)
        saved = torn_dir / f"{path.stem}-{offset}.bin"
        atomic_write(saved, tail)
        with open(path, "r+b") as f:
            f.truncate(offset)
            os.fsync(f.fileno())
        self.recovered.append(
            TornTail(path.name, offset, len(tail), str(saved), "partial entry (interrupted write)")
        )
        with open(self.dir / "recovery.log", "a", encoding="utf-8") as f:
            f.write(
                f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} cut {len(tail)} bytes "
                f"at {path.name}:{offset} before seq {seq}; saved to {saved.name}\n"
            )

    def _sync_with_disk(self) -> None:
        """Caller holds the lock: reload if another process appended since our last batch.

        Another writer either grew our segment or (having rolled) created the
        segment named for our next seq; it may also have rebuilt the index.
        Four cheap system calls tell, so the check costs little per batch.
        """
        assert self._index is not None
        st = self._st
        try:
            size = os.fstat(self._seg_fd).st_size if self._seg_fd is not None else -1
        except OSError:
            size = -1
        if (
            size == st.seg_size
            and self._index.intact()
            and not os.path.exists(os.path.join(self._dir_s, segment_file(st.next_seq)))
        ):
            return
        self._reload()

    # -- appending -----------------------------------------------------------

    def _commit(self, batch: _Batch) -> None:
        """Sign, write and sync one batch under the lock; wake its waiters."""
        try:
            with self._mutex, self._lock:
                self._sync_with_disk()
                batch.receipts = self._write_batch(batch.items)
        except BaseException as exc:
            batch.error = exc
            if not isinstance(exc, Exception):
                batch.done.set()
                raise
        batch.done.set()

    def _write_batch(self, batch: list[_Pending]) -> list[Receipt]:
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
            _write_all(self._seg_fd, bytes(buf))
            os.fdatasync(self._seg_fd)
        except OSError as exc:
            # Nothing of this batch was acknowledged: take back whatever reached the file.
            try:
                os.ftruncate(self._seg_fd, st.seg_size)
                os.fsync(self._seg_fd)
            except OSError:
                pass
            raise StorageError(f"appending to the log failed: {exc}") from exc
        self._index.append(records)
        st.next_seq, st.prev, st.last_ts = seq, prev, last_ts
        st.seg_size += len(buf)
        if next_signer is not signer:
            self._signer = next_signer
            if next_signer not in self._keys:
                self._keys.append(next_signer)
        st.kid = self.key.kid
        return receipts

    def _roll(self) -> None:
        st = self._st
        path = self.dir / segment_file(st.next_seq)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fsync_dir(self.dir)
        if self._seg_fd is not None:
            os.close(self._seg_fd)
        self._seg_fd = fd
        st.seg_first = st.next_seq
        st.seg_size = 0

    def submit(self, type_: str, data: dict[str, Any], tv: int = 1) -> Ticket:
        """Queue an append; the ticket's `result()` returns once the entry is durable."""
        return self._enqueue([_Pending(type_, tv, data)])[0]

    def _commit_now(self, items: list[_Pending]) -> list[Receipt]:
        """fsync mode: sign, write and sync `items` in the calling thread."""
        if self._closed:
            raise StorageError("the log writer is closed")
        with self._mutex, self._lock:
            self._sync_with_disk()
            return self._write_batch(items)

    def _enqueue(self, items: list[_Pending]) -> list[Ticket]:
        if self._closed:
            raise StorageError("the log writer is closed")
        if self._thread is None:
            batch = _Batch()
            batch.items = items
            self._commit(batch)
            return [Ticket(batch, i) for i in range(len(items))]
        tickets: list[Ticket] = []
        max_n = self.durability.max_entries
        wake = False
        with self._cond:
            for p in items:
                b = self._batches[-1] if self._batches else None
                if b is None or b.closed or len(b.items) >= max_n:
                    b = _Batch()
                    b.first_at = time.monotonic()
                    self._batches.append(b)
                    wake = True
                tickets.append(Ticket(b, len(b.items)))
                b.items.append(p)
                # Entries after a rotation need the new key: they start a new batch.
                if p.new_key is not None:
                    b.closed = True
                    wake = True
                elif len(b.items) >= max_n:
                    wake = True
            # The committer polls a filling batch; waking it per append only
            # costs the GIL hand-offs that slow both threads down.
            if wake:
                self._cond.notify()
        return tickets

    def append(self, type_: str, data: dict[str, Any], tv: int = 1) -> Receipt:
        """Append one entry; returns once it is durable."""
        if self._thread is None:
            return self._commit_now([_Pending(type_, tv, data)])[0]
        return self.submit(type_, data, tv).result()

    def append_many(self, items: Iterable[tuple[str, dict[str, Any], int]]) -> list[Receipt]:
        """Append several entries in order; returns once all are durable."""
        pending = [_Pending(t, tv, d) for t, d, tv in items]
        if self._thread is None:
            return self._commit_now(pending) if pending else []
        tickets = self._enqueue(pending)
        return [t.result() for t in tickets]

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
        return self._enqueue([_Pending(ROTATION_TYPE, 1, data, new_key=new_key)])[0].result()

    def _committer(self) -> None:
        max_n = self.durability.max_entries
        max_wait = self.durability.max_ms / 1000.0
        while True:
            with self._cond:
                while not self._batches and not self._closed:
                    self._cond.wait()
                if not self._batches:
                    return
                b = self._batches[0]
                # Wait for the batch to fill, for at most max_ms, and no longer
                # than appends keep arriving: a lull means every waiting caller
                # has submitted, so syncing now costs no one anything.
                while not (b.closed or len(b.items) >= max_n or self._closed):
                    left = b.first_at + max_wait - time.monotonic()
                    if left <= 0:
                        break
                    n0 = len(b.items)
                    self._cond.wait(min(left, IDLE_SLICE))
                    if len(b.items) == n0:
                        break
                self._batches.pop(0)
            self._commit(b)

    def flush(self) -> None:
        """Wait until everything submitted so far is durable."""
        with self._cond:
            last = self._batches[-1] if self._batches else None
        if last is not None:
            last.done.wait()

    # -- checkpoints and closing --------------------------------------------

    def checkpoint(self) -> tuple[Checkpoint, bytes]:
        """Sign a checkpoint of the log as it is now and store it (idempotent per size)."""
        self.flush()
        with self._mutex, self._lock:
            self._sync_with_disk()
            assert self._index is not None
            n = self._st.next_seq
            path = self.dir / CHECKPOINT_DIR / checkpoint_name(n)
            if path.exists():
                raw = read_regular(path, MAX_NOTE_BYTES)
                return peek_checkpoint(raw, str(path)), raw
            cp = Checkpoint(origin_for(self._log_id()), n, self._index.root(n))
            raw = cp.sign(self.key)
            atomic_write(path, raw)
            self._st.checkpoints.append(n)
            return cp, raw

    def close(self) -> None:
        if self._closed:
            return
        if self._thread is not None:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._thread.join()
        self._closed = True
        try:
            if self.checkpoint_on_close and self._grew():
                self.checkpoint()
        finally:
            if self._seg_fd is not None:
                os.close(self._seg_fd)
                self._seg_fd = None
            if self._index is not None:
                self._index.close()
            self._lock.close()

    def _grew(self) -> bool:
        return self._st.next_seq > self._size_at_open or (
            bool(self._st.checkpoints) and self._st.checkpoints[-1] < self._st.next_seq
        )

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Test hook, read once at import: write segment bytes in pieces of this many
# bytes with this pause between them, so that crash and reader tests can land
# inside a write. Unset (the default) in every real use.
_TEST_CHUNK = int(os.environ.get("MNEMOLOG_TEST_WRITE_CHUNK") or 0)
_TEST_PAUSE = float(os.environ.get("MNEMOLOG_TEST_WRITE_PAUSE") or 0)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    step = _TEST_CHUNK or len(view)
    while view:
        n = os.write(fd, view[:step])
        view = view[n:]
        if _TEST_CHUNK and view:
            time.sleep(_TEST_PAUSE)


def entry_from_map_raw(raw: bytes, seq: int) -> Entry:
    return parse_entry(raw, f"entry {seq}")


def _checkpoint_sizes(log_dir: Path) -> list[int]:
    d = log_dir / CHECKPOINT_DIR
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if len(n) == 20 and n.isdigit())
