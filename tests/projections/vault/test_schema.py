"""How a note carries an instant (`mnemolog_occurred_at`): exact both ways, and nothing else reads as one."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemolog.projections.vault import schema

END_OF_9999 = 253_402_300_799_999_999  # the last µs of year 9999, the latest date the store takes


@given(st.integers(0, END_OF_9999))
def test_an_instant_reads_back_exactly(micros: int) -> None:
    text = schema.instant_text(micros)
    assert text.endswith("Z") and ("." in text) == (micros % 1_000_000 != 0)
    assert schema.as_instant(text) == micros


def test_the_text_is_iso_8601_utc() -> None:
    assert schema.instant_text(1_683_556_200_000_000) == "2023-05-08T14:30:00Z"
    assert schema.instant_text(1_683_556_200_000_001) == "2023-05-08T14:30:00.000001Z"
    assert schema.instant_text(0) == "1970-01-01T00:00:00Z"


def test_a_date_reads_as_its_midnight_utc() -> None:
    assert schema.as_instant(dt.date(2023, 5, 8)) == 1_683_504_000_000_000


@pytest.mark.parametrize(
    "bad",
    [
        "soon",
        "2023-05-08",  # a date the loader kept as text is not an instant
        "2023-05-08T14:30:00",  # no zone
        "2023-05-08T14:30:00+02:00",  # only UTC, as written
        "2023-02-30T00:00:00Z",
        "2023-05-08T14:30:00.1234567Z",
        "1969-12-31T23:59:59Z",
        dt.date(1969, 12, 31),
        dt.datetime(2023, 5, 8, tzinfo=dt.UTC),
        1_683_504_000_000_000,
        True,
        None,
        ["2023-05-08T14:30:00Z"],
    ],
)
def test_anything_else_is_no_instant(bad: Any) -> None:
    assert schema.as_instant(bad) is None
