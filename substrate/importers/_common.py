"""What every format mapper shares: deterministic ids, namespaces, times and error paths.

A mapper is a pure function from a parsed document to records in the shape a
JSON Lines import line has (substrate.importer.FIELDS); every limit of a memory
is checked afterwards by the importer itself, so the mappers only say where
in the source document a field came from when it is missing or of the wrong type.
"""

from __future__ import annotations

import hashlib
import math
import re
from datetime import UTC, datetime
from typing import Any, Final

from mnemolog.eventlog.errors import BadInput
from mnemolog.substrate.ids import encode_128

_SEGMENT_BAD: Final = re.compile(r"[^A-Za-z0-9_.\-]+")
#: Years a timestamp may name: an epoch in ms or µs read as seconds lands far outside.
_YEARS: Final = range(1971, 2200)


class MapError(BadInput):
    """A source document that does not have the shape its format documents (exit 65)."""

    slug = "bad_import_source"


def derived_id(fmt: str, pointer: str) -> str:
    """A ULID-shaped id that depends only on (format, source pointer).

    Re-importing the same item yields the same id, so the importer's
    skip-existing path adds nothing the second time. 128 bits of SHA-256 in
    26 base32 characters (the first is 0-7, as in any 128-bit ULID).
    """
    return encode_128(int.from_bytes(hashlib.sha256(f"{fmt}\0{pointer}".encode()).digest()[:16], "big"))


def segment(text: str) -> str:
    """`text` as one namespace segment: other characters become '-', at most 64 characters."""
    s = _SEGMENT_BAD.sub("-", text).strip("-.")[:64].strip("-.")
    return s or "_"


def tag(text: str) -> str | None:
    """A tag from free text (whitespace becomes '-'), None when nothing is left."""
    t = "-".join(text.split())[:64]
    return t or None


def at(where: str, key: str | int) -> str:
    return f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else key


def need(obj: Any, key: str, where: str, types: type | tuple[type, ...], *, required: bool = True) -> Any:
    """obj[key] checked against `types`; MapError naming the path (`where.key`) otherwise."""
    if not isinstance(obj, dict):
        raise MapError(f"{where or 'the document'} must be a JSON object", field=where)
    if key not in obj or obj[key] is None:
        if required:
            raise MapError(f"{at(where, key)} is missing", field=at(where, key))
        return None
    value = obj[key]
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise MapError(f"{at(where, key)} must be {_names(types)}, found a boolean", field=at(where, key))
    if not isinstance(value, types):
        raise MapError(
            f"{at(where, key)} must be {_names(types)}, found {type(value).__name__}", field=at(where, key)
        )
    return value


def items(obj: Any, key: str, where: str, *, required: bool = True) -> list[Any]:
    value = need(obj, key, where, list, required=required)
    return value if value is not None else []


def text_id(obj: Any, key: str, where: str, *, required: bool = True) -> str | None:
    """An identifier that may be written as text or as an integer."""
    value = need(obj, key, where, (str, int), required=required)
    if value is None:
        return None
    s = str(value)
    if not s.strip():
        raise MapError(f"{at(where, key)} is empty", field=at(where, key))
    return s


def _names(types: type | tuple[type, ...]) -> str:
    names = {str: "text", int: "an integer", float: "a number", list: "a list", dict: "an object"}
    ts = types if isinstance(types, tuple) else (types,)
    return " or ".join(names.get(t, t.__name__) for t in ts)


def micros(value: Any, where: str) -> int | None:
    """A timestamp (ISO 8601 text, or epoch seconds as a number) in µs since the epoch; None stays None.

    A text without a zone is read as UTC (what these tools write is UTC).
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise MapError(f"{where} must be a time, found a boolean", field=where)
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise MapError(f"{where} is not a finite number", field=where)
        try:
            dt = datetime.fromtimestamp(value, UTC)
        except (OverflowError, OSError, ValueError) as exc:
            raise MapError(f"{where}: {value!r} is not a time in epoch seconds", field=where) from exc
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(text)
        except ValueError as exc:
            raise MapError(f"{where}: {value[:64]!r} is not an ISO 8601 time", field=where) from exc
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
    else:
        raise MapError(f"{where} must be a time, found {type(value).__name__}", field=where)
    if dt.year not in _YEARS:
        raise MapError(f"{where}: {value!r} is out of range (year {dt.year})", field=where)
    return int(dt.timestamp()) * 1_000_000 + dt.microsecond
