"""The Merkle tree and proofs against a naive RFC 9162 §2.1 implementation written here."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.format import merkle
from mnemolog.eventlog.store.index import Index, IndexWriter

MAX = 70


# -- RFC 9162 §2.1, transcribed as plainly as possible ---------------------------


def _h(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(d: list[bytes]) -> bytes:
    """MTH over leaf *hashes* (D[i] already is MTH({d(i)}) = HASH(0x00 || d(i)))."""
    if not d:
        return _h(b"")
    if len(d) == 1:
        return d[0]
    k = _k(len(d))
    return _h(b"\x01" + mth(d[:k]) + mth(d[k:]))


def path(m: int, d: list[bytes]) -> list[bytes]:
    if len(d) == 1:
        return []
    k = _k(len(d))
    if m < k:
        return [*path(m, d[:k]), mth(d[k:])]
    return [*path(m - k, d[k:]), mth(d[:k])]


def subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    n = len(d)
    if m == n:
        return [] if b else [mth(d)]
    k = _k(n)
    if m <= k:
        return [*subproof(m, d[:k], b), mth(d[k:])]
    return [*subproof(m - k, d[k:], False), mth(d[:k])]


def consistency(m: int, d: list[bytes]) -> list[bytes]:
    return subproof(m, d, True)


LEAVES = [_h(b"\x00" + f"leaf {i}".encode()) for i in range(MAX)]


@pytest.fixture(scope="module")
def disk_index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    d = tmp_path_factory.mktemp("merkle") / "log"
    d.mkdir()
    w = IndexWriter(d)
    # Two appends, so node records written by separate batches are read back together.
    w.append([(0, i * 10, 10, h, False) for i, h in enumerate(LEAVES[:37])])
    w.append([(0, (37 + i) * 10, 10, h, False) for i, h in enumerate(LEAVES[37:])])
    w.close()
    idx = Index(d)
    assert idx.count() == MAX
    return idx


# -- exhaustive agreement on one set of leaves -------------------------------------


def test_roots_agree_for_every_size(disk_index: Index) -> None:
    mem = merkle.MemoryTree(LEAVES)
    cr = merkle.CompactRange()
    packed = merkle.CompactRange()
    assert merkle.root_of([]) == mth([]) == merkle.EMPTY_ROOT == cr.root() == disk_index.root(0)
    for n in range(1, MAX + 1):
        want = mth(LEAVES[:n])
        cr.append(LEAVES[n - 1])
        packed.extend_packed(LEAVES[n - 1])
        assert cr.root() == packed.root() == want
        assert packed.size == n
        assert merkle.root_of(LEAVES[:n]) == want
        assert merkle.MemoryTree(LEAVES[:n]).root() == mem.root(n) == want
        assert disk_index.root(n) == want
    copy = cr.copy()
    copy.append(LEAVES[0])
    assert cr.root() == mth(LEAVES)


def test_extend_packed_in_pieces() -> None:
    blob = b"".join(LEAVES)
    cr = merkle.CompactRange()
    cr.extend_packed(blob, 0, 32 * 5)
    cr.extend_packed(blob, 32 * 5, 32 * 33)
    cr.extend_packed(blob, 32 * 33)
    assert cr.size == MAX and cr.root() == mth(LEAVES)


def test_inclusion_proofs_agree_for_every_size_and_leaf(disk_index: Index) -> None:
    mem = merkle.MemoryTree(LEAVES)
    for n in range(1, MAX + 1):
        root = mth(LEAVES[:n])
        small = merkle.MemoryTree(LEAVES[:n])
        for m in range(n):
            want = path(m, LEAVES[:n])
            assert merkle.inclusion_proof(m, n, small.subtree) == want
            assert merkle.inclusion_proof(m, n, mem.subtree) == want
            assert merkle.inclusion_proof(m, n, disk_index.subtree) == want
            merkle.verify_inclusion(m, n, LEAVES[m], want, root)


def test_consistency_proofs_agree_for_every_pair_of_sizes(disk_index: Index) -> None:
    mem = merkle.MemoryTree(LEAVES)
    for n in range(1, MAX + 1):
        root2 = mth(LEAVES[:n])
        for m in range(1, n + 1):
            want = consistency(m, LEAVES[:n])
            assert merkle.consistency_proof(m, n, mem.subtree) == want
            assert merkle.consistency_proof(m, n, disk_index.subtree) == want
            merkle.verify_consistency(m, n, mth(LEAVES[:m]), root2, want)


# -- random leaves, random sizes ----------------------------------------------------


@st.composite
def tree_and_sizes(draw: st.DrawFn) -> tuple[list[bytes], int, int]:
    n = draw(st.integers(min_value=1, max_value=MAX))
    leaves = [_h(draw(st.binary(max_size=8)) + bytes([i])) for i in range(n)]
    m = draw(st.integers(min_value=1, max_value=n))
    return leaves, m, n


@given(tree_and_sizes(), st.data())
@settings(max_examples=300, deadline=None)
def test_proofs_agree_on_random_trees(t: tuple[list[bytes], int, int], data: st.DataObject) -> None:
    leaves, m, n = t
    tree = merkle.MemoryTree(leaves)
    root = mth(leaves)
    assert tree.root() == root
    i = data.draw(st.integers(min_value=0, max_value=n - 1))
    p = merkle.inclusion_proof(i, n, tree.subtree)
    assert p == path(i, leaves)
    merkle.verify_inclusion(i, n, leaves[i], p, root)
    c = merkle.consistency_proof(m, n, tree.subtree)
    assert c == consistency(m, leaves)
    merkle.verify_consistency(m, n, mth(leaves[:m]), root, c)


@given(tree_and_sizes(), st.data())
@settings(max_examples=300, deadline=None)
def test_mangled_proofs_are_rejected(t: tuple[list[bytes], int, int], data: st.DataObject) -> None:
    leaves, m, n = t
    tree = merkle.MemoryTree(leaves)
    root = tree.root()
    i = data.draw(st.integers(min_value=0, max_value=n - 1))
    p = merkle.inclusion_proof(i, n, tree.subtree)
    bad_proofs = [[*p, LEAVES[0]], [LEAVES[1], *p]]
    if p:
        j = data.draw(st.integers(min_value=0, max_value=len(p) - 1))
        bad_proofs += [[*p[:j], bytes([p[j][0] ^ 1]) + p[j][1:], *p[j + 1 :]], p[:-1]]
    for bad in bad_proofs:
        with pytest.raises(VerificationError):
            merkle.verify_inclusion(i, n, leaves[i], bad, root)
    with pytest.raises(VerificationError):
        merkle.verify_inclusion(i, n, _h(b"other"), p, root)
    if n > 1:
        with pytest.raises(VerificationError):
            merkle.verify_inclusion((i + 1) % n, n, leaves[i], p, root)
    if m < n:
        c = merkle.consistency_proof(m, n, tree.subtree)
        j = data.draw(st.integers(min_value=0, max_value=len(c) - 1))
        for bad in ([*c[:j], bytes([c[j][0] ^ 1]) + c[j][1:], *c[j + 1 :]], c[:-1], [*c, LEAVES[2]]):
            with pytest.raises(VerificationError):
                merkle.verify_consistency(m, n, mth(leaves[:m]), root, bad)
        with pytest.raises(VerificationError):
            merkle.verify_consistency(m, n, _h(b"x"), root, c)


def test_argument_errors() -> None:
    tree = merkle.MemoryTree(LEAVES[:5])
    with pytest.raises(ValueError):
        merkle.inclusion_proof(5, 5, tree.subtree)
    with pytest.raises(ValueError):
        merkle.consistency_proof(0, 5, tree.subtree)
    with pytest.raises(ValueError):
        merkle.consistency_proof(6, 5, tree.subtree)
    with pytest.raises(VerificationError):
        merkle.verify_consistency(0, 5, merkle.EMPTY_ROOT, tree.root(), [])
    with pytest.raises(VerificationError):
        merkle.verify_inclusion(-1, 5, LEAVES[0], [], tree.root())
    with pytest.raises(ValueError):
        merkle.subtree_from_perfect(tree.perfect, 3, 3)
    assert merkle.consistency_proof(5, 5, tree.subtree) == []
    merkle.verify_consistency(5, 5, tree.root(), tree.root(), [])


def test_index_written_in_many_batches(tmp_path: Path) -> None:
    d = tmp_path / "log"
    d.mkdir()
    w = IndexWriter(d)
    for i, h in enumerate(LEAVES[:23]):
        w.append([(0, i, 1, h, i in (0, 7))])
    w.close()
    idx = Index(d)
    assert idx.count() == 23
    assert idx.root(23) == mth(LEAVES[:23])
    assert idx.key_seqs(100) == [0, 7]
    assert [idx.leaf(i) for i in range(23)] == LEAVES[:23]
    w2 = IndexWriter(d)  # reopening resumes the right edge
    w2.append([(0, 23, 1, LEAVES[23], False)])
    w2.reset_to(10)
    assert w2.n == 10 and Index(d).root(10) == mth(LEAVES[:10])
    w2.append([(0, 10 + i, 1, h, False) for i, h in enumerate(LEAVES[10:40])])
    assert Index(d).root(40) == mth(LEAVES[:40])
    w2.close()
