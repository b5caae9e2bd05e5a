"""Segments: naming, splitting into entries, and telling a torn tail from damage."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.format.entry import ZERO_HASH, make_entry
from mnemolog.eventlog.store.segments import (
    MAX_ENTRY_BYTES,
    is_entry_prefix,
    iter_items,
    list_segments,
    scan_file,
    segment_name,
    split_items,
)
from tests.eventlog.format.test_codec import values
from tests.eventlog.logkit import seeded_key

KEY = seeded_key()


def _entry(seq: int, data: dict[str, object]) -> bytes:
    return make_entry(seq=seq, ts=seq, type_="note.added", tv=1, data=data, prev=ZERO_HASH, signer=KEY).raw


def test_names_and_listing(tmp_path: Path) -> None:
    assert segment_name(0) == "00000000000000000000.seg"
    assert segment_name(123) == "00000000000000000123.seg"
    for name in ("00000000000000000010.seg", "00000000000000000002.seg", "junk.seg", "0002.seg", "x"):
        (tmp_path / name).write_bytes(b"")
    assert [f for f, _ in list_segments(tmp_path)] == [2, 10]
    assert list_segments(tmp_path / "missing") == []


@given(st.dictionaries(st.text(max_size=5), values, max_size=4), st.data())
@settings(max_examples=200, deadline=None)
def test_every_proper_prefix_of_an_entry_is_a_torn_tail(data: dict[str, object], draw: st.DataObject) -> None:
    raw = _entry(5, data)
    cut = draw.draw(st.integers(min_value=1, max_value=len(raw) - 1))
    assert is_entry_prefix(raw[:cut])
    assert not is_entry_prefix(raw)  # complete: not a partial entry
    whole = _entry(4, {}) + raw[:cut]
    split = split_items(whole)
    assert len(split.items) == 1 and split.tail is not None and split.tail.torn
    assert split.tail.offset == len(_entry(4, {})) and split.tail.length == cut


def test_damage_is_not_a_torn_tail() -> None:
    good = _entry(1, {"a": 1})
    for junk in (
        b"\x1c",  # reserved additional information
        b"\x82\x01",  # an array, not a map
        b"\xa8\x61v",  # a map of 8 pairs
        b"\xa9\xff",  # a break
        b"\xa9\x61v\xc1",  # a tag
        b"\xa9\x7f",  # an indefinite text
        b"\xa9\x61v\x5b\x00\x00\x00\x00\x01\x00\x00\x00",  # a length over the entry limit
        b"\xa9\x61v\xf7",  # undefined
    ):
        assert not is_entry_prefix(junk), junk
        split = split_items(good + junk)
        assert split.tail is not None and not split.tail.torn, junk
    n = MAX_ENTRY_BYTES - 4
    big = b"\xa9\x61v\x5a" + n.to_bytes(4, "big") + b"x" * n  # complete string, then it stops
    tail = split_items(big).tail
    assert tail is not None and not tail.torn and "larger" in tail.reason


def test_iteration_stops_before_an_incomplete_tail(tmp_path: Path) -> None:
    a, b = _entry(0, {"x": 1}), _entry(1, {"y": "z" * 100})
    buf = a + b + b[:30]
    assert [(s, e) for s, e, _ in iter_items(buf)] == [(0, len(a)), (len(a), len(a) + len(b))]
    p = tmp_path / "s.seg"
    p.write_bytes(buf)
    assert [raw for _, _, _, raw in scan_file(p)] == [a, b]
    assert [raw for _, _, _, raw in scan_file(p, len(a))] == [b]
