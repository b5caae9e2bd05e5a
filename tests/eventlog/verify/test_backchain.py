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
