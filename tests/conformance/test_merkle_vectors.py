"""RFC 9162 inclusion and consistency proofs against the transparency-dev/merkle test vectors.

The vectors live outside the project, in ../shared/vectors/merkle/testdata
(transparency-dev/merkle testdata); they are read in place, never copied. When
the directory is missing the tests skip and say so.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from mnemolog.eventlog import merkle
from mnemolog.eventlog.errors import VerificationError

ROOT = Path(__file__).resolve().parents[3] / "shared" / "vectors" / "merkle" / "testdata"
MISSING = f"transparency-dev/merkle vectors not found at {ROOT}"


def _cases(kind: str) -> list[Path]:
    d = ROOT / kind
    return sorted(d.rglob("*.json")) if d.is_dir() else []


def _b(s: str) -> bytes:
    return base64.b64decode(s)


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _id(p: Path) -> str:
    return f"{p.parent.name}/{p.stem}"


INCLUSION = _cases("inclusion")
CONSISTENCY = _cases("consistency")


@pytest.mark.skipif(not INCLUSION, reason=MISSING)
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


@pytest.mark.skipif(not CONSISTENCY, reason=MISSING)
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


@pytest.mark.skipif(not CONSISTENCY, reason=MISSING)
def test_vectors_cover_both_verdicts() -> None:
    wants = [_load(p)["wantErr"] for p in INCLUSION + CONSISTENCY]
    assert wants.count(True) > 100 and wants.count(False) >= 10


SUBTREE = [ROOT / "subtreeinclusion", ROOT / "subtreeconsistency"]


@pytest.mark.parametrize("path", SUBTREE, ids=[p.name for p in SUBTREE])
def test_subtree_vectors_are_a_different_api(path: Path) -> None:
    if not path.is_dir():
        pytest.skip(MISSING)
    pytest.skip(
        f"{path.name}: proofs for an arbitrary subtree [start, end) of a larger tree "
        "(transparency-dev's subtree API, not RFC 9162 §2.1); the log proves leaves and "
        "prefixes only"
    )
