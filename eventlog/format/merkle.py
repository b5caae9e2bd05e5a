"""The RFC 9162 §2.1 Merkle tree: hashes, roots, inclusion and consistency proofs.

Pure functions of their inputs. Proof generation takes a `SubtreeHash`
callable, MTH(D[a:b]) over leaf hashes, so the same code serves a tree held
in memory (bundles, tests) and the on-disk node store of a large log, where a
proof costs O(log n) lookups instead of O(n) hashing. Verification follows
the algorithm of RFC 9162 §2.1.3.2 and §2.1.4.2 in the decomposed form used
by transparency-dev/merkle, whose test vectors it passes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from mnemolog.eventlog.errors import VerificationError

HASH_LEN = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

SubtreeHash = Callable[[int, int], bytes]


def hash_leaf(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def hash_children(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def split_point(n: int) -> int:
    """The largest power of two strictly less than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def root_of(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH of a list of leaf hashes (iteratively, via a compact range)."""
    cr = CompactRange()
    for h in leaf_hashes:
        cr.append(h)
    return cr.root()


class CompactRange:
    """Streaming root computation: the perfect subtree roots of the leaves so far.

    Appending costs amortised one node hash; `root()` folds the O(log n)
    stored roots right to left, which equals MTH of all appended leaves.
    """

    __slots__ = ("_hashes", "_sizes", "size")

    def __init__(self) -> None:
        self._hashes: list[bytes] = []
        self._sizes: list[int] = []
        self.size = 0

    def append(self, leaf: bytes) -> None:
        h, s = leaf, 1
        hashes, sizes = self._hashes, self._sizes
        while sizes and sizes[-1] == s:
            h = hash_children(hashes.pop(), h)
            s += sizes.pop()
        hashes.append(h)
        sizes.append(s)
        self.size += 1

    def extend_packed(self, leaves: bytes, start: int = 0, stop: int | None = None) -> None:
        """Append the 32-byte leaf hashes packed in `leaves[start:stop]` (offsets in bytes)."""
        end = len(leaves) if stop is None else stop
        hashes, sizes = self._hashes, self._sizes
        sha = hashlib.sha256
        n = 0
        for off in range(start, end, HASH_LEN):
            h, s = leaves[off : off + HASH_LEN], 1
            while sizes and sizes[-1] == s:
                h = sha(b"\x01" + hashes.pop() + h).digest()
                s += sizes.pop()
            hashes.append(h)
            sizes.append(s)
            n += 1
        self.size += n

    def root(self) -> bytes:
        if not self._hashes:
            return EMPTY_ROOT
        h = self._hashes[-1]
        for left in reversed(self._hashes[:-1]):
            h = hash_children(left, h)
        return h

    def copy(self) -> CompactRange:
        c = CompactRange()
        c._hashes = list(self._hashes)
        c._sizes = list(self._sizes)
        c.size = self.size
        return c


class MemoryTree:
    """A whole tree in memory: every level of aligned perfect subtrees."""

    def __init__(self, leaf_hashes: Sequence[bytes]) -> None:
        self.levels: list[list[bytes]] = [list(leaf_hashes)]
        while len(self.levels[-1]) > 1:
            prev = self.levels[-1]
            self.levels.append([hash_children(prev[i], prev[i + 1]) for i in range(0, len(prev) - 1, 2)])

    @property
    def size(self) -> int:
        return len(self.levels[0])

    def perfect(self, level: int, index: int) -> bytes:
        return self.levels[level][index]

    def subtree(self, a: int, b: int) -> bytes:
        return subtree_from_perfect(self.perfect, a, b)

    def root(self, size: int | None = None) -> bytes:
        n = self.size if size is None else size
        return EMPTY_ROOT if n == 0 else self.subtree(0, n)


def subtree_from_perfect(perfect: Callable[[int, int], bytes], a: int, b: int) -> bytes:
    """MTH(D[a:b]) from aligned perfect subtree hashes `perfect(level, index)`.

    Valid for the ranges RFC 9162 recursion produces: `a` is a multiple of the
    largest power of two not exceeding b - a.
    """
    n = b - a
    if n <= 0:
        raise ValueError(f"empty range [{a}, {b})")
    if n & (n - 1) == 0:
        level = n.bit_length() - 1
        return perfect(level, a >> level)
    k = split_point(n)
    return hash_children(subtree_from_perfect(perfect, a, a + k), subtree_from_perfect(perfect, a + k, b))


def inclusion_proof(index: int, size: int, subtree: SubtreeHash) -> list[bytes]:
    """PATH(index, D[0:size]) of RFC 9162 §2.1.3.1, leaf-side first."""
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is outside a tree of size {size}")
    proof: list[bytes] = []
    lo, hi, m = 0, size, index
    # Walk down from the root, then reverse so the proof runs leaf to root.
    while hi - lo > 1:
        k = split_point(hi - lo)
        if m < k:
            proof.append(subtree(lo + k, hi))
            hi = lo + k
        else:
            proof.append(subtree(lo, lo + k))
            lo, m = lo + k, m - k
    proof.reverse()
    return proof


def consistency_proof(size1: int, size2: int, subtree: SubtreeHash) -> list[bytes]:
    """PROOF(size1, D[0:size2]) of RFC 9162 §2.1.4.1."""
    if not 0 < size1 <= size2:
        raise ValueError(f"no consistency proof from size {size1} to size {size2}")
    if size1 == size2:
        return []
    proof: list[bytes] = []
    lo, hi, m, complete = 0, size2, size1, True
    while True:
        n = hi - lo
        if m == n:
            if not complete:
                proof.append(subtree(lo, hi))
            break
        k = split_point(n)
        if m <= k:
            proof.append(subtree(lo + k, hi))
            hi = lo + k
        else:
            proof.append(subtree(lo, lo + k))
            lo, m, complete = lo + k, m - k, False
    proof.reverse()
    return proof


def _inner_proof_size(index: int, size: int) -> int:
    return (index ^ (size - 1)).bit_length()


def _decomp(index: int, size: int) -> tuple[int, int]:
    inner = _inner_proof_size(index, size)
    border = bin(index >> inner).count("1")
    return inner, border


def _chain_inner(seed: bytes, proof: Sequence[bytes], index: int) -> bytes:
    for i, h in enumerate(proof):
        seed = hash_children(seed, h) if (index >> i) & 1 == 0 else hash_children(h, seed)
    return seed


def _chain_inner_right(seed: bytes, proof: Sequence[bytes], index: int) -> bytes:
    for i, h in enumerate(proof):
        if (index >> i) & 1 == 1:
            seed = hash_children(h, seed)
    return seed


def _chain_border_right(seed: bytes, proof: Sequence[bytes]) -> bytes:
    for h in proof:
        seed = hash_children(h, seed)
    return seed


def _fail(check: str, message: str, **where: object) -> VerificationError:
    return VerificationError(message, check=check, **where)  # type: ignore[arg-type]


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    if not 0 <= index < size:
        raise _fail("inclusion.index", f"leaf index {index} is outside a tree of size {size}", seq=index)
    if len(leaf) != HASH_LEN or any(len(h) != HASH_LEN for h in proof):
        raise _fail("inclusion.hash_length", "proof hashes must be 32 bytes", seq=index)
    inner, border = _decomp(index, size)
    if len(proof) != inner + border:
        raise _fail(
            "inclusion.length",
            f"inclusion proof for leaf {index} of {size} has {len(proof)} hashes",
            seq=index,
            expected=inner + border,
            found=len(proof),
        )
    res = _chain_inner(leaf, proof[:inner], index)
    return _chain_border_right(res, proof[inner:])


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> None:
    """Return if `proof` shows leaf `index` in the tree of `size` with `root`; else raise."""
    got = root_from_inclusion(index, size, leaf, proof)
    if got != root:
        raise _fail(
            "inclusion.root",
            f"inclusion proof for leaf {index} does not lead to the root of size {size}",
            seq=index,
            expected=root.hex(),
            found=got.hex(),
        )


def verify_consistency(size1: int, size2: int, root1: bytes, root2: bytes, proof: Sequence[bytes]) -> None:
    """Return if the tree (size2, root2) extends (size1, root1); else raise. Needs 0 < size1 <= size2."""
    if size2 < size1:
        raise _fail("consistency.sizes", f"size2 ({size2}) < size1 ({size1})")
    if size1 <= 0:
        # RFC 9162 defines proofs for 0 < size1 only; transparency-dev/merkle refuses them too.
        raise _fail("consistency.sizes", "a consistency proof from the empty tree is meaningless")
    if size1 == size2:
        if proof:
            raise _fail("consistency.length", "equal sizes need an empty proof")
        if root1 != root2:
            raise _fail(
                "consistency.root",
                "equal sizes but different roots",
                expected=root1.hex(),
                found=root2.hex(),
            )
        return
    if not proof:
        raise _fail("consistency.length", "empty consistency proof")
    if any(len(h) != HASH_LEN for h in proof):
        raise _fail("consistency.hash_length", "proof hashes must be 32 bytes")
    inner, border = _decomp(size1 - 1, size2)
    shift = (size1 & -size1).bit_length() - 1
    inner -= shift
    seed, start = proof[0], 1
    if size1 == 1 << shift:
        seed, start = root1, 0
    if len(proof) != start + inner + border:
        raise _fail(
            "consistency.length",
            f"consistency proof {size1}->{size2} has {len(proof)} hashes",
            expected=start + inner + border,
            found=len(proof),
        )
    rest = proof[start:]
    mask = (size1 - 1) >> shift
    h1 = _chain_border_right(_chain_inner_right(seed, rest[:inner], mask), rest[inner:])
    if h1 != root1:
        raise _fail(
            "consistency.root1",
            f"consistency proof does not reproduce the root of size {size1}",
            expected=root1.hex(),
            found=h1.hex(),
        )
    h2 = _chain_border_right(_chain_inner(seed, rest[:inner], mask), rest[inner:])
    if h2 != root2:
        raise _fail(
            "consistency.root2",
            f"consistency proof does not reproduce the root of size {size2}",
            expected=root2.hex(),
            found=h2.hex(),
        )
