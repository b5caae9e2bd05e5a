"""Offline verification primitives shared by forensic bundles and log exports.

Everything here works on bytes handed over by someone else (no log
directory, no index, no projection): splitting a CBOR sequence of entries,
checking one entry (canonical bytes, key id and signature under the key
history), following the key history from genesis, deciding which key is
trusted, and opening a checkpoint with it. Like the rest of the offline
verifier it imports only the standard library, cbor2, pynacl and
mnemolog.eventlog modules that obey the same rule.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import cbor2

from mnemolog.eventlog.errors import DecodeError, MnemologError, VerificationError
from mnemolog.eventlog.format import codec
from mnemolog.eventlog.format.entry import ZERO_HASH, Entry, encodings, entry_from_map
from mnemolog.eventlog.format.note import Checkpoint, open_checkpoint, peek_checkpoint
from mnemolog.eventlog.verify.trust import GENESIS_TYPE, ROTATION_TYPE, KeySchedule

_CBOR_ERRORS = (cbor2.CBORError, ValueError, TypeError, OverflowError, MemoryError, RecursionError)


def fail(message: str, check: str, **where: Any) -> VerificationError:
    return VerificationError(message, check=check, **where)


def split_sequence(buf: bytes, file: str) -> list[tuple[bytes, Any]]:
    """The items of an RFC 8742 CBOR sequence as (raw bytes, decoded value)."""
    stream = io.BytesIO(buf)
    dec = cbor2.CBORDecoder(stream)
    out: list[tuple[bytes, Any]] = []
    pos = 0
    while pos < len(buf):
        try:
            value = dec.decode()
        except cbor2.CBORDecodeEOF:
            raise fail(f"{file}: truncated CBOR item at offset {pos}", "entries.decode", file=file) from None
        except _CBOR_ERRORS as exc:
            raise fail(
                f"{file}: malformed CBOR at offset {pos}: {exc}", "entries.decode", file=file
            ) from None
        end = stream.tell()
        out.append((buf[pos:end], value))
        pos = end
    return out


def decode_any(raw: bytes, file: str) -> Any:
    """Exactly one CBOR item filling `raw` (its canonical form is checked by the caller)."""
    items = split_sequence(raw, file)
    if len(items) != 1:
        raise fail(f"{file}: expected one CBOR item, found {len(items)}", "entries.decode", file=file)
    return items[0][1]


def decode_map(raw: bytes, file: str, check: str) -> dict[str, Any]:
    """One canonical CBOR map filling all of `raw` (a manifest, a proofs file, a header)."""
    try:
        value = codec.decode(raw, file)
    except DecodeError as exc:
        raise fail(f"{file}: {exc.message}", check, file=file) from exc
    if not isinstance(value, dict):
        raise fail(f"{file}: expected a CBOR map", check, file=file)
    return value


def parse_entry_item(raw: bytes, value: Any, file: str, index: int) -> Entry:
    """Shape and canonical bytes of one entry; signatures are checked by `KeySchedule`."""
    try:
        e = entry_from_map(value, raw, f"{file} item {index}")
        _, canonical = encodings(e.seq, e.ts, e.type, e.tv, e.data, e.prev, e.kid, e.sig)
    except DecodeError as exc:
        raise fail(f"{file}: item {index}: {exc.message}", "entry.decode", file=file) from exc
    except _CBOR_ERRORS as exc:
        raise fail(f"{file}: item {index}: {exc}", "entry.decode", file=file) from exc
    if canonical != raw:
        raise fail(
            f"{file}: entry {e.seq} is not the canonical CBOR encoding of itself",
            "entry.canonical",
            seq=e.seq,
            file=file,
        )
    return e


def parse_entries(buf: bytes, file: str) -> list[Entry]:
    return [parse_entry_item(raw, value, file, i) for i, (raw, value) in enumerate(split_sequence(buf, file))]


def key_schedule(key_entries: Sequence[Entry], file: str) -> KeySchedule:
    """The key history from genesis through every rotation, each key event's signature checked.

    The one `KeySchedule` type decides which key signs what; this names the
    failures the way bundle and export verification report them.
    """
    if not key_entries or key_entries[0].seq != 0 or key_entries[0].type != GENESIS_TYPE:
        raise fail(
            f"{file}: the key history must start with the genesis entry (seq 0)",
            "keys.genesis",
            file=file,
        )
    g = key_entries[0]
    if g.prev != ZERO_HASH:
        raise fail("the genesis entry does not start the chain", "entry.prev", seq=0, file=file)
    for e in key_entries[1:]:
        if e.type != ROTATION_TYPE:
            raise fail(
                f"{file}: entry {e.seq} of type {e.type!r} is not a key event",
                "keys.type",
                seq=e.seq,
                file=file,
            )
    last = 0
    for e in key_entries[1:]:
        if e.seq <= last:
            raise fail(f"{file}: key events out of order at {e.seq}", "keys.order", seq=e.seq, file=file)
        last = e.seq
    try:
        return KeySchedule.from_key_entries(key_entries)
    except DecodeError as exc:
        seq = exc.details.get("seq")
        check = "keys.genesis" if seq == 0 and "log_id" in exc.message else "keys.data"
        raise fail(f"{file}: {exc.message}", check, seq=seq, file=file) from exc
    except VerificationError as exc:
        raise fail(
            exc.message if exc.message.startswith(file) else f"{file}: {exc.message}",
            exc.check,
            seq=exc.seq,
            file=file,
            expected=exc.expected,
            found=exc.found,
        ) from exc


def open_trusted_checkpoint(raw: bytes, keys: KeySchedule, file: str) -> Checkpoint:
    """The checkpoint body, its signature checked with the key valid at its size."""
    try:
        body = peek_checkpoint(raw, file)
    except DecodeError as exc:
        raise fail(f"{file}: {exc.message}", "checkpoint.decode", file=file) from exc
    if body.origin != keys.origin:
        raise fail(
            f"{file}: the checkpoint is for another log",
            "checkpoint.origin",
            file=file,
            expected=keys.origin,
            found=body.origin,
        )
    if body.size == 0:
        raise fail(f"{file}: a checkpoint of an empty tree", "checkpoint.size", file=file)
    last_key_seq = keys.epochs[-1].event_seq
    if last_key_seq >= body.size:
        raise fail(
            f"{file}: the key history holds entry {last_key_seq}, beyond the checkpoint of size {body.size}",
            "keys.beyond_checkpoint",
            file=file,
            seq=last_key_seq,
        )
    key = keys.key_at(body.size)
    try:
        return open_checkpoint(raw, key, file)
    except DecodeError as exc:
        raise fail(f"{file}: {exc.message}", "checkpoint.decode", file=file) from exc
    except VerificationError as exc:
        raise fail(exc.message, exc.check, file=file, expected=exc.expected, found=exc.found) from exc


def as_int(value: Any, what: str, file: str, check: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail(f"{file}: {what} must be an unsigned integer", check, file=file)
    return value


def as_hash(value: Any, what: str, file: str, check: str) -> bytes:
    if not isinstance(value, bytes) or len(value) != 32:
        raise fail(f"{file}: {what} must be 32 bytes", check, file=file)
    return value


def as_list(value: Any, what: str, file: str, check: str) -> list[Any]:
    if not isinstance(value, list):
        raise fail(f"{file}: {what} must be an array", check, file=file)
    return value


def as_str(value: Any, what: str, file: str, check: str) -> str:
    if not isinstance(value, str):
        raise fail(f"{file}: {what} must be text", check, file=file)
    return value


def require_keys(m: dict[str, Any], keys: set[str], file: str, check: str) -> None:
    """Exactly these keys: a missing one is malformed, an unknown one is an unsigned surprise."""
    if set(m) != keys:
        raise fail(
            f"{file}: keys differ from the format (missing {sorted(keys - set(m))}, "
            f"unexpected {sorted(set(m) - keys)})",
            check,
            file=file,
        )


def wrap_unexpected(exc: Exception, what: str) -> MnemologError:
    """A parser error we did not anticipate is still a refusal, never a traceback."""
    return fail(f"{what}: malformed input ({type(exc).__name__}: {exc})", "input.malformed")
