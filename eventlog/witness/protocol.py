"""The C2SP tlog-witness protocol as pure functions: requests, the state transition, responses.

A witness keeps, for each log it is configured with (an origin and the log's
public keys), the latest checkpoint it cosigned. `POST <prefix>/add-checkpoint`
carries

    old <size the client believes the witness cosigned last>\\n
    <0..63 lines: one base64 hash each, an RFC 9162 consistency proof>\\n
    \\n
    <the checkpoint: a signed note>

and `step` decides, from the configured logs, the stored states and the
request alone, whether to cosign (returning the new state) or which protocol
error to answer:

    400  malformed request, old size above the checkpoint's size
    403  no signature by a key the witness trusts for the origin verifies
    404  unknown origin
    409  old size is not the size last cosigned (body: that size, text/x.tlog.size),
         or the same size with another root
    413  request larger than the bounds below
    422  the consistency proof does not verify: also a non-empty proof from old size 0,
         and a size-0 checkpoint whose root is not the empty tree's

So the witness never cosigns a checkpoint smaller than, or inconsistent with,
one it cosigned: the only way forward is a proof from exactly its own state.
The HTTP server (substrate.witness_server) holds a lock around `step` and the
durable write of the new state; the client (substrate.witnessing) builds
requests with `AddCheckpoint.encode` and checks answers here too.

Standard library, cbor2-free: it imports only mnemolog.eventlog modules that
keep the verifier's dependency rule.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from mnemolog.eventlog.errors import DecodeError, MnemologError, VerificationError
from mnemolog.eventlog.format import merkle
from mnemolog.eventlog.format.keys import VerifierKey
from mnemolog.eventlog.format.note import MAX_NOTE_BYTES, Checkpoint, SignedNote, parse_note
from mnemolog.eventlog.witness.cosignature import Cosignature, CosignerKey, CosignerVerifier, cosignatures

MAX_PROOF_LINES = 63
_MAX_OLD_LINE = len("old ") + 20 + 1
_PROOF_LINE = 44 + 1  # base64 of 32 bytes and a newline
MAX_REQUEST_BYTES = _MAX_OLD_LINE + MAX_PROOF_LINES * _PROOF_LINE + 1 + MAX_NOTE_BYTES
MAX_RESPONSE_BYTES = 16 * 1024
SIZE_CONTENT_TYPE = "text/x.tlog.size"
MAX_TREE_SIZE = 2**64 - 1
_DECIMAL = re.compile(rb"(0|[1-9][0-9]{0,19})")
_OLD_LINE = re.compile(rb"old (0|[1-9][0-9]{0,19})")


class WitnessRefusal(MnemologError):
    """A request the witness answers with an HTTP error: `status`, and a body to send."""

    status: ClassVar[int] = 400
    exit_code = 8
    slug = "witness_refused"

    def __init__(
        self, message: str, *, body: bytes | None = None, content_type: str | None = None, **details: Any
    ):
        super().__init__(message, status=self.status, **details)
        self.body = body if body is not None else (message + "\n").encode()
        self.content_type = content_type or "text/plain; charset=utf-8"


class BadRequest(WitnessRefusal):
    status = 400
    exit_code = 65
    slug = "witness_bad_request"


class Forbidden(WitnessRefusal):
    status = 403
    exit_code = 8
    slug = "witness_bad_signature"


class UnknownLog(WitnessRefusal):
    status = 404
    exit_code = 2
    slug = "witness_unknown_log"


class Conflict(WitnessRefusal):
    """The old size is not what the witness holds (or the same size has another root)."""

    status = 409
    exit_code = 8
    slug = "witness_conflict"

    def __init__(self, message: str, latest_size: int, **details: Any) -> None:
        super().__init__(
            message,
            body=f"{latest_size}\n".encode(),
            content_type=SIZE_CONTENT_TYPE,
            latest_size=latest_size,
            **details,
        )
        self.latest_size = latest_size


class TooLarge(WitnessRefusal):
    status = 413
    exit_code = 65
    slug = "witness_request_too_large"


class Inconsistent(WitnessRefusal):
    status = 422
    exit_code = 8
    slug = "witness_inconsistent_proof"


@dataclass(frozen=True)
class CheckpointBody:
    """A checkpoint note's text: origin, size, root, and any extension lines (kept, not judged)."""

    origin: str
    size: int
    root: bytes
    text: str

    @property
    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self.origin, self.size, self.root)


def parse_checkpoint_body(text: str) -> CheckpointBody:
    """C2SP tlog-checkpoint: origin, decimal size, base64 root, then optional non-empty extension lines."""
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "":
        raise BadRequest("a checkpoint body is at least three lines, each ending in a newline")
    origin, size_s, root_s, *ext = lines[:-1]
    if not origin:
        raise BadRequest("the checkpoint's origin line is empty")
    if not _DECIMAL.fullmatch(size_s.encode()) or int(size_s) > MAX_TREE_SIZE:
        raise BadRequest(f"the checkpoint's tree size {size_s[:30]!r} is not a decimal below 2^64")
    try:
        root = base64.b64decode(root_s, validate=True)
    except binascii.Error as exc:
        raise BadRequest("the checkpoint's root hash is not base64") from exc
    if len(root) != 32 or base64.b64encode(root).decode() != root_s:
        raise BadRequest("the checkpoint's root hash must be 32 bytes in canonical base64")
    if any(not line for line in ext):
        raise BadRequest("a checkpoint extension line is empty")
    return CheckpointBody(origin, int(size_s), root, text)


@dataclass(frozen=True)
class AddCheckpoint:
    """One add-checkpoint request: the old size, the consistency proof, the signed checkpoint."""

    old_size: int
    proof: tuple[bytes, ...]
    checkpoint: bytes

    def encode(self) -> bytes:
        lines = [f"old {self.old_size}\n", *(base64.b64encode(h).decode() + "\n" for h in self.proof), "\n"]
        return "".join(lines).encode() + self.checkpoint


@dataclass(frozen=True)
class ParsedRequest:
    request: AddCheckpoint
    note: SignedNote
    body: CheckpointBody


def parse_add_checkpoint(data: bytes) -> ParsedRequest:
    """Parse a request body strictly; anything malformed, truncated or oversized is refused."""
    if len(data) > MAX_REQUEST_BYTES:
        raise TooLarge(f"request of {len(data)} bytes; at most {MAX_REQUEST_BYTES}")
    nl = data.find(b"\n", 0, _MAX_OLD_LINE)
    if nl < 0:
        raise BadRequest("the request does not start with an 'old <size>' line")
    m = _OLD_LINE.fullmatch(data[:nl])
    if m is None or int(m.group(1)) > MAX_TREE_SIZE:
        raise BadRequest("the first line must be 'old <decimal size>' with no leading zeroes")
    old = int(m.group(1))
    pos = nl + 1
    proof: list[bytes] = []
    while True:
        end = data.find(b"\n", pos, pos + _PROOF_LINE)
        if end < 0:
            raise BadRequest(
                "the request is truncated or a proof line is malformed (no empty line before the checkpoint)"
            )
        line = data[pos:end]
        pos = end + 1
        if not line:
            break
        if len(proof) == MAX_PROOF_LINES:
            raise BadRequest(f"more than {MAX_PROOF_LINES} consistency proof lines")
        try:
            h = base64.b64decode(line, validate=True)
        except binascii.Error as exc:
            raise BadRequest(f"proof line {len(proof) + 1} is not base64") from exc
        if len(h) != 32 or base64.b64encode(h) != line:
            raise BadRequest(f"proof line {len(proof) + 1} is not one 32-byte hash in canonical base64")
        proof.append(h)
    raw = data[pos:]
    if not raw:
        raise BadRequest("the request has no checkpoint after the empty line")
    try:
        note = parse_note(raw, "checkpoint")
    except DecodeError as exc:
        raise BadRequest(f"the checkpoint is not a signed note: {exc.message}") from exc
    body = parse_checkpoint_body(note.text)
    return ParsedRequest(AddCheckpoint(old, tuple(proof), raw), note, body)


@dataclass(frozen=True)
class WitnessedLog:
    """A log the witness is configured with: its origin and the public keys it trusts for it."""

    origin: str
    keys: tuple[VerifierKey, ...]


@dataclass(frozen=True)
class LogState:
    """The latest checkpoint the witness cosigned for one origin."""

    origin: str
    size: int
    root: bytes
    checkpoint: bytes  # the signed note as it was submitted: the log's own statement


@dataclass(frozen=True)
class Accepted:
    state: LogState
    body: CheckpointBody


def _check_log_signature(log: WitnessedLog, note: SignedNote) -> None:
    msg = note.text.encode()
    verified = False
    for sig in note.signatures:
        for k in log.keys:
            if sig.name == k.name and sig.key_hash == k.note_hash:
                if not k.verify(msg, sig.signature):
                    raise Forbidden(
                        f"the signature by the log key {k.name}+{k.note_hash.hex()} does not verify"
                    )
                verified = True
    if not verified:
        raise Forbidden(f"no signature by a key this witness trusts for {log.origin}")


def step(logs: Mapping[str, WitnessedLog], states: Mapping[str, LogState], parsed: ParsedRequest) -> Accepted:
    """The witness's decision for one request: the new state to persist, or a WitnessRefusal."""
    req, body = parsed.request, parsed.body
    log = logs.get(body.origin)
    if log is None:
        raise UnknownLog(f"this witness does not know the log {body.origin[:200]!r}")
    _check_log_signature(log, parsed.note)
    if req.old_size > body.size:
        raise BadRequest(f"old size {req.old_size} is larger than the checkpoint's size {body.size}")
    state = states.get(body.origin)
    latest = state.size if state is not None else 0
    if req.old_size != latest:
        raise Conflict(
            f"old size {req.old_size} is not the size this witness cosigned last ({latest})", latest
        )
    if req.old_size == 0:
        # C2SP tlog-witness: "The proof MUST be empty if the old size is zero. If the Merkle
        # Consistency Proof doesn't verify, the witness MUST respond with 422": a proof from
        # nothing that is not empty does not verify.
        if req.proof:
            raise Inconsistent(
                f"a consistency proof from old size 0 is empty; this one has {len(req.proof)} hashes"
            )
        # The empty tree has one root; a size-0 checkpoint with another is no tree at all.
        if body.size == 0 and body.root != merkle.EMPTY_ROOT:
            raise Inconsistent("a checkpoint of size 0 must carry the empty tree's root (SHA-256 of nothing)")
    else:
        assert state is not None
        if req.old_size == body.size and body.root != state.root:
            raise Conflict(f"the witness cosigned size {latest} with another root: the log forked", latest)
        try:
            merkle.verify_consistency(req.old_size, body.size, state.root, body.root, req.proof)
        except VerificationError as exc:
            raise Inconsistent(
                f"the consistency proof from {req.old_size} to {body.size} does not verify: {exc.message}"
            ) from exc
    return Accepted(LogState(body.origin, body.size, body.root, req.checkpoint), body)


def cosign_response(key: CosignerKey, body: CheckpointBody, timestamp: int) -> bytes:
    """The 200 response body: this witness's cosignature line on the checkpoint."""
    return key.cosign(body.text, timestamp).line().encode()


# -- the client side ---------------------------------------------------------


def parse_size_body(data: bytes) -> int:
    """A 409 body: the witness's latest cosigned size, in decimal, then a newline."""
    if len(data) > 32 or not data.endswith(b"\n") or not _DECIMAL.fullmatch(data[:-1]):
        raise DecodeError("a 409 answer's body is not '<decimal size>\\n'", found=data[:40].decode("latin-1"))
    return int(data[:-1])


def parse_cosignature_response(data: bytes, text: str, witness: CosignerVerifier) -> Cosignature:
    """The witness's valid cosignature among the signature lines of a 200 answer, else raise."""
    if len(data) > MAX_RESPONSE_BYTES:
        raise DecodeError(f"a cosignature answer of {len(data)} bytes is too large")
    if not data.startswith("— ".encode()):
        raise DecodeError("a cosignature answer is signature lines starting with '— '")
    note = parse_note(text.encode() + b"\n" + data, "cosignature response")
    found = cosignatures(note, [witness])
    if not found:
        raise VerificationError(
            f"the witness answered without a cosignature by {witness.vkey()}",
            check="witness.signer",
            expected=witness.vkey(),
            found=[f"{s.name}+{s.key_hash.hex()}" for s in note.signatures],
        )
    return found[0]


def distinct(witnesses: Sequence[CosignerVerifier]) -> list[CosignerVerifier]:
    """Witness keys without repeats (a key named twice counts once)."""
    seen: dict[tuple[str, bytes], CosignerVerifier] = {}
    for w in witnesses:
        seen.setdefault((w.name, w.public_key), w)
    return list(seen.values())
