"""A small deterministic Parquet writer: flat tables of required columns, standard library only.

It exists so that a bundle can ship `entries.parquet` for auditors who query
with DuckDB or pyarrow, while the offline verifier, which has neither,
recomputes the file's exact bytes from the bundle's entries and compares.
The output is one fixed shape of the Apache Parquet format: one row group,
one v1 data page per column, PLAIN encoding, no compression, no statistics,
no dictionary, every column REQUIRED (so pages carry no definition or
repetition levels), and a FileMetaData footer in the Thrift compact
protocol. Same rows, same bytes.

Column kinds: `int64`, `timestamp_us` (INT64 annotated TIMESTAMP(MICROS),
not adjusted to UTC: a plain TIMESTAMP in DuckDB, microseconds since the
epoch in UTC by our convention), `string` (BYTE_ARRAY annotated STRING),
`binary` (BYTE_ARRAY), `double` (DOUBLE) and `boolean` (BOOLEAN, bit-packed).
A column may be OPTIONAL (`Column(..., optional=True)`, None for a null): its
page then starts with the definition levels, one bit each, as a single
bit-packed run of the RLE/bit-packing hybrid behind a 4-byte length, and
holds only the values that are there.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

MAGIC = b"PAR1"
CREATED_BY = "mnemolog parquet writer v1"
MAX_PAGE = 2**31 - 1

Kind = Literal["int64", "timestamp_us", "string", "binary", "double", "boolean"]
KINDS = ("int64", "timestamp_us", "string", "binary", "double", "boolean")

# Parquet enums (parquet.thrift).
_T_BOOLEAN = 0
_T_INT64 = 2
_T_DOUBLE = 5
_T_BYTE_ARRAY = 6
_PHYSICAL = {"int64": _T_INT64, "timestamp_us": _T_INT64, "double": _T_DOUBLE, "boolean": _T_BOOLEAN}
_REQUIRED = 0
_OPTIONAL = 1
_PLAIN = 0
_RLE = 3
_UNCOMPRESSED = 0
_DATA_PAGE = 0
_CONVERTED_UTF8 = 0

# Thrift compact protocol field types.
_C_TRUE = 1
_C_FALSE = 2
_C_I32 = 5
_C_I64 = 6
_C_BINARY = 8
_C_LIST = 9
_C_STRUCT = 12

Field = tuple[int, int, Any]  # (field id, compact type, value)


@dataclass(frozen=True)
class Column:
    name: str
    kind: Kind
    optional: bool = False


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _value(ctype: int, value: Any) -> bytes:
    if ctype in (_C_I32, _C_I64):
        return _varint(_zigzag(int(value)))
    if ctype == _C_BINARY:
        raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return _varint(len(raw)) + raw
    if ctype == _C_STRUCT:
        return _struct(value)
    if ctype == _C_LIST:
        elem_type, items = value
        n = len(items)
        head = bytes(((n << 4) | elem_type,)) if n < 15 else bytes((0xF0 | elem_type,)) + _varint(n)
        return head + b"".join(_value(elem_type, v) for v in items)
    raise ValueError(f"unsupported compact type {ctype}")


def _struct(fields: Sequence[Field]) -> bytes:
    """A Thrift compact struct; `fields` in increasing id order. Booleans are (id, _C_TRUE/_C_FALSE, None)."""
    out = bytearray()
    last = 0
    for fid, ctype, value in fields:
        delta = fid - last
        if not 0 < delta <= 15:
            raise ValueError("fields must be given in increasing id order, at most 15 apart")
        out.append((delta << 4) | ctype)
        last = fid
        if ctype not in (_C_TRUE, _C_FALSE):
            out += _value(ctype, value)
    out.append(0)
    return bytes(out)


def _plain(kind: Kind, values: Sequence[Any]) -> bytes:
    if kind in ("int64", "timestamp_us"):
        return struct.pack(f"<{len(values)}q", *values)
    if kind == "double":
        return struct.pack(f"<{len(values)}d", *values)
    if kind == "boolean":
        return _bits(values)
    parts: list[bytes] = []
    for v in values:
        raw = v.encode("utf-8") if kind == "string" else bytes(v)
        parts.append(struct.pack("<I", len(raw)))
        parts.append(raw)
    return b"".join(parts)


def _bits(values: Sequence[Any]) -> bytes:
    """Booleans (or 0/1 levels) packed eight to a byte, least significant bit first."""
    out = bytearray((len(values) + 7) // 8)
    for i, v in enumerate(values):
        if v:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def _levels(values: Sequence[Any]) -> bytes:
    """Definition levels (1 = present) of an OPTIONAL column: one bit-packed run, length-prefixed."""
    groups = (len(values) + 7) // 8
    run = _varint((groups << 1) | 1) + _bits([v is not None for v in values])
    return struct.pack("<I", len(run)) + run


def _schema_element(col: Column) -> list[Field]:
    ptype = _PHYSICAL.get(col.kind, _T_BYTE_ARRAY)
    rep = _OPTIONAL if col.optional else _REQUIRED
    fields: list[Field] = [(1, _C_I32, ptype), (3, _C_I32, rep), (4, _C_BINARY, col.name)]
    if col.kind == "string":
        fields.append((6, _C_I32, _CONVERTED_UTF8))
        fields.append((10, _C_STRUCT, [(1, _C_STRUCT, [])]))  # LogicalType.STRING
    elif col.kind == "timestamp_us":
        # No converted type: TIMESTAMP_MICROS would claim UTC adjustment (parquet.thrift).
        micros: list[Field] = [(2, _C_STRUCT, [])]  # TimeUnit.MICROS
        # isAdjustedToUTC=false: the values are UTC, but a naive TIMESTAMP reads in DuckDB
        # without pytz, which a zoned one needs just to print.
        ts_type: list[Field] = [(1, _C_FALSE, None), (2, _C_STRUCT, micros)]
        fields.append((10, _C_STRUCT, [(8, _C_STRUCT, ts_type)]))  # LogicalType.TIMESTAMP
    return fields


def _check(columns: Sequence[Column], rows: Sequence[Sequence[Any]]) -> None:
    names = [c.name for c in columns]
    if not columns or len(set(names)) != len(names):
        raise ValueError("a table needs at least one column and unique column names")
    for c in columns:
        if c.kind not in KINDS:
            raise ValueError(f"column {c.name}: unknown kind {c.kind!r}")
    for i, row in enumerate(rows):
        if len(row) != len(columns):
            raise ValueError(f"row {i} has {len(row)} values for {len(columns)} columns")
        for c, v in zip(columns, row, strict=True):
            if v is None:
                if not c.optional:
                    raise ValueError(f"row {i}, column {c.name}: a required column has no null")
            elif c.kind == "double":
                if not isinstance(v, float):
                    raise ValueError(f"row {i}, column {c.name}: {v!r} is not a float")
            elif c.kind == "boolean":
                if not isinstance(v, bool):
                    raise ValueError(f"row {i}, column {c.name}: {v!r} is not a boolean")
            elif c.kind in ("int64", "timestamp_us"):
                if isinstance(v, bool) or not isinstance(v, int) or not -(2**63) <= v < 2**63:
                    raise ValueError(f"row {i}, column {c.name}: {v!r} is not a 64-bit integer")
            elif c.kind == "string" and not isinstance(v, str):
                raise ValueError(f"row {i}, column {c.name}: expected text")
            elif c.kind == "binary" and not isinstance(v, bytes):
                raise ValueError(f"row {i}, column {c.name}: expected bytes")


def write_table(columns: Sequence[Column], rows: Sequence[Sequence[Any]]) -> bytes:
    """The Parquet file holding `rows` (sequences of values in column order)."""
    _check(columns, rows)
    n = len(rows)
    out = bytearray(MAGIC)
    chunks: list[list[Field]] = []
    total = 0
    for j, col in enumerate(columns):
        column = [r[j] for r in rows]
        page = _plain(col.kind, [v for v in column if v is not None])
        if col.optional:
            page = _levels(column) + page
        if len(page) > MAX_PAGE:
            raise ValueError(f"column {col.name} is larger than one Parquet page may be")
        page_header = _struct(
            [
                (1, _C_I32, _DATA_PAGE),
                (2, _C_I32, len(page)),
                (3, _C_I32, len(page)),
                (
                    5,
                    _C_STRUCT,
                    [(1, _C_I32, n), (2, _C_I32, _PLAIN), (3, _C_I32, _RLE), (4, _C_I32, _RLE)],
                ),
            ]
        )
        offset = len(out)
        out += page_header
        out += page
        size = len(page_header) + len(page)
        total += size
        ptype = _PHYSICAL.get(col.kind, _T_BYTE_ARRAY)
        meta: list[Field] = [
            (1, _C_I32, ptype),
            (2, _C_LIST, (_C_I32, [_PLAIN])),
            (3, _C_LIST, (_C_BINARY, [col.name])),
            (4, _C_I32, _UNCOMPRESSED),
            (5, _C_I64, n),
            (6, _C_I64, size),
            (7, _C_I64, size),
            (9, _C_I64, offset),
        ]
        chunks.append([(2, _C_I64, offset), (3, _C_STRUCT, meta)])
    root: list[Field] = [(4, _C_BINARY, "schema"), (5, _C_I32, len(columns))]
    schema = [root] + [_schema_element(c) for c in columns]
    row_group: list[Field] = [
        (1, _C_LIST, (_C_STRUCT, chunks)),
        (2, _C_I64, total),
        (3, _C_I64, n),
    ]
    footer = _struct(
        [
            (1, _C_I32, 1),
            (2, _C_LIST, (_C_STRUCT, schema)),
            (3, _C_I64, n),
            (4, _C_LIST, (_C_STRUCT, [row_group])),
            (6, _C_BINARY, CREATED_BY),
        ]
    )
    out += footer
    out += struct.pack("<I", len(footer))
    out += MAGIC
    return bytes(out)
