"""Parameters bound as literals: exact values and types, and an import system left alone."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.projections.db import Connection, ProjectionStore, bind, sql_literal


def test_importing_mnemolog_leaves_pyarrow_working_beside_numpy() -> None:
    pytest.importorskip("numpy")  # a dev dependency: the host programs we live in have it
    code = (
        "import sys, mnemolog.projections.db, pyarrow as pa\n"
        "assert 'pandas' not in sys.modules or sys.modules['pandas'] is not None\n"
        "assert pa.table({'a': ['x']}).num_rows == 1\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_a_store_in_use_leaves_sys_modules_alone(tmp_path: Path) -> None:
    before = dict(sys.modules)
    store = ProjectionStore(
        tmp_path, on_attach=lambda c: c.execute("CREATE TABLE IF NOT EXISTS t(s VARCHAR)")
    )
    try:
        with store.session() as conn:
            conn.execute("INSERT INTO t VALUES (?)", ["x"])
            assert conn.execute("SELECT count(*) FROM t WHERE s = ?", ["x"]).fetchone() == (1,)
    finally:
        store.close()
    poisoned = [name for name, mod in sys.modules.items() if mod is None and name not in before]
    assert poisoned == []


def test_placeholders_inside_strings_identifiers_and_comments_are_not_parameters() -> None:
    sql = """SELECT '?' AS "a?", ? -- what?
    /* ? */ , ?"""
    out = bind(sql, ["x", 2])
    assert out is not None
    conn = duckdb.connect()
    assert conn.execute(out).fetchone() == ("?", "x", 2)


def test_a_count_mismatch_is_left_to_duckdb() -> None:
    assert bind("SELECT ?", [1, 2]) is None
    conn = Connection(duckdb.connect())
    with pytest.raises(duckdb.Error):
        conn.execute("SELECT ?", [1, 2])


hostile_text = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=200)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats()
    | hostile_text
    | st.binary(max_size=40)
)


@settings(max_examples=300, deadline=None)
@given(st.lists(scalars, min_size=1, max_size=5))
def test_a_literal_round_trips_exactly_as_the_binding_would(params: list[object]) -> None:
    conn = duckdb.connect()
    sql = "SELECT " + ", ".join("?" for _ in params)
    ours = Connection(conn).execute(sql, params).fetchone()
    theirs = conn.execute(sql, params).fetchone()
    assert ours is not None and theirs is not None
    for a, b in zip(ours, theirs, strict=True):
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
            assert math.isnan(b)
        else:
            assert a == b and type(a) is type(b)


@settings(max_examples=500, deadline=None)
@given(st.floats(allow_nan=False))
def test_every_double_reads_back_bit_for_bit(x: float) -> None:
    conn = Connection(duckdb.connect())
    row = conn.execute("SELECT ?", [x]).fetchone()
    assert row is not None and row[0] == x and math.copysign(1, row[0]) == math.copysign(1, x)


def test_a_double_that_a_decimal_literal_would_round() -> None:
    conn = Connection(duckdb.connect())
    assert conn.execute("SELECT ?", [0.17107246076312801]).fetchone() == (0.17107246076312801,)


def test_lists_of_text_bind_as_lists() -> None:
    conn = Connection(duckdb.connect())
    row = conn.execute("SELECT list_contains(?::VARCHAR[], ?), len(?::BIGINT[])", [["a", "it's"], "it's", []])
    assert row.fetchone() == (True, 0)


def test_nul_inside_text_does_not_end_the_statement() -> None:
    assert "\x00" not in sql_literal("a\x00b")
    conn = Connection(duckdb.connect())
    assert conn.execute("SELECT ?, ?", ["a\x00b", "ok"]).fetchone() == ("a\x00b", "ok")


def test_values_without_a_literal_use_the_ordinary_binding() -> None:
    conn = Connection(duckdb.connect())
    assert (
        conn.execute("SELECT ?::DECIMAL(4,2)", [__import__("decimal").Decimal("1.25")]).fetchone() is not None
    )
    assert conn.execute("SELECT ?", [2**70]).fetchone() == (2**70,)
