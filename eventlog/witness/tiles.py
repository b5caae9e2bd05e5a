"""C2SP tlog-tiles: tile coordinates and paths, entry bundles, and roots from tiles.

Pure functions. A tile at level `l`, index `n` holds up to 256 hashes; its
`i`-th is MTH(D[(n*256+i) * 256**l : (n*256+i+1) * 256**l]) (c2sp.org/tlog-tiles).
Paths are `tile/<L>/<N>[.p/<W>]` and `tile/entries/<N>[.p/<W>]`, `<N>` in
zero-padded 3-digit groups, all but the last prefixed with `x`.

Entry bundles hold uint16 big-endian length-prefixed entries, so an entry
of more than 65,535 bytes cannot sit in one. mnemolog's rule (docs/format.md
§16): its slot holds a marker, `LARGE_MARKER || uint64 BE length`, and its
bytes are published whole at `large-entry/<seq as N>`; the level-0 tile
still holds the leaf hash of the real bytes, so the tree proves them. A
marker never parses as an entry (entries are CBOR maps, the marker starts
with the ASCII letter `m`).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Sequence

from mnemolog.eventlog.errors import DecodeError
from mnemolog.eventlog.format import merkle

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT
TILE_BYTES = TILE_WIDTH * merkle.HASH_LEN
MAX_LEVEL = 63
MAX_BUNDLE_ENTRY = 0xFFFF
LARGE_MARKER = b"mnemolog/large-entry/v1\n"
LARGE_SLOT_LEN = len(LARGE_MARKER) + 8
LARGE_DIR = "large-entry"
CHECKPOINT_PATH = "checkpoint"

_PATH_ELEM = re.compile(r"^(x[0-9]{3}/)*[0-9]{3}$")


def encode_index(n: int) -> str:
    """`<N>`: 1234067 -> `x001/x234/067`."""
    if n < 0:
        raise ValueError(f"tile index {n} is negative")
    groups = [f"{n % 1000:03d}"]
    n //= 1000
    while n:
        groups.append(f"x{n % 1000:03d}")
        n //= 1000
    return "/".join(reversed(groups))


def decode_index(s: str) -> int:
    if not _PATH_ELEM.match(s):
        raise DecodeError(f"{s!r} is not a tile index path")
    return int(s.replace("x", "").replace("/", ""))


def _suffix(width: int) -> str:
    if not 1 <= width <= TILE_WIDTH:
        raise ValueError(f"tile width {width} is outside 1..256")
    return "" if width == TILE_WIDTH else f".p/{width}"


def tile_path(level: int, index: int, width: int = TILE_WIDTH) -> str:
    if not 0 <= level <= MAX_LEVEL:
        raise ValueError(f"tile level {level} is outside 0..63")
    return f"tile/{level}/{encode_index(index)}{_suffix(width)}"


def entries_path(index: int, width: int = TILE_WIDTH) -> str:
    return f"tile/entries/{encode_index(index)}{_suffix(width)}"


def large_entry_path(seq: int) -> str:
    return f"{LARGE_DIR}/{encode_index(seq)}"


def tile_widths(size: int, level: int) -> list[tuple[int, int]]:
    """(index, width) of every tile at `level` a tree of `size` has: full ones, then the partial one."""
    n = size >> (TILE_HEIGHT * level)
    out = [(i, TILE_WIDTH) for i in range(n >> TILE_HEIGHT)]
    if n % TILE_WIDTH:
        out.append((n >> TILE_HEIGHT, n % TILE_WIDTH))
    return out


def levels(size: int) -> int:
    """How many levels have tiles in a tree of `size` (0 for the empty tree)."""
    n = 0
    while size >> (TILE_HEIGHT * n):
        n += 1
    return n


def split_tile(data: bytes, width: int, where: str = "tile") -> list[bytes]:
    """The hashes of a tile of `width`; anything but exactly width * 32 bytes is refused."""
    if len(data) != width * merkle.HASH_LEN:
        raise DecodeError(
            f"{where}: {len(data)} bytes, a tile of width {width} is {width * merkle.HASH_LEN}",
            file=where,
            expected=width * merkle.HASH_LEN,
            found=len(data),
        )
    return [data[i : i + merkle.HASH_LEN] for i in range(0, len(data), merkle.HASH_LEN)]


def large_slot(entry_len: int) -> bytes:
    return LARGE_MARKER + struct.pack(">Q", entry_len)


def bundle_slot(entry: bytes) -> bytes:
    """What an entry's slot in a bundle holds: the entry, or the large-entry marker."""
    return entry if len(entry) <= MAX_BUNDLE_ENTRY else large_slot(len(entry))


def encode_bundle(entries: Iterable[bytes]) -> bytes:
    out = bytearray()
    for e in entries:
        slot = bundle_slot(e)
        out += struct.pack(">H", len(slot)) + slot
    return bytes(out)


def decode_bundle(data: bytes, width: int, where: str = "entry bundle") -> list[bytes]:
    """The `width` slots of a bundle; short, long or trailing bytes are refused."""
    slots: list[bytes] = []
    off = 0
    while off < len(data):
        if off + 2 > len(data):
            raise DecodeError(f"{where}: truncated length prefix at byte {off}", file=where)
        (n,) = struct.unpack_from(">H", data, off)
        if off + 2 + n > len(data):
            raise DecodeError(f"{where}: entry {len(slots)} runs past the end", file=where)
        slots.append(data[off + 2 : off + 2 + n])
        off += 2 + n
    if len(slots) != width:
        raise DecodeError(
            f"{where}: {len(slots)} entries, a bundle of width {width} holds {width}",
            file=where,
            expected=width,
            found=len(slots),
        )
    return slots


def large_slot_length(slot: bytes) -> int | None:
    """The announced length if `slot` is a large-entry marker, else None."""
    if len(slot) == LARGE_SLOT_LEN and slot.startswith(LARGE_MARKER):
        (n,) = struct.unpack(">Q", slot[len(LARGE_MARKER) :])
        return int(n)
    return None


def root_from_edge(edge: Sequence[Sequence[bytes]]) -> bytes:
    """The tree root from its right-edge tiles: `edge[l]` is the partial tile at level l (maybe empty).

    The hashes of the partial tiles, highest level first, are the tree's
    aligned perfect subtrees left to right; folding them as a compact range
    gives MTH (RFC 9162 §2.1.1).
    """
    hashes: list[bytes] = []
    sizes: list[int] = []
    for level in range(len(edge) - 1, -1, -1):
        span = 1 << (TILE_HEIGHT * level)
        for tile_h in edge[level]:
            h, s = tile_h, span
            while sizes and sizes[-1] == s:
                h = merkle.hash_children(hashes.pop(), h)
                s += sizes.pop()
            hashes.append(h)
            sizes.append(s)
    if not hashes:
        return merkle.EMPTY_ROOT
    root = hashes[-1]
    for left in reversed(hashes[:-1]):
        root = merkle.hash_children(left, root)
    return root


def tile_hash(hashes: Sequence[bytes]) -> bytes:
    """MTH of a full tile's 256 hashes: the hash its parent tile holds for it."""
    if len(hashes) != TILE_WIDTH:
        raise ValueError("only a full tile is hashed into the level above")
    return merkle.root_of(hashes)
