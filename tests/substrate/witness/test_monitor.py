"""The monitor's tile walk across level boundaries (255, 256, 65,536 …), on a tree held in memory.

Publishing 65,537 real entries would take long; the walk needs only tiles
and a signed checkpoint, built here from eventlog.merkle's in-memory tree.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.format import merkle
from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.format.note import Checkpoint
from mnemolog.eventlog.witness import tiles
from mnemolog.substrate.witness.monitor import check_rel, monitor

ORIGIN = "mnemolog/00000000000000000000000000000000"
N = 70_000


class MemorySource:
    """The tlog-tiles resources of the first `size` leaves of `tree`."""

    where = "mem/"

    def __init__(self, tree: merkle.MemoryTree, key: SigningKey) -> None:
        self.tree, self.key, self.size = tree, key, 0
        self.fetched: list[str] = []

    def get(self, rel: str, limit: int) -> bytes | None:
        check_rel(rel)
        self.fetched.append(rel)
        if rel == "checkpoint":
            return Checkpoint(ORIGIN, self.size, self.tree.root(self.size)).sign(self.key)
        for level in range(tiles.levels(self.size)):
            span = 1 << (8 * level)
            for index, width in tiles.tile_widths(self.size, level):
                if tiles.tile_path(level, index, width) == rel:
                    start = index * 256 * span
                    return b"".join(
                        self.tree.subtree(a, a + span) for a in range(start, start + width * span, span)
                    )
        return None


@pytest.fixture(scope="module")
def tree() -> merkle.MemoryTree:
    return merkle.MemoryTree([hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(N)])


def test_the_walk_follows_a_tree_across_every_tile_boundary(tree: merkle.MemoryTree, tmp_path: Path) -> None:
    key = SigningKey.generate("log")
    src = MemorySource(tree, key)
    state = tmp_path / "state.json"
    trusted: str | None = key.verifier.vkey()
    for size in (1, 255, 256, 257, 511, 512, 65_535, 65_536, 65_537, N):
        src.size = size
        src.fetched.clear()
        r = monitor(src, state, trusted_key=trusted)
        trusted = None  # from the state from now on
        assert r.size == size and r.root == Checkpoint(ORIGIN, size, tree.root(size)).text().split("\n")[2]
    # Incremental: 65,537 -> 70,000 fetched the level-0 tiles of the new range and one tile a level above.
    assert sum(p.startswith("tile/0/") for p in src.fetched) == (N - 1) // 256 - 65_537 // 256 + 1


def test_a_forked_tree_past_a_level_boundary_is_caught(tree: merkle.MemoryTree, tmp_path: Path) -> None:
    key = SigningKey.generate("log")
    src = MemorySource(tree, key)
    state = tmp_path / "state.json"
    src.size = 300
    monitor(src, state, trusted_key=key.verifier.vkey())
    leaves = list(tree.levels[0][:N])
    leaves[299] = hashlib.sha256(b"forged").digest()  # a leaf the monitor saw, now another
    src.tree = merkle.MemoryTree(leaves)
    src.size = 65_600
    with pytest.raises(VerificationError) as e:
        monitor(src, state)
    assert e.value.check == "monitor.fork"
