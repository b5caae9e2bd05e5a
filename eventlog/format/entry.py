"""Format-v1 entries: building, signing, encoding, parsing and leaf hashes.

An entry is a CBOR map with exactly the keys v, seq, ts, type, tv, data, prev,
kid and sig (docs/format.md §2). The envelope is encoded by hand, in canonical key
order, because the writer and verifier spend most of their time here; only
the payload goes through the codec (cbor2). A property test holds the
hand encoding equal to cbor2's canonical encoding of the same map.
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from mnemolog.eventlog.errors import DecodeError
from mnemolog.eventlog.format import codec

FORMAT_VERSION = 1
ENTRY_DOMAIN = b"mnemolog/entry/v1\x00"
ZERO_HASH = bytes(32)
KID_LEN = 8
SIG_LEN = 64
HASH_LEN = 32
ENTRY_KEYS = frozenset({"v", "seq", "ts", "type", "tv", "data", "prev", "kid", "sig"})
TYPE_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
MAX_TYPE_LEN = 64
# The payload map sits inside the entry map: the value model's nesting limit (codec.MAX_DEPTH)
# counts from the entry, so a payload is checked at this depth everywhere it is checked.
PAYLOAD_DEPTH = 1


def _head(major: int, n: int) -> bytes:
    mt = major << 5
    if n < 24:
        return bytes((mt | n,))
    if n < 0x100:
        return bytes((mt | 24, n))
    if n < 0x10000:
        return struct.pack(">BH", mt | 25, n)
    if n < 0x100000000:
        return struct.pack(">BI", mt | 26, n)
    return struct.pack(">BQ", mt | 27, n)


def _uint_len(n: int) -> int:
    """Bytes of the canonical head of unsigned integer `n`."""
    if n < 24:
        return 1
    if n < 0x100:
        return 2
    if n < 0x10000:
        return 3
    if n < 0x100000000:
        return 5
    return 9


def _text(s: str) -> bytes:
    b = s.encode("utf-8")
    return _head(3, len(b)) + b


def _bytes(b: bytes) -> bytes:
    return _head(2, len(b)) + b


# Canonical order of the entry keys: shorter encodings first, then bytewise.
_K_V = _text("v")
_K_TS = _text("ts")
_K_TV = _text("tv")
_K_KID = _text("kid")
_K_SEQ = _text("seq")
_K_SIG = _text("sig")
_K_DATA = _text("data")
_K_PREV = _text("prev")
_K_TYPE = _text("type")


class Signer(Protocol):
    """What the writer needs from a key: its id and a detached Ed25519 signature."""

    @property
    def kid(self) -> bytes: ...

    def sign(self, message: bytes) -> bytes: ...


def leaf_hash(entry_bytes: bytes) -> bytes:
    """RFC 9162 leaf hash: SHA-256(0x00 || entry bytes)."""
    return hashlib.sha256(b"\x00" + entry_bytes).digest()


_VALID_TYPES: set[str] = set()


def _valid_type_name(type_: str) -> bool:
    if len(type_) > MAX_TYPE_LEN or not TYPE_RE.match(type_):
        return False
    if len(_VALID_TYPES) < 4096:
        _VALID_TYPES.add(type_)
    return True


def check_type_name(type_: str) -> None:
    if type_ in _VALID_TYPES:
        return
    if not isinstance(type_, str) or not _valid_type_name(type_):
        raise DecodeError(
            f"event type {type_!r} is not a dotted lowercase name (e.g. memory.stored)",
            field="type",
            found=type_,
        )


@dataclass(frozen=True, slots=True)
class Entry:
    """One decoded, shape-checked entry together with its exact bytes."""

    seq: int
    ts: int
    type: str
    tv: int
    data: dict[str, Any]
    prev: bytes
    kid: bytes
    sig: bytes
    raw: bytes
    leaf: bytes
    v: int = FORMAT_VERSION

    def tbs(self) -> bytes:
        """The to-be-signed bytes: domain tag || canonical entry without sig."""
        return tbs_bytes(self.seq, self.ts, self.type, self.tv, self.data, self.prev, self.kid)

    def summary(self) -> dict[str, Any]:
        """A JSON-friendly view (bytes as hex) for `log show` and reports."""
        return {
            "seq": self.seq,
            "ts": self.ts,
            "type": self.type,
            "tv": self.tv,
            "data": to_jsonable(self.data),
            "prev": self.prev.hex(),
            "kid": self.kid.hex(),
            "sig": self.sig.hex(),
            "leaf_hash": self.leaf.hex(),
        }


def to_jsonable(value: Any) -> Any:
    """Bytes become hex strings; everything else in the value model is JSON already."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_jsonable(v) for v in value]
    return value


_V1 = _K_V + _head(0, FORMAT_VERSION) + _K_TS
_SIG_HEAD = _K_SIG + _head(2, SIG_LEN)
_PREV_HEAD = _K_PREV + _head(2, HASH_LEN)


def _parts(
    seq: int, ts: int, type_: str, tv: int, data_enc: bytes, prev: bytes, kid: bytes
) -> tuple[bytes, bytes]:
    """The canonical pairs before and after `sig` (v, ts, tv, kid, seq | data, prev, type)."""
    mid = _MID.get((tv, kid))
    if mid is None:
        mid = _K_TV + _head(0, tv) + _K_KID + _bytes(kid) + _K_SEQ
        if len(_MID) < 256:
            _MID[(tv, kid)] = mid
    end = _END.get(type_)
    if end is None:
        end = _K_TYPE + _text(type_)
        if len(_END) < 4096:
            _END[type_] = end
    head = b"".join((_V1, _head(0, ts), mid, _head(0, seq)))
    tail = b"".join((_K_DATA, data_enc, _PREV_HEAD, prev, end))
    return head, tail


# Encoded pieces that repeat from entry to entry: (tv, kid) -> "tv" tv "kid" kid "seq", type -> "type" type.
_MID: dict[tuple[int, bytes], bytes] = {}
_END: dict[str, bytes] = {}


# Bytes of the canonical head pairs before sig that do not depend on the values:
# the map head, v: 1, and the keys ts, tv, kid (with its bytes(8) head) and seq.
_FIXED_HEAD = 1 + len(_V1) + len(_K_TV) + len(_K_KID) + 1 + KID_LEN + len(_K_SEQ)


def sig_offset(seq: int, ts: int, tv: int) -> int:
    """Where the `sig` pair (key, head, 64 bytes) starts in canonical entry bytes.

    In the canonical order v, ts, tv, kid, seq precede sig; their lengths
    depend only on the three integers. The to-be-signed bytes are the entry
    bytes with this 70-byte pair cut out and the map head 0xa9 made 0xa8.
    """
    return _FIXED_HEAD + _uint_len(ts) + _uint_len(tv) + _uint_len(seq)


SIG_PAIR_LEN = len(_SIG_HEAD) + SIG_LEN


def tbs_from_raw(raw: bytes, seq: int, ts: int, tv: int) -> bytes:
    """The to-be-signed bytes of canonical entry bytes `raw` (whose seq, ts, tv are given)."""
    at = sig_offset(seq, ts, tv)
    return ENTRY_DOMAIN + b"\xa8" + raw[1:at] + raw[at + SIG_PAIR_LEN :]


def _tbs(head: bytes, tail: bytes) -> bytes:
    return ENTRY_DOMAIN + b"\xa8" + head + tail


def _full(head: bytes, tail: bytes, sig: bytes) -> bytes:
    return b"\xa9" + head + _SIG_HEAD + sig + tail


def encode_payload(data: dict[str, Any]) -> bytes:
    """Canonical CBOR of an entry payload (a map with text keys, in the value model)."""
    if not isinstance(data, dict):
        raise DecodeError("entry data must be a map", field="data")
    return codec.encode(data, "data", depth=PAYLOAD_DEPTH)


def encodings(
    seq: int,
    ts: int,
    type_: str,
    tv: int,
    data: dict[str, Any],
    prev: bytes,
    kid: bytes,
    sig: bytes,
) -> tuple[bytes, bytes]:
    """(to-be-signed bytes, canonical entry bytes), encoding the payload once."""
    head, tail = _parts(seq, ts, type_, tv, encode_payload(data), prev, kid)
    return _tbs(head, tail), _full(head, tail, sig)


def tbs_bytes(seq: int, ts: int, type_: str, tv: int, data: dict[str, Any], prev: bytes, kid: bytes) -> bytes:
    return _tbs(*_parts(seq, ts, type_, tv, encode_payload(data), prev, kid))


class Problem(NamedTuple):
    """Why a decoded value is not a v1 entry: the field at fault and a sentence."""

    field: str
    message: str


_UINT_FIELDS = ("seq", "ts", "tv")


def entry_problem(m: Any) -> Problem | None:
    """None when the decoded value `m` has the v1 entry shape, else what is wrong.

    The one shape rule of an entry: exactly the nine keys, `v` = 1, unsigned
    seq/ts/tv below 2^64, a valid type name, a map payload, and byte strings
    of 32, 8 and 64 bytes for prev, kid and sig. The decoder
    (`entry_from_map`) and the verifier's fast pass both ask it; it returns
    rather than raises so the fast pass pays no exception per entry.
    """
    if type(m) is not dict:
        return Problem("entry", "not a CBOR map")
    if m.keys() != ENTRY_KEYS:
        keys = set(m)
        missing = sorted(ENTRY_KEYS - keys)
        extra = sorted(str(k) for k in keys - ENTRY_KEYS)
        return Problem("entry", f"entry keys differ from format v1 (missing {missing}, unexpected {extra})")
    v = m["v"]
    if type(v) is not int or v != FORMAT_VERSION:
        return Problem("v", f"format version {v!r}, this reader knows {FORMAT_VERSION}")
    seq, ts, tv, t, prev, kid, sig = m["seq"], m["ts"], m["tv"], m["type"], m["prev"], m["kid"], m["sig"]
    # One test for the common case (`log verify` asks this of every entry); the field at
    # fault is looked for only once one is.
    if (
        type(seq) is int
        and type(ts) is int
        and type(tv) is int
        and 0 <= seq <= codec.UINT_MAX
        and 0 <= ts <= codec.UINT_MAX
        and 0 <= tv <= codec.UINT_MAX
        and type(t) is str
        and (t in _VALID_TYPES or _valid_type_name(t))
        and type(m["data"]) is dict
        and type(prev) is bytes
        and type(kid) is bytes
        and type(sig) is bytes
        and len(prev) == HASH_LEN
        and len(kid) == KID_LEN
        and len(sig) == SIG_LEN
    ):
        return None
    for name in _UINT_FIELDS:
        n = m[name]
        if type(n) is not int or not 0 <= n <= codec.UINT_MAX:
            return Problem(name, f"entry field {name} must be an unsigned integer")
    if type(t) is not str:
        return Problem("type", "field type has the wrong CBOR type")
    if t not in _VALID_TYPES and not _valid_type_name(t):
        return Problem("type", f"event type {t!r} is not a dotted lowercase name (e.g. memory.stored)")
    if type(m["data"]) is not dict:
        return Problem("data", "field data has the wrong CBOR type")
    for name, length in (("prev", HASH_LEN), ("kid", KID_LEN), ("sig", SIG_LEN)):
        b = m[name]
        if type(b) is not bytes or len(b) != length:
            return Problem(name, f"field {name} must be {length} bytes")
    raise AssertionError("unreachable: the one-test form and the field tests disagree")  # pragma: no cover


def _check_fields(seq: int, ts: int, type_: str, tv: int, prev: bytes, kid: bytes) -> None:
    for name, n in (("seq", seq), ("ts", ts), ("tv", tv)):
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= codec.UINT_MAX:
            raise DecodeError(f"entry field {name} must be an unsigned integer", field=name)
    check_type_name(type_)
    if len(prev) != HASH_LEN:
        raise DecodeError("entry field prev must be 32 bytes", field="prev", found=len(prev))
    if len(kid) != KID_LEN:
        raise DecodeError("entry field kid must be 8 bytes", field="kid", found=len(kid))


def make_entry(
    *,
    seq: int,
    ts: int,
    type_: str,
    tv: int,
    data: dict[str, Any],
    prev: bytes,
    signer: Signer,
    data_enc: bytes | None = None,
) -> Entry:
    """Build and sign an entry; the result carries its bytes and leaf hash.

    `data_enc` is `encode_payload(data)` when the caller encoded it already
    (the group-commit writer does so in the submitting thread).
    """
    kid = signer.kid
    _check_fields(seq, ts, type_, tv, prev, kid)
    if data_enc is None:
        data_enc = encode_payload(data)
    return sign_checked(seq, ts, type_, tv, data, data_enc, prev, signer)


def sign_raw(
    seq: int, ts: int, type_: str, tv: int, data_enc: bytes, prev: bytes, signer: Signer
) -> tuple[bytes, bytes]:
    """(entry bytes, leaf hash) of a new entry whose fields the caller has checked.

    The writer's hot path: no Entry object, one signature, one hash.
    """
    head, tail = _parts(seq, ts, type_, tv, data_enc, prev, signer.kid)
    sig = signer.sign(_tbs(head, tail))
    if len(sig) != SIG_LEN:
        raise DecodeError("signer returned a signature that is not 64 bytes", field="sig")
    raw = _full(head, tail, sig)
    return raw, hashlib.sha256(b"\x00" + raw).digest()


def sign_checked(
    seq: int,
    ts: int,
    type_: str,
    tv: int,
    data: dict[str, Any],
    data_enc: bytes,
    prev: bytes,
    signer: Signer,
) -> Entry:
    """make_entry without re-checking fields the caller has already checked."""
    raw, leaf = sign_raw(seq, ts, type_, tv, data_enc, prev, signer)
    at = sig_offset(seq, ts, tv) + len(_SIG_HEAD)
    return Entry(seq, ts, type_, tv, data, prev, signer.kid, raw[at : at + SIG_LEN], raw, leaf)


def entry_from_map(m: Any, raw: bytes, where: str = "entry") -> Entry:
    """Shape-check a decoded map (`entry_problem`) and wrap it with its bytes."""
    problem = entry_problem(m)
    if problem is not None:
        raise DecodeError(f"{where}: {problem.message}", field=problem.field)
    return Entry(
        seq=m["seq"],
        ts=m["ts"],
        type=m["type"],
        tv=m["tv"],
        data=m["data"],
        prev=m["prev"],
        kid=m["kid"],
        sig=m["sig"],
        raw=raw,
        leaf=leaf_hash(raw),
    )


def parse_entry(raw: bytes | memoryview, where: str = "entry") -> Entry:
    """Decode entry bytes strictly: canonical CBOR, exactly the v1 keys and types."""
    b = bytes(raw)
    return entry_from_map(codec.decode(b, where), b, where)
