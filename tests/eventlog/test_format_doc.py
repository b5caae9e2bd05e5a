"""docs/format.md stays true: its worked example is rebuilt here from the code, byte for byte."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mnemolog.eventlog.format import merkle
from mnemolog.eventlog.format.entry import ENTRY_DOMAIN, ZERO_HASH, Entry, make_entry, sig_offset
from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.format.note import Checkpoint, origin_for
from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.eventlog.verify.verifier import verify_log

DOC = Path(__file__).resolve().parents[2] / "docs" / "format.md"
TS = 1_700_000_000_000_000
KEY = SigningKey(bytes(range(32)), "example")
LOG_ID = bytes(range(0x10, 0x20))


def _example() -> tuple[Entry, Entry, bytes]:
    data = {"log_id": LOG_ID, "public_key": KEY.public_key, "key_name": "example", "created_at": TS}
    g = make_entry(seq=0, ts=TS, type_="log.created", tv=1, data=data, prev=ZERO_HASH, signer=KEY)
    e1 = make_entry(
        seq=1, ts=TS + 1, type_="note.added", tv=1, data={"text": "hello"}, prev=g.leaf, signer=KEY
    )
    cp = Checkpoint(origin_for(LOG_ID), 2, merkle.root_of([g.leaf, e1.leaf])).sign(KEY)
    return g, e1, cp


def _blocks() -> dict[str, str]:
    text = DOC.read_text("utf-8")
    out = {}
    for m in re.finditer(r"<!-- example: (\S+) -->\n(```[a-z]*\n.*?```|(?:\|[^\n]*\n)+)", text, re.S):
        out[m.group(1)] = m.group(2)
    return out


def _fenced(block: str) -> str:
    m = re.match(r"```[a-z]*\n(.*?)```", block, re.S)
    assert m, block
    return m.group(1)


def _hex(block: str) -> bytes:
    return bytes.fromhex("".join(_fenced(block).split()))


@pytest.fixture(scope="module")
def blocks() -> dict[str, str]:
    if not DOC.exists():
        pytest.skip(f"{DOC} is missing")
    b = _blocks()
    assert set(b) >= {"key", "entry0", "leaf0", "entry1-parts", "tbs1", "leaf1", "root2", "checkpoint2"}
    return b


def test_key_block(blocks: dict[str, str]) -> None:
    rows = {k: v.strip() for k, v in (line.split("  ", 1) for line in _fenced(blocks["key"]).splitlines())}
    assert rows["public key"] == KEY.public_key.hex()
    assert rows["key id"] == KEY.kid.hex()
    assert rows["key hash"] == KEY.note_hash.hex()
    assert rows["vkey"] == KEY.verifier.vkey()
    assert rows["skey"] == KEY.skey()


def test_entries_hashes_root(blocks: dict[str, str]) -> None:
    g, e1, _ = _example()
    assert _hex(blocks["entry0"]) == g.raw and len(g.raw) == 276
    assert _hex(blocks["leaf0"]) == g.leaf
    assert _hex(blocks["tbs1"]) == e1.tbs() and len(e1.tbs()) == 128
    assert e1.tbs().startswith(ENTRY_DOMAIN + b"\xa8")
    assert KEY.verifier.verify(e1.tbs(), e1.sig)
    assert _hex(blocks["leaf1"]) == e1.leaf
    assert _hex(blocks["root2"]) == merkle.root_of([g.leaf, e1.leaf])


def test_entry_parts_table(blocks: dict[str, str]) -> None:
    _, e1, _ = _example()
    rows = [line for line in blocks["entry1-parts"].splitlines() if line.startswith("| `")]
    parts = ["".join(re.findall(r"`([0-9a-f]+)`", row.split("|")[1])) for row in rows]
    assert bytes.fromhex("".join(parts)) == e1.raw and len(e1.raw) == 180
    # The doc's rule for where the sig pair starts.
    at = sig_offset(1, TS + 1, 1)
    assert at == 27 + 9 + 1 + 1
    assert e1.raw[at : at + 6] == b"\x63sig\x58\x40"
    assert e1.tbs() == ENTRY_DOMAIN + b"\xa8" + e1.raw[1:at] + e1.raw[at + 70 :]


def test_checkpoint_block(blocks: dict[str, str]) -> None:
    _, _, cp = _example()
    assert _fenced(blocks["checkpoint2"]).encode() == cp


def test_the_example_log_verifies(tmp_path: Path) -> None:
    g, e1, cp = _example()
    d = tmp_path / "log"
    (d / "checkpoints").mkdir(parents=True)
    (d / "00000000000000000000.seg").write_bytes(g.raw + e1.raw)
    (d / "checkpoints" / f"{1:020d}").write_bytes(Checkpoint(origin_for(LOG_ID), 1, g.leaf).sign(KEY))
    (d / "checkpoints" / f"{2:020d}").write_bytes(cp)
    r = verify_log(d, processes=1, policy=TRUST_GENESIS)
    assert (r.entries, r.checkpoints, r.root) == (2, 2, merkle.root_of([g.leaf, e1.leaf]).hex())
    assert len(g.raw + e1.raw) == 456


def test_the_doc_names_every_check_verify_uses() -> None:
    pkg = Path(__file__).resolve().parents[2] / "eventlog"
    src = "".join(
        (pkg / f).read_text() for f in ("verify/verifier.py", "verify/chunks.py", "verify/trust.py")
    )
    prefixes = "segments|entry|genesis|key|checkpoint|log|high_water|trust"
    used = set(re.findall(rf'"((?:{prefixes})\.[a-z_]+)"', src))
    used |= set(re.findall(rf'check="((?:{prefixes})\.[a-z_]+)"', src))
    text = DOC.read_text("utf-8")
    missing = sorted(c for c in used if f"`{c}`" not in text)
    assert not missing, f"docs/format.md does not name the checks {missing}"
