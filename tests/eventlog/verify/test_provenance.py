"""`log verify` checks a migrated log's hand-off from the log it replaced, and refuses a forged one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.format.note import peek_checkpoint
from mnemolog.eventlog.store.writer import LogWriter
from mnemolog.eventlog.verify.provenance import MIGRATED_FROM, check_provenance, handoff_message
from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.eventlog.verify.verifier import verify_log

OLD_ID = bytes(range(16))
NEW_ID = bytes(range(16, 32))
OLD_KEY = SigningKey(bytes([1]) * 32, "old")
NEW_KEY = SigningKey(bytes([2]) * 32, "new")
OTHER_KEY = SigningKey(bytes([3]) * 32, "other")


def _old_checkpoint(tmp: Path) -> bytes:
    _, note = LogWriter.create(tmp / "old", OLD_KEY, log_id=OLD_ID)
    return note


def _provenance(note: bytes, signer: SigningKey = OLD_KEY, new_key: SigningKey = NEW_KEY) -> dict[str, Any]:
    cp = peek_checkpoint(note)
    size, root = cp.size, cp.root
    return {
        "log_id": OLD_ID,
        "checkpoint": note,
        "vkey": OLD_KEY.verifier.vkey(),
        "handoff": signer.sign(handoff_message(OLD_ID, size, root, NEW_ID, new_key.public_key)),
        "migrated_at": 1,
    }


def _new_log(tmp: Path, provenance: Any, key: SigningKey = NEW_KEY) -> Path:
    LogWriter.create(tmp / "new", key, log_id=NEW_ID, extra={MIGRATED_FROM: provenance})
    return tmp / "new"


def test_a_migrated_log_verifies_and_names_the_old_log(tmp_path: Path) -> None:
    new = _new_log(tmp_path, _provenance(_old_checkpoint(tmp_path)))
    r = verify_log(new, policy=TRUST_GENESIS)
    assert r.migrated_from is not None and r.migrated_from["log_id"] == OLD_ID.hex()
    assert r.migrated_from["vkey"] == OLD_KEY.verifier.vkey()
    assert "migration_provenance" in r.checks
    assert r.to_json()["migrated_from"] == r.migrated_from
    plain = verify_log(tmp_path / "old", policy=TRUST_GENESIS)
    assert plain.migrated_from is None and "migration_provenance" not in plain.checks


@pytest.mark.parametrize(
    "forge",
    [
        "signed_by_another_key",
        "handoff_to_another_key",
        "checkpoint_of_another_log",
        "not_a_map",
        "missing_field",
        "checkpoint_not_bytes",
        "checkpoint_truncated",
    ],
)
def test_a_forged_hand_off_fails_log_verify(tmp_path: Path, forge: str) -> None:
    note = _old_checkpoint(tmp_path)
    prov: Any = _provenance(note)
    if forge == "signed_by_another_key":
        prov = _provenance(note, signer=OTHER_KEY)
    elif forge == "handoff_to_another_key":
        prov = _provenance(note, new_key=OTHER_KEY)
    elif forge == "checkpoint_of_another_log":
        _, other = LogWriter.create(tmp_path / "other", OLD_KEY, log_id=bytes(16))
        prov = _provenance(other)
    elif forge == "not_a_map":
        prov = [1, 2]
    elif forge == "missing_field":
        del prov["handoff"]
    elif forge == "checkpoint_not_bytes":
        prov["checkpoint"] = note.decode()
    elif forge == "checkpoint_truncated":
        prov["checkpoint"] = note[: len(note) // 2]
    new = _new_log(tmp_path, prov)
    with pytest.raises(VerificationError) as info:
        verify_log(new, policy=TRUST_GENESIS)
    assert info.value.details.get("check") == "migration.provenance"
    assert info.value.details.get("seq") == 0


@settings(max_examples=40, deadline=None)
@given(flip=st.integers(min_value=0))
def test_any_flipped_byte_of_the_hand_off_is_refused(flip: int) -> None:
    import tempfile

    from mnemolog.eventlog.format.entry import Entry

    with tempfile.TemporaryDirectory() as d:
        note = _old_checkpoint(Path(d))
        prov = _provenance(note)
        sig = bytearray(prov["handoff"])
        sig[flip % len(sig)] ^= 1 << (flip % 8)
        prov["handoff"] = bytes(sig)
        genesis, _ = LogWriter.create(Path(d) / "new", NEW_KEY, log_id=NEW_ID, extra={MIGRATED_FROM: prov})
        assert isinstance(genesis, Entry)
        with pytest.raises(VerificationError):
            check_provenance(genesis)
