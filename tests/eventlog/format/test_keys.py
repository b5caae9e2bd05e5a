"""Keys: identifiers, Go note encodings, and private key files that refuse to be loose."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from mnemolog.eventlog.errors import SignerError
from mnemolog.eventlog.format import keys as K
from tests.eventlog.logkit import seeded_key


def test_identifiers() -> None:
    k = seeded_key("alice")
    assert k.kid == hashlib.sha256(k.public_key).digest()[:8] == K.key_id(k.public_key)
    assert k.note_hash == hashlib.sha256(b"alice\n\x01" + k.public_key).digest()[:4]
    assert k.verifier.kid == k.kid and k.verifier.note_hash == k.note_hash


def test_encodings_round_trip() -> None:
    k = K.SigningKey.generate("bob")
    again = K.SigningKey.from_skey(k.skey())
    assert again.public_key == k.public_key and again.name == "bob"
    v = K.VerifierKey.from_vkey(k.verifier.vkey() + "\n")
    assert v == k.verifier
    sig = k.sign(b"message")
    assert v.verify(b"message", sig) and not v.verify(b"massage", sig)
    assert not K.verify_signature(k.public_key, b"message", sig[:63])
    assert not K.verify_signature(k.public_key[:31], b"message", sig)


@pytest.mark.parametrize("name", ["", "a b", "a+b", "tab\there", "x" * 257, "nbsp\u00a0"])
def test_bad_key_names(name: str) -> None:
    with pytest.raises(SignerError):
        K.check_key_name(name)


def test_private_key_file_is_0600(tmp_path: Path) -> None:
    p = tmp_path / "keys" / "signing.key"
    p.parent.mkdir()
    k = seeded_key()
    K.write_private_key(p, k)
    assert p.stat().st_mode & 0o777 == 0o600
    assert K.load_private_key(p).public_key == k.public_key


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_loose_private_key_is_refused(tmp_path: Path, mode: int) -> None:
    p = tmp_path / "signing.key"
    K.write_private_key(p, seeded_key())
    os.chmod(p, mode)
    with pytest.raises(SignerError) as ei:
        K.load_private_key(p)
    assert "0600" in ei.value.message and ei.value.details["found"] == f"{mode:04o}"


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not a key\n",
        b"PRIVATE+KEY+name+00000000+AAAA\n",
        b"\xff\xfe\n",
        seeded_key().verifier.vkey().encode(),  # a public key where the private one belongs
        b"x" * 5000,
    ],
)
def test_malformed_private_key_files(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "signing.key"
    p.write_bytes(content)
    os.chmod(p, 0o600)
    with pytest.raises(SignerError):
        K.load_private_key(p)


def test_missing_and_odd_private_key_paths(tmp_path: Path) -> None:
    with pytest.raises(SignerError) as ei:
        K.load_private_key(tmp_path / "nope.key")
    assert "no private key" in ei.value.message
    d = tmp_path / "dir.key"
    d.mkdir()
    with pytest.raises(SignerError):
        K.load_private_key(d)


def test_load_verifier_key_from_text_or_file(tmp_path: Path) -> None:
    v = seeded_key().verifier
    assert K.load_verifier_key(v.vkey()) == v
    p = tmp_path / "k.pub"
    K.write_public_key(p, v)
    assert K.load_verifier_key(str(p)) == v
    with pytest.raises(SignerError):
        K.load_verifier_key(str(tmp_path / "missing.pub"))


def test_seeds_and_lengths() -> None:
    with pytest.raises(SignerError):
        K.SigningKey(b"short", "n")
    with pytest.raises(SignerError):
        K.VerifierKey("n", b"short")
