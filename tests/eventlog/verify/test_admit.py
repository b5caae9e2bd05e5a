"""What a reader folding the log admits: entries its own writer just signed are not re-verified,
and nothing else escapes the signature check (eventlog.verify.trust.KeySchedule.admit)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.format.entry import Entry, leaf_hash
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.verify import trust
from tests.eventlog.logkit import make_log


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Entry]]:
    log_dir = tmp_path_factory.mktemp("admit") / "log"
    make_log(log_dir, 6)
    with Log(log_dir) as log:
        return log_dir, list(log.iter_entries(0))


def forged(e: Entry, at: int) -> Entry:
    """`e` with one byte of its signature flipped: other bytes, so another leaf hash."""
    sig = bytearray(e.sig)
    sig[at % len(sig)] ^= 0x01
    raw = e.raw[: -len(e.sig)] + bytes(sig) if e.raw.endswith(e.sig) else e.raw.replace(e.sig, bytes(sig))
    return replace(e, sig=bytes(sig), raw=raw, leaf=leaf_hash(raw))


def test_entries_signed_here_are_admitted_without_a_second_check(
    logged: tuple[Path, list[Entry]], monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir, entries = logged
    with Log(log_dir) as log:
        keys = log.key_schedule(0)
    checked: list[int] = []
    real = trust.KeySchedule.check_entry
    monkeypatch.setattr(
        trust.KeySchedule,
        "check_entry",
        lambda self, e, file=None: (checked.append(e.seq), real(self, e, file)),
    )
    own = {e.seq: e.leaf for e in entries[3:]}
    assert list(keys.admit(entries, signatures_from=0, signed_here=own)) == entries
    # Entries 0-2 were not signed here: each is checked.
    assert checked == [0, 1, 2]


@settings(max_examples=30)
@given(at=st.integers(min_value=0, max_value=63), which=st.integers(min_value=1, max_value=5))
def test_bytes_other_than_those_signed_here_are_checked_and_refused(
    logged: tuple[Path, list[Entry]], at: int, which: int
) -> None:
    log_dir, entries = logged
    with Log(log_dir) as log:
        keys = log.key_schedule(0)
    bad = forged(entries[which], at)
    assert bad.leaf != entries[which].leaf
    stream = [*entries[:which], bad, *entries[which + 1 :]]
    # The writer's receipt names the bytes it signed: the forged entry's leaf is not among them.
    own = {e.seq: e.leaf for e in entries}
    with pytest.raises(VerificationError) as info:
        list(keys.admit(stream, signatures_from=0, signed_here=own))
    assert info.value.check == "entry.signature" and info.value.seq == which
