"""Reading a log directory: entries, key history, checkpoints, roots and proofs.

`Log` never writes and never blocks the writer. It uses the sidecar index for
random access and, past the last indexed entry, parses complete entries
straight from the segments, stopping before anything incomplete (an append
in progress). It does not judge the bytes it serves: that is `verify`'s job.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mnemolog.eventlog import merkle
from mnemolog.eventlog.entry import Entry, entry_from_map, parse_entry
from mnemolog.eventlog.errors import DecodeError, HomeMissing, NotFound, SignerError, StorageError
from mnemolog.eventlog.index import Index, Location
from mnemolog.eventlog.keys import VerifierKey
from mnemolog.eventlog.note import Checkpoint, open_checkpoint, origin_for
from mnemolog.eventlog.segments import iter_items, list_segments, scan_file

GENESIS_TYPE = "log.created"
ROTATION_TYPE = "key.rotated"
CHECKPOINT_DIR = "checkpoints"


@dataclass(frozen=True)
class KeyEpoch:
    """A key and the first seq it signs (genesis: 0; a rotation at r: r + 1)."""

    first_seq: int
    key: VerifierKey
    event_seq: int


def checkpoint_name(size: int) -> str:
    return f"{size:020d}"


def key_from_data(data: dict[str, object], what: str, seq: int) -> VerifierKey:
    """The key a genesis or key.rotated payload announces: text key_name, bytes(32) public_key."""
    name, pk = data.get("key_name"), data.get("public_key")
    if not isinstance(name, str) or not isinstance(pk, bytes):
        raise DecodeError(f"{what} at seq {seq} lacks a text key_name and a byte-string public_key", seq=seq)
    try:
        return VerifierKey(name, pk)
    except SignerError as exc:
        raise DecodeError(f"{what} at seq {seq}: {exc.message}", seq=seq) from exc


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
        self._tail: list[tuple[Location, bytes]] = []
        self._indexed = 0
        self.refresh()
        self._genesis: Entry | None = None

    def close(self) -> None:
        self.index.close()

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- size and tail -----------------------------------------------------

    def refresh(self) -> int:
        """Re-read how far the log extends; returns the size."""
        c = self.index.count()
        segs = list_segments(self.dir)
        start_seg, start_off = 0, 0
        if c > 0:
            loc = self.index.location(c - 1)
            end = loc.offset + loc.length
            try:
                seg_size = (self.dir / segment_file(loc.segment)).stat().st_size
            except FileNotFoundError:
                seg_size = -1
            if end > seg_size:
                c, loc, end = 0, Location(0, 0, 0), 0
            start_seg, start_off = loc.segment, end
        self._indexed = c
        self._tail = []
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
            with open(path, "rb") as f:
                buf = f.read()
            for s, e, _ in iter_items(buf, off):
                self._tail.append((Location(first, s, e - s), buf[s:e]))
                seq += 1
        return self.size

    @property
    def size(self) -> int:
        return self._indexed + len(self._tail)

    @property
    def indexed(self) -> int:
        return self._indexed

    # -- entries -------------------------------------------------------------

    def location(self, seq: int) -> Location:
        if seq < self._indexed:
            return self.index.location(seq)
        if seq < self.size:
            return self._tail[seq - self._indexed][0]
        raise NotFound(f"no entry {seq}: the log has {self.size} entries", seq=seq)

    def raw(self, seq: int) -> bytes:
        if self._indexed <= seq < self.size:
            return self._tail[seq - self._indexed][1]
        loc = self.location(seq)
        with open(self.dir / segment_file(loc.segment), "rb") as f:
            data = os.pread(f.fileno(), loc.length, loc.offset)
        if len(data) != loc.length:
            raise StorageError(f"entry {seq}: segment shorter than the index says", seq=seq)
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
        first_loc = self.location(start)
        seq = start
        for first, path in list_segments(self.dir):
            if first < first_loc.segment:
                continue
            off = first_loc.offset if first == first_loc.segment else 0
            for _, _, value, raw in scan_file(path, off):
                yield entry_from_map(value, raw, f"entry {seq}")
                seq += 1
                if seq >= end:
                    return

    def leaf(self, seq: int) -> bytes:
        if seq < self._indexed:
            return self.index.leaf(seq)
        return merkle.hash_leaf(self.raw(seq))

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

    def key_history(self, below: int | None = None) -> list[KeyEpoch]:
        """Genesis key and every rotation among the first `below` entries."""
        limit = self.size if below is None else below
        epochs = [KeyEpoch(0, genesis_key(self.genesis), 0)]
        seqs = self.index.key_seqs(min(limit, self._indexed))
        seqs += [
            self._indexed + i
            for i, (_, raw) in enumerate(self._tail)
            if self._indexed + i < limit and b"key.rotated" in raw
        ]
        for s in seqs:
            if s == 0:
                continue
            e = self.entry(s)
            if e.type == ROTATION_TYPE:
                epochs.append(KeyEpoch(s + 1, rotation_key(e), s))
        return epochs

    def key_at(self, seq: int) -> VerifierKey:
        """The key that signs entry `seq` (and the checkpoint of size `seq`)."""
        key = genesis_key(self.genesis)
        for ep in self.key_history(seq):
            if ep.first_seq <= seq:
                key = ep.key
        return key

    # -- tree, proofs, checkpoints -----------------------------------------

    def _need_indexed(self, size: int) -> None:
        if size > self._indexed:
            raise StorageError(
                f"the index covers {self._indexed} of {self.size} entries; "
                "open the log for writing once to re-index it",
            )

    def root(self, size: int | None = None) -> bytes:
        n = self.size if size is None else size
        if n > self.size:
            raise NotFound(f"the log has {self.size} entries, not {n}")
        self._need_indexed(n)
        return self.index.root(n)

    def inclusion_proof(self, seq: int, size: int) -> list[bytes]:
        self._need_indexed(size)
        return merkle.inclusion_proof(seq, size, self.index.subtree)

    def consistency_proof(self, size1: int, size2: int) -> list[bytes]:
        self._need_indexed(size2)
        return merkle.consistency_proof(size1, size2, self.index.subtree)

    def checkpoint_sizes(self) -> list[int]:
        d = self.dir / CHECKPOINT_DIR
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            return []
        return sorted(int(n) for n in names if len(n) == 20 and n.isdigit())

    def checkpoint_bytes(self, size: int) -> bytes:
        path = self.dir / CHECKPOINT_DIR / checkpoint_name(size)
        try:
            return path.read_bytes()
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
