"""The stdlib Parquet writer: pyarrow and DuckDB read what it writes, rows and types intact."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.bundle import parquet
from mnemolog.eventlog.bundle.parquet import Column, write_table

COLUMNS = [
    Column("seq", "int64"),
    Column("ts", "timestamp_us"),
    Column("type", "string"),
    Column("raw", "binary"),
]

int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)
# Timestamps pyarrow can turn into datetimes: years 1..9999.
timestamps = st.integers(min_value=-62_135_596_800_000_000, max_value=253_402_300_799_999_999)
rows_strategy = st.lists(
    st.tuples(int64s, timestamps, st.text(max_size=40), st.binary(max_size=60)),
    max_size=40,
)


def table(data: bytes) -> pa.Table:
    return pq.read_table(io.BytesIO(data))


def test_pyarrow_sees_the_schema() -> None:
    t = table(write_table(COLUMNS, [(1, 0, "a", b"")]))
    assert t.schema.field("seq").type == pa.int64()
    assert t.schema.field("ts").type == pa.timestamp("us")
    assert t.schema.field("type").type == pa.string()
    assert t.schema.field("raw").type == pa.binary()
    assert all(not f.nullable for f in t.schema)


@settings(max_examples=80, deadline=None)
@given(rows_strategy)
def test_pyarrow_reads_back_every_row(rows: list[tuple[int, int, str, bytes]]) -> None:
    t = table(write_table(COLUMNS, rows))
    assert t.num_rows == len(rows)
    assert t.column("seq").to_pylist() == [r[0] for r in rows]
    assert t.column("ts").cast(pa.int64()).to_pylist() == [r[1] for r in rows]
    assert t.column("type").to_pylist() == [r[2] for r in rows]
    assert t.column("raw").to_pylist() == [r[3] for r in rows]


@settings(max_examples=30, deadline=None)
@given(rows_strategy)
def test_same_rows_same_bytes(rows: list[tuple[int, int, str, bytes]]) -> None:
    assert write_table(COLUMNS, rows) == write_table(COLUMNS, [tuple(r) for r in rows])


def test_different_rows_different_bytes() -> None:
    a = write_table(COLUMNS, [(1, 2, "x", b"y")])
    b = write_table(COLUMNS, [(1, 2, "x", b"z")])
    assert a != b


def test_duckdb_reads_types_and_rows(tmp_path: Path) -> None:
    rows = [(i, 1_700_000_000_000_000 + i, f"memory.stored {i} é", bytes([i]) * i) for i in range(50)]
    path = tmp_path / "t.parquet"
    path.write_bytes(write_table(COLUMNS, rows))
    conn = duckdb.connect()
    types = {r[0]: r[1] for r in conn.execute(f"DESCRIBE SELECT * FROM '{path}'").fetchall()}
    assert types == {"seq": "BIGINT", "ts": "TIMESTAMP", "type": "VARCHAR", "raw": "BLOB"}
    got = conn.execute(f"SELECT seq, epoch_us(ts), type, raw FROM '{path}' ORDER BY seq").fetchall()
    assert got == [(s, t, ty, r) for s, t, ty, r in rows]
    first = conn.execute(f"SELECT ts FROM '{path}' WHERE seq = 0").fetchone()
    assert first is not None
    assert first[0] == dt.datetime(2023, 11, 14, 22, 13, 20)
    n = conn.execute(f"SELECT count(*) FROM '{path}' WHERE type LIKE 'memory.stored 4%'").fetchone()
    assert n == (11,)  # 4 and 40..49


def test_empty_table_is_readable(tmp_path: Path) -> None:
    data = write_table(COLUMNS, [])
    assert table(data).num_rows == 0
    path = tmp_path / "e.parquet"
    path.write_bytes(data)
    assert duckdb.connect().execute(f"SELECT count(*) FROM '{path}'").fetchone() == (0,)


def test_many_columns_and_long_strings() -> None:
    cols = [Column(f"c{i}", "string") for i in range(20)]
    rows = [tuple("v" * (i * 300 + j) for j in range(20)) for i in range(5)]
    t = table(write_table(cols, rows))
    assert t.column("c19").to_pylist() == [r[19] for r in rows]


def test_footer_layout() -> None:
    data = write_table(COLUMNS, [(1, 2, "a", b"b")])
    assert data[:4] == b"PAR1" and data[-4:] == b"PAR1"
    footer_len = int.from_bytes(data[-8:-4], "little")
    assert 0 < footer_len < len(data)
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    assert meta.num_row_groups == 1
    assert meta.created_by == parquet.CREATED_BY
    assert meta.row_group(0).column(0).compression == "UNCOMPRESSED"


@pytest.mark.parametrize(
    ("columns", "rows"),
    [
        ([], []),
        ([Column("a", "int64"), Column("a", "int64")], []),
        ([Column("a", "int64")], [("1",)]),
        ([Column("a", "int64")], [(True,)]),
        ([Column("a", "int64")], [(2**63,)]),
        ([Column("a", "string")], [(b"bytes",)]),
        ([Column("a", "binary")], [("text",)]),
        ([Column("a", "int64")], [(1, 2)]),
        ([Column("a", "float")], [(1.0,)]),  # type: ignore[arg-type]
    ],
)
def test_malformed_input_is_refused(columns: list[Column], rows: list[tuple[Any, ...]]) -> None:
    with pytest.raises(ValueError):
        write_table(columns, rows)


def test_thrift_compact_integers() -> None:
    # zigzag varints (Thrift compact protocol) at the edges of the 64-bit range
    assert parquet._varint(parquet._zigzag(0)) == b"\x00"
    assert parquet._varint(parquet._zigzag(-1)) == b"\x01"
    assert parquet._varint(parquet._zigzag(1)) == b"\x02"
    assert parquet._varint(parquet._zigzag(300)) == b"\xd8\x04"
    assert len(parquet._varint(parquet._zigzag(-(2**63)))) == 10
    with pytest.raises(ValueError):
        parquet._struct([(2, parquet._C_I32, 1), (1, parquet._C_I32, 1)])


optional_rows = st.lists(
    st.tuples(
        st.none() | int64s,
        st.none() | st.floats(allow_nan=False),
        st.none() | st.booleans(),
        st.none() | st.text(max_size=20),
        st.none() | st.binary(max_size=20),
        st.booleans(),
    ),
    max_size=40,
)
OPTIONAL = [
    Column("i", "int64", optional=True),
    Column("d", "double", optional=True),
    Column("b", "boolean", optional=True),
    Column("s", "string", optional=True),
    Column("x", "binary", optional=True),
    Column("flag", "boolean"),
]


@settings(max_examples=60, deadline=None)
@given(rows=optional_rows)
def test_optional_columns_of_every_kind_read_back_in_pyarrow_and_duckdb(
    rows: list[tuple[Any, ...]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    data = write_table(OPTIONAL, rows)
    t = table(data)
    assert [tuple(r.values()) for r in t.to_pylist()] == rows
    assert [f.nullable for f in t.schema] == [True] * 5 + [False]
    path = tmp_path_factory.mktemp("opt") / "t.parquet"
    path.write_bytes(data)
    with duckdb.connect() as conn:
        assert conn.execute(f"SELECT * FROM '{path}'").fetchall() == rows


@pytest.mark.parametrize(
    ("column", "value"),
    [
        (Column("s", "string"), None),  # a null in a required column
        (Column("d", "double", optional=True), 1),  # an int where a float belongs
        (Column("b", "boolean", optional=True), 1),  # 1 is not True
        (Column("i", "int64", optional=True), True),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused(column: Column, value: Any) -> None:
    with pytest.raises(ValueError, match=column.name):
        write_table([column], [(value,)])
