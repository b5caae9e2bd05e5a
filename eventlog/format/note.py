"""C2SP signed notes and tlog checkpoints (write, parse, verify).

A signed note is text ending in a newline, a blank line, then one line per
signature: `— <key name> <base64(4-byte key hash || signature)>`. The rules
follow golang.org/x/mod/sumdb/note (its known-answer vector is a test here):
valid UTF-8, no control characters other than newline, at most 100
signature lines. A checkpoint is a note whose text is the C2SP
tlog-checkpoint body: origin, decimal tree size, base64 root hash.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from mnemolog.eventlog.errors import DecodeError, SignerError, VerificationError
from mnemolog.eventlog.format.keys import SigningKey, VerifierKey, check_key_name
from mnemolog.eventlog.verify.trust import ORIGIN_PREFIX, origin_for

__all__ = ["ORIGIN_PREFIX", "Checkpoint", "SignedNote", "open_checkpoint", "origin_for", "peek_checkpoint"]

SIG_PREFIX = "— "
MAX_SIGS = 100
MAX_NOTE_BYTES = 64 * 1024
_DECIMAL = re.compile(r"^(0|[1-9][0-9]{0,19})$")


@dataclass(frozen=True)
class NoteSignature:
    name: str
    key_hash: bytes
    signature: bytes

    def line(self) -> str:
        b64 = base64.b64encode(self.key_hash + self.signature).decode()
        return f"{SIG_PREFIX}{self.name} {b64}\n"


@dataclass(frozen=True)
class SignedNote:
    text: str
    signatures: tuple[NoteSignature, ...]

    def encode(self) -> bytes:
        return (self.text + "\n" + "".join(s.line() for s in self.signatures)).encode()


def sign_note(text: str, *signers: SigningKey) -> bytes:
    """Sign `text` (which must end in a newline), byte for byte as Go's note.Sign."""
    if not text.endswith("\n"):
        raise DecodeError("note text must end with a newline")
    _check_text(text.encode())
    msg = text.encode()
    sigs = tuple(NoteSignature(s.name, s.note_hash, s.sign(msg)) for s in signers)
    return SignedNote(text, sigs).encode()


def _check_text(raw: bytes) -> None:
    try:
        s = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError("note is not valid UTF-8") from exc
    for ch in s:
        if ch < " " and ch != "\n":
            raise DecodeError("note contains a control character other than newline")


def parse_note(raw: bytes, where: str = "note") -> SignedNote:
    """Split a signed note into text and signatures; malformed notes raise DecodeError."""
    if len(raw) > MAX_NOTE_BYTES:
        raise DecodeError(f"{where}: {len(raw)} bytes is larger than a note may be", file=where)
    _check_text(raw)
    split = raw.rfind(b"\n\n")
    if split < 0:
        raise DecodeError(f"{where}: no blank line before the signatures", file=where)
    text, block = raw[: split + 1], raw[split + 2 :]
    if not block or not block.endswith(b"\n"):
        raise DecodeError(f"{where}: the signature block must end with a newline", file=where)
    sigs: list[NoteSignature] = []
    for line in block.decode().split("\n")[:-1]:
        if not line.startswith(SIG_PREFIX):
            raise DecodeError(f"{where}: signature line does not start with '— '", file=where)
        name, _, b64 = line[len(SIG_PREFIX) :].partition(" ")
        try:
            check_key_name(name)
            blob = base64.b64decode(b64, validate=True)
        except (binascii.Error, SignerError) as exc:
            raise DecodeError(f"{where}: malformed signature line", file=where) from exc
        if not b64 or len(blob) < 5:
            raise DecodeError(f"{where}: malformed signature line", file=where)
        # One signature, one spelling: base64 whose unused trailing bits are set
        # decodes to the same bytes, so a changed byte of the file would pass.
        if base64.b64encode(blob).decode() != b64:
            raise DecodeError(f"{where}: signature is not in canonical base64", file=where)
        sigs.append(NoteSignature(name, blob[:4], blob[4:]))
        if len(sigs) > MAX_SIGS:
            raise DecodeError(f"{where}: more than {MAX_SIGS} signatures", file=where)
    return SignedNote(text.decode(), tuple(sigs))


def open_note(raw: bytes, key: VerifierKey, where: str = "note") -> SignedNote:
    """Parse `raw` and require a valid signature by `key`; return the parsed note.

    A line naming `key` (name and key hash) whose signature fails is a
    verification failure; so is a note with no line for `key` at all.
    """
    note = parse_note(raw, where)
    msg = note.text.encode()
    for sig in note.signatures:
        if sig.name == key.name and sig.key_hash == key.note_hash:
            if not key.verify(msg, sig.signature):
                raise VerificationError(
                    f"{where}: the signature by {key.name} does not verify",
                    check="checkpoint.signature",
                    file=where,
                )
            return note
    raise VerificationError(
        f"{where}: no signature by the expected key {key.name}+{key.note_hash.hex()}",
        check="checkpoint.signer",
        file=where,
        expected=f"{key.name}+{key.note_hash.hex()}",
        found=[f"{s.name}+{s.key_hash.hex()}" for s in note.signatures],
    )


@dataclass(frozen=True)
class Checkpoint:
    """A C2SP tlog-checkpoint body: origin, tree size, root hash."""

    origin: str
    size: int
    root: bytes

    def text(self) -> str:
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n"

    def sign(self, key: SigningKey) -> bytes:
        return sign_note(self.text(), key)

    @staticmethod
    def parse_text(text: str, where: str = "checkpoint") -> Checkpoint:
        lines = text.split("\n")
        if len(lines) != 4 or lines[3] != "":
            raise DecodeError(
                f"{where}: a checkpoint body is exactly three lines (origin, size, root)",
                file=where,
            )
        origin, size_s, root_s = lines[:3]
        if not origin:
            raise DecodeError(f"{where}: empty origin line", file=where)
        if not _DECIMAL.match(size_s):
            raise DecodeError(f"{where}: tree size {size_s!r} is not a decimal", file=where)
        try:
            root = base64.b64decode(root_s, validate=True)
        except binascii.Error as exc:
            raise DecodeError(f"{where}: root hash is not base64", file=where) from exc
        if len(root) != 32 or base64.b64encode(root).decode() != root_s:
            raise DecodeError(f"{where}: root hash must be 32 bytes in base64", file=where)
        return Checkpoint(origin, int(size_s), root)


def open_checkpoint(raw: bytes, key: VerifierKey, where: str = "checkpoint") -> Checkpoint:
    """Verify a signed checkpoint against `key` and return its body."""
    note = open_note(raw, key, where)
    return Checkpoint.parse_text(note.text, where)


def peek_checkpoint(raw: bytes, where: str = "checkpoint") -> Checkpoint:
    """The checkpoint body without checking any signature (to decide which key applies)."""
    return Checkpoint.parse_text(parse_note(raw, where).text, where)
