"""The Merkle map of per-memory heads: one answer per memory for one root, short proofs both ways.

Properties over random maps: every present memory proves its head and
every absent one proves its absence against the root; the root depends
only on the set of (memory, head) pairs; a proof for another head, or one
edited in any sibling, does not lead to the root.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.format.heads import (
    EMPTY,
    HeadProof,
    HeadsMap,
    fold_heads,
    root_from_proof,
    verify_head,
)

ids = st.text(st.characters(min_codepoint=0x30, max_codepoint=0x7A), min_size=1, max_size=12)
maps = st.dictionaries(ids, st.integers(0, 10**9), max_size=60)


@settings(max_examples=150, deadline=None)
@given(heads=maps, probe=ids)
def test_every_memory_proves_its_head_or_its_absence(heads: dict[str, int], probe: str) -> None:
    hm = HeadsMap(heads)
    for m, h in heads.items():
        assert verify_head(hm.prove(m), hm.root) == h
    p = hm.prove(probe)
    assert verify_head(p, hm.root) == heads.get(probe)
    # Round trip through the bundle encoding.
    assert HeadProof.from_cbor(p.to_cbor(), "t") == p


@settings(max_examples=100, deadline=None)
@given(heads=maps.filter(bool), other=st.integers(0, 10**9), data=st.data())
def test_a_proof_for_another_head_fails(heads: dict[str, int], other: int, data: st.DataObject) -> None:
    hm = HeadsMap(heads)
    m = data.draw(st.sampled_from(sorted(heads)))
    p = hm.prove(m)
    if other != heads[m]:
        with pytest.raises(VerificationError):
            verify_head(HeadProof(m, other, p.siblings), hm.root)
    with pytest.raises(VerificationError):
        verify_head(HeadProof(m, None, p.siblings), hm.root)  # claiming absence
    if p.siblings:
        i = data.draw(st.integers(0, len(p.siblings) - 1))
        sib = list(p.siblings)
        sib[i] = bytes(32) if sib[i] != bytes(32) else b"\x01" * 32
        with pytest.raises(VerificationError):
            verify_head(HeadProof(m, p.head, tuple(sib)), hm.root)


@settings(max_examples=50, deadline=None)
@given(heads=maps)
def test_the_root_depends_only_on_the_pairs(heads: dict[str, int]) -> None:
    items = list(heads.items())
    assert HeadsMap(dict(reversed(items))).root == HeadsMap(heads).root
    if heads:
        m = next(iter(heads))
        assert HeadsMap({**heads, m: heads[m] + 1}).root != HeadsMap(heads).root


def test_small_cases_and_proof_size() -> None:
    assert HeadsMap({}).root == EMPTY
    assert root_from_proof(HeadsMap({}).prove("x")) == EMPTY
    one = HeadsMap({"a": 3})
    assert one.prove("a").siblings == () and verify_head(one.prove("b"), one.root) is None
    big = HeadsMap({f"m{i}": i for i in range(5000)})
    depth = max(len(big.prove(f"m{i}").siblings) for i in range(0, 5000, 97))
    assert depth <= 2 * math.log2(5000) + 8


def test_fold_keeps_the_newest_touch() -> None:
    class E:
        def __init__(self, seq: int, type_: str, data: dict[str, str]) -> None:
            self.seq, self.type, self.data = seq, type_, data

    entries = [E(1, "t", {"id": "a"}), E(2, "t", {"id": "b"}), E(3, "t", {"id": "a"})]
    assert fold_heads(entries, lambda _t, d: [d["id"]]) == {"a": 3, "b": 2}


@pytest.mark.parametrize(
    "value",
    [
        None,
        [],
        ["m", None, [b"x"], None, None],
        ["m", -1, [], None, None],
        ["m", 1, [], "o", 2],
        [1, None, [], None, None],
    ],
)
def test_malformed_proofs_are_refused(value: object) -> None:
    with pytest.raises(VerificationError) as e:
        HeadProof.from_cbor(value, "heads")
    assert e.value.check == "heads.decode"
