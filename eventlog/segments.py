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
            return Split(items, Tail(pos, rest, True, "partial entry (interrupted write)"))
        except (cbor2.CBORError, ValueError, OverflowError, MemoryError, RecursionError) as exc:
            return Split(items, Tail(pos, n - pos, False, f"malformed CBOR: {exc}"))
        end = stream.tell()
        items.append((pos, end, value))
        pos = end
    return Split(items, None)


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
    with open(path, "rb") as f:
        if offset:
            f.seek(offset)
        return f.read()


READ_CHUNK = 8 * 1024 * 1024


def scan_file(path: Path, offset: int = 0) -> Iterator[tuple[int, int, Any, bytes]]:
    """(start, end, value, raw) of each complete item of a file from `offset`, in chunks."""
    with open(path, "rb") as f:
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
