"""Sealed content: the AEAD that keeps what a memory says out of the signed bytes, and data-key files.

An entry of a sealing type version (vocabulary.SEALED) carries its content
fields only inside `sealed`, a map from field name to
``nonce (24 bytes) || XChaCha20-Poly1305 ciphertext and tag`` of the
field's canonical CBOR value, under the data key of its subject (the
memory, interaction, document, atomised source or pack the type names in
its key field). The associated data binds each box to
``"mnemolog/sealed/v1" 0x00 type 0x00 subject 0x00 field``, so a box cannot
be moved to another field, another subject or another event type.

Destroying a subject's data key (forgetting) leaves its boxes in the log,
signed, hashed and unreadable: the log, its exports, tiles and witnesses'
copies stay whole and verify. Opening is pure: given a key lookup it gives
the payload back with its fields, or with `sealed` turned into the list of
the fields it could not open (no key, or a box that does not open).

Data-key files (the home's key store and the keys a `log export` carries
beside the log) are CBOR sequences: a header map, then one ``[subject,
key]`` array per key; the first key of a subject wins.

Standard library, cbor2 and pynacl only: the standalone verifier opens
sealed content with this module when it is given keys.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import cbor2
from nacl import bindings as nb
from nacl.exceptions import CryptoError

from mnemolog.eventlog import codec
from mnemolog.eventlog.errors import DecodeError
from mnemolog.eventlog.vocabulary import CONTEXT_BUILT, SEALED, SEALED_FIELD, read_id

__all__ = [
    "AD_PREFIX",
    "KEYS_FORMAT",
    "KEY_BYTES",
    "NONCE_BYTES",
    "KeyLookup",
    "decode_keys",
    "encode_key_record",
    "encode_keys",
    "keys_header",
    "new_key",
    "open_payload",
    "seal_payload",
    "sealed_fields",
    "subject_of",
]

KEYS_FORMAT: Final = "mnemolog/data-keys/v1"
AD_PREFIX: Final = b"mnemolog/sealed/v1"
KEY_BYTES: Final = nb.crypto_aead_xchacha20poly1305_ietf_KEYBYTES  # 32
NONCE_BYTES: Final = nb.crypto_aead_xchacha20poly1305_ietf_NPUBBYTES  # 24
TAG_BYTES: Final = nb.crypto_aead_xchacha20poly1305_ietf_ABYTES  # 16
MAX_KEYS_FILE: Final = 1 << 30

KeyLookup = Callable[[str], bytes | None]


def new_key() -> bytes:
    """A fresh random data key."""
    return os.urandom(KEY_BYTES)


def _ad(type_: str, subject: str, field: str) -> bytes:
    return b"\x00".join((AD_PREFIX, type_.encode(), subject.encode(), field.encode()))


#: The fields of each entry a `context.built` quotes (tiers[*].included[*]) sealed under the
#: key of the entry's own subject (`record_subject`).
PACK_RECORD_FIELDS: Final = ("label", "text")
_PACK_AD_FIELD: Final = "tiers.included."


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


def subject_of(type_: str, data: Mapping[str, Any]) -> str:
    """The subject whose data key seals this payload's content ("" when the type seals nothing)."""
    spec = SEALED.get(type_)
    return read_id(data.get(spec.key)) if spec is not None else ""


def _box(type_: str, subject: str, field: str, value: Any, key: bytes) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    ct = nb.crypto_aead_xchacha20poly1305_ietf_encrypt(
        codec.encode(value), _ad(type_, subject, field), nonce, key
    )
    return bytes(nonce + ct)


def seal_payload(
    type_: str, data: dict[str, Any], key: bytes, record_keys: KeyLookup | None = None
) -> dict[str, Any]:
    """`data` with its content fields moved into `sealed` boxes under `key`.

    A type that seals nothing, and a payload without a subject, come back as
    they are. Fields absent from the payload are not sealed (an update seals
    only what it changes). A pack's quoted entries are sealed each under its
    subject's key from `record_keys` (`subjects_of` names them).
    """
    spec = SEALED.get(type_)
    subject = subject_of(type_, data)
    if spec is None or not subject:
        return data
    if len(key) != KEY_BYTES:
        raise ValueError(f"a data key is {KEY_BYTES} bytes, not {len(key)}")
    out = dict(data)
    boxes: dict[str, bytes] = {}
    for f in spec.fields:
        if f in out:
            boxes[f] = _box(type_, subject, f, out.pop(f), key)
    if boxes:
        out[SEALED_FIELD] = boxes
    if type_ == CONTEXT_BUILT and isinstance(out.get("tiers"), list):
        out["tiers"] = _seal_records(out["tiers"], subject, record_keys or {subject: key}.get)
    return out


def _seal_records(tiers: list[Any], pack_id: str, keys: KeyLookup) -> list[Any]:
    sealed_tiers: list[Any] = []
    for t in tiers:
        inc = t.get("included") if isinstance(t, dict) else None
        if not isinstance(inc, list):
            sealed_tiers.append(t)
            continue
        records = []
        for r in inc:
            subject = record_subject(r, pack_id) if isinstance(r, dict) else ""
            key = keys(subject) if subject else None
            if key is None:
                records.append(r)
                continue
            rec = dict(r)
            boxes = {
                f: _box(CONTEXT_BUILT, subject, _PACK_AD_FIELD + f, rec.pop(f), key)
                for f in PACK_RECORD_FIELDS
                if f in rec
            }
            rec[SEALED_FIELD] = boxes
            records.append(rec)
        sealed_tiers.append({**t, "included": records})
    return sealed_tiers


def sealed_fields(data: Mapping[str, Any]) -> list[str]:
    """The names of the boxes a stored payload carries (before opening), sorted."""
    boxes = data.get(SEALED_FIELD)
    return sorted(k for k in boxes if isinstance(k, str)) if isinstance(boxes, dict) else []


def open_payload(type_: str, data: dict[str, Any], keys: KeyLookup) -> dict[str, Any]:
    """The payload with its boxes opened; total (never raises on a hostile payload).

    Every box that opens becomes its field again. When some do not (no key
    for the subject, a box of the wrong shape, or one that fails
    authentication), `sealed` becomes the sorted list of those fields, which
    stay absent: a reader shows them as sealed, never as something else.
    A payload without boxes comes back as it is.
    """
    boxes = data.get(SEALED_FIELD)
    if not isinstance(boxes, dict) or SEALED.get(type_) is None:
        return data
    out = {k: x for k, x in data.items() if k != SEALED_FIELD}
    subject = subject_of(type_, data)
    if type_ == CONTEXT_BUILT and isinstance(out.get("tiers"), list):
        out["tiers"] = _open_records(out["tiers"], subject, keys)
    key = keys(subject) if subject else None
    closed: list[str] = []
    for f, box in boxes.items():
        if not isinstance(f, str):
            continue
        value = _open_box(type_, subject, f, box, key)
        if value is _CLOSED:
            closed.append(f)
        else:
            out[f] = value
    if closed:
        out[SEALED_FIELD] = sorted(closed)
    return out


_CLOSED: Final = object()


def _open_records(tiers: list[Any], pack_id: str, keys: KeyLookup) -> list[Any]:
    opened_tiers: list[Any] = []
    for t in tiers:
        inc = t.get("included") if isinstance(t, dict) else None
        if not isinstance(inc, list):
            opened_tiers.append(t)
            continue
        records = []
        for r in inc:
            boxes = r.get(SEALED_FIELD) if isinstance(r, dict) else None
            if not isinstance(boxes, dict):
                records.append(r)
                continue
            subject = record_subject(r, pack_id)
            key = keys(subject) if subject else None
            rec = {k: x for k, x in r.items() if k != SEALED_FIELD}
            closed = []
            for f, box in boxes.items():
                if not isinstance(f, str):
                    continue
                value = _open_box(CONTEXT_BUILT, subject, _PACK_AD_FIELD + f, box, key)
                if value is _CLOSED:
                    closed.append(f)
                else:
                    rec[f] = value
            if closed:
                rec[SEALED_FIELD] = sorted(closed)
            records.append(rec)
        opened_tiers.append({**t, "included": records})
    return opened_tiers


def _open_box(type_: str, subject: str, field: str, box: Any, key: bytes | None) -> Any:
    if key is None or not isinstance(box, bytes) or len(box) < NONCE_BYTES + TAG_BYTES:
        return _CLOSED
    try:
        plain = nb.crypto_aead_xchacha20poly1305_ietf_decrypt(
            box[NONCE_BYTES:], _ad(type_, subject, field), box[:NONCE_BYTES], key
        )
        return codec.decode(plain, f"sealed {field}")
    except (CryptoError, DecodeError, ValueError, TypeError):
        return _CLOSED


# -- data-key files ------------------------------------------------------------------------


def keys_header(log_id: bytes | None = None) -> bytes:
    """The first item of a data-key file."""
    head: dict[str, Any] = {"format": KEYS_FORMAT}
    if log_id is not None:
        head["log_id"] = log_id
    return codec.encode(head)


def encode_key_record(subject: str, key: bytes) -> bytes:
    """One key of a data-key file."""
    if not subject or len(key) != KEY_BYTES:
        raise ValueError("a key record needs a subject and a 32-byte key")
    return codec.encode([subject, key])


def encode_keys(keys: Mapping[str, bytes], log_id: bytes | None = None) -> bytes:
    """A whole data-key file, subjects in sorted order."""
    return keys_header(log_id) + b"".join(encode_key_record(s, keys[s]) for s in sorted(keys))


def _items(data: bytes) -> Iterator[Any]:
    stream = io.BytesIO(data)
    while stream.tell() < len(data):
        try:
            yield cbor2.CBORDecoder(stream).decode()
        except cbor2.CBORDecodeEOF:
            # A record cut short by a crash mid-append was never acknowledged: its entry was
            # not written either (keys are durable before the entry that uses them).
            return
        except (cbor2.CBORError, ValueError, OverflowError, MemoryError, RecursionError) as exc:
            raise DecodeError(f"malformed CBOR at byte {stream.tell()}: {exc}") from exc


def decode_keys(data: bytes, what: str = "data keys") -> tuple[dict[str, Any], dict[str, bytes]]:
    """The header and the keys (subject -> key) of a data-key file; DecodeError when it is not one.

    A trailing record cut short is ignored (see `_items`); every whole
    record must be a ``[text, 32 bytes]`` array.
    """
    if len(data) > MAX_KEYS_FILE:
        raise DecodeError(f"{what}: {len(data)} bytes is more than a data-key file may be")
    try:
        head, *records = list(_items(data)) or [None]
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
            raise DecodeError(f"{what}: record {n} is not [subject, 32-byte key]", found=repr(rec)[:80])
        keys.setdefault(rec[0], rec[1])
    return head, keys
