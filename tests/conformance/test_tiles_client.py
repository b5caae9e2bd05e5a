"""A tlog-tiles client written from the C2SP text alone follows `log publish` output.

It imports neither eventlog.tiles nor eventlog.merkle: hashlib and base64
only, every rule taken from c2sp.org/tlog-tiles and RFC 6962 §2.1 (and, for
entries over 64 KiB, the rule of docs/format.md §16). It reads the
checkpoint, checks every hash tile against the level below, recomputes the
root from the tiles, compares it with the checkpoint, checks every entry
bundle against the level-0 tiles, and proves the inclusion of every entry
with an RFC 6962 audit path built from the tiles.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from mnemolog.substrate.home import Home
from mnemolog.substrate.witness.publish import publish


def _h(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


def mth(d: list[bytes]) -> bytes:
    """RFC 6962 §2.1 MTH over leaf hashes (already hashed with 0x00)."""
    n = len(d)
    if n == 0:
        return _h(b"")
    if n == 1:
        return d[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return _h(b"\x01" + mth(d[:k]) + mth(d[k:]))


def path(m: int, d: list[bytes]) -> list[bytes]:
    """RFC 6962 §2.1.1 PATH(m, D[n])."""
    n = len(d)
    if n == 1:
        return []
    k = 1
    while k * 2 < n:
        k *= 2
    if m < k:
        return [*path(m, d[:k]), mth(d[k:])]
    return [*path(m - k, d[k:]), mth(d[:k])]


def verify_path(m: int, n: int, leaf: bytes, proof: list[bytes], root: bytes) -> bool:
    """RFC 9162 §2.1.3.2."""
    if m >= n:
        return False
    fn, sn, r = m, n - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = _h(b"\x01" + p + r)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = _h(b"\x01" + r + p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def n_path(n: int) -> str:
    """`<N>`: zero-padded 3-digit elements, all but the last starting with x."""
    parts = []
    while True:
        parts.append(f"{n % 1000:03d}")
        n //= 1000
        if n == 0:
            break
    return "/".join(["x" + p for p in reversed(parts[1:])] + [parts[0]])


def get(root: Path, rel: str) -> bytes:
    return (root / rel).read_bytes()


def read_tree(pub: Path) -> tuple[str, int, bytes, list[bytes]]:
    note = get(pub, "checkpoint").decode()
    body = note.split("\n\n")[0].split("\n")
    origin, size, root = body[0], int(body[1]), base64.b64decode(body[2])
    levels: list[list[bytes]] = []
    level = 0
    while size >> (8 * level):
        count = size >> (8 * level)
        hashes: list[bytes] = []
        for n in range((count + 255) // 256):
            width = min(256, count - n * 256)
            rel = f"tile/{level}/{n_path(n)}" + ("" if width == 256 else f".p/{width}")
            data = get(pub, rel)
            assert len(data) == 32 * width, rel
            hashes += [data[i : i + 32] for i in range(0, len(data), 32)]
        levels.append(hashes)
        level += 1
    # "each hash in a tile is the Merkle Tree Hash of a *full* tile at the level below"
    for lv in range(1, len(levels)):
        for i, h in enumerate(levels[lv]):
            assert h == mth(levels[lv - 1][i * 256 : (i + 1) * 256]), (lv, i)
    return origin, size, root, levels[0] if levels else []


def read_entries(pub: Path, size: int) -> list[bytes]:
    out: list[bytes] = []
    for n in range((size + 255) // 256):
        width = min(256, size - n * 256)
        data = get(pub, f"tile/entries/{n_path(n)}" + ("" if width == 256 else f".p/{width}"))
        off = 0
        while off < len(data):
            ln = int.from_bytes(data[off : off + 2], "big")
            slot = data[off + 2 : off + 2 + ln]
            off += 2 + ln
            marker = b"mnemolog/large-entry/v1\n"
            if len(slot) == len(marker) + 8 and slot.startswith(marker):
                seq = len(out)
                slot = get(pub, f"large-entry/{n_path(seq)}")
                assert len(slot) == int.from_bytes(data[off - 8 : off], "big")
            out.append(slot)
    assert len(out) == size
    return out


def follow(pub: Path) -> tuple[str, int, bytes]:
    origin, size, root, leaves = read_tree(pub)
    assert len(leaves) == size
    assert mth(leaves) == root
    entries = read_entries(pub, size)
    for m, e in enumerate(entries):
        assert _h(b"\x00" + e) == leaves[m], m
        assert verify_path(m, size, leaves[m], path(m, leaves), root), m
    return origin, size, root


def _grow(home: Home, n: int, big: int = 0) -> None:
    with home.open_writer(periodic_checkpoints=False) as w:
        w.append_many([("note.test", {"i": i, "pad": "y" * (i % 50)}, 1) for i in range(n)])
        for j in range(big):
            w.append("note.test", {"big": "z" * (70_000 + j)})


def test_a_spec_literal_client_follows_publish_output(make_home, tmp_path: Path) -> None:
    home = make_home()
    _grow(home, 300, big=1)
    pub = tmp_path / "pub"
    publish(home.log_dir, pub)
    origin, size, root = follow(pub)
    with home.open_log() as log:
        assert (origin, size, root) == (log.origin, log.size, log.root())
    assert size > 300 and any(
        p.stat().st_size > 65_535 for p in (pub / "large-entry").rglob("*") if p.is_file()
    )


def test_the_client_follows_an_incremental_publish(make_home, tmp_path: Path) -> None:
    home = make_home()
    _grow(home, 200)
    pub = tmp_path / "pub"
    publish(home.log_dir, pub)
    first = follow(pub)
    _grow(home, 100, big=1)
    publish(home.log_dir, pub)
    second = follow(pub)
    assert second[1] > first[1] > 0 and second[2] != first[2]
