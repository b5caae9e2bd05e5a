"""eventlog.tiles: paths as c2sp.org/tlog-tiles spells them, hostile bundles, roots from edge tiles."""

from __future__ import annotations

import hashlib

import pytest

from mnemolog.eventlog.errors import DecodeError
from mnemolog.eventlog.format import merkle
from mnemolog.eventlog.witness import tiles


def test_paths_follow_the_spec_examples() -> None:
    assert tiles.encode_index(1234067) == "x001/x234/067"
    assert tiles.encode_index(0) == "000"
    assert tiles.tile_path(0, 1234067, 8) == "tile/0/x001/x234/067.p/8"
    assert tiles.entries_path(5) == "tile/entries/005"
    assert tiles.decode_index("x001/x234/067") == 1234067
    for bad in ("../000", "x001", "1/000", "000/x001", "0000"):
        with pytest.raises(DecodeError):
            tiles.decode_index(bad)


def test_tile_widths_of_a_tree_of_70000_match_the_spec() -> None:
    # "273 full level 0 tiles, one partial level 0 tile of width 112, one full level 1 tile,
    # one partial level 1 tile of width 17, and one partial level 2 tile of width 1"
    l0, l1, l2 = (tiles.tile_widths(70_000, lv) for lv in range(3))
    assert sum(w == 256 for _, w in l0) == 273 and l0[-1] == (273, 112)
    assert l1 == [(0, 256), (1, 17)] and l2 == [(0, 1)] and tiles.levels(70_000) == 3
    assert tiles.tile_widths(256, 1) == [(0, 1)]


@pytest.mark.parametrize("size", [0, 1, 255, 256, 257, 65_535, 65_536, 70_000])
def test_the_root_from_edge_tiles_is_the_tree_root(size: int) -> None:
    leaves = [hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(size)]
    tree = merkle.MemoryTree(leaves)
    edge = []
    for level in range(tiles.levels(size)):
        span = 1 << (8 * level)
        idx, width = tiles.tile_widths(size, level)[-1] if tiles.tile_widths(size, level) else (0, 0)
        if width == 256:
            edge.append([])
            continue
        start = idx * 256 * span
        edge.append([tree.subtree(a, a + span) for a in range(start, start + width * span, span)])
    assert tiles.root_from_edge(edge) == tree.root()


def test_bundles_round_trip_and_refuse_malformed_input() -> None:
    entries = [b"\xa1a", b"", b"\xa0" * 65_535, b"\xa0" * 65_536]
    data = tiles.encode_bundle(entries)
    slots = tiles.decode_bundle(data, 4)
    assert slots[:3] == entries[:3] and tiles.large_slot_length(slots[3]) == 65_536
    for bad, width in ((data[:-1], 4), (data + b"\x00", 4), (data, 5), (b"\x00", 1), (b"\xff\xff", 1)):
        with pytest.raises(DecodeError):
            tiles.decode_bundle(bad, width)
    with pytest.raises(DecodeError):
        tiles.split_tile(b"\x00" * 33, 1)
