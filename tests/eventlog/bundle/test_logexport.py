"""Log exports: range proofs, and the container checked against its signed checkpoint."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.bundle import logexport
from mnemolog.eventlog.bundle.logexport import range_proof, root_from_range, verify_export
from mnemolog.eventlog.bundle.offline import split_sequence
from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.format import codec, merkle
from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.store.writer import Durability
from mnemolog.eventlog.verify.trust import TRUST_GENESIS, PinnedKey
from mnemolog.substrate.forensics import service as forensics
from mnemolog.substrate.home import Home
from tests.support.forensic_data import make_home

# -- range proofs ---------------------------------------------------------------------


def leaves(n: int) -> list[bytes]:
    return [merkle.hash_leaf(i.to_bytes(4, "big")) for i in range(n)]


@st.composite
def ranges(draw: st.DrawFn) -> tuple[int, int, int]:
    size = draw(st.integers(1, 300))
    start = draw(st.integers(0, size - 1))
    end = draw(st.integers(start + 1, size))
    return size, start, end


@settings(max_examples=300, deadline=None)
@given(ranges())
def test_range_proof_rebuilds_the_root(r: tuple[int, int, int]) -> None:
    size, start, end = r
    ls = leaves(size)
    tree = merkle.MemoryTree(ls)
    proof = range_proof(start, end, size, tree.subtree)
    assert root_from_range(start, ls[start:end], size, proof) == tree.root()
    # O(log n): at most one hash per level on each side of the range.
    assert len(proof) <= 2 * math.ceil(math.log2(size)) if size > 1 else not proof


@settings(max_examples=200, deadline=None)
@given(ranges(), st.data())
def test_range_proof_detects_any_change(r: tuple[int, int, int], data: st.DataObject) -> None:
    size, start, end = r
    ls = leaves(size)
    tree = merkle.MemoryTree(ls)
    proof = range_proof(start, end, size, tree.subtree)
    part = ls[start:end]
    what = data.draw(st.sampled_from(["leaf", "hash", "start", "drop", "extra"]))
    try:
        if what == "leaf":
            i = data.draw(st.integers(0, len(part) - 1))
            part = [*part[:i], merkle.hash_leaf(b"forged"), *part[i + 1 :]]
            got = root_from_range(start, part, size, proof)
        elif what == "hash" and proof:
            i = data.draw(st.integers(0, len(proof) - 1))
            bad = [*proof[:i], bytes(32), *proof[i + 1 :]]
            got = root_from_range(start, part, size, bad)
        elif what == "start" and end < size:
            got = root_from_range(start + 1, part, size, proof)
        elif what == "drop" and proof:
            got = root_from_range(start, part, size, proof[:-1])
        elif what == "extra":
            got = root_from_range(start, part, size, [*proof, bytes(32)])
        else:
            return
    except VerificationError as exc:
        assert exc.check.startswith("range.")
        return
    assert got != tree.root()


def test_whole_tree_needs_no_proof() -> None:
    ls = leaves(37)
    tree = merkle.MemoryTree(ls)
    assert range_proof(0, 37, 37, tree.subtree) == []
    assert root_from_range(0, ls, 37, []) == tree.root()
    with pytest.raises(ValueError):
        range_proof(5, 5, 37, tree.subtree)


# -- export files ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    """A log of ~300 entries with two key rotations (no projections needed)."""
    h = make_home(tmp_path_factory.mktemp("export") / "home")
    with h.open_writer(durability=Durability("group")) as w:
        w.append_many([("note.added", {"i": i, "text": "x" * (i % 17)}, 1) for i in range(120)])
        h.rotate_key(w)
    with h.open_writer(durability=Durability("group")) as w:
        w.append_many([("note.added", {"i": i}, 1) for i in range(120, 250)])
        h.rotate_key(w)
    with h.open_writer(durability=Durability("group")) as w:
        w.append_many([("note.added", {"i": i}, 1) for i in range(250, 300)])
    return h


def export(home: Home, tmp_path: Path, start: int = 0, last: int | None = None) -> bytes:
    out = tmp_path / f"export-{start}-{last}.cbor"
    forensics.export_log(home, start, last, out)
    return out.read_bytes()


def parts(data: bytes) -> tuple[dict[str, object], list[bytes]]:
    items = split_sequence(data, "export")
    return items[0][1], [raw for raw, _ in items[1:]]


def rebuild(header: dict[str, object], raws: list[bytes]) -> bytes:
    return codec.encode(header) + b"".join(raws)


def test_whole_log_export_verifies(home: Home, tmp_path: Path) -> None:
    data = export(home, tmp_path)
    ex = verify_export(data, policy=TRUST_GENESIS)
    with home.open_log() as log:
        assert ex.count == log.size == ex.tree_size
        assert [e.raw for e in ex.entries] == [log.raw(i) for i in range(log.size)]
    assert len(ex.keys.epochs) == 3
    assert ex.trust["anchor"] == "genesis"
    header, _ = parts(data)
    assert header["range_proof"] == []


@pytest.mark.parametrize(("start", "last"), [(0, 10), (5, 5), (130, 200), (121, 122), (260, None)])
def test_partial_export_verifies(home: Home, tmp_path: Path, start: int, last: int | None) -> None:
    data = export(home, tmp_path, start, last)
    ex = verify_export(data, policy=TRUST_GENESIS)
    assert ex.start == start
    assert ex.entries[0].seq == start
    assert ex.entries[-1].seq == (ex.tree_size - 1 if last is None else last)


def test_pinned_keys(home: Home, tmp_path: Path) -> None:
    data = export(home, tmp_path, 100, 150)
    with home.open_log() as log:
        epochs = log.key_history()
    for ep in epochs:
        assert verify_export(data, policy=PinnedKey(ep.key)).trust["pinned"] is True
    with pytest.raises(VerificationError) as info:
        verify_export(data, policy=PinnedKey(SigningKey.generate("x").verifier))
    assert info.value.check == "trust.key"


@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_changed_entry_byte_fails(home: Home, tmp_path: Path, which: str) -> None:
    data = export(home, tmp_path, 40, 90)
    header, raws = parts(data)
    i = {"first": 0, "middle": len(raws) // 2, "last": len(raws) - 1}[which]
    raw = raws[i]
    raws[i] = raw[:-3] + bytes([raw[-3] ^ 0x20]) + raw[-2:]
    with pytest.raises(VerificationError) as info:
        verify_export(rebuild(header, raws), policy=TRUST_GENESIS)
    assert info.value.check in (
        "entry.signature",
        "entry.decode",
        "entry.canonical",
        "range.root",
        "entry.prev",
    )


def test_truncated_and_extended_exports(home: Home, tmp_path: Path) -> None:
    data = export(home, tmp_path, 10, 60)
    header, raws = parts(data)
    with pytest.raises(VerificationError) as info:
        verify_export(rebuild(header, raws[:-1]), policy=TRUST_GENESIS)
    assert info.value.check == "export.count"
    with pytest.raises(VerificationError) as info:
        verify_export(rebuild(header, [*raws, raws[-1]]), policy=TRUST_GENESIS)
    assert info.value.check == "export.count"
    with pytest.raises(VerificationError):
        verify_export(data[:-7], policy=TRUST_GENESIS)


def test_entries_swapped(home: Home, tmp_path: Path) -> None:
    header, raws = parts(export(home, tmp_path, 10, 60))
    raws[3], raws[4] = raws[4], raws[3]
    with pytest.raises(VerificationError) as info:
        verify_export(rebuild(header, raws), policy=TRUST_GENESIS)
    assert info.value.check == "entry.seq" and info.value.seq == 13


def test_header_lies(home: Home, tmp_path: Path) -> None:
    header, raws = parts(export(home, tmp_path, 10, 60))
    for field, value, check in [
        ("start", 11, "entry.seq"),
        ("tree_size", 9999, "export.header"),
        ("count", 0, "export.range"),
        ("format", "mnemolog/log-export/v2", "export.format"),
        ("range_proof", [], "range.length"),
        ("log_id", bytes(16), "export.header"),
    ]:
        with pytest.raises(VerificationError) as info:
            verify_export(rebuild({**header, field: value}, raws), policy=TRUST_GENESIS)
        assert info.value.check == check, field
    extra = {**header, "note": "unsigned"}
    with pytest.raises(VerificationError) as info:
        verify_export(rebuild(extra, raws), policy=TRUST_GENESIS)
    assert info.value.check == "export.header"


def test_key_history_tampering(home: Home, tmp_path: Path) -> None:
    header, raws = parts(export(home, tmp_path, 200, 210))
    keys = list(header["key_entries"])  # type: ignore[call-overload]
    proofs = list(header["key_proofs"])  # type: ignore[call-overload]
    dropped = {**header, "key_entries": keys[:2], "key_proofs": proofs[:2]}
    with pytest.raises(VerificationError) as info:
        verify_export(rebuild(dropped, raws), policy=TRUST_GENESIS)
    assert info.value.check in ("checkpoint.signer", "checkpoint.signature", "entry.kid")
    bad_proof = [proofs[0], [proofs[1][0], [bytes(32)] * len(proofs[1][1])], proofs[2]]
    with pytest.raises(VerificationError) as info:
        verify_export(rebuild({**header, "key_proofs": bad_proof}, raws), policy=TRUST_GENESIS)
    assert info.value.check == "inclusion.root"


def test_rotation_inside_the_range_must_be_in_the_key_history(home: Home, tmp_path: Path) -> None:
    header, raws = parts(export(home, tmp_path, 115, 125))
    assert any(b"key.rotated" in r for r in raws)
    keys = list(header["key_entries"])  # type: ignore[call-overload]
    proofs = list(header["key_proofs"])  # type: ignore[call-overload]
    dropped = {**header, "key_entries": [keys[0], keys[2]], "key_proofs": [proofs[0], proofs[2]]}
    with pytest.raises(VerificationError):
        verify_export(rebuild(dropped, raws), policy=TRUST_GENESIS)


@pytest.mark.parametrize(
    "blob",
    [b"", b"\xff\xff", b"not cbor at all", codec.encode([1, 2, 3]), codec.encode({"format": 1}), b"\xa1"],
)
def test_malformed_files(blob: bytes) -> None:
    with pytest.raises(VerificationError):
        verify_export(blob, policy=TRUST_GENESIS)


@pytest.fixture(scope="module")
def small_export(home: Home, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    out = tmp_path_factory.mktemp("small") / "e.cbor"
    forensics.export_log(home, 110, 130, out)
    return out.read_bytes()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_random_damage_is_always_a_verification_error(small_export: bytes, data: st.DataObject) -> None:
    blob = bytearray(small_export)
    # Distinct positions: two flips of one byte can cancel out and leave the export whole.
    places = data.draw(st.sets(st.integers(0, len(blob) - 1), min_size=1, max_size=3))
    for i in places:
        blob[i] ^= data.draw(st.integers(1, 255))
    cut = data.draw(st.integers(1, len(blob)))
    with pytest.raises(VerificationError):
        verify_export(bytes(blob[:cut]), policy=TRUST_GENESIS)


def test_header_round_trip(home: Home, tmp_path: Path) -> None:
    header, raws = parts(export(home, tmp_path, 3, 9))
    assert set(header) == logexport.HEADER_KEYS
    assert len(raws) == header["count"] == 7
