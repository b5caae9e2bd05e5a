"""Strict, deterministic ustar archives: the container of a forensic bundle.

The writer emits one fixed shape: regular files only, names sorted, mode
0644, uid/gid 0, empty owner names, mtime 0, POSIX ustar magic, no
compression, two zero blocks at the end. The same log, memory and checkpoint
therefore always give the same bytes.

The reader is for archives of unknown origin. It never hands a member to
`tarfile` (which follows links, extracts devices and understands a dozen
header dialects): it parses the 512-byte ustar headers itself and refuses,
before reading any member's data, anything but a flat set of regular files
within the size and count limits. Every refusal is a VerificationError with
check `archive.*`, naming the member.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO

from mnemolog.eventlog.errors import VerificationError

BLOCK = 512
USTAR_MAGIC = b"ustar\x0000"
GNU_MAGIC = b"ustar  \x00"
MAX_NAME = 100  # the writer never uses the prefix field

# Member names the reader accepts: a flat file name, letters first.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")

_TYPES = {
    b"1": "a hard link",
    b"2": "a symbolic link",
    b"3": "a character device",
    b"4": "a block device",
    b"5": "a directory",
    b"6": "a FIFO",
    b"7": "a contiguous file",
    b"x": "a pax extended header",
    b"g": "a pax global header",
    b"L": "a GNU long name",
    b"K": "a GNU long link name",
    b"S": "a GNU sparse file",
}


@dataclass(frozen=True)
class Limits:
    """Bounds checked from the headers before any member's data is read."""

    max_member: int = 256 * 1024 * 1024
    max_total: int = 1024 * 1024 * 1024
    max_members: int = 64


DEFAULT_LIMITS = Limits()


def _fail(message: str, check: str, file: str | None = None, **kw: object) -> VerificationError:
    return VerificationError(message, check=check, file=file, **kw)  # type: ignore[arg-type]


def _octal(value: int, width: int) -> bytes:
    """`width - 1` octal digits and a NUL, as ustar numeric fields are written."""
    digits = f"{value:o}".encode()
    if len(digits) > width - 1:
        raise ValueError(f"{value} does not fit a {width}-byte ustar field")
    return digits.rjust(width - 1, b"0") + b"\x00"


def header(name: str, size: int) -> bytes:
    """The ustar header of a regular file with the writer's fixed metadata."""
    raw = name.encode("ascii")
    if not NAME_RE.match(name) or len(raw) > MAX_NAME:
        raise ValueError(f"member name {name!r} is not a flat ASCII file name of at most 100 bytes")
    h = bytearray(BLOCK)
    h[0 : len(raw)] = raw
    h[100:108] = _octal(0o644, 8)
    h[108:116] = _octal(0, 8)
    h[116:124] = _octal(0, 8)
    h[124:136] = _octal(size, 12)
    h[136:148] = _octal(0, 12)
    h[148:156] = b" " * 8
    h[156:157] = b"0"
    h[257:265] = USTAR_MAGIC
    h[329:337] = _octal(0, 8)
    h[337:345] = _octal(0, 8)
    h[148:156] = f"{sum(h):06o}".encode() + b"\x00 "
    return bytes(h)


def write_tar(files: Iterable[tuple[str, bytes]]) -> bytes:
    """A deterministic archive of `files` (name, bytes), members sorted by name."""
    items = sorted(files)
    names = [n for n, _ in items]
    if len(set(names)) != len(names):
        raise ValueError("duplicate member names")
    out = bytearray()
    for name, data in items:
        out += header(name, len(data))
        out += data
        out += bytes(-len(data) % BLOCK)
    out += bytes(2 * BLOCK)
    return bytes(out)


def _number(field: bytes, what: str, member: str) -> int:
    """A ustar numeric field: octal digits (NUL/space padded) or GNU base-256."""
    if field and field[0] & 0x80:
        # GNU base-256, used for sizes of 8 GiB and more; read it to refuse it clearly.
        if field[0] & 0x40:
            raise _fail(f"member {member!r}: negative {what}", "archive.header", member)
        value = field[0] & 0x3F
        for b in field[1:]:
            value = (value << 8) | b
        return value
    text = field.rstrip(b"\x00 ").lstrip(b" ")
    if not text:
        return 0
    if not all(0x30 <= c <= 0x37 for c in text):
        raise _fail(f"member {member!r}: {what} field is not octal", "archive.header", member)
    return int(text, 8)


def _checksum_ok(h: bytes) -> bool:
    stored = h[148:156]
    try:
        want = _number(stored, "checksum", "?")
    except VerificationError:
        return False
    unsigned = sum(h[:148]) + 8 * 0x20 + sum(h[156:])
    signed = sum((b - 256 if b > 127 else b) for b in h[:148] + h[156:]) + 8 * 0x20
    return want in (unsigned, signed)


def _member_name(h: bytes) -> str:
    raw_name = h[0:100].split(b"\x00", 1)[0]
    prefix = h[345:500].split(b"\x00", 1)[0] if h[257:263] in (b"ustar\x00", b"ustar ") else b""
    raw = prefix + b"/" + raw_name if prefix else raw_name
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def check_name(name: str) -> None:
    """Refuse names that could escape or confuse an extraction directory."""
    if not name:
        raise _fail("a member has an empty name", "archive.name", name)
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise _fail(f"member {name!r} has an absolute path", "archive.absolute_path", name)
    parts = name.replace("\\", "/").split("/")
    if ".." in parts:
        raise _fail(
            f"member {name!r} escapes the archive (path traversal with '..')", "archive.traversal", name
        )
    if any(ord(c) < 0x20 or c == "\x7f" for c in name):
        raise _fail(f"member {name!r} has control characters in its name", "archive.name", name)
    if not NAME_RE.match(name):
        raise _fail(
            f"member {name!r} is not a flat file name (letters, digits, '.', '_', '-')",
            "archive.name",
            name,
        )


def read_tar(stream: BinaryIO, archive_size: int, limits: Limits = DEFAULT_LIMITS) -> dict[str, bytes]:
    """Read a strict ustar archive of regular files into {name: bytes}, or raise.

    `archive_size` is the byte length of the stream (a file's size), so a
    member whose declared size runs past the end is refused as truncated
    without trying to read it.
    """
    if archive_size > limits.max_total + (limits.max_members + 3) * BLOCK * 2:
        raise _fail(
            f"the archive is {archive_size} bytes, more than a bundle may be ({limits.max_total})",
            "archive.too_large",
            found=archive_size,
        )
    members: dict[str, bytes] = {}
    total = 0
    pos = 0
    while True:
        h = stream.read(BLOCK)
        if pos == 0 and not h:
            raise _fail("the archive is empty", "archive.empty")
        if pos == 0 and h[257:263] not in (b"ustar\x00", b"ustar ") and h != bytes(BLOCK):
            raise _fail(_not_a_tar(h), "archive.not_tar")
        if len(h) < BLOCK:
            raise _fail(
                f"the archive ends inside a header at offset {pos} (truncated)",
                "archive.truncated",
                found=archive_size,
            )
        if h == bytes(BLOCK):
            second = stream.read(BLOCK)
            if second != bytes(BLOCK):
                raise _fail(
                    f"the archive ends without its end-of-archive marker at offset {pos} (truncated)",
                    "archive.truncated",
                )
            rest = stream.read(BLOCK)
            while rest:
                if rest.strip(b"\x00"):
                    raise _fail("data after the end-of-archive marker", "archive.trailing_data")
                rest = stream.read(BLOCK)
            break
        if h[257:265] not in (USTAR_MAGIC, GNU_MAGIC):
            raise _fail(f"header at offset {pos} lacks the ustar magic", "archive.header")
        if not _checksum_ok(h):
            raise _fail(f"header at offset {pos} has a bad checksum", "archive.header")
        name = _member_name(h)
        kind = h[156:157]
        if kind not in (b"0", b"\x00"):
            what = _TYPES.get(kind, f"an entry of type {kind!r}")
            raise _fail(
                f"member {name!r} is {what}; a bundle holds regular files only",
                "archive.member_type",
                name,
            )
        check_name(name)
        size = _number(h[124:136], "size", name)
        if size > limits.max_member:
            raise _fail(
                f"member {name!r} declares {size} bytes, over the per-member limit of {limits.max_member}",
                "archive.member_too_large",
                name,
                expected=limits.max_member,
                found=size,
            )
        if total + size > limits.max_total:
            raise _fail(
                f"members declare more than the total limit of {limits.max_total} bytes",
                "archive.too_large",
                name,
                expected=limits.max_total,
                found=total + size,
            )
        if len(members) + 1 > limits.max_members:
            raise _fail(
                f"the archive has more than {limits.max_members} members",
                "archive.too_many_members",
                name,
                expected=limits.max_members,
            )
        if name in members:
            raise _fail(f"member {name!r} appears twice", "archive.duplicate", name)
        padded = size + (-size % BLOCK)
        if pos + BLOCK + padded > archive_size:
            raise _fail(
                f"member {name!r} declares {size} bytes but the archive ends first (truncated)",
                "archive.truncated",
                name,
                expected=size,
            )
        data = stream.read(size)
        if len(data) != size:
            raise _fail(f"member {name!r} is truncated", "archive.truncated", name)
        stream.read(padded - size)
        members[name] = data
        total += size
        pos += BLOCK + padded
    return members


def _not_a_tar(h: bytes) -> str:
    if h[:2] == b"\x1f\x8b":
        return "the file is gzip-compressed; a bundle is an uncompressed tar archive (compression is refused)"
    if h[:3] == b"BZh" or h[:6] == b"\xfd7zXZ\x00" or h[:4] == b"\x28\xb5\x2f\xfd":
        return "the file is compressed; a bundle is an uncompressed tar archive (compression is refused)"
    if h[:4] == b"PK\x03\x04":
        return "the file is a zip archive, not a tar archive"
    return "the file is not a tar archive (no ustar header)"
