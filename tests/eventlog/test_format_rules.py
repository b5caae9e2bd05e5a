"""The rules docs/format.md settles for an independent implementer, each held to the code.

An implementer working from the document alone found these gaps; each is
now a sentence of the document and a test here: how a verifier key is
split, whether `created_at`/`rotated_at` must equal `ts`, the `key.rotated`
rules (key name, rotating to the same key, tv), the name of an empty last
segment, a checkpoint with two lines by the log's key where the first is
bad, what counts as a level of nesting (tests/eventlog/verify/test_agreement.py),
and the JSON of `log prove` and `log consistency`. A second one, who wrote
tests/conformance/independent/verifier.py from the documents, asked whether
key-event times are checked at all, what a malformed `touch_prev` means, whether
a malformed line of another key refuses a note, and whether every line by a
witness must verify (not only the first, as for the log's key).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from mnemolog.eventlog.errors import SignerError, UsageError, VerificationError
from mnemolog.eventlog.format import merkle
from mnemolog.eventlog.format.entry import ZERO_HASH, make_entry
from mnemolog.eventlog.format.keys import SigningKey, VerifierKey
from mnemolog.eventlog.format.note import Checkpoint, NoteSignature, SignedNote, parse_note
from mnemolog.eventlog.store.checkpoints import CHECKPOINT_DIR, checkpoint_name
from mnemolog.eventlog.store.fsio import atomic_write
from mnemolog.eventlog.store.index import IndexWriter
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.writer import LogWriter
from mnemolog.eventlog.verify.trust import TRUST_GENESIS, origin_for, parse_key_arg
from mnemolog.eventlog.verify.verifier import verify_log
from tests.eventlog.logkit import T0, StepClock, seeded_key
from tests.support.cli import Cli

DOC = Path(__file__).resolve().parents[2] / "docs" / "format.md"
KEY = seeded_key()
LOG_ID = b"\x55" * 16


def doc() -> str:
    return DOC.read_text("utf-8")


def write_log(log_dir: Path, entries: list[tuple[str, int, dict[str, Any], SigningKey]], **kw: Any) -> None:
    """A log of hand-made entries after a genesis by KEY, with a checkpoint of the whole log."""
    log_dir.mkdir(parents=True)
    (log_dir / CHECKPOINT_DIR).mkdir()
    g_data = {"log_id": LOG_ID, "public_key": KEY.public_key, "key_name": KEY.name, "created_at": T0}
    g_data.update(kw.get("genesis", {}))
    made = [make_entry(seq=0, ts=T0, type_="log.created", tv=1, data=g_data, prev=ZERO_HASH, signer=KEY)]
    for i, (type_, tv, data, signer) in enumerate(entries, start=1):
        made.append(
            make_entry(seq=i, ts=T0 + i, type_=type_, tv=tv, data=data, prev=made[-1].leaf, signer=signer)
        )
    (log_dir / f"{0:020d}.seg").write_bytes(b"".join(e.raw for e in made))
    idx = IndexWriter(log_dir)
    off = 0
    recs = []
    for e in made:
        recs.append((0, off, len(e.raw), e.leaf, e.type in ("log.created", "key.rotated")))
        off += len(e.raw)
    idx.append(recs)
    idx.close()
    n = len(made)
    cp_key = kw.get("checkpoint_key", KEY)
    cp = Checkpoint(origin_for(LOG_ID), n, merkle.root_of([e.leaf for e in made])).sign(cp_key)
    atomic_write(log_dir / CHECKPOINT_DIR / checkpoint_name(n), cp)


def fails(log_dir: Path, check: str) -> None:
    for hint in (True, False):
        with pytest.raises(VerificationError) as info:
            verify_log(log_dir, processes=1, use_index_hint=hint, policy=TRUST_GENESIS)
        assert info.value.check == check, (hint, info.value.check, info.value.message)


# -- verifier keys ----------------------------------------------------------------------


def test_a_verifier_key_is_split_at_its_first_two_plus_signs() -> None:
    assert "first two" in doc()
    key = next(
        k
        for k in (SigningKey(bytes([i]) * 32, "plus") for i in range(256))
        if "+" in k.verifier.vkey().split("+", 2)[2]
    )
    text = key.verifier.vkey()
    assert text.count("+") > 2
    assert VerifierKey.from_vkey(text) == key.verifier
    assert parse_key_arg(text) == key.verifier
    name, hash_hex, b64 = text.split("+", 2)
    assert VerifierKey.from_vkey(f"{name}+{hash_hex.upper()}+{b64}") == key.verifier  # hex in either case
    for bad in (f"{name}+{hash_hex}0+{b64}", f"{name}+{hash_hex}+{b64[:-4]}", f"{name}+{hash_hex[:7]}+{b64}"):
        with pytest.raises(SignerError):
            VerifierKey.from_vkey(bad)
        with pytest.raises(UsageError):
            parse_key_arg(bad)


# -- key events -----------------------------------------------------------------------------


def test_created_at_and_rotated_at_need_not_equal_ts(tmp_path: Path) -> None:
    assert "do not compare them with `ts`" in doc()
    d = tmp_path / "log"
    LogWriter.create(d, KEY, clock=StepClock())
    with LogWriter(d, [KEY], clock=StepClock(T0 + 100)) as w:
        w.append("note.added", {})
        r = w.rotate_key(seeded_key("next", 8))
    with Log(d) as log:
        e = log.entry(r.seq)
    assert e.data["rotated_at"] != e.ts  # the writer stamps the request, the entry its write
    verify_log(d, policy=TRUST_GENESIS)
    odd = tmp_path / "odd"
    write_log(odd, [("note.added", 1, {}, KEY)], genesis={"created_at": 5})
    verify_log(odd, use_index_hint=False, policy=TRUST_GENESIS)


@pytest.mark.parametrize(
    ("what", "data", "tv"),
    [
        ("the same key", {"public_key": KEY.public_key, "key_name": "again", "rotated_at": T0}, 1),
        ("a key name with '+'", {"public_key": b"\x01" * 32, "key_name": "a+b", "rotated_at": T0}, 1),
        ("a key name with a space", {"public_key": b"\x01" * 32, "key_name": "a b", "rotated_at": T0}, 1),
        ("a 31-byte key", {"public_key": b"\x01" * 31, "key_name": "ok", "rotated_at": T0}, 1),
        ("tv 2", {"public_key": b"\x01" * 32, "key_name": "ok", "rotated_at": T0}, 2),
    ],
)
def test_key_rotated_rules(tmp_path: Path, what: str, data: dict[str, Any], tv: int) -> None:
    d = tmp_path / "log"
    write_log(d, [("key.rotated", tv, data, KEY)])
    fails(d, "key.rotated")


def test_a_rotation_to_the_key_in_use_is_refused_by_the_writer(tmp_path: Path) -> None:
    d = tmp_path / "log"
    LogWriter.create(d, KEY)
    with LogWriter(d, [KEY]) as w, pytest.raises(SignerError):
        w.rotate_key(SigningKey(bytes([7]) * 32, "same-key-other-name"))


def test_the_genesis_entry_is_tv_1(tmp_path: Path) -> None:
    d = tmp_path / "log"
    d.mkdir()
    (d / CHECKPOINT_DIR).mkdir()
    data = {"log_id": LOG_ID, "public_key": KEY.public_key, "key_name": KEY.name, "created_at": T0}
    g = make_entry(seq=0, ts=T0, type_="log.created", tv=2, data=data, prev=ZERO_HASH, signer=KEY)
    (d / f"{0:020d}.seg").write_bytes(g.raw)
    fails(d, "genesis.data")


# -- segments and checkpoints ------------------------------------------------------------------


def test_an_empty_last_segment_is_named_for_the_next_seq(tmp_path: Path) -> None:
    assert "named for the\nseq its first entry will have" in doc()
    d = tmp_path / "log"
    write_log(d, [("note.added", 1, {"i": i}, KEY) for i in range(3)])
    (d / f"{4:020d}.seg").write_bytes(b"")
    verify_log(d, processes=1, policy=TRUST_GENESIS)
    with LogWriter(d, [KEY]) as w:  # a writer continues in it
        assert w.append("note.added", {}).seq == 4
    verify_log(d, processes=1, policy=TRUST_GENESIS)
    misnamed = tmp_path / "misnamed"
    write_log(misnamed, [("note.added", 1, {}, KEY)])
    (misnamed / f"{5:020d}.seg").write_bytes(b"")
    fails(misnamed, "segments.name")


def _with_lines(note: bytes, first_bad: bool) -> bytes:
    parsed = parse_note(note)
    sig = parsed.signatures[0]
    bad = NoteSignature(sig.name, sig.key_hash, bytes(64))
    lines = (bad, sig) if first_bad else (sig, bad)
    return SignedNote(parsed.text, lines).encode()


def test_the_first_line_by_the_logs_key_decides_a_checkpoint(tmp_path: Path) -> None:
    assert "the **first** line" in doc()
    d = tmp_path / "log"
    write_log(d, [("note.added", 1, {}, KEY)])
    cp = d / CHECKPOINT_DIR / checkpoint_name(2)
    good = cp.read_bytes()
    cp.write_bytes(_with_lines(good, first_bad=False))
    verify_log(d, processes=1, policy=TRUST_GENESIS)
    cp.write_bytes(_with_lines(good, first_bad=True))
    fails(d, "checkpoint.signature")


# -- the JSON of log prove and log consistency -----------------------------------------------


def test_prove_and_consistency_json_are_as_documented(cli: Cli, tmp_path: Path) -> None:
    assert "## 10. The JSON of `log prove` and `log consistency`" in doc()
    home = tmp_path / "home"

    cli.ok(home, "init")
    for i in range(5):
        cli.ok(home, "log", "append", "note.added", "--data", json.dumps({"i": i}))
    p = cli.ok(home, "log", "prove", "3")
    assert set(p) == {"ok", "seq", "tree_size", "leaf_hash", "root", "proof", "checkpoint"}
    b = base64.b64decode
    merkle.verify_inclusion(3, p["tree_size"], b(p["leaf_hash"]), [b(x) for x in p["proof"]], b(p["root"]))
    assert p["checkpoint"].splitlines()[2] == p["root"]
    c = cli.ok(home, "log", "consistency", "2", "6")
    assert set(c) == {"ok", "old_size", "new_size", "old_root", "new_root", "proof"}
    merkle.verify_consistency(2, 6, b(c["old_root"]), b(c["new_root"]), [b(x) for x in c["proof"]])
    assert cli.ok(home, "log", "consistency", "6", "6")["proof"] == []


# -- rules a second independent implementer asked about (tests/conformance/independent) ---------


def test_key_event_times_are_not_checked(tmp_path: Path) -> None:
    assert "nor check their\npresence or type" in doc()
    nxt = seeded_key("next", 8)
    d = tmp_path / "log"
    rotation = {"public_key": nxt.public_key, "key_name": nxt.name}  # no rotated_at
    write_log(d, [("key.rotated", 1, rotation, KEY)], genesis={"created_at": "soon"}, checkpoint_key=nxt)
    verify_log(d, processes=1, use_index_hint=False, policy=TRUST_GENESIS)


def test_a_malformed_touch_prev_reads_as_left_out(tmp_path: Path) -> None:
    assert "reads\n     as left out" in doc()
    d = tmp_path / "log"
    link = {"src": "m1", "dst": "m2"}
    write_log(
        d,
        [
            ("link.removed", 1, {**link, "touch_prev": [1]}, KEY),
            ("link.removed", 1, {**link, "touch_prev": {"m1": True, "m2": "1", "untouched": 7}}, KEY),
            ("link.removed", 1, {**link, "touch_prev": {"m1": -2, "m2": 2}}, KEY),
        ],
    )
    chains = verify_log(d, processes=1, policy=TRUST_GENESIS).back_chains
    assert chains is not None
    assert (chains["pointers_checked"], chains["pointers_missing"]) == (1, 5)
    false = tmp_path / "false"
    write_log(false, [("link.removed", 1, {**link, "touch_prev": {"m1": 0}}, KEY)])
    fails(false, "backchain.pointer")


def test_a_malformed_line_of_any_key_refuses_the_note(tmp_path: Path) -> None:
    assert "Every signature line, whoever's, must be well\n  formed" in doc()
    for line in ("\u2014 other AAAA\n", "\u2014 a+b " + base64.b64encode(bytes(68)).decode() + "\n"):
        d = tmp_path / str(len(line))
        write_log(d, [("note.added", 1, {}, KEY)])
        cp = d / CHECKPOINT_DIR / checkpoint_name(2)
        cp.write_bytes(cp.read_bytes() + line.encode())
        fails(d, "checkpoint.decode")


def test_every_line_by_a_witness_must_verify(tmp_path: Path) -> None:
    from mnemolog.eventlog.witness.cosignature import CosignerKey, cosignatures

    assert "**every** line with a given\n  witness's name and key hash must verify" in doc()
    d = tmp_path / "log"
    write_log(d, [("note.added", 1, {}, KEY)])
    note = parse_note((d / CHECKPOINT_DIR / checkpoint_name(2)).read_bytes())
    w = CosignerKey(bytes([9]) * 32, "w.example")
    good = w.cosign(note.text, 1700000000)
    assert len(cosignatures(SignedNote(note.text, (*note.signatures, good)), [w.verifier])) == 1
    forged = NoteSignature(good.name, good.key_hash, good.signature[:8] + bytes(64))
    short = NoteSignature(good.name, good.key_hash, good.signature[:64])
    for bad in (forged, short):
        for lines in ((good, bad), (bad, good)):
            with pytest.raises(VerificationError) as info:
                cosignatures(SignedNote(note.text, (*note.signatures, *lines)), [w.verifier])
            assert info.value.check == "witness.signature"
