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


Path = Any  # a str, or (parent path, key or index): formatted only when an error is raised


def _path(path: Path) -> str:
    parts: list[str] = []
    while isinstance(path, tuple):
        path, k = path
        parts.append(f"[{k}]" if isinstance(k, int) else f".{k}")
    return str(path) + "".join(reversed(parts))


def _fail(value: Any, depth: int, p: Path) -> DecodeError:
    path = _path(p)
    if depth > MAX_DEPTH:
        return DecodeError(f"value nested deeper than {MAX_DEPTH} levels at {path}", field=path)
    if isinstance(value, float):
        return DecodeError(f"NaN or infinite float at {path}", field=path)
    if isinstance(value, int) and not isinstance(value, bool):
        return DecodeError(f"integer outside the 64-bit CBOR range at {path}: {value}", field=path)
    return DecodeError(
        f"value of type {type(value).__name__} at {path} is outside the format-v1 value model",
        field=path,
    )


def _scan(value: Any, depth: int, path: Path) -> bool:
    """Check `value` against the value model; raise DecodeError naming the first offence.

    Returns True when the value is "plain": it holds no float and every map's
    keys are already in canonical order. For a plain value cbor2's default
    encoder (insertion order, shortest integers and lengths, definite lengths)
    writes exactly the canonical bytes, at a third of the cost of its
    canonical mode.
    """
    t = type(value)
    if t is str or t is bytes or t is bool or value is None:
        return True
    if t is int:
        if NINT_MIN <= value <= UINT_MAX:
            return True
        raise _fail(value, depth, path)
    if depth >= MAX_DEPTH and (t is dict or t is list) and value:
        raise _fail(value, depth + 1, path)  # its items would nest too deep
    if t is dict:
        plain = True
        pl, pb = -1, b""
        for key, item in value.items():
            if type(key) is not str:
                where = _path(path)
                raise DecodeError(f"map key at {where} is {type(key).__name__}, expected text", field=where)
            try:
                kb = key.encode()
            except UnicodeEncodeError:
                raise _surrogate(key, (path, "<key>")) from None
            kl = len(kb)
            if plain and not (kl > pl or (kl == pl and kb > pb)):
                plain = False
            pl, pb = kl, kb
            it = type(item)
            # Scalars inline: most of a payload is text and small integers.
            if it is str or it is bytes or it is bool or item is None:
                continue
            if it is int and NINT_MIN <= item <= UINT_MAX:
                continue
            if not _scan(item, depth + 1, (path, key)):
                plain = False
        return plain
    if t is list:
        plain = True
        for i, item in enumerate(value):
            it = type(item)
            if it is str or it is bytes or it is bool or item is None:
                continue
            if it is int and NINT_MIN <= item <= UINT_MAX:
                continue
            if not _scan(item, depth + 1, (path, i)):
                plain = False
        return plain
    if t is float:
        if math.isfinite(value):
            return False
        raise _fail(value, depth, path)
    # Subclasses (an IntEnum, a str subclass): the value model holds their base types.
    base: Any
    for base in (int, str, bytes, float, list, dict):
        if isinstance(value, base):
            _scan(base(value), depth, path)
            return False  # cbor2's canonical mode knows how to encode it
    raise _fail(value, depth, path)


def is_plain(value: Any, path: str = "$", *, depth: int = 0) -> bool:
    """Check the value model (raising DecodeError) and tell whether `value` is plain:
    no floats and every map's keys in canonical order, so that cbor2's default
    encoding of it is the canonical one."""
    return _scan(value, depth, path)


def encode(value: Any, path: str = "$", *, depth: int = 0) -> bytes:
    """The canonical CBOR encoding of `value` (which must be in the value model).

    `depth` is how deep `value` sits in the structure that is signed (an
    entry's payload sits at depth 1, inside the entry map): the nesting limit
    counts from the outermost map, wherever a value is checked.
    """
    plain = _scan(value, depth, path)
    try:
        return bytes(cbor2.dumps(value) if plain else cbor2.dumps(value, canonical=True))
    except UnicodeEncodeError:
        # Text must be Unicode scalar values; checking every string up front would
        # cost every append, so the offender is looked for only once one exists.
        raise _surrogate(value, path) from None


def _surrogate(value: Any, path: Path) -> DecodeError:
    stack: list[tuple[Any, Path]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                at = _path(where)
                return DecodeError(
                    f"text at {at} is not valid Unicode: lone surrogate U+{ord(item[exc.start]):04X} "
                    f"at character {exc.start}",
                    field=at,
                )
        elif isinstance(item, dict):
            for k, v in item.items():
                stack.append((k, (where, "<key>")))
                stack.append((v, (where, k)))
        elif isinstance(item, list):
            stack.extend((v, (where, i)) for i, v in enumerate(item))
    return DecodeError(f"text under {_path(path)} is not valid Unicode", field=_path(path))


def is_canonical(value: Any, raw: bytes, path: str = "$") -> bool:
    """Whether `raw` is the canonical encoding of `value`, which was decoded from it.

    Raises DecodeError when `value` is outside the value model. A decoded map
    keeps the order of its encoded keys, so a map whose keys are out of order
    proves `raw` non-canonical without re-encoding anything.
    """
    if _scan(value, 0, path):
        return bytes(cbor2.dumps(value)) == raw
    return bytes(cbor2.dumps(value, canonical=True)) == raw


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
    if not is_canonical(value, raw):
        raise DecodeError(f"{what}: bytes are not the canonical CBOR encoding of their value")
    return value
