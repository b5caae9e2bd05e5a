"""C2SP tlog-cosignature/v1: keys, lines, and a cosigned checkpoint that stays a valid signed note.

The interop checks verify each signature the way the C2SP text describes it,
with nothing from mnemolog but the bytes: Go's note.Open splits the note at
its last blank line, looks up a line by (key name, key hash), and verifies
the signature with the configured key; the cosignature verifier of
transparency-dev/formats additionally reads an 8-byte big-endian timestamp and
verifies over "cosignature/v1\\ntime <t>\\n" + the note text.
"""

from __future__ import annotations

import base64
import hashlib
import struct

import nacl.bindings
import nacl.exceptions
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.errors import SignerError, UsageError, VerificationError
from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.format.note import Checkpoint, NoteSignature, open_note, parse_note
from mnemolog.eventlog.witness.cosignature import (
    CosignerKey,
    CosignerVerifier,
    WitnessPolicy,
    add_signature_lines,
    cosignatures,
    require_cosignatures,
    signed_message,
)

ROOT = hashlib.sha256(b"root").digest()
SEED = bytes(range(32))


def checkpoint_note(key: SigningKey, size: int = 5) -> bytes:
    return Checkpoint(key.name, size, ROOT).sign(key)


def go_note_open(raw: bytes, name: str, key_hash: bytes, verify: object) -> bool:
    """note.Open, as Go writes it: the text ends at the last blank line; find (name, hash); verify."""
    split = raw.rfind(b"\n\n")
    text, block = raw[: split + 1], raw[split + 2 :]
    ok = False
    for line in block.decode().splitlines():
        assert line.startswith("— ")
        n, b64 = line[2:].split(" ")
        blob = base64.b64decode(b64)
        if n == name and blob[:4] == key_hash:
            if not verify(text, blob[4:]):  # type: ignore[operator]
                return False
            ok = True
    return ok


def ed25519_ok(pk: bytes, msg: bytes, sig: bytes) -> bool:
    try:
        nacl.bindings.crypto_sign_open(sig + msg, pk)
    except nacl.exceptions.BadSignatureError:
        return False
    return True


def test_key_hash_and_vkey_follow_the_spec() -> None:
    k = CosignerKey(SEED, "witness.example/w1")
    pk = k.public_key
    want = hashlib.sha256(b"witness.example/w1\n\x04" + pk).digest()[:4]
    assert k.verifier.key_hash == want
    vkey = k.verifier.vkey()
    assert vkey == f"witness.example/w1+{want.hex()}+" + base64.b64encode(b"\x04" + pk).decode()
    assert CosignerVerifier.from_vkey(vkey) == k.verifier
    # The same key as a plain Ed25519 (0x01) vkey is read as the cosigner key it encodes.
    plain = SigningKey(SEED, "witness.example/w1").verifier.vkey()
    assert CosignerVerifier.from_vkey(plain) == k.verifier
    assert CosignerKey.from_skey(k.skey()).public_key == pk
    assert CosignerKey.from_skey(SigningKey(SEED, "witness.example/w1").skey()).public_key == pk


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "name+12345678",
        "name+zzzzzzzz+" + base64.b64encode(b"\x04" + bytes(32)).decode(),
        "name+00000000+" + base64.b64encode(b"\x04" + bytes(32)).decode(),
        "name+00000000+" + base64.b64encode(b"\x02" + bytes(32)).decode(),
        "name+00000000+" + base64.b64encode(b"\x04" + bytes(31)).decode(),
        "na me+00000000+" + base64.b64encode(b"\x04" + bytes(32)).decode(),
        "name+00000000+!!!!",
    ],
)
def test_malformed_witness_keys_are_refused(bad: str) -> None:
    with pytest.raises(SignerError):
        CosignerVerifier.from_vkey(bad)


def test_signed_message_is_the_spec_text() -> None:
    assert signed_message("o\n1\nr\n", 1679315147) == b"cosignature/v1\ntime 1679315147\no\n1\nr\n"
    with pytest.raises(ValueError):
        signed_message("o\n1\nr\n", 2**63)


def test_cosigned_checkpoint_stays_a_signed_note_for_both_keys() -> None:
    log_key = SigningKey(bytes([9]) * 32, "mnemolog/00112233445566778899aabbccddeeff")
    raw = checkpoint_note(log_key)
    w = CosignerKey(SEED, "witness.example/w1")
    text = parse_note(raw).text
    line = w.cosign(text, 1_700_000_000)
    cosigned = add_signature_lines(raw, [line], 100)
    assert cosigned is not None and cosigned.startswith(raw)
    # Our note reader, with the log key: the witness line is ignored.
    open_note(cosigned, log_key.verifier)
    # Go's note.Open with the log key (algorithm 0x01 over the text).
    assert go_note_open(
        cosigned, log_key.name, log_key.note_hash, lambda t, s: ed25519_ok(log_key.public_key, t, s)
    )

    # transparency-dev's cosignature verifier with the witness key.
    def cosig_ok(t: bytes, s: bytes) -> bool:
        (ts,) = struct.unpack(">Q", s[:8])
        return ed25519_ok(w.public_key, b"cosignature/v1\ntime %d\n" % ts + t, s[8:])

    wk_hash = hashlib.sha256(w.name.encode() + b"\n\x04" + w.public_key).digest()[:4]
    assert go_note_open(cosigned, w.name, wk_hash, cosig_ok)
    found = cosignatures(parse_note(cosigned), [w.verifier])
    assert [(c.witness, c.timestamp) for c in found] == [(w.verifier, 1_700_000_000)]


def test_a_forged_cosignature_line_rejects_the_note() -> None:
    log_key = SigningKey(bytes([9]) * 32, "log")
    raw = checkpoint_note(log_key)
    w = CosignerKey(SEED, "w")
    good = w.cosign(parse_note(raw).text, 42)
    forged = NoteSignature(good.name, good.key_hash, good.signature[:-1] + bytes([good.signature[-1] ^ 1]))
    bad = add_signature_lines(raw, [forged], 100)
    assert bad is not None
    with pytest.raises(VerificationError) as e:
        cosignatures(parse_note(bad), [w.verifier])
    assert e.value.check == "witness.signature"
    # A line by another key with the same name is someone else's, and ignored.
    other = CosignerKey(bytes([1]) * 32, "w").cosign(parse_note(raw).text, 42)
    mixed = add_signature_lines(raw, [other], 100)
    assert mixed is not None and cosignatures(parse_note(mixed), [w.verifier]) == []


def test_add_signature_lines_is_idempotent_per_key() -> None:
    log_key = SigningKey(bytes([9]) * 32, "log")
    raw = checkpoint_note(log_key)
    w = CosignerKey(SEED, "w")
    text = parse_note(raw).text
    once = add_signature_lines(raw, [w.cosign(text, 1)], 100)
    assert once is not None
    assert add_signature_lines(once, [w.cosign(text, 1)], 100) is None
    assert add_signature_lines(once, [w.cosign(text, 2)], 100) is None  # one line per key
    with pytest.raises(SignerError):
        add_signature_lines(raw, [CosignerKey(bytes([i]) * 32, "w").cosign(text, 1) for i in range(3)], 3)


def test_quorum() -> None:
    log_key = SigningKey(bytes([9]) * 32, "log")
    raw = checkpoint_note(log_key)
    text = parse_note(raw).text
    ws = [CosignerKey(bytes([i]) * 32, f"w{i}") for i in range(3)]
    two = add_signature_lines(raw, [ws[0].cosign(text, 1), ws[1].cosign(text, 2)], 100)
    assert two is not None
    keys = tuple(w.verifier for w in ws)
    assert len(require_cosignatures(two, WitnessPolicy(keys, 2), "cp")) == 2
    with pytest.raises(VerificationError) as e:
        require_cosignatures(two, WitnessPolicy(keys, 3), "cp")
    assert e.value.check == "witness.quorum"
    # The same witness named twice counts once.
    with pytest.raises(UsageError):
        WitnessPolicy((keys[0], keys[0]), 2)
    assert WitnessPolicy.parse([w.verifier.vkey() for w in ws], None) == WitnessPolicy(keys, 3)
    assert WitnessPolicy.parse([], None) is None
    with pytest.raises(UsageError):
        WitnessPolicy.parse([], 1)
    with pytest.raises(UsageError):
        WitnessPolicy.parse(["not a key"], None)


@settings(max_examples=60, deadline=None)
@given(
    body=st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=60),
    ts=st.integers(0, 2**63 - 1),
    flip=st.integers(0, 72 * 8 - 1),
)
def test_any_changed_bit_of_a_cosignature_fails(body: str, ts: int, flip: int) -> None:
    w = CosignerKey(SEED, "w")
    text = f"{body}\n1\n{base64.b64encode(ROOT).decode()}\n"
    line = w.cosign(text, ts)
    assert w.verifier.timestamp_if_valid(text, line) == ts
    sig = bytearray(line.signature)
    sig[flip // 8] ^= 1 << (flip % 8)
    assert w.verifier.timestamp_if_valid(text, NoteSignature(line.name, line.key_hash, bytes(sig))) is None
    assert w.verifier.timestamp_if_valid(text + "x\n", line) is None


def test_one_key_under_two_names_is_one_witness() -> None:
    # Issue 23 item 5: the quorum counted (name, key) pairs, so one party cosigning under
    # two names met --min-witnesses 2.
    log_key = SigningKey(bytes([9]) * 32, "log")
    raw = checkpoint_note(log_key)
    text = parse_note(raw).text
    alice, alias = CosignerKey(SEED, "alice"), CosignerKey(SEED, "not-alice")
    both = add_signature_lines(raw, [alice.cosign(text, 1), alias.cosign(text, 1)], 100)
    assert both is not None
    keys = (alice.verifier, alias.verifier)
    with pytest.raises(UsageError, match="distinct witness public key"):
        WitnessPolicy(keys, 2)
    with pytest.raises(UsageError):
        WitnessPolicy.parse([k.vkey() for k in keys], 2)
    assert WitnessPolicy.parse([k.vkey() for k in keys], None) == WitnessPolicy(keys, 1)
    # A policy of two real witnesses is not met by one of them cosigning under an alias too.
    bob = CosignerKey(bytes([5]) * 32, "bob")
    policy = WitnessPolicy((alice.verifier, alias.verifier, bob.verifier), 2)
    with pytest.raises(VerificationError) as e:
        require_cosignatures(both, policy, "cp")
    assert e.value.check == "witness.quorum"
    three = add_signature_lines(both, [bob.cosign(text, 2)], 100)
    assert three is not None
    assert len({c.witness.public_key for c in require_cosignatures(three, policy, "cp")}) == 2
