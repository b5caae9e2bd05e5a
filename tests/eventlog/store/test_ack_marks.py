"""An acknowledged entry cannot disappear silently (issue 23, item 4).

A long-lived writer publishes checkpoints on a schedule (every thousand
entries or five seconds); entries acknowledged inside that interval were
covered by no signed statement, so cutting them off the log behind a live
server left `log verify` ok. The high-water marks now follow every
acknowledged batch of such a writer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemolog.eventlog.errors import LogMoved, VerificationError
from mnemolog.eventlog.store.checkpoints import CheckpointPolicy, read_high_water
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.segments import list_segments
from mnemolog.eventlog.store.writer import Durability, LogWriter
from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.eventlog.verify.verifier import verify_log
from tests.eventlog.logkit import StepClock, seeded_key

NEVER = CheckpointPolicy(max_entries=1_000_000, max_seconds=1e9)  # no periodic checkpoint in the test


def cut_last_entry(d: Path) -> int:
    with Log(d) as log:
        size, loc = log.size, log.location(log.size - 1)
    with list_segments(d)[-1][1].open("r+b") as f:
        f.truncate(loc.offset)
    return size


@pytest.mark.parametrize("mode", ["fsync", "group"])
def test_an_acknowledged_entry_cut_inside_the_checkpoint_interval_fails_verify(
    tmp_path: Path, mode: str
) -> None:
    d, mark = tmp_path / "log", tmp_path / "outside" / "checkpoint"
    key, clock = seeded_key(), StepClock()
    LogWriter.create(d, key, clock=clock)
    with LogWriter(
        d, [key], clock=clock, durability=Durability(mode), checkpoint_policy=NEVER, high_water=[mark]
    ) as w:
        w.checkpoint()  # the last stored checkpoint: size 1
        for i in range(3):
            w.append("note.added", {"i": i})  # acknowledged, and no checkpoint in log/ covers them
        hw = read_high_water(mark)
        assert hw is not None and hw.body().size == 4
        assert sorted(int(p.name) for p in (d / "checkpoints").iterdir()) == [1]
        size = cut_last_entry(d)  # behind the live writer
        with pytest.raises(VerificationError) as info:
            verify_log(d, high_water=[hw], processes=1, policy=TRUST_GENESIS)
        assert info.value.check == "high_water.size" and info.value.found == size - 1
        # The live writer sees it too, and refuses to build on it.
        with pytest.raises(VerificationError) as info:
            w.append("note.added", {"i": 9})
        assert info.value.check == "log_diverged"


def test_a_writer_without_a_policy_moves_the_mark_with_its_checkpoints(tmp_path: Path) -> None:
    d, mark = tmp_path / "log", tmp_path / "mark"
    key, clock = seeded_key(), StepClock()
    LogWriter.create(d, key, clock=clock)
    with LogWriter(d, [key], clock=clock, high_water=[mark]) as w:
        w.append("note.added", {"i": 0})
        assert read_high_water(mark) is None  # with the checkpoint at close
    hw = read_high_water(mark)
    assert hw is not None and hw.body().size == 2
    verify_log(d, high_water=[hw], processes=1, policy=TRUST_GENESIS)


def test_a_cut_only_the_periodic_checkpointer_saw_is_raised_at_close(tmp_path: Path) -> None:
    """A server that saw its log cut (in its background checkpointer) must not close quietly."""
    d, mark = tmp_path / "log", tmp_path / "mark"
    key, clock = seeded_key(), StepClock()
    LogWriter.create(d, key, clock=clock)
    w = LogWriter(d, [key], clock=clock, checkpoint_policy=NEVER, high_water=[mark])
    w.append("note.added", {"i": 0})
    w.append("note.added", {"i": 1})
    cut_last_entry(d)
    with pytest.raises(VerificationError):
        w._periodic_checkpoint()  # what the checkpointer thread runs; it only logs a warning
    with pytest.raises(VerificationError) as info:
        w.close()
    assert info.value.check == "log_diverged" and "closing the log writer" in info.value.message


def test_a_batch_prepared_for_other_seqs_is_refused_unwritten(tmp_path: Path) -> None:
    """Back-chain pointers name seqs inside their batch: it lands there or not at all."""
    d = tmp_path / "log"
    key, clock = seeded_key(), StepClock()
    LogWriter.create(d, key, clock=clock)
    with LogWriter(d, [key], clock=clock) as w, LogWriter(d, [key], clock=clock) as other:
        base = w.size
        other.append("note.added", {"by": "another process"})
        with pytest.raises(LogMoved) as info:
            w.append_many([("note.added", {"i": 0}, 1), ("note.added", {"i": 1}, 1)], first_seq=base)
        assert (info.value.details["expected"], info.value.details["found"]) == (base, base + 1)
        with Log(d) as log:
            assert log.size == base + 1  # nothing of the refused batch
        assert [r.seq for r in w.append_many([("note.added", {"i": 0}, 1)], first_seq=base + 1)] == [base + 1]
