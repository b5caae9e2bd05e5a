"""An independent verifier of mnemolog logs, checkpoints, cosignatures and forensic bundles.

Written from docs/format.md, docs/forensics.md, README.md and a bundle's VERIFY.md only, without
reading mnemolog's code, and importing nothing of it (stdlib, cbor2 and pynacl): it is the
second implementation that tells whether those documents are enough to verify what the writer
produces. Sealed content (format.md §17) is opened with the data keys a v4 bundle or an export's
FILE.keys carries (XChaCha20-Poly1305 from pynacl); erasure receipts are checked as forensics.md
§8a says. Every failure is a `Failure` naming the check slug the documents give, and the seq.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import itertools
import json
import math
import re
import struct
import sys
import tomllib
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cbor2
from nacl.bindings import crypto_aead_xchacha20poly1305_ietf_decrypt
from nacl.exceptions import BadSignatureError, CryptoError
from nacl.signing import VerifyKey

MAX_ENTRY = 4 * 1024 * 1024
MAX_DEPTH = 32
ENTRY_TAG = b"mnemolog/entry/v1\x00"
MANIFEST_TAG = b"mnemolog/bundle-manifest/v1\x00"
ZERO32 = b"\x00" * 32
TYPE_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
ORIGIN_RE = re.compile(r"^mnemolog/([0-9a-f]{32})$")
SIZE_RE = re.compile(r"^(0|[1-9][0-9]*)$")
SEGMENT_RE = re.compile(r"^([0-9]{20})\.seg$")
CHECKPOINT_RE = re.compile(r"^[0-9]{20}$")
ENTRY_KEYS = ("v", "ts", "tv", "kid", "seq", "sig", "data", "prev", "type")
EM_DASH_PREFIX = "\u2014 "


class Failure(Exception):
    """A verification failure: the document's check slug, the seq (or None) and what was found."""

    def __init__(self, check: str, message: str, seq: int | None = None) -> None:
        super().__init__(f"{check}: {message}" + ("" if seq is None else f" (seq {seq})"))
        self.check = check
        self.seq = seq


class _Incomplete(Exception):
    """The bytes end inside a CBOR item (a torn tail, if the rest of the rules hold)."""


# ---------------------------------------------------------------- canonical CBOR (format.md §1)


def _head(major: int, n: int) -> bytes:
    if n < 24:
        return bytes([major << 5 | n])
    for ai, fmt, limit in ((24, ">B", 1 << 8), (25, ">H", 1 << 16), (26, ">I", 1 << 32), (27, ">Q", 1 << 64)):
        if n < limit:
            return bytes([major << 5 | ai]) + struct.pack(fmt, n)
    raise Failure("entry.decode", f"integer {n} beyond 64 bits")


def _float(x: float) -> bytes:
    if math.isnan(x) or math.isinf(x):
        raise Failure("entry.decode", "NaN and infinities are outside the value model")
    for prefix, fmt in ((b"\xf9", ">e"), (b"\xfa", ">f")):
        try:
            packed = struct.pack(fmt, x)
        except OverflowError:
            continue
        if struct.unpack(fmt, packed)[0] == x:
            return prefix + packed
    return b"\xfb" + struct.pack(">d", x)


def encode(value: Any, depth: int = 0, check: str = "entry.decode") -> bytes:
    """The canonical encoding of a value of the model; anything outside the model fails."""
    if depth > MAX_DEPTH:
        raise Failure(check, f"value nested deeper than {MAX_DEPTH}")
    if value is None:
        return b"\xf6"
    if value is False:
        return b"\xf4"
    if value is True:
        return b"\xf5"
    if isinstance(value, int):
        if value >= 0:
            return _head(0, value)
        if value < -(1 << 64):
            raise Failure(check, f"integer {value} below -2^64")
        return _head(1, -1 - value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        raw = value.encode("utf-8")
        return _head(3, len(raw)) + raw
    if isinstance(value, bytes):
        return _head(2, len(value)) + value
    if isinstance(value, list):
        return _head(4, len(value)) + b"".join(encode(v, depth + 1, check) for v in value)
    if isinstance(value, dict):
        pairs = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise Failure(check, f"map key {k!r} is not a text string")
            pairs.append((encode(k, depth + 1, check), encode(v, depth + 1, check)))
        pairs.sort(key=lambda p: p[0])
        return _head(5, len(pairs)) + b"".join(k + v for k, v in pairs)
    raise Failure(check, f"value of type {type(value).__name__} is outside the value model")


def _scan(buf: bytes, off: int, limit: int = MAX_ENTRY) -> int:
    """The end offset of the item at `off`, using only the value model's heads (§1, §7 torn tails).

    Raises _Incomplete when the bytes end inside the item and Failure when a head is outside the
    model (a tag, an indefinite length, a reserved or simple value, a length above `limit`).
    """
    pending = 1
    while pending:
        if off >= len(buf):
            raise _Incomplete
        ib = buf[off]
        major, ai = ib >> 5, ib & 31
        off += 1
        if major == 7:
            if ai in (20, 21, 22):
                pending -= 1
                continue
            sizes = {25: 2, 26: 4, 27: 8}
            if ai not in sizes:
                raise Failure("entry.decode", f"simple value or break 0x{ib:02x} outside the model")
            off += sizes[ai]
            if off > len(buf):
                raise _Incomplete
            pending -= 1
            continue
        if major == 6:
            raise Failure("entry.decode", "tags are outside the value model")
        if ai < 24:
            n = ai
        elif ai <= 27:
            width = 1 << (ai - 24)
            if off + width > len(buf):
                raise _Incomplete
            n = int.from_bytes(buf[off : off + width], "big")
            off += width
        else:
            raise Failure("entry.decode", f"indefinite or reserved length (0x{ib:02x})")
        pending -= 1
        if major in (2, 3):
            if n > limit:
                raise Failure("entry.decode", f"string length {n} above the bound")
            off += n
            if off > len(buf):
                raise _Incomplete
        elif major == 4:
            if n > limit:
                raise Failure("entry.decode", f"array length {n} above the bound")
            pending += n
        elif major == 5:
            if n > limit:
                raise Failure("entry.decode", f"map length {n} above the bound")
            pending += 2 * n
    return off


def decode_canonical(raw: bytes, check: str) -> Any:
    """Decode exactly one item and require `raw` to be its canonical encoding."""
    try:
        end = _scan(raw, 0, limit=len(raw))
    except _Incomplete:
        raise Failure(check, "truncated CBOR") from None
    except Failure as exc:
        raise Failure(check, str(exc)) from None
    if end != len(raw):
        raise Failure(check, f"{len(raw) - end} trailing bytes after the item")
    try:
        value = cbor2.loads(raw)
    except Exception as exc:  # any decoder complaint is the same failure
        raise Failure(check, f"undecodable CBOR: {exc}") from None
    if encode(value, 0, check) != raw:
        raise Failure(check, "bytes are not the canonical encoding of what they decode to")
    return value


def split_sequence(buf: bytes, check: str, allow_torn: bool = False) -> tuple[list[bytes], bytes]:
    """An RFC 8742 sequence cut into items; with allow_torn, a trailing torn tail is returned apart."""
    items: list[bytes] = []
    off = 0
    while off < len(buf):
        try:
            end = _scan(buf, off)
        except _Incomplete:
            tail = buf[off:]
            if allow_torn and tail[:1] == b"\xa9" and len(tail) < MAX_ENTRY:
                return items, tail
            raise Failure(check, f"item at offset {off} is cut short") from None
        except Failure as exc:
            raise Failure(check, f"at offset {off}: {exc}") from None
        items.append(buf[off:end])
        off = end
    return items, b""


# ---------------------------------------------------------------- hashes and the tree (format.md §2, §3)


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def leaf_hash(entry: bytes) -> bytes:
    return sha256(b"\x00" + entry)


def node_hash(left: bytes, right: bytes) -> bytes:
    return sha256(b"\x01" + left + right)


def mth(leaves: Sequence[bytes]) -> bytes:
    if not leaves:
        return sha256(b"")
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return node_hash(mth(leaves[:k]), mth(leaves[k:]))


def roots_at(leaves: Sequence[bytes], sizes: Iterable[int]) -> dict[int, bytes]:
    """MTH(D[0:n]) for every wanted n, in one pass over the leaves (a stack of perfect subtrees)."""
    wanted = set(sizes)
    out: dict[int, bytes] = {}
    if 0 in wanted:
        out[0] = sha256(b"")
    stack: list[tuple[int, bytes]] = []
    for i, leaf in enumerate(leaves):
        h, size = leaf, 1
        while stack and stack[-1][0] == size:
            h = node_hash(stack.pop()[1], h)
            size *= 2
        stack.append((size, h))
        if i + 1 in wanted:
            acc = stack[-1][1]
            for _, left in reversed(stack[:-1]):
                acc = node_hash(left, acc)
            out[i + 1] = acc
    return out


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> bool:
    """RFC 9162 §2.1.3.2."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if len(p) != 32 or sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(m: int, n: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> bool:
    """RFC 9162 §2.1.4.2 (format.md §3: m = 0 refused, m = n needs an empty proof)."""
    if m <= 0 or m > n:
        return False
    if m == n:
        return not proof and old_root == new_root
    path = list(proof)
    if m & (m - 1) == 0:  # m a power of two: the old root is the first node
        path.insert(0, old_root)
    if not path or any(len(p) != 32 for p in path):
        return False
    fn, sn = m - 1, n - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root


# ---------------------------------------------------------------- keys and notes (format.md §4, §5, §12)


def valid_key_name(name: object) -> bool:
    return (
        isinstance(name, str)
        and 0 < len(name) <= 256
        and "+" not in name
        and not any(c.isspace() for c in name)
    )


def note_key_hash(name: str, key_type: int, public_key: bytes) -> bytes:
    return sha256(name.encode() + b"\n" + bytes([key_type]) + public_key)[:4]


def key_id(public_key: bytes) -> bytes:
    return sha256(public_key)[:8]


def _b64(text: str, what: str, check: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        raise Failure(check, f"{what} is not base64: {text!r}") from None
    if base64.b64encode(raw).decode() != text:
        raise Failure(check, f"{what} is not canonical base64: {text!r}")
    return raw


@dataclass(frozen=True)
class VerifierKey:
    name: str
    key_type: int
    public_key: bytes

    @property
    def text(self) -> str:
        h = note_key_hash(self.name, self.key_type, self.public_key).hex()
        return f"{self.name}+{h}+{base64.b64encode(bytes([self.key_type]) + self.public_key).decode()}"


def parse_vkey(text: str, types: tuple[int, ...] = (1,)) -> VerifierKey:
    """A Go note verifier key, split at its first two '+' (format.md §5)."""
    parts = text.strip().split("+", 2)
    if len(parts) != 3 or not valid_key_name(parts[0]):
        raise Failure("usage.key", f"not a verifier key: {text!r}")
    name, hash_hex, b64 = parts
    if not re.fullmatch(r"[0-9a-fA-F]{8}", hash_hex):
        raise Failure("usage.key", f"key hash {hash_hex!r} is not 8 hex digits")
    raw = _b64(b64, "key", "usage.key")
    if len(raw) != 33 or raw[0] not in types:
        raise Failure("usage.key", f"key must be 33 bytes starting with one of {types}")
    key = VerifierKey(name, raw[0], raw[1:])
    if note_key_hash(name, raw[0], raw[1:]) != bytes.fromhex(hash_hex):
        raise Failure("usage.key", f"key hash {hash_hex} does not match name and key")
    return key


def ed25519_ok(public_key: bytes, message: bytes, signature: bytes) -> bool:
    try:
        VerifyKey(public_key).verify(message, signature)
    except (BadSignatureError, ValueError, TypeError):
        return False
    return True


@dataclass(frozen=True)
class SignatureLine:
    name: str
    raw: bytes


@dataclass(frozen=True)
class Note:
    text: bytes
    lines: tuple[SignatureLine, ...]


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    note: Note


def parse_note(raw: bytes, check: str) -> Note:
    """A C2SP signed note (format.md §4): text, a blank line, at most 100 signature lines."""
    if len(raw) > 64 * 1024:
        raise Failure(check, f"note of {len(raw)} bytes is above 64 KiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Failure(check, "note is not UTF-8") from None
    if any(unicodedata.category(c) == "Cc" and c != "\n" for c in text):
        raise Failure(check, "note holds a control character")
    cut = text.rfind("\n\n")
    if cut < 0:
        raise Failure(check, "note has no blank line before its signatures")
    body, sigs = text[: cut + 1], text[cut + 2 :]
    if not sigs.endswith("\n"):
        raise Failure(check, "signature block does not end in a newline")
    lines = []
    for line in sigs[:-1].split("\n"):
        if not line.startswith(EM_DASH_PREFIX):
            raise Failure(check, f"signature line {line!r} does not start with an em dash and a space")
        name, sep, b64 = line[len(EM_DASH_PREFIX) :].partition(" ")
        if not sep or not valid_key_name(name) or " " in b64:
            raise Failure(check, f"malformed signature line {line!r}")
        sig = _b64(b64, "signature", check)
        if len(sig) < 5:
            raise Failure(check, f"signature line {line!r} is too short")
        lines.append(SignatureLine(name, sig))
    if not lines:
        raise Failure(check, "note carries no signature")
    if len(lines) > 100:
        raise Failure(check, f"note carries {len(lines)} signature lines, above 100")
    return Note(body.encode(), tuple(lines))


def parse_checkpoint(raw: bytes, check: str = "checkpoint.decode") -> Checkpoint:
    note = parse_note(raw, check)
    body = note.text.decode()
    parts = body.split("\n")
    if len(parts) != 4 or parts[3] != "":
        raise Failure(check, f"checkpoint body has {len(parts) - 1} lines, not 3")
    origin, size_text, root_text = parts[:3]
    if not ORIGIN_RE.match(origin):
        raise Failure(check, f"origin {origin!r} is not mnemolog/<32 lowercase hex>")
    if not SIZE_RE.match(size_text):
        raise Failure(check, f"tree size {size_text!r} is not a plain decimal")
    if len(root_text) != 44:
        raise Failure(check, f"root {root_text!r} is not 44 base64 characters")
    root = _b64(root_text, "root", check)
    return Checkpoint(origin, int(size_text), root, note)


def check_note_signature(note: Note, name: str, public_key: bytes, prefix: str) -> None:
    """format.md §4: the first line with the key's name and hash must verify."""
    want = note_key_hash(name, 1, public_key)
    for line in note.lines:
        if line.name == name and line.raw[:4] == want:
            if len(line.raw) != 68 or not ed25519_ok(public_key, note.text, line.raw[4:]):
                raise Failure(f"{prefix}.signature", f"signature line of {name} does not verify")
            return
    raise Failure(f"{prefix}.signer", f"no signature line by {name} ({want.hex()})")


@dataclass
class CosignatureReport:
    witnesses: list[dict[str, Any]]
    distinct: int


def check_cosignatures(
    checkpoint: Checkpoint, witness_keys: Sequence[str], min_witnesses: int | None = None
) -> CosignatureReport:
    """format.md §12 and forensics.md §10: cosignatures by N distinct given witnesses."""
    keys = [parse_vkey(k, types=(1, 4)) for k in witness_keys]
    distinct_keys = {k.public_key for k in keys}
    need = len(distinct_keys) if min_witnesses is None else min_witnesses
    if need > len(distinct_keys):
        raise Failure("usage.min_witnesses", f"{need} witnesses asked of {len(distinct_keys)} keys")
    signed: set[bytes] = set()
    seen = []
    for key in keys:
        want = note_key_hash(key.name, 4, key.public_key)
        for line in checkpoint.note.lines:
            if line.name != key.name or line.raw[:4] != want:
                continue
            if len(line.raw) != 76:  # the witness's name and hash: it must verify, so be 76 bytes
                raise Failure("witness.signature", f"{key.name}: a {len(line.raw)}-byte cosignature line")
            stamp = int.from_bytes(line.raw[4:12], "big")
            if stamp >= 1 << 63:
                raise Failure("witness.signature", f"{key.name}: timestamp {stamp} above 2^63 - 1")
            message = b"cosignature/v1\ntime " + str(stamp).encode() + b"\n" + checkpoint.note.text
            if not ed25519_ok(key.public_key, message, line.raw[12:]):
                raise Failure("witness.signature", f"cosignature by {key.name} does not verify")
            signed.add(key.public_key)
            seen.append({"name": key.name, "timestamp": stamp})
    if len(signed) < need:
        raise Failure("witness.quorum", f"{len(signed)} of the given witnesses cosigned, {need} required")
    return CosignatureReport(seen, len(signed))


# ---------------------------------------------------------------- entries and the key history (§2, §6)


@dataclass(frozen=True)
class Entry:
    raw: bytes
    value: dict[str, Any]
    leaf: bytes

    @property
    def seq(self) -> int:
        return int(self.value["seq"])

    @property
    def type(self) -> str:
        return str(self.value["type"])

    @property
    def data(self) -> dict[str, Any]:
        data: dict[str, Any] = self.value["data"]
        return data


def _uint(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 64


def _bytes(v: object, n: int | None = None) -> bool:
    return isinstance(v, bytes) and (n is None or len(v) == n)


def decode_entry(raw: bytes, where: int | None = None) -> Entry:
    """One entry's bytes: canonical (§1), exactly the nine keys with their types (§2)."""
    if len(raw) >= MAX_ENTRY:
        raise Failure("entry.decode", f"entry of {len(raw)} bytes is not below 4 MiB", where)
    try:
        value = decode_canonical(raw, "entry.decode")
    except Failure as exc:
        check = "entry.canonical" if "canonical encoding" in str(exc) else "entry.decode"
        raise Failure(check, str(exc), where) from None
    if not isinstance(value, dict) or sorted(value) != sorted(ENTRY_KEYS):
        raise Failure("entry.decode", "not a map of exactly the nine entry keys", where)
    ok = (
        value["v"] == 1
        and _uint(value["v"])
        and _uint(value["ts"])
        and _uint(value["tv"])
        and _bytes(value["kid"], 8)
        and _uint(value["seq"])
        and _bytes(value["sig"], 64)
        and isinstance(value["data"], dict)
        and _bytes(value["prev"], 32)
        and isinstance(value["type"], str)
        and len(value["type"]) <= 64
        and TYPE_RE.match(value["type"]) is not None
    )
    if not ok:
        raise Failure("entry.decode", "a field has the wrong type or value", where)
    return Entry(raw, value, leaf_hash(raw))


def to_be_signed(entry: Entry) -> bytes:
    return ENTRY_TAG + encode({k: v for k, v in entry.value.items() if k != "sig"})


def to_be_signed_cut(raw: bytes) -> bytes:
    """The shortcut of format.md §2: a8, and the 70-byte sig pair cut out after the seq pair."""
    value = cbor2.loads(raw)
    start = 27 + len(_head(0, value["ts"])) + len(_head(0, value["tv"])) + len(_head(0, value["seq"]))
    return ENTRY_TAG + b"\xa8" + raw[1:start] + raw[start + 70 :]


@dataclass(frozen=True)
class Epoch:
    start: int  # the first seq this key signs
    event_seq: int
    name: str
    public_key: bytes

    @property
    def kid(self) -> bytes:
        return key_id(self.public_key)


@dataclass
class KeyHistory:
    log_id: bytes
    epochs: list[Epoch] = field(default_factory=list)

    @property
    def origin(self) -> str:
        return "mnemolog/" + self.log_id.hex()

    def at(self, seq: int) -> Epoch:
        """The key of the latest epoch beginning at or before seq (§6)."""
        starts = [e.start for e in self.epochs]
        return self.epochs[bisect.bisect_right(starts, seq) - 1]


def genesis_history(entry: Entry) -> KeyHistory:
    d = entry.data
    if entry.seq != 0 or entry.type != "log.created":
        raise Failure("genesis.type", f"entry 0 is {entry.type}, not log.created", entry.seq)
    if entry.value["prev"] != ZERO32:
        raise Failure("entry.prev", "genesis prev is not 32 zero bytes", 0)
    ok = (
        entry.value["tv"] == 1
        and _bytes(d.get("log_id"), 16)
        and _bytes(d.get("public_key"), 32)
        and valid_key_name(d.get("key_name"))
    )  # created_at is informational: neither its presence nor its type is checked (§6)
    if not ok:
        raise Failure("genesis.data", "log.created payload is not well formed", 0)
    return KeyHistory(d["log_id"], [Epoch(0, 0, d["key_name"], d["public_key"])])


def apply_key_event(history: KeyHistory, entry: Entry) -> None:
    if entry.type == "log.created":
        raise Failure("genesis.repeated", "a second log.created", entry.seq)
    if entry.type != "key.rotated":
        return
    d = entry.data
    ok = (
        entry.value["tv"] == 1 and _bytes(d.get("public_key"), 32) and valid_key_name(d.get("key_name"))
    )  # rotated_at is informational, like created_at (§6)
    if not ok:
        raise Failure("key.rotated", "key.rotated payload is not well formed", entry.seq)
    if d["public_key"] == history.at(entry.seq).public_key:
        raise Failure("key.rotated", "rotation to the key already in use", entry.seq)
    history.epochs.append(Epoch(entry.seq + 1, entry.seq, d["key_name"], d["public_key"]))


def check_signed(entry: Entry, history: KeyHistory) -> None:
    epoch = history.at(entry.seq)
    if entry.value["kid"] != epoch.kid:
        raise Failure("entry.kid", f"kid {entry.value['kid'].hex()} is not {epoch.kid.hex()}", entry.seq)
    if not ed25519_ok(epoch.public_key, to_be_signed(entry), entry.value["sig"]):
        raise Failure("entry.signature", "signature does not verify", entry.seq)


# ---------------------------------------------------------------- sealed content (format.md §17)

# type -> (sealed from tv, key field, sealed fields)
SEALED: dict[str, tuple[int, str, tuple[str, ...]]] = {
    "memory.stored": (4, "id", ("title", "content", "tags", "metadata", "source")),
    "memory.updated": (4, "id", ("title", "content", "tags", "metadata", "source")),
    "interaction.captured": (2, "id", ("prompt", "response")),
    "candidate.extracted": (2, "interaction_id", ("candidates", "responses", "warnings")),
    "extraction.failed": (2, "interaction_id", ("responses", "warnings")),
    "candidate.triaged": (3, "id", ("responses", "warnings")),
    "triage.failed": (2, "id", ("responses", "warnings")),
    "atomisation.completed": (3, "source_id", ("responses", "dropped", "warnings")),
    "document.ingested": (2, "document_id", ("chunks",)),
    "context.built": (2, "pack_id", ("query",)),
}
SEAL_AD = b"mnemolog/sealed/v1"
DATAKEYS_FORMAT = "mnemolog/data-keys/v1"
KEY_ID_RE = re.compile(r"^[0-9a-f]{32}$")


def read_datakeys(
    raw: bytes, check: str = "datakeys.decode", log_id: bytes | None = None, whole: bool = False
) -> dict[str, bytes]:
    """A data-key file: a header map, then [key id, 32-byte key] records; the first of an id wins,
    a last record cut short is ignored, except in a bundle's file (`whole`), written in one piece
    (format.md §17)."""
    items: list[bytes] = []
    off = 0
    while off < len(raw):
        try:
            end = _scan(raw, off)
        except _Incomplete:
            if whole:
                raise Failure(check, f"a record cut short at offset {off}") from None
            break
        except Failure as exc:
            raise Failure(check, f"at offset {off}: {exc}") from None
        items.append(raw[off:end])
        off = end
    if not items:
        raise Failure(check, "no header")
    header = cbor2.loads(items[0])
    if (
        not isinstance(header, dict)
        or header.get("format") != DATAKEYS_FORMAT
        or not set(header)
        <= {
            "format",
            "log_id",
        }
    ):
        raise Failure(check, "the header is not a mnemolog/data-keys/v1 map")
    if log_id is not None and "log_id" in header and header["log_id"] != log_id:
        raise Failure(check, "the key file is another log's")
    keys: dict[str, bytes] = {}
    for item in items[1:]:
        rec = cbor2.loads(item)
        if (
            not isinstance(rec, list)
            or len(rec) != 2
            or not isinstance(rec[0], str)
            or KEY_ID_RE.match(rec[0]) is None
            or not _bytes(rec[1], 32)
        ):
            raise Failure(check, f"a key record is not [id, 32 bytes]: {rec!r:.60}")
        keys.setdefault(rec[0], rec[1])
    return keys


def open_box(sealed: object, etype: str, subject: str, keys: dict[str, bytes]) -> dict[str, Any] | None:
    """The fields a `sealed` map holds, or None when it does not open (§17 "Opening")."""
    if not isinstance(sealed, dict) or set(sealed) != {"key", "fields", "box"}:
        return None
    kid, names, box = sealed["key"], sealed["fields"], sealed["box"]
    if not isinstance(kid, str) or not isinstance(names, list) or not all(isinstance(f, str) for f in names):
        return None
    if not isinstance(box, bytes) or len(box) < 40 or kid not in keys or not subject:
        return None
    ad = SEAL_AD + b"\x00" + etype.encode() + b"\x00" + subject.encode() + b"\x00"
    ad += ",".join(names).encode()  # the list as written (sorted by the writer), never re-sorted
    try:
        plain = crypto_aead_xchacha20poly1305_ietf_decrypt(box[24:], ad, box[:24], keys[kid])
    except (CryptoError, ValueError, TypeError):
        return None
    try:
        value = decode_canonical(plain, "sealed.decode")
    except Failure:
        return None
    if not isinstance(value, dict) or sorted(value) != sorted(names):
        return None
    return value


def _sealed_names(sealed: object) -> list[str]:
    names = sealed.get("fields") if isinstance(sealed, dict) else None
    return sorted(f for f in names if isinstance(f, str)) if isinstance(names, list) else []


def _chunk_document(chunk_id: str) -> str:
    return chunk_id.rsplit("/", 2)[0] if chunk_id.count("/") >= 2 else ""


def open_payload(e: Entry, keys: dict[str, bytes]) -> tuple[dict[str, Any], list[str]]:
    """The payload with its sealed fields put back where a key opens them, and the fields left
    sealed (whose `sealed` then is their sorted list)."""
    rule = SEALED.get(e.type)
    d = e.data
    if rule is None or e.value["tv"] < rule[0]:
        return d, []
    out = dict(d)
    left: list[str] = []
    subject = d.get(rule[1])
    if "sealed" in d:
        opened = open_box(d["sealed"], e.type, subject, keys) if isinstance(subject, str) else None
        if opened is None:
            left = _sealed_names(d["sealed"])
            out["sealed"] = left
        else:
            del out["sealed"]
            out.update(opened)
    if e.type == "context.built" and isinstance(d.get("tiers"), list):
        pack = subject if isinstance(subject, str) else ""
        tiers = []
        for t in d["tiers"]:
            if not isinstance(t, dict) or not isinstance(t.get("included"), list):
                tiers.append(t)
                continue
            inc = []
            for quoted in t["included"]:
                x = quoted
                if isinstance(x, dict) and "sealed" in x:
                    src, xid = x.get("source"), x.get("id")
                    sub = (
                        (xid if src == "memory" else _chunk_document(xid) if src == "chunk" else pack)
                        if isinstance(xid, str)
                        else ""
                    )
                    got = open_box(x["sealed"], e.type, sub, keys)
                    x = dict(x)
                    if got is None:
                        x["sealed"] = _sealed_names(x["sealed"])
                    else:
                        del x["sealed"]
                        x.update(got)
                inc.append(x)
            tiers.append({**t, "included": inc})
        out["tiers"] = tiers
    return out, left


ERASED_KEYS = {"ids", "interactions", "documents", "subjects", "keys", "reason", "requested_by", "selector"}


def check_erased(e: Entry) -> None:
    """A `memory.erased` entry as format.md §17 defines it: ids (1 to 500), the other subjects,
    `subjects` all of them, the destroyed key ids; never content."""
    d = e.data

    def texts(name: str) -> list[str]:
        v = d.get(name, [])
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            raise Failure("erased.shape", f"{name} is not a list of ids", e.seq)
        return v

    extra = set(d) - ERASED_KEYS - {"touch_prev"}
    if extra:
        raise Failure("erased.shape", f"fields {sorted(extra)} in a memory.erased", e.seq)
    ids = texts("ids")
    if not 1 <= len(ids) <= 500:
        raise Failure("erased.shape", f"{len(ids)} ids (1 to 500 expected)", e.seq)
    if set(texts("subjects")) != set(ids) | set(texts("interactions")) | set(texts("documents")):
        raise Failure("erased.shape", "subjects is not ids, interactions and documents", e.seq)
    if not all(KEY_ID_RE.match(k) for k in texts("keys")):
        raise Failure("erased.shape", "a destroyed key id is not 32 hex digits", e.seq)
    if "selector" in d and not isinstance(d["selector"], dict):
        raise Failure("erased.shape", "selector is not a map", e.seq)
    for name in ("reason", "requested_by"):
        if d.get(name) is not None and not isinstance(d[name], str):
            raise Failure("erased.shape", f"{name} is not text", e.seq)


def opened(entries: Sequence[Entry], keys: dict[str, bytes]) -> list[Entry]:
    """The entries with their payloads opened (the raw bytes and leaf stay the signed ones)."""
    out = []
    for e in entries:
        data, _ = open_payload(e, keys)
        out.append(e if data is e.data else Entry(e.raw, {**e.value, "data": data}, e.leaf))
    return out


# ---------------------------------------------------------------- touches, back-chains, heads (§13, §14)

# format.md §14: type -> (first tv with touch_prev or None, single-id fields, list fields).
TOUCHES: dict[str, tuple[int | None, tuple[str, ...], tuple[str, ...]]] = {
    "atomisation.completed": (2, ("source_id",), ("atom_ids",)),
    "atomisation.failed": (2, ("source_id",), ()),
    "atomisation.requested": (2, ("source_id",), ()),
    "candidate.extracted": (1, ("interaction_id",), ("candidate_ids",)),
    "candidate.triaged": (1, ("id", "conflicts_with", "duplicate_of"), ()),
    "context.built": (1, (), ("memory_ids",)),
    "extraction.failed": (1, ("interaction_id",), ()),
    "interaction.captured": (1, ("id",), ()),
    "link.created": (2, ("src", "dst"), ()),
    "link.removed": (1, ("src", "dst"), ()),
    "memory.archived": (2, ("id",), ()),
    "memory.erased": (1, (), ("ids", "interactions")),
    "memory.promoted": (1, ("id",), ()),
    "memory.reinforced": (1, ("id",), ()),
    "memory.reinstated": (1, ("id",), ()),
    "memory.rejected": (1, ("id",), ()),
    "memory.restored": (2, ("id",), ()),
    "memory.stored": (2, ("id", "atom_of"), ()),
    "memory.superseded": (1, ("id", "superseded_by"), ()),
    "memory.updated": (2, ("id",), ()),
    "migration.rolled_back": (2, (), ("memory_ids",)),
    "triage.failed": (1, ("id",), ()),
}


def touched_ids(entry: Entry) -> list[str]:
    """§14's rule. No upcaster of the table changes an id field, so the raw payload gives the ids."""
    rule = TOUCHES.get(entry.type)
    if rule is None:
        return []
    _, singles, lists = rule
    out: list[str] = []
    for f in singles:
        v = entry.data.get(f)
        if isinstance(v, str) and v and v not in out:
            out.append(v)
    for f in lists:
        vs = entry.data.get(f)
        if isinstance(vs, list):
            for v in vs:
                if isinstance(v, str) and v and v not in out:
                    out.append(v)
    return out


def carries_pointers(entry: Entry) -> bool:
    rule = TOUCHES.get(entry.type)
    return rule is not None and rule[0] is not None and entry.value["tv"] >= rule[0]


def pointer(entry: Entry, memory_id: str) -> int | None:
    """The entry's touch_prev for memory_id, or None when it makes no claim.

    A touch_prev that is not a map, and a value that is not an integer from -1 up, are read
    as left out (format.md §13): no claim, so never a false one.
    """
    if not carries_pointers(entry):
        return None
    tp = entry.data.get("touch_prev")
    if not isinstance(tp, dict):
        return None
    v = tp.get(memory_id)
    if not isinstance(v, int) or isinstance(v, bool) or not -1 <= v < 1 << 63:
        return None
    return v


def heads_key(memory_id: str) -> bytes:
    return sha256(memory_id.encode("utf-8"))


def heads_leaf(memory_id: str, head: int) -> bytes:
    return sha256(b"\x00" + heads_key(memory_id) + encode([memory_id, head]))


def _bit(k: bytes, d: int) -> int:
    return (k[d // 8] >> (7 - d % 8)) & 1


def heads_root(heads: dict[str, int]) -> bytes:
    """The compact sparse Merkle tree of format.md §13."""

    def t(items: list[tuple[bytes, str, int]], d: int) -> bytes:
        if not items:
            return ZERO32
        if len(items) == 1:
            return heads_leaf(items[0][1], items[0][2])
        return node_hash(
            t([i for i in items if not _bit(i[0], d)], d + 1), t([i for i in items if _bit(i[0], d)], d + 1)
        )

    return t([(heads_key(m), m, h) for m, h in heads.items()], 0)


def heads_proof_root(proof: object, check: str = "heads.proof") -> tuple[str, int | None, bytes]:
    """Rebuild the root from one heads proof `[m, head|null, [siblings], other|null, other head|null]`."""
    if not isinstance(proof, list) or len(proof) != 5:
        raise Failure(check, f"heads proof is not a five-element array: {proof!r}")
    m, head, siblings, other, other_head = proof
    if not isinstance(m, str) or not isinstance(siblings, list) or not all(_bytes(s, 32) for s in siblings):
        raise Failure(check, f"malformed heads proof for {m!r}")
    k = heads_key(m)
    depth = len(siblings)
    if depth > 256:
        raise Failure(check, f"heads proof for {m} is deeper than 256")
    if head is not None:
        if not _uint(head) or other is not None or other_head is not None:
            raise Failure(check, f"heads proof for {m}: a head and another leaf")
        h = heads_leaf(m, head)
    elif other is None:
        if other_head is not None:
            raise Failure(check, f"heads proof for {m}: another head without another id")
        h = ZERO32
    else:
        if not isinstance(other, str) or other == m or not _uint(other_head):
            raise Failure(check, f"heads proof for {m}: malformed other leaf")
        ko = heads_key(other)
        if any(_bit(ko, d) != _bit(k, d) for d in range(depth)):
            raise Failure(check, f"heads proof for {m}: {other} does not share its path")
        h = heads_leaf(other, other_head)
    for d in range(depth - 1, -1, -1):
        h = node_hash(siblings[d], h) if _bit(k, d) else node_hash(h, siblings[d])
    return m, head, h


# ---------------------------------------------------------------- a log on disk (format.md §7, §8)


@dataclass
class LogReport:
    size: int
    origin: str
    checkpoints: list[int]
    torn_tail: int
    anchor: str
    epochs: list[dict[str, Any]]
    pointers_checked: int = 0
    pointers_missing: int = 0
    heads_commitments_checked: int = 0
    high_water: list[int] = field(default_factory=list)
    witnesses: list[dict[str, Any]] = field(default_factory=list)
    erasures: list[int] = field(default_factory=list)
    migrated_from: dict[str, Any] | None = None


def check_migrated_from(genesis: Entry) -> dict[str, Any] | None:
    """format.md §17, a migrated log: the old checkpoint under `vkey`, of the old log's origin,
    and the old key's hand-off signature over the new log id and genesis key."""
    mf = genesis.data.get("migrated_from")
    if mf is None:
        return None
    check = "migration.provenance"
    if not isinstance(mf, dict) or not _bytes(mf.get("log_id"), 16) or not _bytes(mf.get("handoff"), 64):
        raise Failure(check, "migrated_from is not a map with log_id (16 bytes) and handoff (64 bytes)", 0)
    if not isinstance(mf.get("vkey"), str) or not _bytes(mf.get("checkpoint")):
        raise Failure(check, "migrated_from lacks vkey (text) or checkpoint (bytes)", 0)
    try:
        key = parse_vkey(mf["vkey"])
        cp = parse_checkpoint(mf["checkpoint"], check)
        check_note_signature(cp.note, key.name, key.public_key, check)
    except Failure as exc:
        raise Failure(check, f"migrated_from: {exc}", 0) from None
    if cp.origin != "mnemolog/" + mf["log_id"].hex():
        raise Failure(check, f"the old checkpoint's origin {cp.origin} is not the old log's", 0)
    message = (
        b"mnemolog/log-migrated/v1\x00"
        + mf["log_id"]
        + struct.pack(">Q", cp.size)
        + cp.root
        + genesis.data["log_id"]
        + genesis.data["public_key"]
    )
    if not ed25519_ok(key.public_key, message, mf["handoff"]):
        raise Failure(check, "the hand-off is not signed by the old key", 0)
    return {"log_id": mf["log_id"].hex(), "size": cp.size, "root": cp.root.hex(), "vkey": mf["vkey"]}


def read_entries(log_dir: Path) -> tuple[list[Entry], int]:
    """The segments, in order, cut into entries (§7; §8 items 1-3). Returns the torn tail's length."""
    segments = sorted((p for p in log_dir.iterdir() if SEGMENT_RE.match(p.name)), key=lambda p: p.name)
    if not segments:
        raise Failure("segments.none", f"no segment in {log_dir}")
    if segments[0].name != "0" * 20 + ".seg":
        raise Failure("segments.name", f"first segment is {segments[0].name}")
    entries: list[Entry] = []
    torn = b""
    for i, path in enumerate(segments):
        first = int(path.name[:20])
        if first != len(entries):
            raise Failure("segments.name", f"{path.name} does not start at seq {len(entries)}", len(entries))
        last = i == len(segments) - 1
        raw = path.read_bytes()
        if not raw and not last:
            raise Failure("segments.empty", f"{path.name} is empty and not last", first)
        items, torn = split_sequence(raw, "entry.decode", allow_torn=last)
        for item in items:
            entries.append(decode_entry(item, len(entries)))
    return entries, len(torn)


def index_disagreements(log_dir: Path, entries: Sequence[Entry]) -> list[str]:
    """Where index/ (format.md §7, non-normative) disagrees with the segments; [] when it agrees.

    Verification never trusts the index; this only tells whether its layout is as documented:
    `loc` 20-byte records, `tree-LL` the complete level-LL nodes, `keys` the key events' seqs.
    """
    index = log_dir / "index"
    out: list[str] = []
    segments = sorted(p for p in log_dir.iterdir() if SEGMENT_RE.match(p.name))
    starts = [int(p.name[:20]) for p in segments]
    loc = (index / "loc").read_bytes() if (index / "loc").exists() else b""
    if len(loc) != 20 * len(entries):
        out.append(f"loc holds {len(loc) / 20} records for {len(entries)} entries")
    for e in entries[: len(loc) // 20]:
        first, offset, length = struct.unpack(">QQI", loc[20 * e.seq : 20 * e.seq + 20])
        if first not in starts:
            out.append(f"loc[{e.seq}] names segment {first}")
            continue
        seg = segments[starts.index(first)].read_bytes()
        if seg[offset : offset + length] != e.raw:
            out.append(f"loc[{e.seq}] = ({first}, {offset}, {length}) is not the entry's bytes")
    level, nodes = 0, [e.leaf for e in entries]
    while nodes:
        path = index / f"tree-{level:02d}"
        raw = path.read_bytes() if path.exists() else b""
        if raw != b"".join(nodes):
            out.append(f"{path.name} holds {len(raw) // 32} nodes, not the {len(nodes)} complete ones")
        nodes = [node_hash(nodes[i], nodes[i + 1]) for i in range(0, len(nodes) - 1, 2)]
        level += 1
    if (index / f"tree-{level:02d}").exists():
        out.append(f"tree-{level:02d} exists for a level with no complete node")
    keys = (index / "keys").read_bytes() if (index / "keys").exists() else b""
    want = b"".join(struct.pack(">Q", e.seq) for e in entries if e.type in ("log.created", "key.rotated"))
    if keys != want:
        out.append("keys is not the seqs of the key events")
    return out


def check_chain(entries: Sequence[Entry]) -> KeyHistory:
    """§8 items 3-5: seq, prev, genesis, the key schedule, canonical bytes, kids, signatures."""
    prev = ZERO32
    history: KeyHistory | None = None
    for i, e in enumerate(entries):
        if e.seq != i:
            raise Failure("entry.seq", f"seq {e.seq} at position {i}", i)
        if e.value["prev"] != prev:
            raise Failure("entry.prev", "prev is not the previous leaf hash", i)
        if history is None:
            history = genesis_history(e)
        else:
            apply_key_event(history, e)
        # A rotation at seq r is signed by the epoch it ends, which at(r) still names.
        check_signed(e, history)
        prev = e.leaf
    if history is None:
        raise Failure("segments.none", "the log holds no entry")
    return history


def check_checkpoint_against(
    cp: Checkpoint, history: KeyHistory, roots: dict[int, bytes], count: int, prefix: str
) -> None:
    if cp.origin != history.origin:
        raise Failure(f"{prefix}.origin", f"origin {cp.origin} is not {history.origin}")
    if cp.size > count:
        check = "log.truncated" if prefix == "checkpoint" else "high_water.size"
        raise Failure(check, f"checkpoint of size {cp.size} and only {count} entries", count)
    epoch = history.at(cp.size)
    check_note_signature(cp.note, epoch.name, epoch.public_key, prefix)
    if roots[cp.size] != cp.root:
        raise Failure(f"{prefix}.root", f"root at size {cp.size} is not the checkpoint's", cp.size)


def check_backchains(entries: Sequence[Entry], report: LogReport) -> None:
    """§8 item 11: every touch_prev pointer and every heads.committed commitment."""
    touches: dict[str, list[int]] = {}
    for e in entries:
        ids = touched_ids(e)
        for m in ids:
            p = pointer(e, m)
            if carries_pointers(e):
                if p is None:
                    report.pointers_missing += 1
                else:
                    want = touches[m][-1] if m in touches else -1
                    if p != want:
                        raise Failure(
                            "backchain.pointer", f"data.touch_prev[{m}]: expected {want}, found {p}", e.seq
                        )
                    report.pointers_checked += 1
        if e.type == "heads.committed":
            check_commitment(e, touches)
            report.heads_commitments_checked += 1
        for m in ids:
            touches.setdefault(m, []).append(e.seq)


def heads_below(touches: dict[str, list[int]], size: int) -> dict[str, int]:
    out = {}
    for m, seqs in touches.items():
        i = bisect.bisect_left(seqs, size)
        if i:
            out[m] = seqs[i - 1]
    return out


def check_commitment(e: Entry, touches: dict[str, list[int]]) -> None:
    d = e.data
    size, root, count = d.get("size"), d.get("root"), d.get("count")
    if not _uint(size) or size > e.seq or not _bytes(root) or not _uint(count):
        raise Failure("heads.committed", f"malformed commitment {d!r}", e.seq)
    heads = heads_below(touches, size)
    if count != len(heads):
        raise Failure("heads.committed", f"data.count: expected {len(heads)}, found {count}", e.seq)
    want = heads_root(heads)
    if root != want:
        raise Failure("heads.committed", f"data.root: expected {want.hex()}, found {root.hex()}", e.seq)


def verify_log(
    log_dir: Path,
    *,
    trusted_key: str | None = None,
    anchor_log_id: bytes | None = None,
    anchor_keys: Sequence[str] = (),
    high_water: Sequence[bytes] = (),
    witness_keys: Sequence[str] = (),
    min_witnesses: int | None = None,
) -> LogReport:
    """Full verification of a log directory (format.md §8), first failure raised."""
    entries, torn = read_entries(log_dir)
    history = check_chain(entries)
    count = len(entries)

    cp_dir = log_dir / "checkpoints"
    checkpoints: dict[int, Checkpoint] = {}
    names = sorted(p.name for p in cp_dir.iterdir()) if cp_dir.is_dir() else []
    for name in names:
        if name.startswith("."):
            continue
        if not CHECKPOINT_RE.match(name) or int(name) == 0:
            raise Failure("checkpoint.name", f"checkpoints/{name} is not named by a size")
        cp = parse_checkpoint((cp_dir / name).read_bytes())
        if cp.size != int(name):
            raise Failure("checkpoint.size", f"checkpoints/{name} states size {cp.size}")
        checkpoints[cp.size] = cp
    marks = [parse_checkpoint(m, "high_water.decode") for m in high_water]
    roots = roots_at([e.leaf for e in entries], [*checkpoints, *(m.size for m in marks if m.size <= count)])
    # The lowest-seq failure first: a checkpoint beyond the log is reported before others.
    for size in sorted(checkpoints):
        check_checkpoint_against(checkpoints[size], history, roots, count, "checkpoint")
    if count > 1 and not checkpoints:
        raise Failure("checkpoint.missing", "a log past its genesis entry without a checkpoint")
    for mark in marks:
        check_checkpoint_against(mark, history, roots, count, "high_water")

    anchor = trust(history, trusted_key, anchor_log_id, anchor_keys)
    report = LogReport(
        size=count,
        origin=history.origin,
        checkpoints=sorted(checkpoints),
        torn_tail=torn,
        anchor=anchor,
        epochs=[{"from_seq": e.start, "name": e.name, "kid": e.kid.hex()} for e in history.epochs],
        high_water=[m.size for m in marks],
    )
    check_backchains(entries, report)
    report.migrated_from = check_migrated_from(entries[0])
    for e in entries:
        if e.type == "memory.erased":
            check_erased(e)
            report.erasures.append(e.seq)
    if witness_keys:
        if count not in checkpoints:
            raise Failure("witness.unwitnessed", f"no checkpoint of size {count}")
        report.witnesses = check_cosignatures(checkpoints[count], witness_keys, min_witnesses).witnesses
    return report


def trust(
    history: KeyHistory, trusted_key: str | None, anchor_log_id: bytes | None, anchor_keys: Sequence[str]
) -> str:
    """§6 Trust: a pinned key, a home's anchor, or trust on first use."""
    if trusted_key is not None:
        key = parse_vkey(trusted_key)
        if not any(e.name == key.name and e.public_key == key.public_key for e in history.epochs):
            raise Failure("trust.key", f"{key.name} is not in the key history")
        return f"pinned key {key.name}"
    if anchor_log_id is not None:
        if history.log_id != anchor_log_id:
            raise Failure("trust.log_id", f"log id {history.log_id.hex()} is not {anchor_log_id.hex()}")
        genesis = history.epochs[0]
        held = [parse_vkey(k) for k in anchor_keys]
        if not any(k.name == genesis.name and k.public_key == genesis.public_key for k in held):
            raise Failure("trust.genesis_key", "the home holds no copy of the genesis key")
        return "home anchor"
    return "trust on first use"


def verify_home(home: Path, **kwargs: Any) -> LogReport:
    """A home's log under its own anchor (config.toml's log id, keys/*.pub) and its high-water mark."""
    config = tomllib.loads((home / "config.toml").read_text())
    log_id = bytes.fromhex(config["log"]["id"])
    keys = [p.read_text().strip() for p in sorted((home / "keys").glob("*.pub"))]
    marks = []
    state = home / "state" / "checkpoint"
    if not state.exists():
        raise Failure("high_water.missing", f"{state} does not exist")
    marks.append(state.read_bytes())
    return verify_log(home / "log", anchor_log_id=log_id, anchor_keys=keys, high_water=marks, **kwargs)


# ---------------------------------------------------------------- forensic bundles (forensics.md)

MANIFEST_KEYS = {
    "format", "log_id", "origin", "memory_id", "include_chain", "memories", "unstored", "tree_size",
    "root", "key_seqs", "seqs", "envelopes", "files", "kid", "sig",
}  # fmt: skip
V1_FILES = {
    "checkpoint", "keys.cbor", "entries.cbor", "proofs.cbor", "memories.json", "envelopes.json",
    "entries.parquet", "VERIFY.md",
}  # fmt: skip
FORMAT_FILES = {
    "mnemolog/forensic-bundle/v1": V1_FILES,
    "mnemolog/forensic-bundle/v2": V1_FILES | {"heads.cbor"},
    "mnemolog/forensic-bundle/v3": V1_FILES | {"heads.cbor", "touches.parquet"},
    "mnemolog/forensic-bundle/v4": V1_FILES | {"heads.cbor", "touches.parquet", "datakeys.cbor"},
}
COMPRESSED = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"PK\x03\x04": "zip",
}


def _octal(field_bytes: bytes, what: str) -> int:
    if field_bytes[:1] and field_bytes[0] & 0x80:  # GNU base-256
        return int.from_bytes(bytes([field_bytes[0] & 0x7F]) + field_bytes[1:], "big")
    text = field_bytes.split(b"\x00", 1)[0].strip(b" ")
    if not text:
        return 0
    if not re.fullmatch(rb"[0-7]+", text):
        raise Failure("archive.header", f"{what} field {field_bytes!r} is not octal")
    return int(text, 8)


def read_tar(raw: bytes) -> dict[str, bytes]:
    """forensics.md §5 item 1: a strict, flat ustar archive of regular files."""
    if len(raw) > (1 << 30) + 64 * 1024:
        raise Failure("archive.size", f"{len(raw)} bytes")
    for magic, kind in COMPRESSED.items():
        if raw.startswith(magic):
            raise Failure("archive.compressed", f"a {kind} file, not a tar")
    members: dict[str, bytes] = {}
    off, total = 0, 0
    while True:
        if off + 512 > len(raw):
            raise Failure("archive.truncated", "no end-of-archive marker")
        block = raw[off : off + 512]
        if block == b"\x00" * 512:
            if raw[off + 512 : off + 1024] != b"\x00" * 512 or len(raw) < off + 1024:
                raise Failure("archive.end", "one zero block, not two")
            if raw[off + 1024 :].strip(b"\x00"):
                raise Failure("archive.trailing", "non-zero bytes after the end marker")
            return members
        # Octal digits padded with NULs or spaces, as every numeric field; any other byte in the
        # field is damage. Historic tars summed signed bytes: either sum is taken.
        digits = block[148:156].rstrip(b"\x00 ").lstrip(b" ")
        if not re.fullmatch(rb"[0-7]+", digits):
            raise Failure("archive.checksum", f"checksum field {block[148:156]!r} at offset {off}")
        rest = block[:148] + block[156:]
        sums = (sum(rest) + 8 * 32, sum(b - 256 if b > 127 else b for b in rest) + 8 * 32)
        if int(digits, 8) not in sums:
            raise Failure("archive.checksum", f"header checksum at offset {off}")
        if block[257:263] != b"ustar\x00":
            raise Failure("archive.format", "not a POSIX ustar header")
        if block[156:157] not in (b"0", b"\x00"):
            raise Failure("archive.type", f"member type {block[156:157]!r} is not a regular file")
        name_raw = block[0:100].split(b"\x00", 1)[0]
        if block[345:500].strip(b"\x00"):
            raise Failure("archive.name", "a ustar prefix (a path)")
        try:
            name = name_raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Failure("archive.name", f"name {name_raw!r} is not UTF-8") from None
        if not name or "/" in name or name in (".", "..") or any(ord(c) < 32 or ord(c) == 127 for c in name):
            raise Failure("archive.name", f"name {name!r} is not flat")
        size = _octal(block[124:136], "size")
        total += size
        if size > 256 << 20 or total > 1 << 30:
            raise Failure("archive.size", f"member {name} of {size} bytes")
        if name in members:
            raise Failure("archive.duplicate", f"{name} twice")
        if len(members) >= 64:
            raise Failure("archive.members", "more than 64 members")
        start = off + 512
        if start + size > len(raw):
            raise Failure("archive.truncated", f"{name} runs past the end")
        members[name] = raw[start : start + size]
        off = start + (size + 511) // 512 * 512


@dataclass
class BundleReport:
    format: str
    memory_id: str
    memories: list[str]
    tree_size: int
    anchor: str
    seqs: list[int]
    complete_as_of: int | None = None
    uncovered_entries: int | None = None
    proven_from: dict[str, int] = field(default_factory=dict)
    witnesses: list[dict[str, Any]] = field(default_factory=list)
    packs: int = 0
    sealed: list[str] = field(default_factory=list)
    pack_gaps: dict[int, list[str]] = field(default_factory=dict)


def render_json(value: Any) -> bytes:
    """forensics.md §4: sorted keys, two-space indent, UTF-8, a final newline."""

    def hexed(v: Any) -> Any:
        if isinstance(v, bytes):
            return v.hex()
        if isinstance(v, dict):
            return {k: hexed(x) for k, x in v.items()}
        if isinstance(v, list):
            return [hexed(x) for x in v]
        return v

    return (json.dumps(hexed(value), sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def chain_closure(memory_id: str, entries: Sequence[Entry]) -> set[str]:
    """forensics.md §3: every id connected by atom_of, an atomisation.completed naming it, or a
    candidate.extracted (its interaction and each candidate)."""
    edges: dict[str, set[str]] = {}

    def link(a: str, b: str) -> None:
        edges.setdefault(a, set()).add(b)
        edges.setdefault(b, set()).add(a)

    for e in entries:
        if e.type == "memory.stored" and isinstance(e.data.get("atom_of"), str) and e.data["atom_of"]:
            link(e.data["id"], e.data["atom_of"])
        if e.type == "atomisation.completed" and isinstance(e.data.get("source_id"), str):
            for atom in e.data.get("atom_ids") or []:
                if isinstance(atom, str) and atom:
                    link(e.data["source_id"], atom)
        if e.type == "candidate.extracted" and isinstance(e.data.get("interaction_id"), str):
            for cand in e.data.get("candidate_ids") or []:
                if isinstance(cand, str) and cand:
                    link(e.data["interaction_id"], cand)
    seen, todo = {memory_id}, [memory_id]
    while todo:
        for n in edges.get(todo.pop(), ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def _texts(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _uints(v: object) -> bool:
    return isinstance(v, list) and all(_uint(x) for x in v)


def _hashes(v: object) -> bool:
    return isinstance(v, list) and all(_bytes(x, 32) for x in v)


def check_manifest_types(m: dict[str, Any]) -> None:
    """forensics.md §2: each manifest key has its type (before any of them is used)."""
    files_ok = isinstance(m["files"], list) and all(
        isinstance(f, dict)
        and set(f) == {"name", "size", "sha256"}
        and isinstance(f["name"], str)
        and _uint(f["size"])
        and _bytes(f["sha256"], 32)
        for f in m["files"]
    )
    ok = {
        "format": isinstance(m["format"], str),
        "log_id": _bytes(m["log_id"], 16),
        "origin": isinstance(m["origin"], str),
        "memory_id": isinstance(m["memory_id"], str),
        "include_chain": isinstance(m["include_chain"], bool),
        "memories": _texts(m["memories"]),
        "unstored": _texts(m["unstored"]),
        "tree_size": _uint(m["tree_size"]),
        "root": _bytes(m["root"], 32),
        "key_seqs": _uints(m["key_seqs"]),
        "seqs": _uints(m["seqs"]),
        "envelopes": isinstance(m["envelopes"], dict),
        "files": files_ok,
        "kid": _bytes(m["kid"], 8),
        "sig": _bytes(m["sig"], 64),
    }
    bad = sorted(k for k, v in ok.items() if not v)
    if bad:
        raise Failure("manifest.decode", f"manifest fields of the wrong type: {bad}")


def _proof_list(v: object) -> bool:
    return isinstance(v, list) and all(
        isinstance(p, list) and len(p) == 2 and _uint(p[0]) and _hashes(p[1]) for p in v
    )


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _iso(us: int) -> str:
    import datetime as dt

    t = dt.datetime.fromtimestamp(us // 1_000_000, dt.UTC).replace(microsecond=us % 1_000_000)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


TRANSITIONS = {  # docs/knowledge.md, "Statuses"
    "memory.promoted": ("candidate", "active"),
    "memory.rejected": ("candidate", "invalid"),
    "memory.superseded": ("active", "superseded"),
    "memory.reinstated": ("superseded", "active"),
}


def _span(v: object) -> list[int] | None:
    if isinstance(v, list) and v and all(_int(x) is not None for x in v):
        return list(v)
    return None


def _stored_view(e: Entry) -> tuple[dict[str, Any], dict[str, Any], bool]:
    d = e.data
    view = {
        "id": d["id"],
        "namespace": _str(d.get("namespace")) or "default",
        "kind": _str(d.get("kind")) or "observation",
        "title": _str(d.get("title")),
        "content": _str(d.get("content")) or "",
        "tags": [str(t) for t in d["tags"]] if isinstance(d.get("tags"), list) else [],
        "confidence": _num(d.get("confidence")),
        "source": _str(d.get("source")),
        "metadata": dict(d["metadata"]) if isinstance(d.get("metadata"), dict) else {},
        "created_at": _int(d.get("created_at")) or e.value["ts"],
        "updated_at": e.value["ts"],
        "last_seen": _int(d.get("last_seen")),
        "atom_of": _str(d.get("atom_of")) or None,
        "source_span": _span(d.get("source_span")),
        "atomised_into": None,
        "atomisation_archived_at": None,
        "archived_at": None,
        "archive_reason": None,
        "stored_seq": e.seq,
        "last_event_seq": e.seq,
        "atom_ids": [],
    }
    if _int(d.get("occurred_at")) is not None:  # only when the entry says when it happened
        view["occurred_at"] = _int(d.get("occurred_at"))
    block = {
        "status": "candidate" if d.get("status") == "candidate" else "active",
        "project": _str(d.get("project")) or "",
        "domains": list(d["domains"]) if isinstance(d.get("domains"), list) else [],
        "promoted_at": None,
        "reference_count": 0,
        "last_referenced_at": None,
    }
    return view, block, block["status"] == "candidate" or bool(block["project"]) or bool(block["domains"])


def _knowledge_event(e: Entry, v: dict[str, Any], block: dict[str, Any]) -> bool:
    d, ts = e.data, e.value["ts"]
    if e.type == "memory.reinforced":
        conf = _num(d.get("confidence"))
        if conf is None or not 0 <= conf <= 1 or block["status"] != "active":
            return False
        v["confidence"] = conf
        block["reference_count"] += 1
        block["last_referenced_at"] = ts
    else:
        before, after = TRANSITIONS[e.type]
        if block["status"] != before:
            return False
        block["status"] = after
        if e.type == "memory.promoted":
            block["promoted_at"] = ts
            block["project"] = _str(d.get("project")) or ""
            block["domains"] = list(d["domains"]) if isinstance(d.get("domains"), list) else []
        elif e.type == "memory.superseded" and d.get("by") == "decay":
            conf = _num(d.get("confidence"))
            if conf is not None and 0 <= conf <= 1:
                v["confidence"] = conf
        elif e.type == "memory.reinstated":
            block["reference_count"] += 1
            block["last_referenced_at"] = ts
    v["last_event_seq"] = e.seq
    return True


def _updated(e: Entry, v: dict[str, Any], block: dict[str, Any]) -> bool:
    """Apply a memory.updated; True when it gives the knowledge block a project or domains."""
    d = e.data
    for f in ("namespace", "kind", "source", "title", "content"):
        if d.get(f) is not None:
            v[f] = str(d[f])
    if _num(d.get("confidence")) is not None:
        v["confidence"] = _num(d["confidence"])
    if _int(d.get("last_seen")) is not None:
        v["last_seen"] = d["last_seen"]
    if _int(d.get("occurred_at")) is not None:  # memory.updated tv 5 may put a date right
        v["occurred_at"] = d["occurred_at"]
    if isinstance(d.get("tags"), list):
        v["tags"] = [str(t) for t in d["tags"]]
    patch = d.get("metadata") if isinstance(d.get("metadata"), dict) else {}
    for k, x in patch.items():
        if x is None:
            v["metadata"].pop(k, None)
        else:
            v["metadata"][k] = x
    v["updated_at"] = e.value["ts"]
    v["last_event_seq"] = e.seq
    knowledge = False
    if isinstance(d.get("project"), str):
        block["project"] = d["project"]
        knowledge = True
    if isinstance(d.get("domains"), list):
        block["domains"] = list(d["domains"])
        knowledge = True
    return knowledge


def fold_views(entries: Sequence[Entry], ids: Sequence[str]) -> dict[str, Any]:
    """memories.json from the entries, by the fold docs/forensics.md §4 spells out.

    (A migration.rolled_back is not folded: no home this verifier is tested on holds one.)
    """
    views: dict[str, dict[str, Any]] = {}
    blocks: dict[str, dict[str, Any]] = {}
    shown: set[str] = set()
    edges: list[dict[str, Any]] = []
    seqs: dict[str, list[int]] = {}
    erased: dict[str, dict[str, Any]] = {}
    sealed: dict[str, set[str]] = {}
    for e in sorted(entries, key=lambda x: x.seq):
        d, ts = e.data, e.value["ts"]
        for m in touched_ids(e):
            seqs.setdefault(m, []).append(e.seq)
        mid = _str(d.get("id"))
        v = views.get(mid) if mid else None
        if e.type == "memory.stored" and mid and v is None:
            views[mid], blocks[mid], is_shown = _stored_view(e)
            if is_shown:
                shown.add(mid)
        elif e.type in TRANSITIONS or e.type == "memory.reinforced":
            if v is not None and _knowledge_event(e, v, blocks[v["id"]]):
                shown.add(v["id"])
        elif e.type == "memory.updated" and v is not None:
            if _updated(e, v, blocks[v["id"]]):
                shown.add(v["id"])
        elif e.type == "memory.archived" and v is not None:
            if d.get("by") == "atomisation":
                v["atomisation_archived_at"] = ts
                v["metadata"]["atomisation_archived_at"] = _iso(ts)
            else:
                v["archived_at"] = ts
                v["archive_reason"] = _str(d.get("reason"))
            v["last_event_seq"] = e.seq
        elif e.type == "memory.restored" and v is not None:
            v["archived_at"] = v["archive_reason"] = v["atomisation_archived_at"] = None
            v["metadata"].pop("atomisation_archived_at", None)
            v["last_event_seq"] = e.seq
        elif e.type == "atomisation.completed":
            src = views.get(_str(d.get("source_id")) or "")
            if src is not None and isinstance(d.get("atom_ids"), list):
                src["atom_ids"] = [a if isinstance(a, str) else "" for a in d["atom_ids"]]
                src["atomised_into"] = len(d["atom_ids"])
                src["last_event_seq"] = e.seq
        elif e.type == "link.created":
            meta = d.get("metadata")
            edges.append(
                {
                    "seq": e.seq,
                    "src": _str(d.get("src")) or "",
                    "dst": _str(d.get("dst")) or "",
                    "relation": str(d.get("relation", "")),
                    "metadata": meta if isinstance(meta, dict) else {},
                    "created_at": ts,
                }
            )
        elif e.type == "link.removed":
            gone = (_str(d.get("src")) or "", _str(d.get("dst")) or "", str(d.get("relation", "")))
            edges = [x for x in edges if (x["src"], x["dst"], x["relation"]) != gone]
        elif e.type == "memory.erased":
            # Emptied where the erasure stands in the fold, for every subject it touches.
            for m in touched_ids(e):
                if m in views:
                    erased[m] = {"seq": e.seq, "reason": _str(d.get("reason"))}
                    views[m].update(title=None, content="", tags=[], metadata={}, source=None)
        if e.type in ("memory.stored", "memory.updated") and mid and isinstance(d.get("sealed"), list):
            sealed.setdefault(mid, set()).update(f for f in d["sealed"] if isinstance(f, str))
    out = {}
    for m in ids:
        v = dict(views[m])
        v["links"] = {
            "incoming": [x for x in edges if x["dst"] == m],
            "outgoing": [x for x in edges if x["src"] == m],
        }
        v["seqs"] = seqs.get(m, [])
        if m in shown:
            v["knowledge"] = blocks[m]
        if m in sealed:
            v["sealed"] = sorted(sealed[m])
        if m in erased:
            v["erased"] = erased[m]
        out[m] = v
    return {"format": "mnemolog/memory-views/v1", "memories": out}


# ---------------------------------------------------------------- Parquet tables (forensics.md §4)


class _Thrift:
    """The Thrift compact protocol, enough to read a Parquet footer and page headers."""

    def __init__(self, buf: bytes, off: int = 0) -> None:
        self.buf, self.off = buf, off

    def _byte(self) -> int:
        if self.off >= len(self.buf):
            raise Failure("view.parquet", "Thrift data cut short")
        b = self.buf[self.off]
        self.off += 1
        return b

    def varint(self) -> int:
        out = shift = 0
        while True:
            b = self._byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
            if shift > 70:
                raise Failure("view.parquet", "Thrift varint too long")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, kind: int) -> Any:
        if kind in (1, 2):
            return kind == 1
        if kind == 3:
            return self._byte()
        if kind in (4, 5, 6):
            return self.zigzag()
        if kind == 7:
            raw = self.buf[self.off : self.off + 8]
            self.off += 8
            return struct.unpack("<d", raw)[0]
        if kind == 8:
            n = self.varint()
            raw = self.buf[self.off : self.off + n]
            if len(raw) != n:
                raise Failure("view.parquet", "Thrift binary cut short")
            self.off += n
            return raw
        if kind in (9, 10):
            head = self._byte()
            size, elem = head >> 4, head & 15
            if size == 15:
                size = self.varint()
            if size > len(self.buf):
                raise Failure("view.parquet", "Thrift list too long")
            return [self.value(elem) if elem not in (1, 2) else self._byte() == 1 for _ in range(size)]
        if kind == 12:
            return self.struct()
        raise Failure("view.parquet", f"Thrift type {kind} unexpected")

    def struct(self) -> dict[int, Any]:
        out: dict[int, Any] = {}
        last = 0
        while True:
            head = self._byte()
            if head == 0:
                return out
            delta, kind = head >> 4, head & 15
            fid = last + delta if delta else self.zigzag()
            out[fid] = self.value(kind)
            last = fid


def read_parquet(raw: bytes) -> dict[str, list[Any]]:
    """read_parquet_unchecked, with any malformed structure a verification failure."""
    try:
        return read_parquet_unchecked(raw)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, struct.error) as exc:
        raise Failure("view.parquet", f"malformed Parquet: {exc!r}") from None


def read_parquet_unchecked(raw: bytes) -> dict[str, list[Any]]:
    """The columns of a Parquet file of the layout forensics.md §4 gives: one row group, one
    PLAIN v1 data page per column, no compression; REQUIRED columns, or OPTIONAL ones whose page
    starts with a 4-byte length and one bit-packed run of 1-bit definition levels."""
    if raw[:4] != b"PAR1" or raw[-4:] != b"PAR1" or len(raw) < 12:
        raise Failure("view.parquet", "not a Parquet file")
    (flen,) = struct.unpack("<I", raw[-8:-4])
    meta = _Thrift(raw[-8 - flen : -8]).struct()
    schema, rows, groups = meta[2], meta[3], meta[4]
    if len(groups) != 1:
        raise Failure("view.parquet", f"{len(groups)} row groups, not one")
    leaves = schema[1:]
    out: dict[str, list[Any]] = {}
    for el, chunk in zip(leaves, groups[0][1], strict=True):
        name, ptype, optional = el[4].decode(), el[1], el.get(3) == 1
        cm = chunk[3]
        if cm.get(4, 0) != 0:
            raise Failure("view.parquet", f"column {name} is compressed")
        t = _Thrift(raw, cm[9])
        page = t.struct()
        data = raw[t.off : t.off + page[3]]
        present = [True] * rows
        pos = 0
        if optional:
            (n,) = struct.unpack("<I", data[:4])
            levels = _Thrift(data[4 : 4 + n])
            header = levels.varint()
            if not header & 1:
                raise Failure("view.parquet", f"column {name}: definition levels not one bit-packed run")
            bits = data[4 + levels.off : 4 + n]
            present = [bool(bits[i // 8] >> (i % 8) & 1) for i in range(rows)]
            pos = 4 + n
        values: list[Any] = []
        count = sum(present)
        if ptype == 2:
            values = list(struct.unpack(f"<{count}q", data[pos : pos + 8 * count]))
        elif ptype == 5:
            values = list(struct.unpack(f"<{count}d", data[pos : pos + 8 * count]))
        elif ptype == 0:
            values = [bool(data[pos + i // 8] >> (i % 8) & 1) for i in range(count)]
        elif ptype == 6:
            for _ in range(count):
                (n,) = struct.unpack("<I", data[pos : pos + 4])
                values.append(data[pos + 4 : pos + 4 + n])
                pos += 4 + n
        else:
            raise Failure("view.parquet", f"column {name}: physical type {ptype}")
        it = iter(values)
        out[name] = [next(it) if p else None for p in present]
    return out


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, bytes):
        return "bytes"
    if isinstance(v, str):
        return "str"
    return "json"


def check_tables(files: dict[str, bytes], rows: Sequence[Entry]) -> None:
    """check_tables_unchecked, with any malformed value (bad UTF-8, JSON, row count) a failure."""
    try:
        check_tables_unchecked(files, rows)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, struct.error) as exc:
        raise Failure("view.parquet", f"malformed table: {exc!r}") from None


def check_tables_unchecked(files: dict[str, bytes], rows: Sequence[Entry]) -> None:
    """forensics.md §4, format v3: entries.parquet holds each entry (key history, selection,
    heads entry) by seq, its fields and its payload as typed columns; touches.parquet one row
    per (memory, entry) by seq then id. Read with the layout §4 gives, compared by value."""
    rows = sorted(rows, key=lambda e: e.seq)
    cols = read_parquet(files["entries.parquet"])
    fixed = {
        "seq": [e.seq for e in rows],
        "ts": [e.value["ts"] for e in rows],
        "type": [e.type.encode() for e in rows],
        "tv": [e.value["tv"] for e in rows],
        "kid": [e.value["kid"] for e in rows],
        "prev": [e.value["prev"] for e in rows],
        "leaf_hash": [e.leaf for e in rows],
        "sig": [e.value["sig"] for e in rows],
        "entry": [e.raw for e in rows],
    }
    for name, want in fixed.items():
        if cols.get(name) != want:
            raise Failure("view.parquet", f"entries.parquet column {name} is not the entries'")
    for e, data in zip(rows, cols.get("data", []), strict=True):
        if json.loads(data) != _jsonable(e.data):
            raise Failure("view.parquet", "entries.parquet data is not the payload", e.seq)
    fields = sorted({f for e in rows for f in e.data})
    payload = sorted(c for c in cols if c.startswith("p_"))
    if payload != [f"p_{f}" for f in fields]:
        raise Failure("view.parquet", f"payload columns {payload} for fields {fields}")
    for f in fields:
        got = cols[f"p_{f}"]
        kinds = {_kind(e.data[f]) for e in rows if f in e.data}
        for e, g in zip(rows, got, strict=True):
            if f not in e.data:
                ok = g is None
            elif kinds in ({"int"}, {"float"}, {"bool"}, {"bytes"}):
                ok = g == e.data[f]
            elif kinds == {"str"}:
                ok = g == e.data[f].encode()
            else:
                ok = g is not None and json.loads(g) == _jsonable(e.data[f])
            if not ok:
                raise Failure("view.parquet", f"entries.parquet p_{f} is not the payload's", e.seq)
    touches = read_parquet(files["touches.parquet"])
    want_rows = sorted((e.seq, m) for e in rows for m in touched_ids(e))
    got_rows = list(
        zip(touches.get("seq", []), [m.decode() for m in touches.get("memory_id", [])], strict=True)
    )
    if got_rows != want_rows:
        raise Failure("view.touches", "touches.parquet is not the entries' touches")


# ---------------------------------------------------------------- context packs (context.md §3, §9)

PACK_TIERS = ("state", "identity", "project", "domain", "chunks")
PACK_TITLES = {
    "state": "Trusted project state",
    "identity": "Identity and preferences",
    "project": "Project memories",
    "domain": "Domain knowledge",
    "chunks": "Retrieved chunks",
}


def _one_line(text: str) -> str:
    return " ".join(text.split())


def render_pack(d: dict[str, Any], seq: int) -> str:
    """A context.built payload's pack, as docs/context.md §3 renders it."""
    tiers = d.get("tiers")
    if not isinstance(tiers, list) or [t.get("name") if isinstance(t, dict) else None for t in tiers] != list(
        PACK_TIERS
    ):
        raise Failure("context.shape", "the tiers are not the five records in trust order", seq)
    project = d.get("project") if isinstance(d.get("project"), str) else ""
    out = []
    for t in tiers:
        included = t.get("included")
        if not isinstance(included, list) or not all(
            isinstance(e, dict)
            and e.get("source") in ("state", "memory", "chunk")
            and isinstance(e.get("id"), str)
            and (
                isinstance(e.get("sealed"), list) or all(isinstance(e.get(k), str) for k in ("label", "text"))
            )
            for e in included
        ):
            raise Failure("context.shape", f"tier {t['name']}: malformed entries", seq)
        if not included:
            continue
        title = PACK_TITLES[t["name"]]
        if t["name"] in ("state", "project") and project:
            title += f" ({_one_line(project)})"
        out.append(f"## {title}\n")
        for quote in included:
            # A quote whose key is gone renders as a marked gap (forensics.md §8a).
            e = (
                {**quote, "label": "forgotten", "text": f"{quote['source']} {quote['id']} was erased"}
                if "sealed" in quote
                else quote
            )
            body = e["text"].replace("\r\n", "\n").replace("\r", "\n").strip("\n").replace("\n", "\n  ")
            label = _one_line(e["label"])
            if not label:
                out.append(f"- {body}\n")
            elif e["source"] == "state":
                out.append(f"- {label}: {body}\n")
            else:
                out.append(f"- [{label}] {body}\n")
        out.append("\n")
    return "".join(out)


def check_packs(
    everything: Sequence[Entry], memories: Sequence[str], gaps: dict[int, list[str]] | None = None
) -> int:
    """forensics.md §5 item 10: each pack re-rendered to its signed hash; each bundle memory it
    quotes read, folded from the entries before the pack, exactly as quoted. Returns the count.

    A pack with a quote left sealed (its key destroyed) renders it as a gap; its hash, over what
    was shown then, cannot be checked (§8a): the gapped ids go into `gaps` by the pack's seq."""
    count = 0
    for e in sorted(everything, key=lambda x: x.seq):
        if e.type != "context.built":
            continue
        text = render_pack(e.data, e.seq)
        gapped = [x["id"] for t in e.data["tiers"] for x in t["included"] if "sealed" in x]
        if gapped and gaps is not None:
            gaps[e.seq] = gapped
        if not gapped and hashlib.sha256(text.encode()).hexdigest() != e.data.get("sha256"):
            raise Failure("context.sha256", "the re-rendered pack does not hash to the signed sha256", e.seq)
        quoted = {
            x["id"]: x["text"]
            for t in e.data["tiers"]
            for x in t["included"]
            if x["source"] == "memory" and x["id"] in memories and "sealed" not in x
        }
        before = [x for x in everything if x.seq < e.seq]
        stored = {x.data.get("id") for x in before if x.type == "memory.stored"}
        for mid, quote in sorted(quoted.items()):
            have = fold_views(before, [mid])["memories"][mid]["content"] if mid in stored else None
            if have != quote:
                raise Failure(
                    "context.source",
                    f"the pack quotes {mid} as {quote!r:.40}, the entries say {have!r:.40}",
                    e.seq,
                )
        count += 1
    return count


def verify_bundle(
    raw: bytes,
    *,
    trusted_key: str | None = None,
    witness_keys: Sequence[str] = (),
    min_witnesses: int | None = None,
) -> BundleReport:
    """forensics.md §5 items 1-9 and 11, and the manifest's envelopes against envelopes.json (item 10)."""
    files = read_tar(raw)
    if "manifest.cbor" not in files:
        raise Failure("manifest.missing", "no manifest.cbor")
    manifest = decode_canonical(files["manifest.cbor"], "manifest.decode")
    if not isinstance(manifest, dict) or set(manifest) != MANIFEST_KEYS:
        raise Failure("manifest.decode", "not exactly the manifest keys")
    check_manifest_types(manifest)
    fmt = manifest["format"]
    if fmt not in FORMAT_FILES:
        raise Failure("manifest.format", f"unknown format {fmt!r}")

    # 3. key history
    if "keys.cbor" not in files:
        raise Failure("files.missing", "keys.cbor")
    key_items, _ = split_sequence(files["keys.cbor"], "keys.decode")
    if not key_items:
        raise Failure("keys.genesis", "keys.cbor is empty")
    keys = [decode_entry(item) for item in key_items]
    history = genesis_history(keys[0])
    check_signed(keys[0], history)
    for before, e in itertools.pairwise(keys):
        if e.type != "key.rotated" or e.seq <= before.seq:
            raise Failure("keys.order", f"{e.type} at {e.seq} in the key history", e.seq)
        apply_key_event(history, e)
        check_signed(e, history)

    # 4. trust and checkpoint
    anchor = trust(history, trusted_key, None, ())
    if "checkpoint" not in files:
        raise Failure("files.missing", "checkpoint")
    cp = parse_checkpoint(files["checkpoint"])
    if cp.origin != history.origin:
        raise Failure("checkpoint.origin", f"{cp.origin} is not {history.origin}")
    if cp.size <= keys[-1].seq:
        raise Failure("checkpoint.size", f"size {cp.size} does not cover key event {keys[-1].seq}")
    signer = history.at(cp.size)
    check_note_signature(cp.note, signer.name, signer.public_key, "checkpoint")

    # 5. manifest signature and its fields against the checkpoint
    if manifest["kid"] != signer.kid:
        raise Failure("manifest.kid", f"kid {manifest['kid']!r} is not the checkpoint signer's")
    unsigned = {k: v for k, v in manifest.items() if k != "sig"}
    if not _bytes(manifest["sig"], 64) or not ed25519_ok(
        signer.public_key, MANIFEST_TAG + encode(unsigned), manifest["sig"]
    ):
        raise Failure("manifest.signature", "manifest signature does not verify")
    expected = {
        "log_id": history.log_id, "origin": history.origin, "tree_size": cp.size, "root": cp.root,
        "key_seqs": [k.seq for k in keys],
    }  # fmt: skip
    for k, v in expected.items():
        if manifest[k] != v:
            raise Failure(f"manifest.{k}", f"expected {v!r}, found {manifest[k]!r}")

    # 6. files and their digests (format.md §15)
    listed = manifest["files"]
    names = [f.get("name") for f in listed if isinstance(f, dict)]
    if len(names) != len(listed) or names != sorted(names) or set(names) != FORMAT_FILES[fmt]:
        raise Failure(
            "files.listed", f"manifest lists {names}, format {fmt} needs {sorted(FORMAT_FILES[fmt])}"
        )
    if set(files) != FORMAT_FILES[fmt] | {"manifest.cbor"}:
        extra = set(files) ^ (FORMAT_FILES[fmt] | {"manifest.cbor"})
        raise Failure("files.set", f"present and listed differ: {sorted(extra)}")
    for f in listed:
        if set(f) != {"name", "size", "sha256"}:
            raise Failure("files.listed", f"file record {f!r}")
        data = files[f["name"]]
        if len(data) != f["size"]:
            raise Failure("files.size", f"{f['name']}: {len(data)} bytes, manifest says {f['size']}")
        if sha256(data) != f["sha256"]:
            raise Failure("files.sha256", f"{f['name']}: digest differs")

    # 7. entries
    items, _ = split_sequence(files["entries.cbor"], "entries.decode")
    entries = [decode_entry(item) for item in items]
    seqs = [e.seq for e in entries]
    if seqs != manifest["seqs"] or seqs != sorted(set(seqs)):
        raise Failure("entries.seqs", f"entries hold {seqs}, manifest says {manifest['seqs']}")
    by_seq = {e.seq: e for e in [*keys, *entries]}
    for e in entries:
        if e.type in ("log.created", "key.rotated") or e.seq >= cp.size:
            raise Failure("entries.selection", f"{e.type} at {e.seq}", e.seq)
        check_signed(e, history)
        before = by_seq.get(e.seq - 1)
        if before is not None and e.value["prev"] != before.leaf:
            raise Failure("entry.prev", "prev is not the leaf hash of the entry before", e.seq)

    # 8. inclusion proofs
    proofs = decode_canonical(files["proofs.cbor"], "proofs.decode")
    all_entries = sorted(by_seq.values(), key=lambda e: e.seq)
    if (
        not isinstance(proofs, dict)
        or set(proofs) != {"tree_size", "proofs"}
        or proofs["tree_size"] != cp.size
        or not _proof_list(proofs["proofs"])
    ):
        raise Failure("proofs.decode", "proofs.cbor is not {tree_size, proofs} for the checkpoint")
    listed_proofs = proofs["proofs"]
    if [p[0] for p in listed_proofs] != [e.seq for e in all_entries]:
        raise Failure("proofs.seqs", "one proof per entry, ascending, is required")
    for (seq, path), e in zip(listed_proofs, all_entries, strict=True):
        if not verify_inclusion(seq, cp.size, e.leaf, path, cp.root):
            raise Failure("proofs.inclusion", "inclusion proof does not lead to the checkpoint's root", seq)

    # 9. selection and chain
    memories, unstored = manifest["memories"], manifest["unstored"]
    member_set = set(memories) | set(unstored)
    if manifest["memory_id"] not in memories:
        raise Failure("chain.memory", "the exported memory has no view")
    for e in entries:
        if not member_set & set(touched_ids(e)):
            raise Failure("selection.foreign", "entry touches none of the bundle's memories", e.seq)
    stored = {e.data.get("id") for e in entries if e.type == "memory.stored"}
    closure = (
        chain_closure(manifest["memory_id"], entries)
        if manifest["include_chain"]
        else {manifest["memory_id"]}
    )
    if memories != sorted(set(memories)) or unstored != sorted(set(unstored)):
        raise Failure("manifest.decode", "memories and unstored must be sorted and unique")
    if member_set != closure:
        raise Failure("chain.closure", f"memories {sorted(member_set)} are not the chain {sorted(closure)}")
    for m in memories:
        if m not in stored:
            raise Failure("chain.missing_memory", f"{m} has no memory.stored in the bundle")
    for m in unstored:
        if m in stored:
            raise Failure("chain.unstored", f"{m} is stored in the bundle")

    # 10 (part). envelopes: the manifest's, rendered, are envelopes.json
    envelopes = {"format": "mnemolog/atomisation-envelopes/v1", "envelopes": manifest["envelopes"]}
    if render_json(envelopes) != files["envelopes.json"]:
        raise Failure("view.envelopes", "envelopes.json is not the manifest's envelopes")
    try:
        views = json.loads(files["memories.json"].decode("utf-8"))
    except ValueError:
        raise Failure("view.memories", "memories.json is not UTF-8 JSON") from None
    if not isinstance(views, dict) or not isinstance(views.get("memories"), dict):
        raise Failure("view.memories", "memories.json is not a map of views")
    datakeys = (
        read_datakeys(files["datakeys.cbor"], log_id=history.log_id, whole=True)
        if fmt == "mnemolog/forensic-bundle/v4"
        else {}
    )
    destroyed: set[str] = set()
    for e in entries:
        if e.type == "memory.erased":
            check_erased(e)
            destroyed |= set(e.data.get("keys", []))
    if destroyed & set(datakeys):
        raise Failure(
            "datakeys.erased",
            f"datakeys.cbor holds keys an erasure destroyed: {sorted(destroyed & set(datakeys))}",
        )
    readable = opened([*keys, *entries], datakeys)
    if render_json(fold_views(readable, memories)) != files["memories.json"]:
        raise Failure("view.memories", "memories.json is not the fold of the entries")
    if views.get("format") != "mnemolog/memory-views/v1" or sorted(views.get("memories", {})) != sorted(
        memories
    ):
        raise Failure("view.memories", "memories.json does not hold a view of each memory")

    report = BundleReport(fmt, manifest["memory_id"], memories, cp.size, anchor, seqs)
    report.packs = check_packs(readable, memories, report.pack_gaps)
    report.sealed = sorted(
        m for m, v in json.loads(files["memories.json"])["memories"].items() if "sealed" in v
    )

    # 11. completeness
    if fmt != "mnemolog/forensic-bundle/v1":
        check_completeness(files["heads.cbor"], cp, history, entries, member_set, report)
    # 12. tables (format v3; the v1 and v2 tables are not read here)
    if fmt in ("mnemolog/forensic-bundle/v3", "mnemolog/forensic-bundle/v4"):
        heads_entry = decode_entry(cbor2.loads(files["heads.cbor"])["entry"])
        check_tables(files, [*keys, *entries, heads_entry])
    if witness_keys:
        report.witnesses = check_cosignatures(cp, witness_keys, min_witnesses).witnesses
    return report


def check_completeness(
    raw: bytes,
    cp: Checkpoint,
    history: KeyHistory,
    entries: Sequence[Entry],
    member_set: set[str],
    report: BundleReport,
) -> None:
    """forensics.md §3a: the heads entry, its proofs, each newest entry and each back-chain."""
    heads = decode_canonical(raw, "heads.decode")
    if (
        not isinstance(heads, dict)
        or set(heads) != {"entry", "inclusion", "proofs"}
        or not _bytes(heads["entry"])
        or not _hashes(heads["inclusion"])
        or not isinstance(heads["proofs"], list)
    ):
        raise Failure("heads.decode", "heads.cbor is not {entry, inclusion, proofs}")
    he = decode_entry(heads["entry"])
    if he.type != "heads.committed" or he.seq >= cp.size:
        raise Failure(
            "heads.entry", f"{he.type} at {he.seq} is not a heads entry below the checkpoint", he.seq
        )
    check_signed(he, history)
    if not verify_inclusion(he.seq, cp.size, he.leaf, heads["inclusion"], cp.root):
        raise Failure("heads.inclusion", "the heads entry is not in the checkpoint's tree", he.seq)
    size, root = he.data.get("size"), he.data.get("root")
    if not _uint(size) or size > he.seq or not _bytes(root, 32):
        raise Failure("heads.entry", "malformed heads.committed payload", he.seq)
    committed: dict[str, int | None] = {}
    order = []
    for proof in heads["proofs"]:
        m, head, got = heads_proof_root(proof)
        if got != root:
            raise Failure("heads.root", f"the proof for {m} does not lead to the committed root", he.seq)
        committed[m] = head
        order.append(m)
    if order != sorted(member_set):
        raise Failure("heads.coverage", f"proofs for {sorted(committed)}, bundle ids {sorted(member_set)}")
    for m in sorted(member_set):
        mine = [e for e in entries if m in touched_ids(e)]
        below = [e.seq for e in mine if e.seq < size]
        newest = below[-1] if below else None
        if newest != committed[m]:
            raise Failure(
                "completeness.head", f"{m}: newest bundle entry {newest}, committed head {committed[m]}"
            )
        # Walking down from the newest entry about m: each entry that carries back-chains must
        # point at the next older bundle entry about m (-1 at the oldest); a pointer left out
        # breaks the chain. An entry of a tv before back-chains ends the proof at its own seq.
        proven_from = 0
        for newer, older in zip(reversed(mine), [*reversed(mine[:-1]), None], strict=True):
            if not carries_pointers(newer):
                proven_from = newer.seq
                break
            p = pointer(newer, m)
            want = -1 if older is None else older.seq
            if p != want:
                raise Failure(
                    "completeness.back_chain", f"{m}: touch_prev {p}, bundle holds {want}", newer.seq
                )
        report.proven_from[m] = proven_from
    report.complete_as_of = size
    report.uncovered_entries = cp.size - size - 1


# ---------------------------------------------------------------- log exports (forensics.md §7)

EXPORT_KEYS = {
    "format", "log_id", "start", "count", "tree_size", "checkpoint",
    "key_entries", "key_proofs", "range_proof",
}  # fmt: skip


def range_root(size: int, start: int, leaves: Sequence[bytes], proof: Sequence[bytes]) -> bytes:
    """The root of the tree of `size` from the leaves of [start, start + len(leaves)) and the
    hashes of the maximal subtrees outside that range, in the order MTH's recursion meets them."""
    end = start + len(leaves)
    hashes = iter(proof)
    used = 0

    def rec(lo: int, hi: int) -> bytes:
        nonlocal used
        if hi <= start or lo >= end:
            used += 1
            h = next(hashes, None)
            if h is None or not _bytes(h, 32):
                raise Failure("export.range_proof", "the range proof is too short or not hashes")
            return h
        if start <= lo and hi <= end:
            return mth(leaves[lo - start : hi - start])
        k = 1 << ((hi - lo - 1).bit_length() - 1)
        return node_hash(rec(lo, lo + k), rec(lo + k, hi))

    root = rec(0, size)
    if used != len(proof):
        raise Failure("export.range_proof", f"{len(proof) - used} range proof hashes left unused")
    return root


@dataclass
class ExportReport:
    start: int
    count: int
    tree_size: int
    anchor: str
    entries: list[Entry] = field(default_factory=list, repr=False)


def verify_export(raw: bytes, *, trusted_key: str | None = None) -> ExportReport:
    """A `log export` file: header, key history, checkpoint, key proofs, entries, range proof."""
    items, _ = split_sequence(raw, "export.decode")
    if not items:
        raise Failure("export.decode", "an empty export")
    header = decode_canonical(items[0], "export.decode")
    if (
        not isinstance(header, dict)
        or set(header) != EXPORT_KEYS
        or header["format"] != "mnemolog/log-export/v1"
    ):
        raise Failure("export.decode", "the header is not exactly the log-export/v1 keys")
    start, count, size = header["start"], header["count"], header["tree_size"]
    if not (_uint(start) and _uint(count) and _uint(size)) or count < 1 or start + count > size:
        raise Failure("export.decode", f"start {start}, count {count}, tree size {size}")
    keys = [decode_entry(k) for k in header["key_entries"]]
    if not keys:
        raise Failure("keys.genesis", "no key history")
    history = genesis_history(keys[0])
    check_signed(keys[0], history)
    for before, e in itertools.pairwise(keys):
        if e.type != "key.rotated" or e.seq <= before.seq:
            raise Failure("keys.order", f"{e.type} at {e.seq} in the key history", e.seq)
        apply_key_event(history, e)
        check_signed(e, history)
    if header["log_id"] != history.log_id:
        raise Failure("export.log_id", "the header's log id is not the genesis entry's")
    anchor = trust(history, trusted_key, None, ())
    cp = parse_checkpoint(header["checkpoint"])
    if cp.origin != history.origin or cp.size != size or cp.size <= keys[-1].seq:
        raise Failure("checkpoint.size", f"checkpoint {cp.origin} {cp.size} for tree size {size}")
    signer = history.at(cp.size)
    check_note_signature(cp.note, signer.name, signer.public_key, "checkpoint")
    proofs = header["key_proofs"]
    if [p[0] for p in proofs] != [k.seq for k in keys]:
        raise Failure("export.key_proofs", "one proof per key entry, in order, is required")
    for (seq, path), k in zip(proofs, keys, strict=True):
        if not verify_inclusion(seq, size, k.leaf, path, cp.root):
            raise Failure("export.key_proofs", "a key entry's proof does not lead to the root", seq)
    entries = [decode_entry(item) for item in items[1:]]
    if len(entries) != count:
        raise Failure("export.count", f"{len(entries)} entries, the header says {count}")
    key_leaves = {k.seq: k.leaf for k in keys}
    prev = ZERO32 if start == 0 else None
    for i, e in enumerate(entries):
        if e.seq != start + i:
            raise Failure("entry.seq", f"seq {e.seq} at position {start + i}", start + i)
        if prev is not None and e.value["prev"] != prev:
            raise Failure("entry.prev", "prev is not the previous leaf hash", e.seq)
        if e.type in ("log.created", "key.rotated") and key_leaves.get(e.seq) != e.leaf:
            raise Failure("export.key_entries", "a key event missing from the header's key history", e.seq)
        check_signed(e, history)
        prev = e.leaf
    if range_root(size, start, [e.leaf for e in entries], header["range_proof"]) != cp.root:
        raise Failure("export.range_proof", "the range proof does not lead to the checkpoint's root")
    return ExportReport(start, count, size, anchor, entries)


def open_export(raw: bytes, keys_raw: bytes, *, trusted_key: str | None = None) -> tuple[list[Entry], int]:
    """A verified export's entries opened with its `FILE.keys` (forensics.md §7), which must be a
    data-key file of the same log; and how many sealed fields stayed closed."""
    export = verify_export(raw, trusted_key=trusted_key)
    header = cbor2.loads(split_sequence(raw, "export.decode")[0][0])
    keys = read_datakeys(keys_raw, log_id=header["log_id"])
    out, closed = [], 0
    for e in export.entries:
        data, left = open_payload(e, keys)
        closed += len(left)
        out.append(e if data is e.data else Entry(e.raw, {**e.value, "data": data}, e.leaf))
    return out, closed


@dataclass
class ReceiptReport:
    seq: int
    tree_size: int
    anchor: str
    memories: list[str]
    interactions: list[str]
    documents: list[str]
    reason: str | None
    requested_by: str | None


def verify_receipt(
    raw: bytes, *, trusted_key: str | None = None, memory_id: str | None = None
) -> ReceiptReport:
    """An erasure receipt (forensics.md §8a): a log export of exactly one entry, a `memory.erased`,
    proven against a checkpoint signed after it; naming memory_id when one is given."""
    export = verify_export(raw, trusted_key=trusted_key)
    if export.count != 1 or export.entries[0].type != "memory.erased":
        found = [e.type for e in export.entries]
        raise Failure("receipt.entry", f"a receipt holds one memory.erased entry, found {found}")
    e = export.entries[0]
    check_erased(e)
    d = e.data
    if memory_id is not None and memory_id not in d["ids"]:
        raise Failure("receipt.memory", f"the erasure names {d['ids']}, not {memory_id}", e.seq)
    return ReceiptReport(
        e.seq,
        export.tree_size,
        export.anchor,
        list(d["ids"]),
        list(d.get("interactions", [])),
        list(d.get("documents", [])),
        d.get("reason"),
        d.get("requested_by"),
    )


def main(argv: Sequence[str]) -> int:
    """`verifier.py log DIR | home DIR | bundle FILE | receipt FILE [--memory-id ID] [--trusted-key K]
    [--witness-key K]...`."""
    import argparse

    ap = argparse.ArgumentParser(prog="verifier.py")
    ap.add_argument("kind", choices=["log", "home", "bundle", "receipt"])
    ap.add_argument("--memory-id")
    ap.add_argument("path", type=Path)
    ap.add_argument("--trusted-key")
    ap.add_argument("--witness-key", action="append", default=[])
    ap.add_argument("--min-witnesses", type=int)
    args = ap.parse_args(argv)
    opts = {"witness_keys": args.witness_key, "min_witnesses": args.min_witnesses}
    out: Any
    try:
        if args.kind == "receipt":
            out = verify_receipt(
                args.path.read_bytes(), trusted_key=args.trusted_key, memory_id=args.memory_id
            )
        elif args.kind == "bundle":
            out = verify_bundle(args.path.read_bytes(), trusted_key=args.trusted_key, **opts)
        elif args.kind == "home":
            out = verify_home(args.path, trusted_key=args.trusted_key, **opts)
        else:
            out = verify_log(args.path, trusted_key=args.trusted_key, **opts)
    except Failure as exc:
        print(json.dumps({"ok": False, "check": exc.check, "seq": exc.seq, "message": str(exc)}))
        return 8
    print(json.dumps({"ok": True, **out.__dict__}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
