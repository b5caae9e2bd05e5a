"""A Merkle map of per-memory heads: which entry last touched each memory, committed by one root.

The map holds, for every memory touched among the first S entries of a log,
the seq of the newest of them that touches it (its *head*). It is a compact
sparse Merkle tree keyed by `k = SHA-256(memory id)`, so every memory has
exactly one place in it, and both "the head of m is h" and "m was never
touched" have short proofs that anyone can check against the root alone:

    empty                 = 32 zero bytes
    leaf(m, h)            = SHA-256(0x00 || k || canonical CBOR [m, h])
    node(left, right)     = SHA-256(0x01 || left || right)
    T(set, depth)         = empty            if the set is empty
                          = leaf(m, h)       if it holds one memory
                          = node(T(set with bit `depth` of k = 0, depth + 1),
                                 T(set with bit `depth` of k = 1, depth + 1))

(bit 0 is the most significant bit of k[0]). A subtree holding one memory
is its leaf, whatever its depth, so a proof is the siblings along k's path
down to where the path ends: at the memory's own leaf (membership), or at an
empty subtree or at another memory's leaf (absence). Leaves and nodes hash
under different prefixes and a leaf names its full key, so one root admits
one answer per memory: a map that says otherwise cannot be made to agree
with a root computed from the log, and a signed root that disagrees with
the log is a provable lie.

Pure functions of their inputs; standard library and cbor2 only.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mnemolog.eventlog.errors import VerificationError

EMPTY = bytes(32)
MAX_DEPTH = 256


def key_of(memory_id: str) -> bytes:
    return hashlib.sha256(memory_id.encode()).digest()


def bit(k: bytes, depth: int) -> int:
    return (k[depth >> 3] >> (7 - (depth & 7))) & 1


def _uint_head(major: int, n: int) -> bytes:
    if n < 24:
        return bytes((major << 5 | n,))
    for ai, width in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * width):
            return bytes((major << 5 | ai,)) + n.to_bytes(width, "big")
    raise ValueError(f"{n} does not fit in 64 bits")


def leaf_value(memory_id: str, head: int) -> bytes:
    """Canonical CBOR of [memory_id, head] (written out: it is the inner loop of building a map)."""
    b = memory_id.encode()
    return b"\x82" + _uint_head(3, len(b)) + b + _uint_head(0, head)


def leaf_hash(memory_id: str, head: int, key: bytes | None = None) -> bytes:
    k = key_of(memory_id) if key is None else key
    return hashlib.sha256(b"\x00" + k + leaf_value(memory_id, head)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


@dataclass(frozen=True)
class HeadProof:
    """Where `memory_id`'s path ends, and the siblings on the way (root side first).

    `head` is the memory's head when the path ends at its own leaf, None when
    it ends at an empty subtree or (`other`, `other_head`) at another
    memory's leaf: then the memory is absent from the map.
    """

    memory_id: str
    head: int | None
    siblings: tuple[bytes, ...]
    other: str | None = None
    other_head: int | None = None

    def to_cbor(self) -> list[Any]:
        return [self.memory_id, self.head, list(self.siblings), self.other, self.other_head]

    @classmethod
    def from_cbor(cls, value: Any, where: str) -> HeadProof:
        def bad(why: str) -> VerificationError:
            return VerificationError(
                f"{where}: malformed head proof ({why})", check="heads.decode", file=where
            )

        if not isinstance(value, list) or len(value) != 5:
            raise bad("not a five-item array")
        mid, head, sibs, other, other_head = value
        if not isinstance(mid, str) or not isinstance(sibs, list) or len(sibs) > MAX_DEPTH:
            raise bad("memory id or siblings")
        if any(not isinstance(s, bytes) or len(s) != 32 for s in sibs):
            raise bad("a sibling is not 32 bytes")
        for v in (head, other_head):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise bad("a head is not an unsigned integer")
        if (other is None) != (other_head is None) or (other is not None and not isinstance(other, str)):
            raise bad("other leaf")
        if head is not None and other is not None:
            raise bad("both a head and another leaf")
        return cls(mid, head, tuple(sibs), other, other_head)


class HeadsMap:
    """A built map: its root and proofs for any memory (present or absent)."""

    def __init__(self, heads: Mapping[str, int]) -> None:
        self.heads = dict(heads)
        # Sorted by key, each subtree is a contiguous run: building and proving split runs by one bit.
        self._items = sorted((key_of(m), m, h) for m, h in self.heads.items())
        self._ints = [int.from_bytes(k, "big") for k, _, _ in self._items]
        self._cache: dict[tuple[int, int, int], bytes] = {}
        self.root = self._hash(0, len(self._items), 0)

    def _split(self, lo: int, hi: int, depth: int) -> int:
        """The first index in [lo, hi) whose key has bit `depth` set (keys there share `depth` bits)."""
        prefix = self._ints[lo] >> (MAX_DEPTH - depth) << (MAX_DEPTH - depth)
        return bisect.bisect_left(self._ints, prefix | (1 << (MAX_DEPTH - 1 - depth)), lo, hi)

    def _hash(self, lo: int, hi: int, depth: int) -> bytes:
        if lo == hi:
            return EMPTY
        if hi - lo == 1:
            k, m, h = self._items[lo]
            return leaf_hash(m, h, k)
        cached = self._cache.get((lo, hi, depth))
        if cached is not None:
            return cached
        if depth >= MAX_DEPTH:
            raise ValueError("two memory ids with the same SHA-256")
        mid = self._split(lo, hi, depth)
        node = node_hash(self._hash(lo, mid, depth + 1), self._hash(mid, hi, depth + 1))
        self._cache[(lo, hi, depth)] = node
        return node

    def prove(self, memory_id: str) -> HeadProof:
        k = key_of(memory_id)
        lo, hi, depth = 0, len(self._items), 0
        siblings: list[bytes] = []
        while hi - lo > 1:
            mid = self._split(lo, hi, depth)
            if bit(k, depth):
                siblings.append(self._hash(lo, mid, depth + 1))
                lo = mid
            else:
                siblings.append(self._hash(mid, hi, depth + 1))
                hi = mid
            depth += 1
        if hi - lo == 1:
            _, m, h = self._items[lo]
            if m == memory_id:
                return HeadProof(memory_id, h, tuple(siblings))
            return HeadProof(memory_id, None, tuple(siblings), m, h)
        return HeadProof(memory_id, None, tuple(siblings))


def root_from_proof(proof: HeadProof) -> bytes:
    """The root `proof` leads to, or a VerificationError if its shape is impossible."""
    k = key_of(proof.memory_id)
    depth = len(proof.siblings)
    if proof.head is not None:
        h = leaf_hash(proof.memory_id, proof.head)
    elif proof.other is not None:
        assert proof.other_head is not None
        ko = key_of(proof.other)
        if ko == k or any(bit(ko, d) != bit(k, d) for d in range(depth)):
            raise VerificationError(
                f"the head proof of {proof.memory_id} ends at a leaf that is not on its path",
                check="heads.proof",
            )
        h = leaf_hash(proof.other, proof.other_head)
    else:
        h = EMPTY
    for d in range(depth - 1, -1, -1):
        s = proof.siblings[d]
        h = node_hash(s, h) if bit(k, d) else node_hash(h, s)
    return h


def verify_head(proof: HeadProof, root: bytes) -> int | None:
    """The head of `proof.memory_id` in the map with `root` (None: never touched); else raise."""
    got = root_from_proof(proof)
    if got != root:
        raise VerificationError(
            f"the head proof of {proof.memory_id} does not lead to the committed root",
            check="heads.root",
            expected=root.hex(),
            found=got.hex(),
        )
    return proof.head


def fold_heads(
    entries: Iterable[Any],
    touched: Callable[[str, dict[str, Any]], Iterable[str]],
    into: dict[str, int] | None = None,
) -> dict[str, int]:
    """Heads after `entries` (in seq order): each touched memory's newest seq."""
    heads = {} if into is None else into
    for e in entries:
        for m in touched(e.type, e.data):
            heads[m] = e.seq
    return heads


def heads_root(heads: Mapping[str, int]) -> bytes:
    return HeadsMap(heads).root


def proofs_for(heads: HeadsMap, memory_ids: Sequence[str]) -> list[HeadProof]:
    return [heads.prove(m) for m in sorted(set(memory_ids))]
