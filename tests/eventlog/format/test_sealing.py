"""Sealed content: boxes open with their key only, in their own place only, and hostile input never raises."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemolog.eventlog.errors import DecodeError
from mnemolog.eventlog.format import codec, sealing
from mnemolog.eventlog.vocabulary import events as v

KEY = bytes(range(32))
OTHER = bytes(range(1, 33))

STORED = {
    "id": "01AAAAAAAAAAAAAAAAAAAAAAAA",
    "namespace": "team/app",
    "kind": "decision",
    "title": "MARKER title",
    "content": "MARKER content",
    "tags": ["a", "b"],
    "metadata": {"k": [1, 2, {"x": None}]},
    "source": "meeting",
}


def key_for(key: bytes = KEY, kid: str = "k1") -> sealing.KeyFor:
    return lambda _subject: (kid, key)


def keys_of(**known: bytes) -> sealing.KeyLookup:
    return known.get


def test_sealing_moves_every_content_field_into_a_box_and_opening_gives_it_back() -> None:
    sealed = sealing.seal_payload(v.MEMORY_STORED, dict(STORED), key_for())
    assert sealing.sealed_fields(sealed) == ["content", "metadata", "source", "tags", "title"]
    assert sealed[v.SEALED_FIELD]["key"] == "k1" and sealing.key_ids(v.MEMORY_STORED, sealed) == ["k1"]
    assert b"MARKER" not in codec.encode(sealed)
    assert sealed["namespace"] == "team/app" and sealed["id"] == STORED["id"]
    assert sealing.open_payload(v.MEMORY_STORED, sealed, keys_of(k1=KEY)) == STORED


def test_without_the_key_the_fields_stay_sealed_and_say_which() -> None:
    sealed = sealing.seal_payload(v.MEMORY_STORED, dict(STORED), key_for())
    for lookup in (keys_of(), keys_of(k1=OTHER), keys_of(**{STORED["id"]: KEY})):
        out = sealing.open_payload(v.MEMORY_STORED, sealed, lookup)
        assert out[v.SEALED_FIELD] == ["content", "metadata", "source", "tags", "title"]
        assert "content" not in out and out["namespace"] == "team/app"


def test_a_box_moved_to_another_memory_other_fields_or_type_does_not_open() -> None:
    a = sealing.seal_payload(v.MEMORY_STORED, dict(STORED), key_for())
    other_id = "01BBBBBBBBBBBBBBBBBBBBBBBB"
    b = sealing.seal_payload(v.MEMORY_STORED, {**STORED, "id": other_id}, key_for())
    lookup = keys_of(k1=KEY)  # even under the same key
    moved = {**a, v.SEALED_FIELD: b[v.SEALED_FIELD]}
    assert sealing.open_payload(v.MEMORY_STORED, moved, lookup)[v.SEALED_FIELD] == sealing.sealed_fields(a)
    fewer = {**a, v.SEALED_FIELD: {**a[v.SEALED_FIELD], "fields": ["content"]}}
    assert sealing.open_payload(v.MEMORY_STORED, fewer, lookup)[v.SEALED_FIELD] == ["content"]
    assert sealing.open_payload(v.MEMORY_UPDATED, a, lookup)[v.SEALED_FIELD] == sealing.sealed_fields(a)


def test_types_that_seal_nothing_and_payloads_without_a_subject_are_left_alone() -> None:
    assert sealing.seal_payload(v.POLICY_SET, {"namespace": "x"}, key_for()) == {"namespace": "x"}
    assert sealing.seal_payload(v.MEMORY_STORED, {"content": "x"}, key_for()) == {"content": "x"}
    plain = {"id": "m", "content": "old plaintext"}
    assert sealing.open_payload(v.MEMORY_STORED, plain, keys_of()) == plain


@pytest.mark.parametrize(
    "boxes",
    [
        None,
        "text",
        [1, 2],
        {"key": "k1", "fields": ["content"], "box": b""},
        {"key": "k1", "fields": ["content"], "box": b"\x00" * 39},
        {"key": "k1", "fields": ["content"], "box": "not bytes"},
        {"key": 7, "fields": ["content"], "box": b"\x00" * 64},
        {"key": "k1", "fields": "content", "box": b"\xff" * 200},
        {"key": "k1", "fields": [1, None], "box": b"\xff" * 200},
        {},
    ],
)
def test_hostile_boxes_read_as_sealed_and_never_raise(boxes: Any) -> None:
    data = {"id": STORED["id"], v.SEALED_FIELD: boxes}
    out = sealing.open_payload(v.MEMORY_STORED, data, keys_of(k1=KEY))
    assert "content" not in out
    sealing.key_ids(v.MEMORY_STORED, data)
    sealing.sealed_fields(data)


def test_a_pack_seals_each_quoted_entry_under_its_own_subject() -> None:
    rec = {"tier": 4, "source": "memory", "id": "M1", "label": "L", "score": None, "chars": 1, "cost": 1}
    chunk = {**rec, "source": "chunk", "id": "doc-1/2/3", "text": "chunk text"}
    data = {
        "pack_id": "P",
        "query": "q",
        "tiers": [{"name": "domain", "included": [{**rec, "text": "m1 text"}, chunk]}],
    }
    given = {"P": ("kp", KEY), "M1": ("km", OTHER), "doc-1": ("kd", KEY)}
    assert sealing.subjects_of(v.CONTEXT_BUILT, data) == ["P", "M1", "doc-1"]
    sealed = sealing.seal_payload(v.CONTEXT_BUILT, data, given.__getitem__)
    assert b"m1 text" not in codec.encode(sealed) and b"chunk text" not in codec.encode(sealed)
    assert sealing.key_ids(v.CONTEXT_BUILT, sealed) == ["kp", "km", "kd"]
    assert sealing.key_ids(v.CONTEXT_BUILT, sealed, {"M1"}) == ["km"]
    assert sealing.open_payload(v.CONTEXT_BUILT, sealed, keys_of(kp=KEY, km=OTHER, kd=KEY)) == data
    gap = sealing.open_payload(v.CONTEXT_BUILT, sealed, keys_of(kp=KEY, kd=KEY))
    first, second = gap["tiers"][0]["included"]
    assert first[v.SEALED_FIELD] == ["label", "text"] and "text" not in first
    assert second["text"] == "chunk text" and gap["query"] == "q"


def test_a_box_whose_plaintext_is_not_canonical_cbor_stays_sealed() -> None:
    from nacl import bindings as nb

    nonce = b"\x01" * 24
    ad = b"\x00".join((sealing.AD_PREFIX, b"memory.stored", STORED["id"].encode(), b"a,b"))
    ct = nb.crypto_aead_xchacha20poly1305_ietf_encrypt(b"\xa2\x61b\x01\x61a\x02", ad, nonce, KEY)
    data = {"id": STORED["id"], v.SEALED_FIELD: {"key": "k1", "fields": ["a", "b"], "box": nonce + ct}}
    assert sealing.open_payload(v.MEMORY_STORED, data, keys_of(k1=KEY))[v.SEALED_FIELD] == ["a", "b"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=5), c, max_size=4),
    max_leaves=10,
)


@given(content=st.text(), meta=st.dictionaries(st.text(max_size=5), json_values, max_size=4))
def test_any_content_round_trips(content: str, meta: dict[str, Any]) -> None:
    d = {"id": "m1", "content": content, "metadata": meta}
    sealed = sealing.seal_payload(v.MEMORY_UPDATED, dict(d), key_for())
    assert sealing.open_payload(v.MEMORY_UPDATED, sealed, keys_of(k1=KEY)) == d


# -- data-key files ---------------------------------------------------------------------


def test_a_key_file_round_trips_first_key_wins_and_a_cut_record_is_ignored() -> None:
    data = sealing.encode_keys({"b": OTHER, "a": KEY}, b"\x01" * 16)
    head, keys = sealing.decode_keys(data)
    assert head["log_id"] == b"\x01" * 16 and keys == {"a": KEY, "b": OTHER}
    again = data + sealing.encode_key_record("a", OTHER)
    assert sealing.decode_keys(again)[1]["a"] == KEY
    cut = data + sealing.encode_key_record("c", KEY)[:-5]
    assert sealing.decode_keys(cut)[1] == {"a": KEY, "b": OTHER}
    # A file written in one piece (a bundle's) was never appended to: any cut is damage.
    for damaged in (cut, data[:-1], data[: len(data) // 2]):
        with pytest.raises(DecodeError, match="cut short"):
            sealing.decode_keys(damaged, whole=True)
    assert sealing.decode_keys(data, whole=True)[1] == keys


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff",
        codec.encode({"format": "something else"}),
        sealing.keys_header() + codec.encode(["a", b"short"]),
        sealing.keys_header() + codec.encode(["", KEY]),
        sealing.keys_header() + codec.encode({"a": KEY}),
        sealing.keys_header() + codec.encode([1, KEY]),
        sealing.keys_header() + b"\x1c",
    ],
)
def test_hostile_key_files_are_refused(data: bytes) -> None:
    with pytest.raises(DecodeError):
        sealing.decode_keys(data)


def test_an_oversized_key_file_is_refused_before_it_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sealing, "MAX_KEYS_FILE", 10)
    with pytest.raises(DecodeError):
        sealing.decode_keys(sealing.encode_keys({"a": KEY}))


def test_every_sealing_type_has_a_later_tv_than_any_plaintext_one() -> None:
    for t, since in v.SEALED_SINCE.items():
        assert v.upcast_chain_end(t) >= since and v.seals(t, since) and not v.seals(t, since - 1)
        # Every tv after sealing seals too (occurred_at came later for two types).
        assert all(v.seals(t, tv) for tv in range(since, v.upcast_chain_end(t) + 1))


def test_new_keys_are_distinct_random_ids_of_32_hex_digits_with_32_byte_keys() -> None:
    made = sealing.new_keys(50)
    assert len(made) == 50
    assert all(len(k) == 32 and int(k, 16) >= 0 and len(x) == sealing.KEY_BYTES for k, x in made.items())
    assert len(set(made.values())) == 50


@pytest.mark.parametrize("kid", ["0" * 32, "ab" * 16, "é" * 16, "x" * 31, "x" * 33, "k"])
def test_a_key_record_is_the_canonical_encoding_of_its_pair(kid: str) -> None:
    assert sealing.encode_key_record(kid, KEY) == codec.encode([kid, KEY])


def test_a_sealed_payload_is_built_in_canonical_key_order_whatever_the_order_given() -> None:
    backwards = dict(reversed(list(STORED.items())))
    for given_ in (dict(STORED), backwards):
        sealed = sealing.seal_payload(v.MEMORY_STORED, given_, key_for())
        # Plain: the codec's default encoding of it is its canonical encoding (its fast path).
        assert codec.is_plain(sealed)
        assert codec.decode(codec.encode(sealed)) == sealed
        opened = sealing.open_payload(v.MEMORY_STORED, sealed, keys_of(k1=KEY))
        assert opened == STORED
