"""Reading a log directory: entries, key history, checkpoints, roots and proofs.

`Log` never writes and never blocks the writer. It uses the sidecar index for
random access and, past the last indexed entry, parses complete entries
straight from the segments, stopping before anything incomplete (an append
in progress). It does not judge the bytes it serves: that is `verify`'s job.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from mnemolog.eventlog.errors import (
    DecodeError,
    HomeMissing,
    NotFound,
    StorageError,
    VerificationError,
)
from mnemolog.eventlog.format import merkle
from mnemolog.eventlog.format.entry import Entry, entry_from_map, parse_entry
from mnemolog.eventlog.format.keys import VerifierKey
from mnemolog.eventlog.format.note import MAX_NOTE_BYTES, Checkpoint, open_checkpoint
from mnemolog.eventlog.store.checkpoints import CHECKPOINT_DIR, checkpoint_name, checkpoint_sizes
from mnemolog.eventlog.store.fsio import open_regular, read_regular
from mnemolog.eventlog.store.index import Index, Location
from mnemolog.eventlog.store.segments import list_segments, scan_file
from mnemolog.eventlog.verify.trust import (
    GENESIS_TYPE,
    ROTATION_TYPE,
    KeyEpoch,
    KeySchedule,
    key_from_data,
    origin_for,
)

__all__ = [
    "CHECKPOINT_DIR",
    "GENESIS_TYPE",
    "ROTATION_TYPE",
    "KeyEpoch",
    "KeySchedule",
    "Log",
    "checkpoint_name",
    "genesis_key",
    "rotation_key",
    "segment_file",
    "segment_zero",
]


def genesis_key(genesis: Entry) -> VerifierKey:
    return key_from_data(genesis.data, "genesis entry", 0)


def rotation_key(entry: Entry) -> VerifierKey:
    return key_from_data(entry.data, "key.rotated", entry.seq)


class Log:
    def __init__(self, log_dir: Path) -> None:
        self.dir = log_dir
        if not (log_dir / segment_zero()).exists():
            raise HomeMissing(f"no log at {log_dir} (run `mnemolog init` to create one)", file=str(log_dir))
        self.index = Index(log_dir)
        self._tail: list[Location] = []  # entries past the index, found by scanning segments
        self._tail_keys: list[int] = []  # seqs of key events among them
        self._indexed = 0
        self._trust_index = True
        self.refresh()
        self._genesis: Entry | None = None

    def close(self) -> None:
        self.index.close()

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- size and tail -----------------------------------------------------

    def _index_count(self) -> int:
        """How many entries the index covers, 0 when its last record does not match the segments.

        The index is derived data: a lost or damaged one must cost speed, never
        correctness, so its last record is checked against the bytes it names.
        """
        if not self._trust_index:
            return 0
        try:
            c = self.index.count()
            if c == 0:
                return 0
            loc = self.index.location(c - 1)
            with open_regular(self.dir / segment_file(loc.segment)) as f:
                raw = os.pread(f.fileno(), loc.length, loc.offset)
            if len(raw) != loc.length or merkle.hash_leaf(raw) != self.index.leaf(c - 1):
                return 0
            return c
        except (OSError, IndexError, ValueError):
            return 0

    def refresh(self) -> int:
        """Re-read how far the log extends; returns the size."""
        c = self._index_count()
        segs = list_segments(self.dir)
        start_seg, start_off = 0, 0
        if c > 0:
            loc = self.index.location(c - 1)
            start_seg, start_off = loc.segment, loc.offset + loc.length
        self._indexed = c
        self._tail = []
        self._tail_keys = []
        seq = c
        for first, path in segs:
            if first < start_seg:
                continue
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            off = start_off if first == start_seg else 0
            if off >= size:
                continue
            if first not in (start_seg, seq):
                break  # a segment whose name does not continue the log: verify reports it
            for s, e, value, _ in scan_file(path, off):
                self._tail.append(Location(first, s, e - s))
                if isinstance(value, dict) and value.get("type") in (GENESIS_TYPE, ROTATION_TYPE):
                    self._tail_keys.append(seq)
                seq += 1
        return self.size

    def _distrust_index(self) -> None:
        """The index named bytes that are not the entry it claims: read the segments instead."""
        self._trust_index = False
        self.refresh()

    @property
    def size(self) -> int:
        return self._indexed + len(self._tail)

    @property
    def indexed(self) -> int:
        return self._indexed

    # -- entries -------------------------------------------------------------

    def location(self, seq: int) -> Location:
        if 0 <= seq < self._indexed:
            return self.index.location(seq)
        if 0 <= seq < self.size:
            return self._tail[seq - self._indexed]
        raise NotFound(f"no entry {seq}: the log has {self.size} entries", seq=seq)

    def _read(self, loc: Location, seq: int) -> bytes:
        try:
            with open_regular(self.dir / segment_file(loc.segment)) as f:
                data = os.pread(f.fileno(), loc.length, loc.offset)
        except OSError as exc:
            raise StorageError(f"entry {seq}: cannot read its segment: {exc}", seq=seq) from exc
        if len(data) != loc.length:
            raise StorageError(f"entry {seq}: segment shorter than expected", seq=seq)
        return data

    def raw(self, seq: int) -> bytes:
        loc = self.location(seq)
        data = self._read(loc, seq)
        if seq < self._indexed and merkle.hash_leaf(data) != self.index.leaf(seq):
            self._distrust_index()
            return self._read(self.location(seq), seq)
        return data

    def entry(self, seq: int) -> Entry:
        """One entry, strictly decoded (canonical bytes, v1 shape)."""
        e = parse_entry(self.raw(seq), f"entry {seq}")
        if e.seq != seq:
            raise DecodeError(f"entry at position {seq} says seq {e.seq}", seq=seq)
        return e

    def iter_entries(self, start: int = 0, stop: int | None = None) -> Iterator[Entry]:
        """Entries start..stop-1 in order, read in large sequential chunks.

        Decoded and shape-checked but not re-encoded: replay trusts bytes that
        `log verify` checks, and replay speed matters for rebuilds.
        """
        end = self.size if stop is None else min(stop, self.size)
        if start >= end:
            return
        self.raw(start)  # checks the index's word for where `start` is
        first_loc = self.location(start)
        seq = start
        for first, path in list_segments(self.dir):
            if first < first_loc.segment:
                continue
            off = first_loc.offset if first == first_loc.segment else 0
            for _, _, value, raw in scan_file(path, off):
                e = entry_from_map(value, raw, f"entry {seq}")
                if e.seq != seq:
                    raise DecodeError(f"entry at position {seq} says seq {e.seq} (run `mnemolog log verify`)")
                yield e
                seq += 1
                if seq >= end:
                    return
        if seq < end:
            raise DecodeError(
                f"entry {seq}: the segment bytes stop decoding before the log's end "
                f"({end} entries); run `mnemolog log verify`",
                seq=seq,
            )

    def leaf(self, seq: int) -> bytes:
        if 0 <= seq < self._indexed:
            return self.index.leaf(seq)
        return merkle.hash_leaf(self.raw(seq))

    def _perfect(self, level: int, index: int) -> bytes:
        """MTH of leaves [index * 2^level, (index + 1) * 2^level): from the index where it covers them."""
        if (index + 1) << level <= self._indexed:
            return self.index.perfect(level, index)
        if level == 0:
            return self.leaf(index)
        return merkle.hash_children(
            self._perfect(level - 1, 2 * index), self._perfect(level - 1, 2 * index + 1)
        )

    def subtree(self, a: int, b: int) -> bytes:
        return merkle.subtree_from_perfect(self._perfect, a, b)

    # -- genesis and keys --------------------------------------------------

    @property
    def genesis(self) -> Entry:
        if self._genesis is None:
            g = self.entry(0)
            if g.type != GENESIS_TYPE:
                raise DecodeError(f"entry 0 has type {g.type!r}, expected {GENESIS_TYPE}", seq=0)
            self._genesis = g
        return self._genesis

    @property
    def log_id(self) -> bytes:
        lid = self.genesis.data.get("log_id")
        if not isinstance(lid, bytes) or len(lid) != 16:
            raise DecodeError("genesis log_id must be 16 bytes", seq=0)
        return lid

    @property
    def origin(self) -> str:
        return origin_for(self.log_id)

    def key_schedule(self, below: int | None = None) -> KeySchedule:
        """The key history as the first `below` entries (default: all) know it.

        Key events are found through the index's key list and the scanned tail;
        each is read and checked as it is added (DecodeError when malformed).
        """
        limit = self.size if below is None else below
        ks = KeySchedule.from_genesis(self.genesis)
        seqs = self.index.key_seqs(min(limit, self._indexed)) if self._indexed else []
        seqs += [s for s in self._tail_keys if s < limit]
        for s in sorted(set(seqs)):
            if s == 0:
                continue
            e = self.entry(s)
            if e.type == ROTATION_TYPE:
                ks.add(e)
        return ks

    def key_history(self, below: int | None = None) -> list[KeyEpoch]:
        return self.key_schedule(below).epochs

    def key_at(self, seq: int) -> VerifierKey:
        """The key that signs entry `seq` (and the checkpoint of size `seq`)."""
        return self.key_schedule(seq).key_at(seq)

    # -- tree, proofs, checkpoints -----------------------------------------

    def root(self, size: int | None = None) -> bytes:
        n = self.size if size is None else size
        if not 0 <= n <= self.size:
            raise NotFound(f"the log has {self.size} entries, not {n}")
        return merkle.EMPTY_ROOT if n == 0 else self.subtree(0, n)

    def _check_size(self, size: int) -> None:
        if not 0 < size <= self.size:
            raise NotFound(f"the log has {self.size} entries, not {size}")

    def inclusion_proof(self, seq: int, size: int) -> list[bytes]:
        """PATH(seq, size), checked against the root before it is handed out.

        Proof nodes come from the index; should one be damaged, the proof will
        not lead to the root, and the proof is rebuilt from the segments.
        """
        self._check_size(size)
        if not 0 <= seq < size:
            raise NotFound(f"entry {seq} is not in the tree of size {size}", seq=seq)
        leaf = merkle.hash_leaf(self.raw(seq))
        proof = merkle.inclusion_proof(seq, size, self.subtree)
        if merkle.root_from_inclusion(seq, size, leaf, proof) != self.root(size) and self._indexed:
            self._distrust_index()
            proof = merkle.inclusion_proof(seq, size, self.subtree)
        return proof

    def consistency_proof(self, size1: int, size2: int) -> list[bytes]:
        """PROOF(size1, size2), checked against both roots before it is handed out."""
        self._check_size(size2)
        if not 0 < size1 <= size2:
            raise NotFound(f"no consistency proof from size {size1} to size {size2}")
        proof = merkle.consistency_proof(size1, size2, self.subtree)
        try:
            merkle.verify_consistency(size1, size2, self.root(size1), self.root(size2), proof)
        except VerificationError:
            if not self._indexed:
                raise
            self._distrust_index()
            proof = merkle.consistency_proof(size1, size2, self.subtree)
        return proof

    def checkpoint_sizes(self) -> list[int]:
        return checkpoint_sizes(self.dir)

    def checkpoint_bytes(self, size: int) -> bytes:
        path = self.dir / CHECKPOINT_DIR / checkpoint_name(size)
        try:
            return read_regular(path, MAX_NOTE_BYTES)
        except FileNotFoundError as exc:
            raise NotFound(f"no checkpoint of size {size}", file=str(path)) from exc

    def latest_checkpoint(self) -> tuple[Checkpoint, bytes]:
        """The newest stored checkpoint, signature-checked against its key."""
        sizes = self.checkpoint_sizes()
        if not sizes:
            raise NotFound("the log has no checkpoint yet (run `mnemolog log checkpoint`)")
        size = sizes[-1]
        raw = self.checkpoint_bytes(size)
        where = str(self.dir / CHECKPOINT_DIR / checkpoint_name(size))
        return open_checkpoint(raw, self.key_at(size), where), raw


def segment_file(first_seq: int) -> str:
    return f"{first_seq:020d}.seg"


def segment_zero() -> str:
    return segment_file(0)
