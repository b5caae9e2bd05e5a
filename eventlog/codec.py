"""Canonical CBOR (RFC 8949 §4.2.1 core deterministic encoding) for format v1.

The codec owns the value model every signed structure uses: null, booleans,
integers in the 64-bit CBOR range, finite floats, text, bytes, arrays and maps
with text keys. No tags, no simple values, no indefinite lengths. `decode`
accepts only bytes that are exactly the canonical encoding of what they decode
to, so one value has one byte string and a signature covers exactly one value.
"""

from __future__ import annotations

import io
import math
from typing import Any

import cbor2

from mnemolog.eventlog.errors import DecodeError

UINT_MAX = 2**64 - 1
NINT_MIN = -(2**64)
MAX_DEPTH = 32


def _check(value: Any, depth: int, path: str) -> None:
    if depth > MAX_DEPTH:
        raise DecodeError(f"value nested deeper than {MAX_DEPTH} levels at {path}", field=path)
    # bool is a subclass of int: test it first so True is not range-checked.
    if value is None or isinstance(value, bool | str | bytes):
        return
    if isinstance(value, int):
        if not NINT_MIN <= value <= UINT_MAX:
            raise DecodeError(f"integer outside the 64-bit CBOR range at {path}: {value}", field=path)
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise DecodeError(f"NaN or infinite float at {path}", field=path)
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check(item, depth + 1, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise DecodeError(f"map key at {path} is {type(key).__name__}, expected text", field=path)
            _check(item, depth + 1, f"{path}.{key}")
        return
    raise DecodeError(
        f"value of type {type(value).__name__} at {path} is outside the format-v1 value model",
        field=path,
    )


def check_value(value: Any, path: str = "$") -> None:
    """Raise DecodeError unless `value` is inside the format-v1 value model."""
    _check(value, 0, path)


def encode(value: Any) -> bytes:
    """The canonical CBOR encoding of `value` (which must be in the value model)."""
    check_value(value)
    return bytes(cbor2.dumps(value, canonical=True))


def decode(data: bytes | memoryview, what: str = "value") -> Any:
    """Decode one canonical CBOR item that spans all of `data`.

    Raises DecodeError on truncated, trailing, non-canonical or out-of-model
    bytes; never returns a value whose canonical encoding differs from `data`.
    """
    raw = bytes(data)
    stream = io.BytesIO(raw)
    try:
        value = cbor2.CBORDecoder(stream).decode()
    except cbor2.CBORDecodeEOF as exc:
        raise DecodeError(f"{what}: truncated CBOR ({len(raw)} bytes)") from exc
    except (cbor2.CBORError, ValueError, OverflowError, MemoryError, RecursionError) as exc:
        raise DecodeError(f"{what}: malformed CBOR: {exc}") from exc
    if stream.tell() != len(raw):
        raise DecodeError(
            f"{what}: {len(raw) - stream.tell()} trailing bytes after one CBOR item",
            expected=stream.tell(),
            found=len(raw),
        )
    check_value(value, "$")
    if cbor2.dumps(value, canonical=True) != raw:
        raise DecodeError(f"{what}: bytes are not the canonical CBOR encoding of their value")
    return value
