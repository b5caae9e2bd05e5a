"""How a writer comes to know the log on disk: index, tail, torn tail, and the signed anchor.

A writer (re)loads its view under the writer lock, in three steps:

1. `load`: trust the sidecar index up to its last record when that record's
   bytes still hash to its leaf and the index's tree gives the root of the
   newest checkpoint it covers; index every entry after it from the segments,
   checking each entry's shape, seq and prev chain. A trailing partial entry
   in the last segment (a crash mid-write, never acknowledged) is returned as
   a cut to make; anything else that does not parse is damage
   (VerificationError, `segment.damage`).
2. `cut_tail`: move a torn tail aside to `log/torn/` and truncate it, keeping
   every cut's bytes (a second cut at the same offset gets its own file).
3. `check_anchor`: the newest signed statements about the log — the newest
   checkpoint file and the high-water marks kept outside `log/` — must
   verify with the key the schedule names for their size and must be
   covered by the log with the same root; the entries since the newest one
   must hash to the leaves the index holds. Hashes and one signature per
   statement, no per-entry signatures: cheap enough for every open. Any
   failure is `log_diverged` (or `checkpoint.signature`): the writer refuses
   to append or sign over such a log.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from mnemolog.eventlog.errors import DecodeError, MnemologError, VerificationError
from mnemolog.eventlog.format import merkle
from mnemolog.eventlog.format.entry import ZERO_HASH, Entry, entry_from_map, leaf_hash, parse_entry
from mnemolog.eventlog.format.keys import key_id
from mnemolog.eventlog.format.note import MAX_NOTE_BYTES, Checkpoint, open_checkpoint, peek_checkpoint
from mnemolog.eventlog.progress import Progress
from mnemolog.eventlog.store.checkpoints import (
    CHECKPOINT_DIR,
    HighWaterMark,
    checkpoint_name,
    checkpoint_sizes,
    read_high_water,
)
from mnemolog.eventlog.store.fsio import atomic_write, open_regular, read_regular
from mnemolog.eventlog.store.index import IndexRecord, IndexWriter
from mnemolog.eventlog.store.segments import list_segments, read_file, segment_name, split_items
from mnemolog.eventlog.verify.trust import GENESIS_TYPE, ROTATION_TYPE, KeySchedule, is_key_event

DIVERGED = "log_diverged"


@dataclass
class WriterState:
    """What a writer knows about the end of the log."""

    next_seq: int = 0
    prev: bytes = ZERO_HASH
    last_ts: int = 0
    seg_first: int = 0
    seg_size: int = 0
    kid: bytes = b""  # the key the next entry must be signed by


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


class Cut(NamedTuple):
    path: Path
    offset: int
    tail: bytes


class Loaded(NamedTuple):
    state: WriterState
    cut: Cut | None
    rehashed_from: int  # the first seq whose bytes were hashed from the segments (= size: none)


def read_raw(log_dir: Path, segment: int, offset: int, length: int) -> bytes:
    with open_regular(log_dir / segment_name(segment)) as f:
        return os.pread(f.fileno(), length, offset)


class IndexDoubt(Exception):
    """The index named bytes that are not the entry it claims: rebuild it from the segments."""


def entry_at(log_dir: Path, idx: IndexWriter, seq: int) -> Entry:
    """Entry `seq` read where the index says; IndexDoubt unless it is that entry with that leaf."""
    try:
        loc = idx.location(seq)
        raw = read_raw(log_dir, loc.segment, loc.offset, loc.length)
        e = parse_entry(raw, f"entry {seq}")
    except (OSError, IndexError, ValueError, DecodeError) as exc:
        raise IndexDoubt(f"entry {seq}: {exc}") from exc
    if e.seq != seq or e.leaf != idx.leaf(seq):
        raise IndexDoubt(f"the index does not point at entry {seq}")
    return e


def _index_matches_checkpoint(log_dir: Path, idx: IndexWriter, count: int) -> bool:
    """Whether the index's tree gives the root of the newest readable checkpoint it covers."""
    for size in reversed([n for n in checkpoint_sizes(log_dir) if 0 < n <= count]):
        path = log_dir / CHECKPOINT_DIR / checkpoint_name(size)
        try:
            cp = peek_checkpoint(read_regular(path, MAX_NOTE_BYTES), str(path))
        except (OSError, MnemologError):
            continue  # damaged checkpoints are the anchor check's and verify's to report
        if cp.size != size:
            continue
        try:
            return idx.root(size) == cp.root
        except (OSError, IndexError, ValueError):
            return False
    return True


def trusted_index_count(log_dir: Path, idx: IndexWriter) -> int:
    """How many entries of the index to trust: 0 unless its last record still names its bytes.

    An index whose last record points past its segment (lost on power
    failure) or whose bytes no longer hash to the recorded leaf is rebuilt;
    so is one whose tree does not give the newest checkpoint's root (the next
    checkpoint's root is folded from the index's right-edge nodes).
    """
    c = idx.n
    if c == 0:
        return 0
    try:
        loc = idx.location(c - 1)
        seg_path = log_dir / segment_name(loc.segment)
        if not seg_path.exists() or loc.offset + loc.length > seg_path.stat().st_size:
            return 0
        if leaf_hash(read_raw(log_dir, loc.segment, loc.offset, loc.length)) != idx.leaf(c - 1):
            return 0
    except (OSError, IndexError, ValueError):
        return 0
    return c if _index_matches_checkpoint(log_dir, idx, c) else 0


def note_key(st: WriterState, e: Entry) -> None:
    """Track which key signs the next entry (a genesis or rotation announces a new one)."""
    if not ((e.type == GENESIS_TYPE and e.seq == 0) or e.type == ROTATION_TYPE):
        st.kid = e.kid
        return
    pk = e.data.get("public_key")
    if not isinstance(pk, bytes) or len(pk) != 32:
        raise VerificationError(
            f"key event at seq {e.seq} lacks a 32-byte public_key; refusing to append "
            "(run `mnemolog log verify`)",
            check="key.event",
            seq=e.seq,
        )
    st.kid = key_id(pk)


def check_continues(st: WriterState, e: Entry, where: str) -> None:
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


def _damage(path: Path, what: str, offset: int, seq: int) -> VerificationError:
    return VerificationError(
        f"{path.name}: {what} at offset {offset}; refusing to append after damaged bytes "
        "(run `mnemolog log verify`)",
        check="segment.damage",
        file=path.name,
        seq=seq,
    )


def load(log_dir: Path, idx: IndexWriter, progress: bool | None) -> Loaded:
    """The writer's view of the log, the index brought up to date (see the module docstring)."""
    segs = list_segments(log_dir)
    if not segs or segs[0][0] != 0:
        raise VerificationError("the log has no first segment", check="segments.first", file=str(log_dir))
    c = trusted_index_count(log_dir, idx)
    if c != idx.n:
        idx.reset_to(c)
    st = WriterState()
    if c > 0:
        loc = idx.location(c - 1)
        last = entry_at(log_dir, idx, c - 1)
        st.next_seq, st.prev, st.last_ts = c, last.leaf, last.ts
        st.seg_first, st.seg_size = loc.segment, loc.offset + loc.length
        note_key(st, last)
        start_seg, start_off = loc.segment, loc.offset + loc.length
    else:
        start_seg, start_off = 0, 0
    rehashed_from = st.next_seq
    # Index whatever the index does not cover yet, checking the chain as we go.
    later = [(f, p) for f, p in segs if f >= start_seg]
    cut: Cut | None = None
    prog = Progress("indexing log", enabled=progress)
    for i, (first, path) in enumerate(later):
        if first not in (start_seg, st.next_seq):
            raise VerificationError(
                f"segment {path.name} should start at seq {st.next_seq}",
                check="segments.name",
                file=path.name,
                expected=segment_name(st.next_seq),
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
                raise _damage(path, exc.message, off + s, st.next_seq) from exc
            check_continues(st, entry, path.name)
            records.append((first, off + s, e - s, entry.leaf, is_key_event(entry.type)))
            st.next_seq += 1
            st.prev = entry.leaf
            st.last_ts = entry.ts
            note_key(st, entry)
            if len(records) >= 65536:
                idx.append(records)
                prog.advance(len(records))
                records = []
        idx.append(records)
        prog.advance(len(records))
        st.seg_first = first
        st.seg_size = off + len(buf)
        if split.tail is not None:
            if not (split.tail.torn and i == len(later) - 1):
                raise _damage(path, split.tail.reason, off + split.tail.offset, st.next_seq)
            cut = Cut(path, off + split.tail.offset, buf[split.tail.offset :])
            st.seg_size = cut.offset
    prog.close()
    return Loaded(st, cut, rehashed_from)


def cut_tail(log_dir: Path, cut: Cut, seq: int) -> TornTail:
    """Save a torn tail under `log/torn/` (never overwriting an earlier cut) and truncate it off."""
    torn_dir = log_dir / "torn"
    torn_dir.mkdir(exist_ok=True)
    base = f"{cut.path.stem}-{cut.offset}"
    saved = torn_dir / f"{base}.bin"
    n = 1
    while saved.exists():
        n += 1
        saved = torn_dir / f"{base}.{n}.bin"
    atomic_write(saved, cut.tail)
    with open(cut.path, "r+b") as f:
        f.truncate(cut.offset)
        os.fsync(f.fileno())
    with open(log_dir / "recovery.log", "a", encoding="utf-8") as f:
        f.write(
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} cut {len(cut.tail)} bytes "
            f"at {cut.path.name}:{cut.offset} before seq {seq}; saved to {saved.name}\n"
        )
    return TornTail(cut.path.name, cut.offset, len(cut.tail), str(saved), "partial entry (interrupted write)")


# -- the signed anchor ------------------------------------------------------------------


def schedule_below(log_dir: Path, idx: IndexWriter, size: int) -> KeySchedule:
    """The key schedule of the first `size` entries, its key events found through the index."""
    ks = KeySchedule.from_genesis(entry_at(log_dir, idx, 0))
    for s in idx.key_seqs(size):
        if s == 0:
            continue
        e = entry_at(log_dir, idx, s)
        if e.type != ROTATION_TYPE:
            raise DecodeError(f"the index lists entry {s} ({e.type}) as a key event", seq=s)
        ks.add(e)
    return ks


def diverged(message: str, **where: Any) -> VerificationError:
    return VerificationError(
        message + "; refusing to append or sign (run `mnemolog log verify`)", check=DIVERGED, **where
    )


class Anchor(NamedTuple):
    size: int
    root: bytes
    source: str


def _statements(log_dir: Path, high_water: Sequence[Path]) -> list[HighWaterMark]:
    """The newest checkpoint file and every high-water mark: the signed statements to hold the log to."""
    out: list[HighWaterMark] = []
    sizes = checkpoint_sizes(log_dir)
    if sizes:
        path = log_dir / CHECKPOINT_DIR / checkpoint_name(sizes[-1])
        try:
            out.append(
                HighWaterMark(
                    f"{CHECKPOINT_DIR}/{checkpoint_name(sizes[-1])}", read_regular(path, MAX_NOTE_BYTES)
                )
            )
        except OSError as exc:
            raise diverged(f"the newest checkpoint {path} cannot be read: {exc}", file=str(path)) from exc
    for p in high_water:
        hw = read_high_water(p)
        if hw is not None:
            out.append(hw)
    return out


def check_anchor(
    log_dir: Path,
    idx: IndexWriter,
    st: WriterState,
    high_water: Sequence[Path],
    rehashed_from: int,
    *,
    require_checkpoint: bool = True,
) -> Anchor | None:
    """Hold the log to its newest signed statements; return the newest one, or None when there is none."""
    size = st.next_seq
    best: Anchor | None = None
    origin = ""
    schedules: dict[int, KeySchedule] = {}
    for stmt in _statements(log_dir, high_water):
        try:
            body = stmt.body()
        except DecodeError as exc:
            raise diverged(f"{stmt.source}: {exc.message}", file=stmt.source) from exc
        if not origin:
            origin = schedule_below(log_dir, idx, min(size, 1)).origin
        if body.origin != origin:
            raise diverged(
                f"{stmt.source} is a checkpoint of another log ({body.origin}); this log is {origin}",
                file=stmt.source,
                expected=body.origin,
                found=origin,
            )
        if body.size > size:
            raise diverged(
                f"the log has {size} entries but {stmt.source} is a signed checkpoint of {body.size}: "
                "entries are missing (truncated or rolled back)",
                file=stmt.source,
                seq=size,
                expected=body.size,
                found=size,
            )
        ks = schedules.get(body.size)
        if ks is None:
            try:
                ks = schedules[body.size] = schedule_below(log_dir, idx, body.size)
            except DecodeError as exc:
                raise diverged(f"the key history is malformed: {exc.message}") from exc
        try:
            cp = open_checkpoint(stmt.note, ks.key_at(body.size), stmt.source)
        except (DecodeError, VerificationError) as exc:
            raise VerificationError(
                f"{stmt.source}: {getattr(exc, 'message', exc)}; refusing to append or sign "
                "(run `mnemolog log verify`)",
                check="checkpoint.signature",
                file=stmt.source,
                seq=body.size - 1,
            ) from exc
        root = idx.root(cp.size)
        if root != cp.root:
            raise diverged(
                f"the log's first {cp.size} entries do not give the root {stmt.source} signed "
                "(damaged or replaced entries)",
                file=stmt.source,
                seq=cp.size - 1,
                expected=cp.root.hex(),
                found=root.hex(),
            )
        if best is None or cp.size > best.size:
            best = Anchor(cp.size, cp.root, stmt.source)
    if best is None and size > 1 and require_checkpoint:
        raise diverged(
            f"the log has {size} entries and no checkpoint: every log past its genesis entry "
            "carries one (they were deleted)",
            seq=size - 1,
            file=CHECKPOINT_DIR,
        )
    if best is not None:
        check_tail_bytes(log_dir, idx, best.size - 1, min(size, rehashed_from))
    return best


def check_tail_bytes(log_dir: Path, idx: IndexWriter, start: int, stop: int) -> None:
    """The segment bytes of entries start..stop-1 must hash to the leaves the index holds.

    One read of the locations, one of the leaves, one of each segment's span:
    this runs before every checkpoint is signed.
    """
    start = max(start, 0)
    if stop <= start:
        return
    try:
        locs = idx.locations(start, stop)
        leaves = idx.leaves(start, stop)
    except (OSError, IndexError) as exc:
        raise IndexDoubt(f"entries {start}..{stop - 1}: {exc}") from exc
    i = 0
    while i < len(locs):
        seg = locs[i].segment
        j = i
        while j + 1 < len(locs) and locs[j + 1].segment == seg:
            j += 1
        base = locs[i].offset
        try:
            span = read_raw(log_dir, seg, base, locs[j].offset + locs[j].length - base)
        except OSError as exc:
            raise diverged(f"entries from {start + i} cannot be read: {exc}", seq=start + i) from exc
        for k in range(i, j + 1):
            loc = locs[k]
            raw = span[loc.offset - base : loc.offset - base + loc.length]
            if len(raw) != loc.length or merkle.hash_leaf(raw) != leaves[k * 32 : k * 32 + 32]:
                raise diverged(
                    f"the bytes of entry {start + k} changed after it was written",
                    seq=start + k,
                    file=segment_name(seg),
                )
        i = j + 1


def set_aside_rolled_back(log_dir: Path, idx: IndexWriter, size: int) -> list[str]:
    """Move checkpoints the log no longer matches (larger, or another root) to `log/rolled-back/`.

    Only for an operator's explicit acceptance of a rollback: they are the
    evidence of what the log was, kept beside it, out of the way of the new
    checkpoints the log will carry at the same sizes.
    """
    moved: list[str] = []
    dest = log_dir / "rolled-back" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for n in checkpoint_sizes(log_dir):
        path = log_dir / CHECKPOINT_DIR / checkpoint_name(n)
        try:
            body = peek_checkpoint(read_regular(path, MAX_NOTE_BYTES), str(path))
            keep = n <= size and body.size == n and idx.root(n) == body.root
        except (OSError, DecodeError):
            keep = False
        if not keep:
            dest.mkdir(parents=True, exist_ok=True)
            os.replace(path, dest / path.name)
            moved.append(str(dest / path.name))
    return moved


def latest_checkpoint(log_dir: Path) -> tuple[Checkpoint, bytes] | None:
    """The newest checkpoint file's body (unverified) and bytes."""
    sizes = checkpoint_sizes(log_dir)
    if not sizes:
        return None
    path = log_dir / CHECKPOINT_DIR / checkpoint_name(sizes[-1])
    raw = read_regular(path, MAX_NOTE_BYTES)
    return peek_checkpoint(raw, str(path)), raw
