"""Entries: the hand-written envelope encoder equals cbor2's canonical encoding; strict parsing."""

from __future__ import annotations

import hashlib
from typing import Any

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.errors import DecodeError
from mnemolog.eventlog.format import entry as E
from tests.eventlog.format.test_codec import values
from tests.eventlog.logkit import seeded_key

KEY = seeded_key()

uints = st.integers(min_value=0, max_value=2**64 - 1) | st.integers(min_value=0, max_value=70000)
type_names = st.from_regex(r"\A[a-z][a-z0-9_]{0,8}(\.[a-z][a-z0-9_]{0,8}){1,3}\Z")
payloads = st.dictionaries(st.text(max_size=8), values, max_size=5)


class FixedSigner:
    """A signer with a given key id and a fixed 'signature' (the encoder does not care)."""

    def __init__(self, kid: bytes, sig: bytes) -> None:
        self.kid = kid
        self._sig = sig

    def sign(self, message: bytes) -> bytes:
        return self._sig


def as_map(
    seq: int, ts: int, type_: str, tv: int, data: dict[str, Any], prev: bytes, kid: bytes
) -> dict[str, Any]:
    return {"v": 1, "seq": seq, "ts": ts, "type": type_, "tv": tv, "data": data, "prev": prev, "kid": kid}


@given(
    seq=uints,
    ts=uints,
    tv=uints,
    type_=type_names,
    data=payloads,
    prev=st.binary(min_size=32, max_size=32),
    kid=st.binary(min_size=8, max_size=8),
    sig=st.binary(min_size=64, max_size=64),
)
@settings(max_examples=300, deadline=None)
def test_hand_encoder_equals_cbor2_canonical(
    seq: int, ts: int, tv: int, type_: str, data: dict[str, Any], prev: bytes, kid: bytes, sig: bytes
) -> None:
    e = E.make_entry(seq=seq, ts=ts, type_=type_, tv=tv, data=data, prev=prev, signer=FixedSigner(kid, sig))
    m = as_map(seq, ts, type_, tv, data, prev, kid)
    assert e.tbs() == E.ENTRY_DOMAIN + cbor2.dumps(m, canonical=True)
    m["sig"] = sig
    assert e.raw == cbor2.dumps(m, canonical=True)
    assert e.leaf == hashlib.sha256(b"\x00" + e.raw).digest()
    assert E.tbs_from_raw(e.raw, seq, ts, tv) == e.tbs()
    assert e.raw[E.sig_offset(seq, ts, tv) :].startswith(b"\x63sig\x58\x40" + sig)
    back = E.parse_entry(e.raw)
    assert (back.seq, back.ts, back.tv, back.type, back.prev, back.kid, back.sig) == (
        seq,
        ts,
        tv,
        type_,
        prev,
        kid,
        sig,
    )
    tbs, raw = E.encodings(seq, ts, type_, tv, data, prev, kid, sig)
    assert (tbs, raw) == (e.tbs(), e.raw)


def test_signature_covers_the_domain_tag() -> None:
    e = E.make_entry(seq=0, ts=1, type_="log.created", tv=1, data={}, prev=E.ZERO_HASH, signer=KEY)
    assert e.tbs().startswith(b"mnemolog/entry/v1\x00\xa8")
    assert KEY.verifier.verify(e.tbs(), e.sig)
    assert not KEY.verifier.verify(e.tbs()[len(E.ENTRY_DOMAIN) :], e.sig)


def _good() -> dict[str, Any]:
    e = E.make_entry(seq=3, ts=10, type_="note.added", tv=1, data={"a": 1}, prev=b"\x01" * 32, signer=KEY)
    return dict(cbor2.loads(e.raw))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda m: m.pop("sig"), "entry"),
        (lambda m: m.update(extra=1), "entry"),
        (lambda m: m.update(v=2), "v"),
        (lambda m: m.update(seq=-1), "seq"),
        (lambda m: m.update(seq="3"), "seq"),
        (lambda m: m.update(seq=True), "seq"),
        (lambda m: m.update(ts=1.5), "ts"),
        (lambda m: m.update(tv=-2), "tv"),
        (lambda m: m.update(type="Note"), "type"),
        (lambda m: m.update(type="note"), "type"),
        (lambda m: m.update(type="note.x" + "y" * 64), "type"),
        (lambda m: m.update(type=b"note.added"), "type"),
        (lambda m: m.update(data=[1]), "data"),
        (lambda m: m.update(prev=b"\x01" * 31), "prev"),
        (lambda m: m.update(prev="x" * 32), "prev"),
        (lambda m: m.update(kid=b"k" * 7), "kid"),
        (lambda m: m.update(sig=b"s" * 63), "sig"),
    ],
)
def test_parse_rejects_wrong_shapes(change: Any, field: str) -> None:
    m = _good()
    change(m)
    raw = cbor2.dumps(m, canonical=True)
    with pytest.raises(DecodeError) as ei:
        E.parse_entry(raw)
    assert ei.value.details.get("field") == field


def test_parse_rejects_non_canonical_entries() -> None:
    m = _good()
    raw = cbor2.dumps(m, canonical=True)
    assert E.parse_entry(raw).raw == raw
    with pytest.raises(DecodeError):
        E.parse_entry(cbor2.dumps(dict(reversed(m.items()))))  # keys out of canonical order
    with pytest.raises(DecodeError):
        E.parse_entry(raw + b"\x00")
    with pytest.raises(DecodeError):
        E.parse_entry(raw[:-1])


def test_signer_returning_a_bad_signature_is_refused() -> None:
    with pytest.raises(DecodeError):
        E.make_entry(
            seq=0, ts=0, type_="a.b", tv=1, data={}, prev=E.ZERO_HASH, signer=FixedSigner(b"k" * 8, b"short")
        )


@pytest.mark.parametrize("name", ["memory.stored", "a.b", "key.rotated", "x1.y_2.z3", "a." + "b" * 62])
def test_type_names_accepted(name: str) -> None:
    E.check_type_name(name)


@pytest.mark.parametrize(
    "name", ["memory", "Memory.stored", "memory.", ".stored", "1a.b", "a..b", "a.b-c", "a.b "]
)
def test_type_names_refused(name: str) -> None:
    with pytest.raises(DecodeError):
        E.check_type_name(name)


def test_summary_is_json_friendly() -> None:
    e = E.make_entry(
        seq=0, ts=5, type_="a.b", tv=1, data={"k": b"\x01", "l": [b"\x02"]}, prev=E.ZERO_HASH, signer=KEY
    )
    s = e.summary()
    assert s["data"] == {"k": "01", "l": ["02"]}
    assert s["leaf_hash"] == e.leaf.hex() and s["prev"] == "00" * 32
