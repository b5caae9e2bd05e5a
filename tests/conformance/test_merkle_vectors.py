"""RFC 9162 inclusion and consistency proofs against the transparency-dev/merkle test vectors.

The vectors ship with the tests, in vectors/merkle/ (copied unchanged from
transparency-dev/merkle's testdata, Apache-2.0; the README there names the
commit and the licence is beside it).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.format import merkle

ROOT = Path(__file__).resolve().parent / "vectors" / "merkle"


def _cases(kind: str) -> list[Path]:
    return sorted((ROOT / kind).rglob("*.json"))


def _b(s: str) -> bytes:
    return base64.b64decode(s)


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _id(p: Path) -> str:
    return f"{p.parent.name}/{p.stem}"


INCLUSION = _cases("inclusion")
CONSISTENCY = _cases("consistency")


@pytest.mark.parametrize("path", INCLUSION, ids=[_id(p) for p in INCLUSION])
def test_inclusion_vector(path: Path) -> None:
    v = _load(path)
    proof = [_b(h) for h in v["proof"] or []]
    args = (v["leafIdx"], v["treeSize"], _b(v["leafHash"]), proof, _b(v["root"]))
    if v["wantErr"]:
        with pytest.raises(VerificationError):
            merkle.verify_inclusion(*args)
    else:
        merkle.verify_inclusion(*args)


@pytest.mark.parametrize("path", CONSISTENCY, ids=[_id(p) for p in CONSISTENCY])
def test_consistency_vector(path: Path) -> None:
    v = _load(path)
    proof = [_b(h) for h in v["proof"] or []]
    args = (v["size1"], v["size2"], _b(v["root1"]), _b(v["root2"]), proof)
    if v["wantErr"]:
        with pytest.raises(VerificationError):
            merkle.verify_consistency(*args)
    else:
        merkle.verify_consistency(*args)


def test_vectors_cover_both_verdicts() -> None:
    assert INCLUSION and CONSISTENCY, f"vectors missing under {ROOT}"
    wants = [_load(p)["wantErr"] for p in INCLUSION + CONSISTENCY]
    assert wants.count(True) > 100 and wants.count(False) >= 10
