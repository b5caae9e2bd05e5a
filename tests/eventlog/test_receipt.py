"""Erasure receipts: written by `forget --receipt`, checked offline with cbor2 and pynacl only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mnemolog.eventlog import receipt
from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.verify.trust import PinnedKey, parse_key_arg
from mnemolog.substrate.forensics import service as forensics
from mnemolog.substrate.home import Home
from tests.eventlog.bundle.test_standalone import only_eventlog, verifier_python  # noqa: F401
from tests.projections.kit import new_home, open_sub


@pytest.fixture(scope="module")
def erased(tmp_path_factory: pytest.TempPathFactory) -> tuple[Home, str, Path, str]:
    d = tmp_path_factory.mktemp("receipt")
    home = new_home(d / "home")
    with open_sub(home) as sub:
        mid = sub.store("XQRECEIPTMARK something to forget")["id"]
        sub.store("something to keep")
        out = sub.forget([mid], reason="the user asked", receipt=d / "erased.receipt")
        vkey = sub.log.key_history()[0].key.vkey()
    assert out["receipts"] == [str(d / "erased.receipt")]
    return home, mid, d / "erased.receipt", vkey


def test_the_receipt_verifies_and_says_what_was_erased(erased: tuple[Home, str, Path, str]) -> None:
    _, mid, path, vkey = erased
    data = path.read_bytes()
    assert b"XQRECEIPTMARK" not in data
    r = receipt.verify_receipt(data, policy=PinnedKey(parse_key_arg(vkey)), memory_id=mid)
    assert r["memories"] == [mid] and r["reason"] == "the user asked" and r["tree_size"] > r["seq"]
    with pytest.raises(VerificationError) as info:
        receipt.verify_receipt(data, memory_id="01SOMEONEELSE0000000000000")
    assert info.value.details["check"] == "receipt.memory"


def test_a_damaged_or_wrong_receipt_is_refused(erased: tuple[Home, str, Path, str], tmp_path: Path) -> None:
    home, _, path, _ = erased
    data = path.read_bytes()
    for i in (len(data) // 3, len(data) // 2, len(data) - 10):
        bad = bytearray(data)
        bad[i] ^= 0x01
        with pytest.raises(VerificationError):
            receipt.verify_receipt(bytes(bad))
    for cut in (0, 1, len(data) // 2, len(data) - 1):
        with pytest.raises(VerificationError):
            receipt.verify_receipt(data[:cut])
    # An export of an entry that is not an erasure proves nothing about forgetting.
    other = tmp_path / "store.export"
    forensics.export_log(home, 1, 1, other, with_keys=False)
    with pytest.raises(VerificationError) as info:
        receipt.verify_receipt(other.read_bytes())
    assert info.value.details["check"] == "receipt.entry"


def test_the_standalone_verifier_checks_a_receipt(
    erased: tuple[Home, str, Path, str],
    verifier_python: Path,  # noqa: F811
    only_eventlog: Path,  # noqa: F811
) -> None:
    _, mid, path, vkey = erased
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin"),
        "PYTHONPATH": str(only_eventlog),
        "PYTHONNOUSERSITE": "1",
    }
    cmd = [str(verifier_python), "-S", "-m", "mnemolog.eventlog.receipt", str(path), "--json"]
    r = subprocess.run([*cmd, "--trusted-key", vkey, "--memory-id", mid], capture_output=True, text=True,
                       env=env, cwd=only_eventlog, check=False, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["memories"] == [mid]
    r = subprocess.run([*cmd, "--memory-id", "nope"], capture_output=True, text=True, env=env,
                       cwd=only_eventlog, check=False, timeout=120)  # fmt: skip
    assert r.returncode == 8 and json.loads(r.stdout)["details"]["check"] == "receipt.memory"
    assert sys.executable
