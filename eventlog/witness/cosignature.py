"""C2SP tlog-cosignature/v1 (Ed25519): witness keys, cosigning a checkpoint, checking cosignatures.

A cosignature is one more signature line on a checkpoint note, so a cosigned
checkpoint stays a valid C2SP signed note that any verifier holding only the
log's key still opens (lines of unknown keys are ignored). For the Ed25519
type the line's key hash is computed with signature type 0x04,

    SHA-256(<name> || 0x0A || 0x04 || 32-byte public key)[:4]

and its signature bytes are `timestamp (u64, big-endian) || Ed25519 signature`
over

    "cosignature/v1\\n" || "time <timestamp>\\n" || <checkpoint body>

where the timestamp is POSIX seconds and the body is the whole note text
(final newline included, signature lines excluded). Key files use the Go note
encodings with type byte 0x04 (`PRIVATE+KEY+name+hash+base64(0x04 || seed)`,
`name+hash+base64(0x04 || public key)`); a plain Ed25519 (0x01) key of the
same form is accepted and read as the cosigner key it encodes, as
transparency-dev's note package does.

Standard library and pynacl only: the offline verifiers use it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import nacl.bindings

from mnemolog.eventlog.errors import DecodeError, SignerError, UsageError, VerificationError
from mnemolog.eventlog.format.keys import (
    ALG_ED25519,
    MAX_KEY_FILE,
    check_key_name,
    note_key_hash,
    verify_signature,
)
from mnemolog.eventlog.format.note import NoteSignature, SignedNote, parse_note
from mnemolog.eventlog.store.fsio import FileTooLarge, read_regular

ALG_COSIGNATURE_V1 = 0x04
HEADER = "cosignature/v1\n"
MAX_TIMESTAMP = 2**63 - 1
SIG_LEN = 8 + 64


def cosigner_key_hash(name: str, public_key: bytes) -> bytes:
    """The 4-byte key hash of an Ed25519 cosigner key (signature type 0x04)."""
    return hashlib.sha256(name.encode() + b"\n" + bytes((ALG_COSIGNATURE_V1,)) + public_key).digest()[:4]


def signed_message(text: str, timestamp: int) -> bytes:
    """The bytes a cosignature/v1 signature covers."""
    if not 0 <= timestamp <= MAX_TIMESTAMP:
        raise ValueError(f"cosignature timestamp {timestamp} is outside 0..2^63-1")
    return f"{HEADER}time {timestamp}\n{text}".encode()


def _split_key(text: str, what: str) -> tuple[str, str, bytes]:
    # The base64 part may itself contain '+': split only the name and hash off.
    parts = text.strip().split("+", 2)
    if len(parts) != 3:
        raise SignerError(f"a {what} is <name>+<hash>+<base64 key>", found=text.strip()[:80])
    name, hash_hex, b64 = parts
    check_key_name(name)
    try:
        raw = base64.b64decode(b64, validate=True)
    except binascii.Error as exc:
        raise SignerError(f"{what}: the key part is not base64") from exc
    if len(hash_hex) != 8 or any(c not in "0123456789abcdefABCDEF" for c in hash_hex):
        raise SignerError(f"{what}: the key hash is not 8 hex digits", found=hash_hex)
    if len(raw) != 33 or raw[0] not in (ALG_ED25519, ALG_COSIGNATURE_V1):
        raise SignerError(
            f"{what}: expected type 0x04 (Ed25519 cosignature/v1) or 0x01 (Ed25519) and 32 bytes"
        )
    return name, hash_hex.lower(), raw


@dataclass(frozen=True, slots=True)
class Cosignature:
    """A cosignature line that verified: who made it and when (POSIX seconds)."""

    witness: CosignerVerifier
    timestamp: int
    line: NoteSignature


@dataclass(frozen=True)
class CosignerVerifier:
    """A witness's public key: its name and its 32-byte Ed25519 key."""

    name: str
    public_key: bytes

    def __post_init__(self) -> None:
        check_key_name(self.name)
        if len(self.public_key) != 32:
            raise SignerError("an Ed25519 public key is 32 bytes", found=len(self.public_key))

    @property
    def key_hash(self) -> bytes:
        return cosigner_key_hash(self.name, self.public_key)

    def vkey(self) -> str:
        b64 = base64.b64encode(bytes((ALG_COSIGNATURE_V1,)) + self.public_key).decode()
        return f"{self.name}+{self.key_hash.hex()}+{b64}"

    @classmethod
    def from_vkey(cls, text: str) -> CosignerVerifier:
        name, hash_hex, raw = _split_key(text, "witness verifier key")
        key = cls(name, raw[1:])
        want = key.key_hash if raw[0] == ALG_COSIGNATURE_V1 else note_key_hash(name, raw[1:])
        if want.hex() != hash_hex:
            raise SignerError(
                "witness verifier key: the key hash does not match the name and key",
                expected=want.hex(),
                found=hash_hex,
            )
        return key

    def matches(self, sig: NoteSignature) -> bool:
        return sig.name == self.name and sig.key_hash == self.key_hash

    def timestamp_if_valid(self, text: str, sig: NoteSignature) -> int | None:
        """The timestamp of `sig` when it is this key's valid cosignature of `text`, else None."""
        if not self.matches(sig) or len(sig.signature) != SIG_LEN:
            return None
        (ts,) = struct.unpack(">Q", sig.signature[:8])
        if ts > MAX_TIMESTAMP:
            return None
        if not verify_signature(self.public_key, signed_message(text, ts), sig.signature[8:]):
            return None
        return int(ts)


class CosignerKey:
    """A witness's private key: it cosigns checkpoint bodies with a timestamp."""

    def __init__(self, seed: bytes, name: str) -> None:
        check_key_name(name)
        if len(seed) != 32:
            raise SignerError("an Ed25519 private key seed is 32 bytes", found=len(seed))
        pk, self._sk = nacl.bindings.crypto_sign_seed_keypair(seed)
        self._seed = seed
        self.name = name
        self.public_key = bytes(pk)

    @classmethod
    def generate(cls, name: str) -> CosignerKey:
        return cls(os.urandom(32), name)

    @property
    def verifier(self) -> CosignerVerifier:
        return CosignerVerifier(self.name, self.public_key)

    def skey(self) -> str:
        b64 = base64.b64encode(bytes((ALG_COSIGNATURE_V1,)) + self._seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.verifier.key_hash.hex()}+{b64}"

    @classmethod
    def from_skey(cls, text: str) -> CosignerKey:
        head = text.strip().split("+", 2)
        if len(head) != 3 or head[0] != "PRIVATE" or head[1] != "KEY":
            raise SignerError("a witness signer key is PRIVATE+KEY+<name>+<hash>+<base64 key>")
        name, hash_hex, raw = _split_key(head[2], "witness signer key")
        key = cls(raw[1:], name)
        pub = key.public_key
        want = key.verifier.key_hash if raw[0] == ALG_COSIGNATURE_V1 else note_key_hash(name, pub)
        if want.hex() != hash_hex:
            raise SignerError(
                "witness signer key: the key hash does not match the name and key",
                expected=want.hex(),
                found=hash_hex,
            )
        return key

    def cosign(self, text: str, timestamp: int) -> NoteSignature:
        """The cosignature/v1 line for a checkpoint body at `timestamp` (POSIX seconds)."""
        sig = bytes(nacl.bindings.crypto_sign(signed_message(text, timestamp), self._sk)[:64])
        return NoteSignature(self.name, self.verifier.key_hash, struct.pack(">Q", timestamp) + sig)


def cosignatures(note: SignedNote, witnesses: Iterable[CosignerVerifier]) -> list[Cosignature]:
    """The valid cosignatures on `note` by any of `witnesses`, one per witness.

    A line that carries a configured witness's name and key hash but does not
    verify is a forgery or damage, never something to skip: C2SP signed-note
    says to reject the whole note, and this raises (check `witness.signature`).
    Lines of other keys are ignored.
    """
    found: dict[tuple[str, bytes], Cosignature] = {}
    keys = list(witnesses)
    for sig in note.signatures:
        for w in keys:
            if not w.matches(sig):
                continue
            ts = w.timestamp_if_valid(note.text, sig)
            if ts is None:
                raise VerificationError(
                    f"the cosignature line of witness {w.name} does not verify",
                    check="witness.signature",
                    expected=w.vkey(),
                )
            prev = found.get((w.name, w.public_key))
            if prev is None or ts > prev.timestamp:
                found[(w.name, w.public_key)] = Cosignature(w, ts, sig)
    return sorted(found.values(), key=lambda c: (c.witness.name, c.witness.public_key))


def add_signature_lines(raw: bytes, lines: Sequence[NoteSignature], max_sigs: int) -> bytes | None:
    """`raw` with `lines` appended, each once; None when nothing is new.

    The note's text and its existing lines are kept byte for byte, so every
    signature already on it still verifies.
    """
    note = parse_note(raw)
    have = {(s.name, s.key_hash, s.signature) for s in note.signatures}
    have_keys = {(s.name, s.key_hash) for s in note.signatures}
    new: list[NoteSignature] = []
    for s in lines:
        # One line per key: a witness that cosigned again later adds nothing the first line lacks.
        if (s.name, s.key_hash, s.signature) in have or (s.name, s.key_hash) in have_keys:
            continue
        have_keys.add((s.name, s.key_hash))
        new.append(s)
    if not new:
        return None
    if len(note.signatures) + len(new) > max_sigs:
        raise SignerError(f"a note carries at most {max_sigs} signatures")
    return raw + b"".join(s.line().encode() for s in new)


@dataclass(frozen=True)
class WitnessPolicy:
    """Which witnesses an auditor trusts and how many of them must have cosigned."""

    witnesses: tuple[CosignerVerifier, ...]
    min_count: int

    def __post_init__(self) -> None:
        # A witness is its key: one key under two names is one witness, and counting it
        # twice would let a single party meet a quorum of two.
        unique = {w.public_key for w in self.witnesses}
        if not 1 <= self.min_count <= len(unique):
            raise UsageError(
                f"--min-witnesses {self.min_count} needs between 1 and the {len(unique)} distinct "
                "witness public key(s) given"
            )

    @classmethod
    def parse(cls, vkeys: Sequence[str], min_count: int | None) -> WitnessPolicy | None:
        """From command-line values: None without keys; every key required unless `min_count` says."""
        if not vkeys:
            if min_count is not None:
                raise UsageError("--min-witnesses needs at least one --witness-key")
            return None
        keys: list[CosignerVerifier] = []
        for v in vkeys:
            try:
                keys.append(CosignerVerifier.from_vkey(_read_key_arg(v)))
            except SignerError as exc:
                raise UsageError(f"--witness-key: {exc.message}", field="witness_key") from exc
        unique = {k.public_key for k in keys}
        return cls(tuple(keys), len(unique) if min_count is None else min_count)

    def describe(self) -> dict[str, object]:
        return {"min": self.min_count, "keys": sorted({w.vkey() for w in self.witnesses})}


def _read_key_arg(text: str) -> str:
    """A key given on a command line: the vkey itself, or a small file holding one."""
    if "+" in text and not os.path.exists(text):
        return text
    try:
        return read_regular(text, MAX_KEY_FILE).decode("utf-8")
    except FileTooLarge as exc:
        raise SignerError(f"{text} is larger than a key file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise SignerError(f"{text!r} is neither a witness key nor a readable key file") from exc


def require_cosignatures(raw: bytes, policy: WitnessPolicy, where: str) -> list[Cosignature]:
    """The policy's witnesses' valid cosignatures on the checkpoint `raw`; raise unless enough.

    Fails with check `witness.quorum` when fewer than `policy.min_count`
    distinct witness public keys cosigned, and `witness.signature` when a line of a
    configured witness is forged or damaged.
    """
    try:
        note = parse_note(raw, where)
    except DecodeError as exc:
        raise VerificationError(f"{where}: {exc.message}", check="checkpoint.decode", file=where) from exc
    try:
        found = cosignatures(note, policy.witnesses)
    except VerificationError as exc:
        raise VerificationError(
            f"{where}: {exc.message}", check=exc.check, file=where, expected=exc.expected
        ) from exc
    distinct = {c.witness.public_key for c in found}
    if len(distinct) < policy.min_count:
        raise VerificationError(
            f"{where}: cosignatures by {len(distinct)} distinct witness key(s) of the required "
            f"{policy.min_count} (one key under several names counts once)",
            check="witness.quorum",
            file=where,
            expected=policy.min_count,
            found=[c.witness.vkey() for c in found],
        )
    return found
