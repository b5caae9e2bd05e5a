"""`log verify` folds the back-chains and heads commitments of the whole log (issue 23, item 2).

A pointer that skips an entry, or a heads root that is not the log's, is a
signed false statement inside the log: verification now finds it by folding
the entries, where before only a bundle built on it could (and a bundle that
omitted the skipped entry verified as complete).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.format.heads import heads_root
from mnemolog.eventlog.store.writer import Durability, LogWriter
from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.eventlog.verify.verifier import verify_log
from mnemolog.eventlog.vocabulary import events as v
from tests.eventlog.logkit import StepClock, seeded_key

A, B = "01AAAAAAAAAAAAAAAAAAAAAAAA", "01BBBBBBBBBBBBBBBBBBBBBBBB"


def stored(mid: str, prev: int) -> tuple[str, dict[str, Any], int]:
    return (v.MEMORY_STORED, {"id": mid, "content": "c", "touch_prev": {mid: prev}}, 3)


def updated(mid: str, prev: int | None) -> tuple[str, dict[str, Any], int]:
    data: dict[str, Any] = {"id": mid, "title": "t"}
    if prev is not None:
        data["touch_prev"] = {mid: prev}
    return (v.MEMORY_UPDATED, data, 3)


def committed(size: int, heads: dict[str, int], count: int | None = None) -> tuple[str, dict[str, Any], int]:
    return (
        v.HEADS_COMMITTED,
        {"size": size, "root": heads_root(heads), "count": len(heads) if count is None else count},
        1,
    )


def write(tmp_path: Path, items: list[tuple[str, dict[str, Any], int]]) -> Path:
    d = tmp_path / "log"
    key = seeded_key()
    clock = StepClock()
    LogWriter.create(d, key, clock=clock, log_id=b"\x22" * 16)
    with LogWriter(d, [key], clock=clock, durability=Durability("fsync")) as w:
        w.append_many(items)
    return d


def test_a_true_log_verifies_and_reports_what_it_folded(tmp_path: Path) -> None:
    d = write(
        tmp_path,
        [
            stored(A, -1),
            stored(B, -1),
            updated(A, 1),
            committed(4, {A: 3, B: 2}),
            updated(B, 2),
            committed(6, {A: 3, B: 5}),
            updated(A, None),
        ],
    )
    r = verify_log(d, processes=1, policy=TRUST_GENESIS)
    assert r.back_chains == {
        "entries": 8,
        "pointers_checked": 4,
        "pointers_missing": 1,
        "heads_commitments_checked": 2,
    }
    assert "back_chains" in r.checks and "heads_committed" in r.checks


def test_a_pointer_that_skips_an_entry_fails(tmp_path: Path) -> None:
    # Entry 3 touches A after entry 2 did, but says the previous touch was entry 1.
    d = write(tmp_path, [stored(A, -1), updated(A, 1), updated(A, 1)])
    with pytest.raises(VerificationError) as ei:
        verify_log(d, processes=1, policy=TRUST_GENESIS)
    e = ei.value
    assert (e.check, e.seq, e.expected, e.found) == ("backchain.pointer", 3, 2, 1)
    assert e.file == "00000000000000000000.seg"


def test_a_false_first_touch_fails(tmp_path: Path) -> None:
    d = write(tmp_path, [stored(A, -1), stored(A, -1)])
    with pytest.raises(VerificationError) as ei:
        verify_log(d, processes=1, policy=TRUST_GENESIS)
    assert (ei.value.check, ei.value.seq, ei.value.expected, ei.value.found) == (
        "backchain.pointer",
        2,
        1,
        -1,
    )


@pytest.mark.parametrize(
    "commitment",
    [
        committed(3, {A: 1}),  # B left out of the map
        committed(3, {A: 1, B: 1}),  # a false head for B
        committed(3, {A: 1, B: 2}, count=5),  # the right root, a false count
        committed(2, {A: 1, B: 2}),  # the heads of 3 entries claimed for the first 2
    ],
)
def test_a_false_heads_commitment_fails(tmp_path: Path, commitment: tuple[str, dict[str, Any], int]) -> None:
    d = write(tmp_path, [stored(A, -1), stored(B, -1), commitment])
    with pytest.raises(VerificationError) as ei:
        verify_log(d, processes=1, policy=TRUST_GENESIS)
    assert (ei.value.check, ei.value.seq) == ("heads.committed", 3)


def test_a_commitment_below_its_own_seq_is_checked_as_of_its_size(tmp_path: Path) -> None:
    # Another process appended (entry 3) between folding the heads and committing them.
    d = write(tmp_path, [stored(A, -1), stored(B, -1), updated(A, 1), committed(3, {A: 1, B: 2})])
    assert verify_log(d, processes=1, policy=TRUST_GENESIS).back_chains["heads_commitments_checked"] == 1  # type: ignore[index]


def test_hashes_only_skips_the_fold(tmp_path: Path) -> None:
    d = write(tmp_path, [stored(A, -1), updated(A, -1)])
    assert verify_log(d, processes=1, hashes_only=True, policy=TRUST_GENESIS).back_chains is None


# -- the fold fed by every strategy: workers hand over what it needs of each entry -------------

STRATEGIES = [
    {"processes": 1},
    {"processes": 2},
    {"processes": 2, "use_index_hint": False},
    {"processes": 1, "use_index_hint": False},
]
IDS = [f"01{i:024d}" for i in range(40)]


def long_chain(bad_at: int | None = None) -> list[tuple[str, dict[str, Any], int]]:
    """2,400 entries touching 40 memories in turn, pointers true except at entry `bad_at`."""
    heads: dict[str, int] = {}
    items: list[tuple[str, dict[str, Any], int]] = []
    for i in range(2400):
        seq = i + 1  # after the genesis
        mid = IDS[i % len(IDS)]
        prev = heads.get(mid, v.FIRST_TOUCH)
        if seq == bad_at:
            prev = v.FIRST_TOUCH if prev != v.FIRST_TOUCH else 0
        items.append(stored(mid, prev) if mid not in heads else updated(mid, prev))
        heads[mid] = seq
    return items


@pytest.fixture
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemolog.eventlog.verify import hinted as VH
    from mnemolog.eventlog.verify import verifier as V

    monkeypatch.setattr(VH, "PARALLEL_MIN_ENTRIES", 500)
    monkeypatch.setattr(VH, "CHUNK_ENTRIES", 300)
    monkeypatch.setattr(V, "SEQ_CHUNK_ENTRIES", 300)
    monkeypatch.setattr(V, "SERIAL_BELOW", 16)


@pytest.mark.usefixtures("small_thresholds")
def test_every_strategy_folds_the_same_chains(tmp_path: Path) -> None:
    d = write(tmp_path, long_chain())
    reports = [verify_log(d, policy=TRUST_GENESIS, **kw) for kw in STRATEGIES]  # type: ignore[arg-type]
    assert [r.processes for r in reports] == [1, 2, 2, 1]  # the workers did fold their chunks
    got = [r.back_chains for r in reports]
    assert got[0] == {
        "entries": 2401,
        "pointers_checked": 2400,
        "pointers_missing": 0,
        "heads_commitments_checked": 0,
    }
    assert all(g == got[0] for g in got)


@pytest.mark.usefixtures("small_thresholds")
def test_a_false_pointer_deep_in_the_log_fails_the_same_every_way(tmp_path: Path) -> None:
    d = write(tmp_path, long_chain(bad_at=1777))
    for kw in STRATEGIES:
        with pytest.raises(VerificationError) as ei:
            verify_log(d, policy=TRUST_GENESIS, **kw)  # type: ignore[arg-type]
        assert (ei.value.check, ei.value.seq) == ("backchain.pointer", 1777), kw


@pytest.mark.usefixtures("small_thresholds")
def test_a_broken_signature_after_a_false_pointer_is_what_fails(tmp_path: Path) -> None:
    # The fold's verdict counts only once every byte and signature checked out: a false pointer
    # at 300 does not hide a signature that does not verify at 2000, as when the fold ran last.
    import cbor2

    d = write(tmp_path, long_chain(bad_at=300))
    seg = d / "00000000000000000000.seg"
    buf = bytearray(seg.read_bytes())
    from mnemolog.eventlog.store.segments import split_items

    s, e, _ = split_items(bytes(buf)).items[2000]
    sig = cbor2.loads(bytes(buf[s:e]))["sig"]
    buf[bytes(buf[s:e]).index(sig) + s + 10] ^= 1
    seg.write_bytes(bytes(buf))
    for kw in STRATEGIES:
        with pytest.raises(VerificationError) as ei:
            verify_log(d, policy=TRUST_GENESIS, **kw)  # type: ignore[arg-type]
        assert (ei.value.check, ei.value.seq) == ("entry.signature", 2000), kw
