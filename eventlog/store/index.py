"""Derived sidecars in `log/index/`: entry locations, Merkle node hashes, key events.

Everything here is rebuildable from the segments and is never trusted by
`log verify`. It exists so that reading entry N, the root at any size, and an
inclusion or consistency proof cost O(log n) reads instead of a scan.

Files (all append-only, fixed-size records, big-endian):
  loc       20 bytes per entry: segment first seq (u64), offset (u64), length (u32)
  tree-LL   32 bytes per node: node i of level LL is MTH of leaves
            [i * 2^LL, (i + 1) * 2^LL); level 00 holds the leaf hashes
  keys      8 bytes per key event (log.created, key.rotated): its seq

The writer appends leaf and location records after the segment bytes are
durable, so the index never names bytes that may vanish; a crash can leave
it shorter than the log (the writer re-indexes the tail on open) or with a
torn last record (the consistent prefix is used).
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mnemolog.eventlog.errors import StorageError
from mnemolog.eventlog.format.merkle import EMPTY_ROOT, hash_children, subtree_from_perfect
from mnemolog.eventlog.store.fsio import open_regular_fd

LOC = struct.Struct(">QQI")
KEYREC = struct.Struct(">Q")
HASH = 32
MAX_LEVELS = 64


@dataclass(frozen=True, slots=True)
class Location:
    segment: int  # seq of the segment's first entry
    offset: int
    length: int


# (segment first seq, offset, length, leaf hash, is a key event): a plain tuple,
# because the writer makes one per append on its hot path.
IndexRecord = tuple[int, int, int, bytes, bool]


def _size(path: Path | str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


class Index:
    """Read access to the sidecars; `IndexWriter` adds appending."""

    def __init__(self, log_dir: Path) -> None:
        self.dir = log_dir / "index"
        self._fds: dict[str, int] = {}
        # The sidecars' paths as text: `count` stats one per tree level on every catch-up
        # check, and building a Path costs more than the stat.
        self._names: dict[str, str] = {}

    def path(self, name: str) -> Path:
        return self.dir / name

    def _name(self, name: str) -> str:
        got = self._names.get(name)
        if got is None:
            got = self._names[name] = str(self.dir / name)
        return got

    def _fd(self, name: str) -> int:
        fd = self._fds.get(name)
        if fd is None:
            fd = open_regular_fd(self.path(name))
            self._fds[name] = fd
        return fd

    def _pread(self, name: str, size: int, offset: int) -> bytes:
        data = os.pread(self._fd(name), size, offset)
        if len(data) != size:
            raise IndexError(f"index file {name}: short read at {offset}")
        return data

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    @staticmethod
    def level_name(level: int) -> str:
        return f"tree-{level:02d}"

    def count(self) -> int:
        """Entries covered by a consistent prefix of every sidecar file."""
        c = min(_size(self._name("loc")) // LOC.size, _size(self._name("tree-00")) // HASH)
        level = 1
        while (1 << level) <= c and level < MAX_LEVELS:
            nodes = _size(self._name(self.level_name(level))) // HASH
            c = min(c, ((nodes + 1) << level) - 1)
            level += 1
        return c

    def location(self, seq: int) -> Location:
        seg, off, length = LOC.unpack(self._pread("loc", LOC.size, seq * LOC.size))
        return Location(seg, off, length)

    def locations(self, start: int, stop: int) -> list[Location]:
        if stop <= start:
            return []
        raw = self._pread("loc", (stop - start) * LOC.size, start * LOC.size)
        return [Location(*t) for t in LOC.iter_unpack(raw)]

    def leaf(self, seq: int) -> bytes:
        return self._pread("tree-00", HASH, seq * HASH)

    def leaves(self, start: int, stop: int) -> bytes:
        """The leaf hashes of entries start..stop-1, concatenated (one read)."""
        if stop <= start:
            return b""
        return self._pread("tree-00", (stop - start) * HASH, start * HASH)

    def perfect(self, level: int, index: int) -> bytes:
        return self._pread(self.level_name(level), HASH, index * HASH)

    def subtree(self, a: int, b: int) -> bytes:
        return subtree_from_perfect(self.perfect, a, b)

    def root(self, size: int) -> bytes:
        return EMPTY_ROOT if size == 0 else self.subtree(0, size)

    def key_seqs(self, below: int) -> list[int]:
        n = _size(self.path("keys")) // KEYREC.size
        if n == 0:
            return []
        raw = self._pread("keys", n * KEYREC.size, 0)
        return [s for (s,) in KEYREC.iter_unpack(raw) if s < below]


def _check_layout(directory: Path) -> None:
    """Refuse an index directory or sidecar that is not what it should be (exit 6, naming it).

    The index is derived: moving the offending path away lets the next writer rebuild it.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        names = os.listdir(directory)
    except OSError as exc:
        raise StorageError(
            f"the log index {directory} is not a directory ({exc.strerror}); it is derived data: "
            "move it away and the next command rebuilds it",
            file=str(directory),
        ) from exc
    for name in names:
        path = directory / name
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            raise StorageError(
                f"the log index file {path} is not a regular file; the index is derived data: "
                "move it away and the next command rebuilds it",
                file=str(path),
            )


class IndexWriter(Index):
    """The writer's view: truncates to a consistent prefix and appends batches."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__(log_dir)
        _check_layout(self.dir)
        self._wfds: dict[str, int] = {}
        self._loc_path = str(self.path("loc"))
        self._loc_ino: int | None = None
        self._edge: list[tuple[int, bytes]] = []  # (level, hash) of right-edge perfect roots
        self.n = 0
        self.reset_to(self.count())

    def _wfd(self, name: str) -> int:
        fd = self._wfds.get(name)
        if fd is None:
            fd = os.open(self.path(name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self._wfds[name] = fd
            if name == "loc":
                self._loc_ino = os.fstat(fd).st_ino
        return fd

    def close(self) -> None:
        super().close()
        for fd in self._wfds.values():
            os.close(fd)
        self._wfds.clear()
        self._loc_ino = None

    def intact(self) -> bool:
        """True when the on-disk location file is still ours and holds exactly `n` records.

        One stat instead of `count()`'s one per level: the writer asks before
        every batch whether another process changed the index under it (every
        writer appends the location record last, and rebuilding replaces it).
        """
        try:
            st = os.stat(self._loc_path)
        except FileNotFoundError:
            return self.n == 0 and self._loc_ino is None
        return st.st_size == self.n * LOC.size and (self._loc_ino is None or st.st_ino == self._loc_ino)

    def reset_to(self, count: int) -> None:
        """Truncate every sidecar to `count` entries and reload the right edge."""
        self.close()
        if self.path("loc").exists():
            os.truncate(self.path("loc"), count * LOC.size)
        for level in range(MAX_LEVELS):
            p = self.path(self.level_name(level))
            if not p.exists():
                continue
            os.truncate(p, (count >> level) * HASH)
        keys = self.key_seqs(count)
        if self.path("keys").exists():
            os.truncate(self.path("keys"), len(keys) * KEYREC.size)
        self.n = count
        self._edge = []
        pos = 0
        for level in range(count.bit_length() - 1, -1, -1):
            if count & (1 << level):
                self._edge.append((level, self.perfect(level, pos >> level)))
                pos += 1 << level

    def append(self, records: Iterable[IndexRecord]) -> None:
        """Append a batch: one write per sidecar file."""
        loc = bytearray()
        keys = bytearray()
        levels: dict[int, bytearray] = {}
        edge = self._edge
        n = self.n
        pack = LOC.pack
        level0 = levels.setdefault(0, bytearray())
        for seg, off, length, leaf, key_event in records:
            loc += pack(seg, off, length)
            if key_event:
                keys += KEYREC.pack(n)
            level0 += leaf
            h, level = leaf, 0
            while edge and edge[-1][0] == level:
                h = hash_children(edge.pop()[1], h)
                level += 1
                levels.setdefault(level, bytearray()).extend(h)
            edge.append((level, h))
            n += 1
        # Nodes first, then locations: count() takes the consistent prefix of all.
        for level in sorted(levels, reverse=True):
            self._write(self.level_name(level), levels[level])
        if keys:
            self._write("keys", keys)
        self._write("loc", loc)
        self.n = n

    def _write(self, name: str, data: bytes | bytearray) -> None:
        try:
            os.write(self._wfd(name), data)
        except OSError as exc:
            if exc.filename is not None:
                raise
            raise OSError(exc.errno, exc.strerror, str(self.path(name))) from exc
