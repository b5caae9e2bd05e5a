"""The C2SP signed-note known-answer vector of golang.org/x/mod/sumdb/note, and Go's manglings.

Key, text and signature line are those of note_test.go (TestNewVerifier,
TestNewSigner, TestSign, TestOpen); they are small published constants, so
they are spelled out here rather than read from a file.
"""

from __future__ import annotations

import pytest

from mnemolog.eventlog.errors import DecodeError, SignerError, VerificationError
from mnemolog.eventlog.format.keys import SigningKey, VerifierKey
from mnemolog.eventlog.format.note import open_note, parse_note, sign_note

SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
PETER_SIG = "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM="
SIG_LINE = f"— PeterNeumann {PETER_SIG}\n"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
ENOCH_SIG = (
    "— EnochRoot "
    "rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"
)
SIGNED = (TEXT + "\n" + SIG_LINE).encode()


def test_keys_parse_and_agree() -> None:
    signer = SigningKey.from_skey(SKEY)
    verifier = VerifierKey.from_vkey(VKEY)
    assert signer.name == verifier.name == "PeterNeumann"
    assert signer.public_key == verifier.public_key
    assert signer.note_hash.hex() == verifier.note_hash.hex() == "c74f20a3"
    assert signer.skey() == SKEY and verifier.vkey() == VKEY


def test_sign_is_byte_for_byte_go() -> None:
    assert sign_note(TEXT, SigningKey.from_skey(SKEY)) == SIGNED


def test_open_verifies_the_go_signature() -> None:
    note = open_note(SIGNED, VerifierKey.from_vkey(VKEY))
    assert note.text == TEXT
    assert len(note.signatures) == 1 and note.signatures[0].name == "PeterNeumann"


def test_open_with_an_unverified_second_signature() -> None:
    # Go: one signature verified, one (an unknown key's) kept unverified.
    note = open_note((TEXT + "\n" + SIG_LINE + ENOCH_SIG).encode(), VerifierKey.from_vkey(VKEY))
    assert [s.name for s in note.signatures] == ["PeterNeumann", "EnochRoot"]
    enoch = VerifierKey.from_vkey(ENOCH_VKEY)
    open_note((TEXT + "\n" + SIG_LINE + ENOCH_SIG).encode(), enoch)  # Enoch's verifies too


def test_no_known_signature() -> None:
    with pytest.raises(VerificationError) as ei:
        open_note((TEXT + "\n" + ENOCH_SIG).encode(), VerifierKey.from_vkey(VKEY))
    assert ei.value.check == "checkpoint.signer"


def test_invalid_signature() -> None:
    bad = (TEXT + "\n" + SIG_LINE[:60] + "ABCD" + SIG_LINE[60:]).encode()
    with pytest.raises(VerificationError) as ei:
        open_note(bad, VerifierKey.from_vkey(VKEY))
    assert ei.value.check == "checkpoint.signature"


def test_too_many_signatures() -> None:
    with pytest.raises(DecodeError):
        parse_note((TEXT + "\n" + SIG_LINE * 101).encode())
    parse_note((TEXT + "\n" + SIG_LINE * 100).encode())


@pytest.mark.parametrize(
    "msg",
    [
        TEXT,
        TEXT + "\n",
        TEXT + "\n" + SIG_LINE[:-1],
        "\x01" + TEXT + "\n" + SIG_LINE,
        TEXT + "\n" + "— Bad Name " + PETER_SIG,
        TEXT + "\n" + SIG_LINE + "Unexpected line.\n",
    ],
)
def test_malformed_notes(msg: str) -> None:
    with pytest.raises(DecodeError):
        open_note(msg.encode(), VerifierKey.from_vkey(VKEY))


def test_invalid_utf8() -> None:
    with pytest.raises(DecodeError):
        open_note(b"\xff" + SIGNED, VerifierKey.from_vkey(VKEY))


def _manglings(key: str) -> list[str]:
    """Go's: every proper substring, and every single byte incremented."""
    b = key.encode()
    out = [b[i:j].decode("utf-8", "replace") for i in range(len(b) + 1) for j in range(i + 1, len(b) + 1)]
    out = [s for s in out if s != key]
    for i in range(len(b)):
        m = bytearray(b)
        m[i] = (m[i] + 1) % 256
        out.append(m.decode("utf-8", "replace"))
    return out


def test_verifier_key_manglings_are_refused() -> None:
    accepted = []
    for k in [
        *_manglings(VKEY),
        "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",  # wrong length
        "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # unknown algorithm
    ]:
        try:
            VerifierKey.from_vkey(k)
        except SignerError:
            continue
        accepted.append(k)
    assert accepted == []


def test_signer_key_manglings_are_refused() -> None:
    accepted = []
    for k in _manglings(SKEY):
        try:
            SigningKey.from_skey(k)
        except SignerError:
            continue
        accepted.append(k)
    assert accepted == []
