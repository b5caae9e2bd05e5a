"""Segment files: naming, listing and splitting a segment into entry byte ranges.

A segment is an RFC 8742 CBOR sequence of entries named by the seq of its
first entry (20 decimal digits, `.seg`). Splitting finds item boundaries with
cbor2's C decoder; what lies after the last complete item is classified as
either a torn tail (a proper prefix of one entry, which a crash mid-write
leaves) or damage (anything else), and the caller decides what to do: only the
writer, under its lock, ever cuts a torn tail.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cbor2

from mnemolog.eventlog.store.fsio import open_regular

SEG_SUFFIX = ".seg"
SEG_RE = re.compile(r"^(\d{20})\.seg$")
# Larger than any entry we write; a "partial entry" claiming more is damage.
MAX_ENTRY_BYTES = 4 * 1024 * 1024
ENTRY_MAP_HEAD = 0xA9  # every v1 entry is a map of 9 pairs


def segment_name(first_seq: int) -> str:
    return f"{first_seq:020d}{SEG_SUFFIX}"


def list_segments(log_dir: Path) -> list[tuple[int, Path]]:
    """Segments sorted by first seq; files that do not match the name pattern are ignored."""
    out = []
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return []
    for name in names:
        m = SEG_RE.match(name)
        if m:
            out.append((int(m.group(1)), log_dir / name))
    out.sort()
    return out


@dataclass(frozen=True)
class Tail:
    """What follows the last complete item of a buffer."""

    offset: int  # where the incomplete bytes start
    length: int  # how many bytes follow
    torn: bool  # True: a proper prefix of one entry (a crash mid-write)
    reason: str


@dataclass(frozen=True)
class Split:
    items: list[tuple[int, int, Any]]  # (start, end, decoded value)
    tail: Tail | None


def split_items(buf: bytes, start: int = 0) -> Split:
    """Split `buf[start:]` into complete CBOR items and classify any remainder."""
    stream = io.BytesIO(buf)
    stream.seek(start)
    dec = cbor2.CBORDecoder(stream)
    items: list[tuple[int, int, Any]] = []
    pos = start
    n = len(buf)
    while pos < n:
        try:
            value = dec.decode()
        except cbor2.CBORDecodeEOF:
            rest = n - pos
            if buf[pos] != ENTRY_MAP_HEAD:
                return Split(items, Tail(pos, rest, False, "trailing bytes are not an entry"))
            if rest >= MAX_ENTRY_BYTES:
                return Split(items, Tail(pos, rest, False, "a partial entry larger than any entry"))
            if not is_entry_prefix(buf, pos):
                return Split(items, Tail(pos, rest, False, "trailing bytes are not the start of an entry"))
            return Split(items, Tail(pos, rest, True, "partial entry (interrupted write)"))
        except (cbor2.CBORError, ValueError, OverflowError, MemoryError, RecursionError) as exc:
            return Split(items, Tail(pos, n - pos, False, f"malformed CBOR: {exc}"))
        end = stream.tell()
        items.append((pos, end, value))
        pos = end
    return Split(items, None)


class _Short(Exception):
    pass


class _Bad(Exception):
    pass


_MAX_PREFIX_DEPTH = 34


def _walk(buf: bytes, pos: int, depth: int) -> int:
    """Skip one CBOR item of the value model at `pos`; _Short if the bytes run out, _Bad if malformed."""
    if depth > _MAX_PREFIX_DEPTH:
        raise _Bad
    if pos >= len(buf):
        raise _Short
    ib = buf[pos]
    major, ai = ib >> 5, ib & 31
    pos += 1
    if ai < 24:
        n = ai
    elif ai <= 27:
        size = 1 << (ai - 24)
        if pos + size > len(buf):
            raise _Short
        n = int.from_bytes(buf[pos : pos + size], "big")
        pos += size
    else:
        raise _Bad  # indefinite lengths and reserved values are never written
    if major <= 1:
        return pos
    if major <= 3:
        if n > MAX_ENTRY_BYTES:
            raise _Bad
        if pos + n > len(buf):
            raise _Short
        return pos + n
    if major <= 5:
        if n > MAX_ENTRY_BYTES:
            raise _Bad
        for _ in range(n if major == 4 else 2 * n):
            pos = _walk(buf, pos, depth + 1)
        return pos
    if major == 7 and (20 <= ai <= 22 or 25 <= ai <= 27):
        return pos  # false, true, null, floats
    raise _Bad  # tags, undefined, simple values


def is_entry_prefix(buf: bytes, start: int = 0) -> bool:
    """Whether `buf[start:]` can be the first bytes of an entry cut short by a crash.

    It must start like an entry (a map of nine pairs), claim no length larger
    than an entry can be, hold nothing a writer never writes, and run out of
    bytes before the map is complete.
    """
    if start >= len(buf) or buf[start] != ENTRY_MAP_HEAD:
        return False
    try:
        _walk(buf, start, 0)
    except _Short:
        return True
    except _Bad:
        return False
    return False  # a complete item is not a partial one


def iter_items(buf: bytes, start: int = 0) -> Iterator[tuple[int, int, Any]]:
    """Complete items of `buf[start:]`, stopping silently before an incomplete tail.

    For readers: what follows may be an append in progress, never to be judged.
    """
    stream = io.BytesIO(buf)
    stream.seek(start)
    dec = cbor2.CBORDecoder(stream)
    pos = start
    n = len(buf)
    while pos < n:
        try:
            value = dec.decode()
        except (cbor2.CBORError, ValueError, OverflowError, MemoryError, RecursionError):
            return
        end = stream.tell()
        yield pos, end, value
        pos = end


def read_file(path: Path, offset: int = 0) -> bytes:
    """The bytes of a file from `offset` to its end."""
    with open_regular(path) as f:
        if offset:
            f.seek(offset)
        return f.read()


READ_CHUNK = 8 * 1024 * 1024


def scan_file(path: Path, offset: int = 0) -> Iterator[tuple[int, int, Any, bytes]]:
    """(start, end, value, raw) of each complete item of a file from `offset`, in chunks."""
    with open_regular(path) as f:
        f.seek(offset)
        buf = b""
        base = offset
        while True:
            chunk = f.read(READ_CHUNK)
            if not chunk:
                return
            buf = buf + chunk if buf else chunk
            pos = 0
            for s, e, value in iter_items(buf):
                yield base + s, base + e, value, buf[s:e]
                pos = e
            base += pos
            buf = buf[pos:]
