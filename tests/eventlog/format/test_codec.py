"""Canonical CBOR: round trips, and the reader rejects every non-canonical spelling."""

from __future__ import annotations

import math
import struct
from typing import Any

import cbor2
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.errors import DecodeError
from mnemolog.eventlog.format import codec

# -- the value model -----------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=codec.NINT_MIN, max_value=codec.UINT_MAX)
    | st.integers(min_value=-1000, max_value=1000)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.binary(max_size=12)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=16,
)


def same(a: Any, b: Any) -> bool:
    """Equality that tells -0.0 from 0.0 and 1 from 1.0 (CBOR does)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack(">d", a) == struct.pack(">d", b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return set(a) == set(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


@given(values)
@settings(max_examples=400, deadline=None)
def test_round_trip(v: Any) -> None:
    raw = codec.encode(v)
    assert raw == cbor2.dumps(v, canonical=True)
    back = codec.decode(raw)
    assert same(back, v)
    assert codec.encode(back) == raw


@given(values)
@settings(max_examples=300, deadline=None)
def test_plain_values_encode_canonically_without_the_canonical_mode(v: Any) -> None:
    if codec.is_plain(v):
        assert cbor2.dumps(v) == cbor2.dumps(v, canonical=True)


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        float("inf"),
        -float("inf"),
        2**64,
        -(2**64) - 1,
        {1: "int key"},
        {b"k": "bytes key"},
        {"a": {"b": [float("nan")]}},
        (1, 2),
        {1, 2},
        bytearray(b"x"),
        object(),
        cbor2.CBORTag(1, 0),
        cbor2.undefined,
    ],
)
def test_encode_refuses_values_outside_the_model(value: Any) -> None:
    with pytest.raises(DecodeError):
        codec.encode(value)


def test_error_names_the_path() -> None:
    with pytest.raises(DecodeError) as ei:
        codec.encode({"a": [1, {"b": float("nan")}]})
    assert ei.value.details["field"] == "$.a[1].b"


def test_depth_limit() -> None:
    v: Any = 1
    for _ in range(codec.MAX_DEPTH):
        v = [v]
    codec.encode(v)  # 32 levels of nesting are fine
    with pytest.raises(DecodeError):
        codec.encode([v])
    deep = b"\x81" * 200 + b"\x01"
    with pytest.raises(DecodeError):
        codec.decode(deep)


# -- a loose encoder: canonical except for one chosen deviation -----------------

DEVIATIONS = [
    "int_wide",
    "len_wide",
    "indefinite",
    "unsorted",
    "duplicate",
    "tag",
    "float_wide",
    "nan",
    "trailing",
]


def _head(major: int, n: int, widen: int = 0) -> bytes:
    forms = [(24, ">B", 0xFF), (25, ">H", 0xFFFF), (26, ">I", 0xFFFFFFFF), (27, ">Q", 2**64 - 1)]
    if n < 24 and widen == 0:
        return bytes([major << 5 | n])
    start = 0 if n < 24 else next(i for i, (_, _, top) in enumerate(forms) if n <= top)
    i = min(start + (widen if n >= 24 else widen - 1), 3)
    ai, fmt, _ = forms[i]
    return bytes([major << 5 | ai]) + struct.pack(fmt, n)


class Loose:
    def __init__(self, deviation: str) -> None:
        self.deviation = deviation
        self.done = False

    def take(self, kind: str) -> bool:
        if not self.done and self.deviation == kind:
            self.done = True
            return True
        return False

    def enc(self, v: Any) -> bytes:
        if self.deviation == "tag" and not self.done and not isinstance(v, (list, dict)):
            self.done = True
            return _head(6, 55799 if isinstance(v, str) else 100) + self.enc(v)
        if v is None:
            return b"\xf6"
        if v is True:
            return b"\xf5"
        if v is False:
            return b"\xf4"
        if isinstance(v, int):
            major, n = (0, v) if v >= 0 else (1, -1 - v)
            if n < 2**32 and self.take("int_wide"):
                return _head(major, n, widen=1)
            return _head(major, n)
        if isinstance(v, float):
            if self.take("nan"):
                return b"\xf9\x7e\x00"
            canon = cbor2.dumps(v, canonical=True)
            if len(canon) < 9 and self.take("float_wide"):
                return b"\xfb" + struct.pack(">d", v)
            return bytes(canon)
        if isinstance(v, (str, bytes)):
            b = v.encode() if isinstance(v, str) else v
            major = 3 if isinstance(v, str) else 2
            if self.take("indefinite"):
                return bytes([major << 5 | 31]) + _head(major, len(b)) + b + b"\xff"
            if len(b) < 2**32 and self.take("len_wide"):
                return _head(major, len(b), widen=1) + b
            return _head(major, len(b)) + b
        if isinstance(v, list):
            items = b"".join(self.enc(x) for x in v)
            if self.take("indefinite"):
                return b"\x9f" + items + b"\xff"
            if self.take("len_wide"):
                return _head(4, len(v), widen=1) + items
            return _head(4, len(v)) + items
        assert isinstance(v, dict)
        keys = sorted(v, key=lambda k: (len(k.encode()), k.encode()))
        if len(keys) >= 2 and self.take("unsorted"):
            keys = keys[::-1]
        pairs = [self.enc(k) + self.enc(v[k]) for k in keys]
        if keys and self.take("duplicate"):
            pairs.append(self.enc(keys[0]) + self.enc(v[keys[0]]))
            return _head(5, len(pairs)) + b"".join(pairs)
        if self.take("indefinite"):
            return b"\xbf" + b"".join(pairs) + b"\xff"
        if self.take("len_wide"):
            return _head(5, len(pairs), widen=1) + b"".join(pairs)
        return _head(5, len(pairs)) + b"".join(pairs)


def test_loose_encoder_without_deviation_is_canonical() -> None:
    v = {"b": [1, 2.5, "x", b"y", None, True], "aa": {"k": -300}}
    assert Loose("none").enc(v) == codec.encode(v)


@given(values, st.sampled_from(DEVIATIONS))
@settings(max_examples=600, deadline=None)
def test_reader_rejects_non_canonical_bytes(v: Any, deviation: str) -> None:
    loose = Loose(deviation)
    raw = loose.enc(v) + (b"\x00" if deviation == "trailing" else b"")
    if deviation == "trailing":
        loose.done = True
    assume(loose.done)
    assert raw != codec.encode(v)
    with pytest.raises(DecodeError):
        codec.decode(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"\x18\x05",  # 5 in one extra byte
        b"\x19\x00\x05",  # 5 in two
        b"\x1b" + (5).to_bytes(8, "big"),
        b"\x38\x00",  # -1 widened
        b"\x58\x01a",  # a one-byte string with a widened length
        b"\x5f\x41a\xff",  # indefinite byte string
        b"\x7f\x61a\xff",  # indefinite text
        b"\x9f\x01\xff",  # indefinite array
        b"\xbf\x61a\x01\xff",  # indefinite map
        b"\xa2\x61b\x01\x61a\x02",  # keys out of order
        b"\xa2\x62aa\x01\x61b\x02",  # longer key first
        b"\xa2\x61a\x01\x61a\x02",  # duplicate key
        b"\xc1\x1a\x65\x53\xf1\x00",  # tag 1 (epoch time)
        b"\xd9\xd9\xf7\x01",  # self-describe tag
        b"\xc2\x49\x01" + bytes(8),  # bignum
        b"\xf9\x7e\x00",  # NaN
        b"\xf9\x7c\x00",  # +inf
        b"\xfb\x3f\xf8\x00\x00\x00\x00\x00\x00",  # 1.5 as a double
        b"\xfa\x3f\xc0\x00\x00",  # 1.5 as a single
        b"\xf7",  # undefined
        b"\xf0",  # simple value 16
        b"\xf8\x20",  # simple value 32
        b"\xa1\x01\x02",  # integer key
        b"\xa1\x41k\x02",  # byte-string key
        b"\x62\xff\xfe",  # invalid UTF-8
        b"\x01\x00",  # trailing byte
        b"\x62a",  # truncated
        b"",  # nothing at all
        b"\x5b\x7f\xff\xff\xff\xff\xff\xff\xff",  # a byte string claiming 2^63 bytes
        b"\x9b\x7f\xff\xff\xff\xff\xff\xff\xff",  # an array claiming 2^63 items
        b"\xff",  # a lone break
        b"\x1c",  # reserved additional information
    ],
)
def test_reader_rejects(raw: bytes) -> None:
    with pytest.raises(DecodeError):
        codec.decode(raw)


def test_reader_accepts_canonical_floats() -> None:
    for f in (0.0, -0.0, 1.5, 1.1, 65504.0, 1e300, -(2.0**-24)):
        raw = codec.encode(f)
        back = codec.decode(raw)
        assert math.copysign(1, back) == math.copysign(1, f) and back == f
    assert codec.encode(1.5) == b"\xf9\x3e\x00"


def test_is_canonical_agrees_with_decode() -> None:
    v = {"a": 1, "bb": [1.5, "x"]}
    raw = codec.encode(v)
    assert codec.is_canonical(cbor2.loads(raw), raw)
    bad = b"\xa2\x62bb\x82\xf9\x3e\x00\x61x\x61a\x01"
    assert not codec.is_canonical(cbor2.loads(bad), bad)
