"""Sealed content: the AEAD that keeps what a memory says out of the signed bytes, and data-key files.

An entry of a sealing type version (vocabulary.SEALED) carries its content
fields only inside one box, ``sealed = {"key": K, "fields": [names], "box":
nonce (24 bytes) || ciphertext and tag}``: the XChaCha20-Poly1305 sealing
of the canonical CBOR map of those fields under the data key named K. The
associated data binds the box to ``"mnemolog/sealed/v1" 0x00 type 0x00
subject 0x00 field,field,...``, where the subject is the memory,
interaction, document or pack the type names in its key field, so a box
cannot be moved to another subject, another event type or other fields. A
context pack seals each entry it quoted (`label`, `text`) in a box of its
own, under a key of the quoted memory's (or document's) subject.

Keys are named by random ids (never derived from anything): each entry
names the key that sealed it, so a key store can hand out keys made and
synced in advance. Destroying every key an entry about a subject names
(forgetting) leaves its boxes in the log, signed, hashed and unreadable:
the log, its exports, tiles and witnesses' copies stay whole and verify.
Opening is pure: given a key lookup it gives the payload back with its
fields, or with `sealed` turned into the list of the fields it could not
open (no key, or a box that does not open).

Data-key files (the home's key store, the keys a `log export` carries
beside the log, a bundle's datakeys.cbor) are CBOR sequences: a header map,
then one ``[key id, key]`` array per key; the first key of an id wins.

Standard library, cbor2 and pynacl only: the standalone verifier opens
sealed content with this module when it is given keys.
"""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import cbor2
from nacl import bindings as nb
from nacl.exceptions import CryptoError

try:
    # pynacl's own cffi module (its public binding calls the same function): see `_encrypt`.
    from nacl._sodium import ffi as _ffi
    from nacl._sodium import lib as _lib
except ImportError:  # pragma: no cover - a pynacl without it: the public binding is used
    _ffi = _lib = None

from mnemolog.eventlog.errors import DecodeError
from mnemolog.eventlog.format import codec
from mnemolog.eventlog.vocabulary.events import CONTEXT_BUILT, SEALED, SEALED_FIELD, read_id

__all__ = [
    "AD_PREFIX",
    "KEYS_FORMAT",
    "KEY_BYTES",
    "NONCE_BYTES",
    "PACK_RECORD_FIELDS",
    "KeyFor",
    "KeyLookup",
    "decode_keys",
    "encode_key_record",
    "encode_keys",
    "key_ids",
    "keys_header",
    "new_key",
    "new_key_id",
    "new_keys",
    "open_payload",
    "opened_with",
    "record_subject",
    "reseal_payload",
    "seal_payload",
    "sealed_fields",
    "sealed_values",
    "subject_of",
    "subjects_of",
]

KEYS_FORMAT: Final = "mnemolog/data-keys/v1"
AD_PREFIX: Final = b"mnemolog/sealed/v1"
KEY_BYTES: Final = nb.crypto_aead_xchacha20poly1305_ietf_KEYBYTES  # 32
NONCE_BYTES: Final = nb.crypto_aead_xchacha20poly1305_ietf_NPUBBYTES  # 24
TAG_BYTES: Final = nb.crypto_aead_xchacha20poly1305_ietf_ABYTES  # 16
MAX_KEYS_FILE: Final = 1 << 30
#: The fields of each entry a `context.built` quotes (tiers[*].included[*]), sealed under a
#: key of the entry's own subject (`record_subject`).
PACK_RECORD_FIELDS: Final = ("label", "text")

#: key id -> the key, or None (never had one, or destroyed).
KeyLookup = Callable[[str], bytes | None]
#: subject -> (key id, key) that seals its content now.
KeyFor = Callable[[str], tuple[str, bytes]]


def new_key() -> bytes:
    """A fresh random data key."""
    return os.urandom(KEY_BYTES)


def new_key_id() -> str:
    """A fresh random key id (32 hex digits)."""
    return os.urandom(16).hex()


def new_keys(n: int) -> dict[str, bytes]:
    """`n` fresh (key id, key) pairs, as `new_key_id` and `new_key` make them, from one random read."""
    pool = os.urandom(n * (16 + KEY_BYTES))
    step = 16 + KEY_BYTES
    return {pool[i : i + 16].hex(): pool[i + 16 : i + step] for i in range(0, len(pool), step)}


def _ad(type_: str, subject: str, fields: list[str]) -> bytes:
    return b"\x00".join((AD_PREFIX, type_.encode(), subject.encode(), ",".join(fields).encode()))


def record_subject(record: Mapping[str, Any], pack_id: str) -> str:
    """Whose key seals a quoted pack entry: the memory, the chunk's document, or (state) the pack."""
    rid = record.get("id")
    if not isinstance(rid, str) or not rid:
        return ""
    source = record.get("source")
    if source == "memory":
        return rid
    if source == "chunk":
        return rid.rsplit("/", 2)[0] if rid.count("/") >= 2 else ""
    return pack_id


def _pack_records(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The quoted-entry maps of a context.built payload (tolerant of any shape)."""
    out: list[dict[str, Any]] = []
    tiers = data.get("tiers")
    for t in tiers if isinstance(tiers, list) else []:
        inc = t.get("included") if isinstance(t, dict) else None
        out += [r for r in (inc if isinstance(inc, list) else []) if isinstance(r, dict)]
    return out


def subject_of(type_: str, data: Mapping[str, Any]) -> str:
    """The subject whose data key seals this payload's content ("" when the type seals nothing)."""
    spec = SEALED.get(type_)
    return read_id(data.get(spec.key)) if spec is not None else ""


def subjects_of(type_: str, data: Mapping[str, Any]) -> list[str]:
    """Every subject whose key seals part of this payload (the main one first)."""
    main = subject_of(type_, data)
    if not main:
        return []
    out = [main]
    if type_ == CONTEXT_BUILT:
        for r in _pack_records(data):
            s = record_subject(r, main)
            if s and s not in out:
                out.append(s)
    return out


def _encrypt(message: bytes, ad: bytes, nonce: bytes, key: bytes) -> bytes:
    """XChaCha20-Poly1305 of `message`: ciphertext || tag, the bytes pynacl's binding returns.

    The binding checks its arguments with messages formatted on every call,
    which cost twice the cipher itself on an entry-sized message (about 2 of
    4 µs); here the caller has checked them (`_seal`: bytes, a 24-byte nonce,
    a 32-byte key), so libsodium is called directly.
    """
    if _lib is None:
        return bytes(nb.crypto_aead_xchacha20poly1305_ietf_encrypt(message, ad, nonce, key))
    out = _ffi.new("unsigned char[]", len(message) + TAG_BYTES)
    n = _ffi.new("unsigned long long *")
    if _lib.crypto_aead_xchacha20poly1305_ietf_encrypt(
        out, n, message, len(message), ad, len(ad), _ffi.NULL, nonce, key
    ):
        raise CryptoError("encryption failed")
    return bytes(_ffi.buffer(out, n[0]))


@functools.lru_cache(maxsize=256)
def _order(fields: tuple[str, ...]) -> tuple[str, ...]:
    """Field names in canonical CBOR map order (shorter first, then bytewise)."""
    return tuple(sorted(fields, key=lambda k: (len(k.encode()), k.encode())))


def _seal(type_: str, subject: str, values: dict[str, Any], key_for: KeyFor) -> dict[str, Any]:
    key_id, key = key_for(subject)
    if len(key) != KEY_BYTES:
        raise ValueError(f"a data key is {KEY_BYTES} bytes, not {len(key)}")
    key = bytes(key)  # libsodium reads it in place: bytes, not a view of something mutable
    fields = sorted(values)
    nonce = os.urandom(NONCE_BYTES)
    # `values` arrives with its keys in canonical order (`_order`): the codec then encodes it
    # on its fast path, to the same bytes.
    ct = _encrypt(codec.encode(values), _ad(type_, subject, fields), nonce, key)
    # The box's keys in canonical order too, for the encoder of the entry that carries it.
    return {"box": nonce + ct, "key": key_id, "fields": fields}


def seal_payload(type_: str, data: dict[str, Any], key_for: KeyFor) -> dict[str, Any]:
    """`data` with its content fields moved into one `sealed` box under `key_for(subject)`.

    A type that seals nothing, and a payload without a subject, come back as
    they are. Fields absent from the payload are not sealed (an update seals
    only what it changes). A pack's quoted entries are sealed each in a box
    of its own, under `key_for` of its subject (`subjects_of` names them).
    """
    spec = SEALED.get(type_)
    subject = subject_of(type_, data)
    if spec is None or not subject:
        return data
    sealed, after = _plan(spec.fields, tuple(data))
    # A new map, its keys in canonical order: the codec encodes it on its fast path.
    out = {k: data.get(k) for k in after}
    if sealed:
        out[SEALED_FIELD] = _seal(type_, subject, {f: data[f] for f in sealed}, key_for)
    tiers = out.get("tiers")
    if type_ == CONTEXT_BUILT and isinstance(tiers, list):
        out["tiers"] = _map_records(tiers, lambda r: _seal_record(r, subject, key_for))
    return out


@functools.lru_cache(maxsize=1024)
def _plan(fields: tuple[str, ...], keys: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the `fields` among a payload's `keys`, the payload's keys once they are sealed), each in
    canonical order: what `seal_payload` does to every payload of one shape, worked out once."""
    sealed = tuple(f for f in _order(fields) if f in keys)
    rest = tuple(k for k in keys if k not in fields)
    return sealed, _order((*rest, SEALED_FIELD) if sealed and SEALED_FIELD not in rest else rest)


def _seal_record(r: Any, pack_id: str, key_for: KeyFor) -> Any:
    subject = record_subject(r, pack_id) if isinstance(r, dict) else ""
    if not subject:
        return r
    rec = dict(r)
    values = {f: rec.pop(f) for f in _order(PACK_RECORD_FIELDS) if f in rec}
    if values:
        rec[SEALED_FIELD] = _seal(CONTEXT_BUILT, subject, values, key_for)
    return rec


def _map_records(tiers: list[Any], fn: Callable[[Any], Any]) -> list[Any]:
    out: list[Any] = []
    for t in tiers:
        inc = t.get("included") if isinstance(t, dict) else None
        out.append({**t, "included": [fn(r) for r in inc]} if isinstance(inc, list) else t)
    return out


def reseal_payload(type_: str, data: dict[str, Any], keys: KeyLookup, key_for: KeyFor) -> dict[str, Any]:
    """A stored payload with every box that opens under `keys` sealed again under `key_for`.

    What moving a log to new data keys needs (substrate.seal_migration): a
    box that does not open (its key was destroyed: forgotten content) is kept
    exactly as it is, so it stays unreadable in the new log too; every other
    box gets a fresh nonce under the subject's new key. A pack's quoted
    entries are resealed one by one the same way. Pure.
    """
    spec = SEALED.get(type_)
    subject = subject_of(type_, data)
    if spec is None or not subject:
        return data
    out = dict(data)
    box = _box_of(data)
    if box is not None:
        values, closed = _open(type_, subject, box, keys)
        if not closed:
            out[SEALED_FIELD] = _seal(type_, subject, values, key_for)
    if type_ == CONTEXT_BUILT and isinstance(out.get("tiers"), list):
        out["tiers"] = _map_records(out["tiers"], lambda r: _reseal_record(r, subject, keys, key_for))
    return out


def _reseal_record(r: Any, pack_id: str, keys: KeyLookup, key_for: KeyFor) -> Any:
    box = _box_of(r) if isinstance(r, dict) else None
    subject = record_subject(r, pack_id) if box is not None else ""
    if box is None or not subject:
        return r
    values, closed = _open(CONTEXT_BUILT, subject, box, keys)
    if closed:
        return r
    return {**r, SEALED_FIELD: _seal(CONTEXT_BUILT, subject, values, key_for)}


def _box_of(data: Mapping[str, Any]) -> dict[str, Any] | None:
    box = data.get(SEALED_FIELD)
    return box if isinstance(box, dict) else None


def sealed_fields(data: Mapping[str, Any]) -> list[str]:
    """The names of the fields a stored payload carries sealed (before opening), sorted."""
    box = _box_of(data)
    names = box.get("fields") if box is not None else None
    return sorted(f for f in names if isinstance(f, str)) if isinstance(names, list) else []


def key_ids(type_: str, data: Mapping[str, Any], subjects: set[str] | None = None) -> list[str]:
    """The key ids a stored payload's boxes name (only those of `subjects`, when given)."""
    out: list[str] = []
    main = subject_of(type_, data)

    def take(box: dict[str, Any] | None, subject: str) -> None:
        k = box.get("key") if box is not None else None
        if isinstance(k, str) and k and (subjects is None or subject in subjects) and k not in out:
            out.append(k)

    take(_box_of(data), main)
    if type_ == CONTEXT_BUILT:
        for r in _pack_records(data):
            take(_box_of(r), record_subject(r, main))
    return out


_CLOSED: Final = object()


def _open(type_: str, subject: str, box: dict[str, Any], keys: KeyLookup) -> tuple[dict[str, Any], list[str]]:
    """(opened fields, fields that stayed sealed) of one box; total."""
    names = box.get("fields")
    fields = [f for f in names if isinstance(f, str)] if isinstance(names, list) else []
    key_id, raw = box.get("key"), box.get("box")
    key = keys(key_id) if isinstance(key_id, str) and key_id and subject else None
    if key is None or not isinstance(raw, bytes) or len(raw) < NONCE_BYTES + TAG_BYTES:
        return {}, sorted(fields)
    try:
        plain = nb.crypto_aead_xchacha20poly1305_ietf_decrypt(
            raw[NONCE_BYTES:], _ad(type_, subject, fields), raw[:NONCE_BYTES], key
        )
        values = codec.decode(plain, "sealed fields")
    except (CryptoError, DecodeError, ValueError, TypeError):
        return {}, sorted(fields)
    if not isinstance(values, dict) or sorted(values) != sorted(fields):
        return {}, sorted(fields)
    return values, []


def sealed_values(type_: str, plain: Mapping[str, Any], sealed: Mapping[str, Any]) -> dict[str, Any] | None:
    """The fields `seal_payload(type_, plain, ...)` put in `sealed`'s one box, taken from `plain`.

    What `open_payload` gives back for that box, without its key: the writer
    that sealed the payload keeps them for the fold of the entry it just
    appended (`opened_with`). None when opening takes more than the one box
    (a pack's quoted entries) or when the box is not what sealing `plain` makes.
    """
    box = _box_of(sealed)
    names = box.get("fields") if box is not None else None
    if type_ == CONTEXT_BUILT or not isinstance(names, list) or SEALED_FIELD in plain:
        return None
    if not all(isinstance(f, str) and f in plain for f in names):
        return None
    return {f: plain[f] for f in names}


def opened_with(data: dict[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """`open_payload` of a payload whose one box holds `values` (`sealed_values`): the box's
    fields given back, the rest of `data` as it is. The caller vouches for `values` (the
    entry's bytes are those its own writer sealed and signed)."""
    out = {k: x for k, x in data.items() if k != SEALED_FIELD}
    out.update(values)
    return out


def open_payload(type_: str, data: dict[str, Any], keys: KeyLookup) -> dict[str, Any]:
    """The payload with its boxes opened; total (never raises on a hostile payload).

    A box that opens gives its fields back. When one does not (no key for
    it, a box of the wrong shape, or one that fails authentication), its
    fields stay absent and `sealed` becomes the sorted list of them: a reader
    shows them as sealed, never as something else. A pack's quoted entries
    are opened the same way, each keeping `sealed` (its closed fields) when
    it stays shut. A payload without boxes comes back as it is.
    """
    if SEALED.get(type_) is None or (SEALED_FIELD not in data and type_ != CONTEXT_BUILT):
        return data
    subject = subject_of(type_, data)
    out = {k: x for k, x in data.items() if k != SEALED_FIELD}
    box = _box_of(data)
    if box is not None:
        values, closed = _open(type_, subject, box, keys)
        out.update(values)
        if closed:
            out[SEALED_FIELD] = closed
    elif SEALED_FIELD in data:
        out[SEALED_FIELD] = data[SEALED_FIELD]  # not a box: left as the payload has it
    if type_ == CONTEXT_BUILT and isinstance(out.get("tiers"), list):
        out["tiers"] = _map_records(out["tiers"], lambda r: _open_record(r, subject, keys))
    return out


def _open_record(r: Any, pack_id: str, keys: KeyLookup) -> Any:
    box = _box_of(r) if isinstance(r, dict) else None
    if box is None:
        return r
    rec = {k: x for k, x in r.items() if k != SEALED_FIELD}
    values, closed = _open(CONTEXT_BUILT, record_subject(r, pack_id), box, keys)
    rec.update(values)
    if closed:
        rec[SEALED_FIELD] = closed
    return rec


# -- data-key files ------------------------------------------------------------------------


def keys_header(log_id: bytes | None = None) -> bytes:
    """The first item of a data-key file."""
    head: dict[str, Any] = {"format": KEYS_FORMAT}
    if log_id is not None:
        head["log_id"] = log_id
    return codec.encode(head)


def encode_key_record(key_id: str, key: bytes) -> bytes:
    """One key of a data-key file."""
    if not isinstance(key_id, str) or not key_id or not isinstance(key, bytes) or len(key) != KEY_BYTES:
        raise ValueError("a key record needs a key id and a 32-byte key")
    if len(key_id) == 32 and key_id.isascii():
        # The ids `new_keys` makes (32 hex digits): array(2), text(32), bytes(32), written out.
        return b"\x82\x78\x20" + key_id.encode() + b"\x58\x20" + key
    try:
        # Text and bytes in a definite array: cbor2's plain encoding is the canonical one.
        return bytes(cbor2.dumps([key_id, key]))
    except UnicodeEncodeError as exc:
        raise ValueError("a key id must be Unicode text") from exc


def encode_keys(keys: Mapping[str, bytes], log_id: bytes | None = None) -> bytes:
    """A whole data-key file, key ids in sorted order."""
    return keys_header(log_id) + b"".join(encode_key_record(s, keys[s]) for s in sorted(keys))


def _items(data: bytes, whole: bool) -> Iterator[Any]:
    stream = io.BytesIO(data)
    while stream.tell() < len(data):
        start = stream.tell()
        try:
            yield cbor2.CBORDecoder(stream).decode()
        except cbor2.CBORDecodeEOF as exc:
            if whole:
                raise DecodeError(f"a record cut short at byte {start}") from exc
            # A record cut short by a crash mid-append was never acknowledged: its entry was
            # not written either (keys are durable before the entry that uses them).
            return
        except (cbor2.CBORError, ValueError, OverflowError, MemoryError, RecursionError) as exc:
            raise DecodeError(f"malformed CBOR at byte {stream.tell()}: {exc}") from exc


def decode_keys(
    data: bytes, what: str = "data keys", *, whole: bool = False
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The header and the keys (key id -> key) of a data-key file; DecodeError when it is not one.

    A trailing record cut short is ignored (see `_items`) unless `whole`: a file written in one
    piece (a bundle's) was never appended to, so there a cut record is damage. Every whole
    record must be a ``[text, 32 bytes]`` array.
    """
    if len(data) > MAX_KEYS_FILE:
        raise DecodeError(f"{what}: {len(data)} bytes is more than a data-key file may be")
    try:
        head, *records = list(_items(data, whole)) or [None]
    except DecodeError as exc:
        raise DecodeError(f"{what}: {exc.message}") from exc
    if not isinstance(head, dict) or head.get("format") != KEYS_FORMAT:
        raise DecodeError(
            f"{what}: not a data-key file", expected=KEYS_FORMAT, found=repr(head)[:80] if head else "nothing"
        )
    keys: dict[str, bytes] = {}
    for n, rec in enumerate(records, start=1):
        if (
            not isinstance(rec, list)
            or len(rec) != 2
            or not isinstance(rec[0], str)
            or not rec[0]
            or not isinstance(rec[1], bytes)
            or len(rec[1]) != KEY_BYTES
        ):
            raise DecodeError(f"{what}: record {n} is not [key id, 32-byte key]", found=repr(rec)[:80])
        keys.setdefault(rec[0], rec[1])
    return head, keys
