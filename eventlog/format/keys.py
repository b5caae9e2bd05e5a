"""Ed25519 keys: generation, identifiers, the Go/C2SP note key encodings, key files.

Two identifiers exist on purpose. The key id (`kid`, first 8 bytes of
SHA-256 of the raw public key) names the signer inside entries; the note key
hash (C2SP signed-note) names it on checkpoint signature lines. Key files use
the encodings of golang.org/x/mod/sumdb/note so existing tools can read them:

    signer:   PRIVATE+KEY+<name>+<8 hex digits>+<base64(0x01 || 32-byte seed)>
    verifier: <name>+<8 hex digits>+<base64(0x01 || 32-byte public key)>

A private key file must be mode 0600 (no access for group or others); a
looser one is refused rather than used.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import nacl.bindings
import nacl.exceptions

from mnemolog.eventlog.errors import SignerError
from mnemolog.eventlog.store.fsio import atomic_write, read_regular

ALG_ED25519 = 0x01
MAX_KEY_FILE = 4096


def key_id(public_key: bytes) -> bytes:
    return hashlib.sha256(public_key).digest()[:8]


def check_key_name(name: str) -> None:
    """C2SP signed-note: non-empty UTF-8 with no Unicode space and no '+'."""
    if not name or "+" in name or any(ch.isspace() for ch in name) or len(name) > 256:
        raise SignerError(
            f"key name {name!r} must be non-empty, at most 256 characters, with no whitespace and no '+'",
            field="key_name",
        )


def note_key_hash(name: str, public_key: bytes) -> bytes:
    """The 4-byte C2SP note key hash: SHA-256(name || 0x0A || 0x01 || key)[:4]."""
    return hashlib.sha256(name.encode() + b"\n" + bytes((ALG_ED25519,)) + public_key).digest()[:4]


@dataclass(frozen=True)
class VerifierKey:
    name: str
    public_key: bytes

    def __post_init__(self) -> None:
        check_key_name(self.name)
        if len(self.public_key) != 32:
            raise SignerError("an Ed25519 public key is 32 bytes", found=len(self.public_key))

    @functools.cached_property
    def kid(self) -> bytes:
        # Cached: a catch-up compares every entry's key id with its epoch key's (a SHA-256 each).
        return key_id(self.public_key)

    @property
    def note_hash(self) -> bytes:
        return note_key_hash(self.name, self.public_key)

    def vkey(self) -> str:
        b64 = base64.b64encode(bytes((ALG_ED25519,)) + self.public_key).decode()
        return f"{self.name}+{self.note_hash.hex()}+{b64}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        """True when `signature` is this key's Ed25519 signature of `message`."""
        return verify_signature(self.public_key, message, signature)

    @classmethod
    def from_vkey(cls, text: str) -> VerifierKey:
        # The base64 key may itself contain '+': split only the name and hash off.
        parts = text.strip().split("+", 2)
        if len(parts) != 3:
            raise SignerError("a verifier key is <name>+<hash>+<base64 key>", found=text.strip()[:80])
        name, hash_hex, b64 = parts
        try:
            raw = base64.b64decode(b64, validate=True)
        except binascii.Error as exc:
            raise SignerError("verifier key: the key part is not base64") from exc
        if len(raw) != 33 or raw[0] != ALG_ED25519:
            raise SignerError("verifier key: expected algorithm 0x01 (Ed25519) and 32 bytes")
        key = cls(name, raw[1:])
        if key.note_hash.hex() != hash_hex.lower() or len(hash_hex) != 8:
            raise SignerError(
                "verifier key: the key hash does not match the name and key",
                expected=key.note_hash.hex(),
                found=hash_hex,
            )
        return key


class SigningKey:
    """A private Ed25519 key with its C2SP name."""

    def __init__(self, seed: bytes, name: str) -> None:
        check_key_name(name)
        if len(seed) != 32:
            raise SignerError("an Ed25519 private key seed is 32 bytes", found=len(seed))
        # The raw libsodium calls: the object wrappers cost more than signing does.
        pk, self._sk = nacl.bindings.crypto_sign_seed_keypair(seed)
        self._seed = seed
        self.name = name
        self.public_key = bytes(pk)
        self.kid = key_id(self.public_key)

    @classmethod
    def generate(cls, name: str) -> SigningKey:
        return cls(os.urandom(32), name)

    @property
    def verifier(self) -> VerifierKey:
        return VerifierKey(self.name, self.public_key)

    @property
    def note_hash(self) -> bytes:
        return note_key_hash(self.name, self.public_key)

    def sign(self, message: bytes) -> bytes:
        return bytes(nacl.bindings.crypto_sign(message, self._sk)[:64])

    def skey(self) -> str:
        b64 = base64.b64encode(bytes((ALG_ED25519,)) + self._seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.note_hash.hex()}+{b64}"

    @classmethod
    def from_skey(cls, text: str) -> SigningKey:
        parts = text.strip().split("+", 4)
        if len(parts) != 5 or parts[0] != "PRIVATE" or parts[1] != "KEY":
            raise SignerError("a signer key is PRIVATE+KEY+<name>+<hash>+<base64 key>")
        _, _, name, hash_hex, b64 = parts
        try:
            raw = base64.b64decode(b64, validate=True)
        except binascii.Error as exc:
            raise SignerError("signer key: the key part is not base64") from exc
        if len(raw) != 33 or raw[0] != ALG_ED25519:
            raise SignerError("signer key: expected algorithm 0x01 (Ed25519) and 32 bytes")
        key = cls(raw[1:], name)
        if key.note_hash.hex() != hash_hex.lower() or len(hash_hex) != 8:
            raise SignerError(
                "signer key: the key hash does not match the name and key",
                expected=key.note_hash.hex(),
                found=hash_hex,
            )
        return key


def verify_signature(public_key: bytes, message: bytes, signature: bytes) -> bool:
    if len(signature) != 64 or len(public_key) != 32:
        return False
    try:
        nacl.bindings.crypto_sign_open(signature + message, public_key)
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.CryptoError, ValueError, TypeError):
        return False
    return True


def write_private_key(path: Path, key: SigningKey) -> None:
    """Write a private key file with mode 0600 from its creation (never briefly wider)."""
    atomic_write(path, (key.skey() + "\n").encode(), mode=0o600)


def write_public_key(path: Path, key: VerifierKey) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, (key.vkey() + "\n").encode())


def load_private_key(path: Path) -> SigningKey:
    """Load a private key, refusing files that others can read or that are malformed."""
    try:
        st = path.stat()
    except FileNotFoundError as exc:
        raise SignerError(f"no private key at {path}", file=str(path)) from exc
    except OSError as exc:
        raise SignerError(f"cannot stat private key {path}: {exc}", file=str(path)) from exc
    if not stat.S_ISREG(st.st_mode):
        raise SignerError(f"private key {path} is not a regular file", file=str(path))
    if st.st_mode & 0o077:
        raise SignerError(
            f"private key {path} has mode {stat.S_IMODE(st.st_mode):04o}; "
            "it must be 0600 (readable by its owner only)",
            file=str(path),
            expected="0600",
            found=f"{stat.S_IMODE(st.st_mode):04o}",
        )
    if st.st_size > MAX_KEY_FILE:
        raise SignerError(f"private key {path} is {st.st_size} bytes; too large", file=str(path))
    try:
        text = read_regular(path, MAX_KEY_FILE).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SignerError(f"cannot read private key {path}: {exc}", file=str(path)) from exc
    try:
        return SigningKey.from_skey(text)
    except SignerError as exc:
        raise SignerError(f"{path}: {exc.message}", file=str(path)) from exc


def load_verifier_key(text_or_path: str) -> VerifierKey:
    """A pinned key given on a command line: a vkey string or a file holding one."""
    candidate = Path(text_or_path)
    text = text_or_path
    if "+" not in text_or_path or candidate.exists():
        try:
            text = read_regular(candidate, MAX_KEY_FILE).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SignerError(f"{text_or_path!r} is neither a verifier key nor a readable key file") from exc
    return VerifierKey.from_vkey(text)
