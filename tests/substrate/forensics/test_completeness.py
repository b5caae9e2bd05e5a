"""Attack 5 (completeness): a bundle proves it holds every entry about its memories up to the
committed heads. Each attack is made by someone holding the log's signing key, who rebuilds and
re-signs the bundle, but cannot change the log that the checkpoint (and its witnesses) pin."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mnemolog.eventlog.bundle import memview
from mnemolog.eventlog.bundle import verifier as bundle
from mnemolog.eventlog.bundle.build import BundleInput, HeadsEvidence
from mnemolog.eventlog.bundle.offline import parse_entries
from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.format import codec
from mnemolog.eventlog.format.heads import HeadsMap
from mnemolog.eventlog.format.keys import load_private_key
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.forensics import service as forensics
from tests.support.forensic_data import FakeClock, make_home, members_of

MID = "01HCOMPLETECOMPLETECOMPLET"


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    h = make_home(tmp_path / "home", FakeClock())
    with Substrate.open(h, long_lived=False) as sub:
        w = sub.writer
        w.append("memory.stored", {"id": MID, "namespace": "default", "kind": "observation", "content": "x"})
        w.append("note.added", {"pad": 1})
        w.append("memory.updated", {"id": MID, "confidence": 0.5})
        w.append("memory.archived", {"id": MID, "by": "operator", "reason": "old"})
        w.append("memory.restored", {"id": MID})
    yield h.root


def export(root: Path) -> forensics.ExportedBundle:
    with Substrate.open(root, long_lived=False) as sub:
        return forensics.export_bundle(sub, MID, include_chain=False)


def rebuild(
    root: Path, ex: forensics.ExportedBundle, keep: list[int], heads: HeadsEvidence | None
) -> dict[str, bytes]:
    """What a key holder can make: the same checkpoint and key history, a chosen subset of entries."""
    m = members_of(ex.data)
    entries = [e for e in parse_entries(m[bundle.ENTRIES], "e") if e.seq in keep]
    key_entries = parse_entries(m[bundle.KEYS], "k")
    proofs = {p[0]: p[1] for p in codec.decode(m[bundle.PROOFS])["proofs"]}
    key = load_private_key(root / "keys" / "signing.key")
    data = bundle.build_bundle(
        BundleInput(MID, False, [MID], [], key_entries, entries, m[bundle.CHECKPOINT], proofs, heads), key
    )
    return members_of(data)


def genuine_heads(ex: forensics.ExportedBundle) -> HeadsEvidence:
    hf = codec.decode(members_of(ex.data)[bundle.HEADS])
    from mnemolog.eventlog.format.heads import HeadProof

    (entry,) = parse_entries(hf["entry"], "h")
    return HeadsEvidence(entry, hf["inclusion"], [HeadProof.from_cbor(p, "h") for p in hf["proofs"]])


def test_a_complete_bundle_says_so(home: Path) -> None:
    ex = export(home)
    r = bundle.verify_members(members_of(ex.data), policy=TRUST_GENESIS)
    assert "completeness" in r.checks
    assert r.completeness is not None
    assert r.completeness["heads"] == {MID: ex.seqs[-1]}
    assert r.completeness["as_of_tree_size"] == ex.tree_size - 1
    assert "complete    as of tree size" in r.text()
    # Exporting again with nothing new reuses the commitment: the same bytes.
    assert export(home).data == ex.data


def test_dropping_the_newest_entry_is_caught(home: Path) -> None:
    ex = export(home)
    members = rebuild(home, ex, ex.seqs[:-1], genuine_heads(ex))
    with pytest.raises(VerificationError) as e:
        bundle.verify_members(members, policy=TRUST_GENESIS)
    assert e.value.check == "completeness.head"
    # Without heads (a v1 bundle) the same forgery verifies: the gap the heads close.
    v1 = bundle.verify_members(rebuild(home, ex, ex.seqs[:-1], None), policy=TRUST_GENESIS)
    assert v1.completeness is None and "not proven" in v1.text()


def test_a_proof_from_another_map_is_caught(home: Path) -> None:
    ex = export(home)
    h = genuine_heads(ex)
    lie = HeadsMap({MID: ex.seqs[-2]})  # "the newest entry is the one before"
    forged = HeadsEvidence(h.entry, h.inclusion, [lie.prove(MID)])
    with pytest.raises(VerificationError) as e:
        bundle.verify_members(rebuild(home, ex, ex.seqs[:-1], forged), policy=TRUST_GENESIS)
    assert e.value.check == "heads.root"


def test_a_heads_entry_that_is_not_in_the_tree_is_caught(home: Path) -> None:
    ex = export(home)
    h = genuine_heads(ex)
    with pytest.raises(VerificationError) as e:
        bundle.verify_members(
            rebuild(home, ex, ex.seqs, HeadsEvidence(h.entry, [bytes(32)] * len(h.inclusion), h.proofs)),
            policy=TRUST_GENESIS,
        )
    assert e.value.check.startswith("inclusion")


def test_malformed_heads_files_are_refused(home: Path) -> None:
    ex = export(home)
    key = load_private_key(home / "keys" / "signing.key")
    m = members_of(ex.data)
    for bad in (
        b"",
        b"\xa0",
        codec.encode({"entry": b"x", "inclusion": [], "proofs": []}),
        codec.encode([1]),
    ):
        forged = bundle.resign_manifest({**m, bundle.HEADS: bad}, key)
        with pytest.raises(VerificationError) as e:
            bundle.verify_members(forged, policy=TRUST_GENESIS)
        assert e.value.check.startswith(("heads.", "entries.", "entry.")), e.value.check


def test_heads_are_folded_from_the_log_not_the_projection(home: Path) -> None:
    """A damaged projection cannot make the export commit wrong heads."""
    with Substrate.open(home, long_lived=False) as sub, sub.projections.session() as conn:
        conn.execute("DELETE FROM touches")
    ex = export(home)
    r = bundle.verify_members(members_of(ex.data), policy=TRUST_GENESIS)
    assert r.completeness is not None and r.completeness["heads"][MID] == ex.seqs[-1]
    with Log(home / "log") as log:
        he = log.entry(r.completeness["heads_seq"])
        heads = {}
        for e in log.iter_entries(0, he.data["size"]):
            for mid in memview.touched_ids(e.type, e.data):
                heads[mid] = e.seq
    assert HeadsMap(heads).root == he.data["root"]


# -- back-chains: entries written through the Session carry touch_prev ---------------------------


@pytest.fixture
def chained_home(tmp_path: Path) -> Iterator[tuple[Path, str, str]]:
    h = make_home(tmp_path / "chained", FakeClock())
    with Substrate.open(h, long_lived=False) as sub:
        a = sub.store("the deploy runs nightly")["id"]
        b = sub.store("rollbacks need two approvals")["id"]
        sub.update(a, confidence=0.8)
        sub.link(a, b)
        sub.archive(a, reason="stale")
        sub.update(b, tags=["ops"])
        sub.restore(a)
    yield h.root, a, b


def export_of(root: Path, mid: str) -> forensics.ExportedBundle:
    with Substrate.open(root, long_lived=False) as sub:
        return forensics.export_bundle(sub, mid, include_chain=False)


def test_entries_carry_their_back_chain(chained_home: tuple[Path, str, str]) -> None:
    root, a, b = chained_home
    with Log(root / "log") as log:
        about_a = [e for e in log.iter_entries() if a in memview.entry_touched_ids(e)]
    assert [e.data["touch_prev"][a] for e in about_a] == [-1, *(e.seq for e in about_a[:-1])]
    link = next(e for e in about_a if e.type == "link.created")
    assert link.data["touch_prev"][b] < link.seq and link.tv == 2


def test_a_chained_bundle_is_complete(chained_home: tuple[Path, str, str]) -> None:
    root, a, _ = chained_home
    r = bundle.verify_members(members_of(export_of(root, a).data), policy=TRUST_GENESIS)
    assert r.completeness is not None and r.completeness["complete"] is True
    assert r.completeness["proven_from"] == {a: 0}
    assert "back-chains unbroken" in r.text()


def test_dropping_a_middle_entry_is_caught(chained_home: tuple[Path, str, str]) -> None:
    """The heads close the tail; the back-chain closes every gap below it."""
    root, a, _ = chained_home
    ex = export_of(root, a)
    middle = ex.seqs[len(ex.seqs) // 2]
    members = rebuild_for(root, ex, a, [s for s in ex.seqs if s != middle])
    with pytest.raises(VerificationError) as e:
        bundle.verify_members(members, policy=TRUST_GENESIS)
    assert e.value.check == "completeness.back_chain"
    assert e.value.found == middle


def test_old_entries_verify_without_a_completeness_claim_below_them(home: Path) -> None:
    """A log written before back-chains (tv 1 entries) still verifies; the report says how far it goes."""
    with Substrate.open(home, long_lived=False) as sub:
        sub.update(MID, confidence=0.9)  # tv 2: chained to the tv 1 entry before it
    ex = export(home)
    r = bundle.verify_members(members_of(ex.data), policy=TRUST_GENESIS)
    assert r.completeness is not None and r.completeness["complete"] is False
    assert r.completeness["proven_from"] == {MID: ex.seqs[-2]}
    assert "predate back-chains" in r.text()


def rebuild_for(root: Path, ex: forensics.ExportedBundle, mid: str, keep: list[int]) -> dict[str, bytes]:
    m = members_of(ex.data)
    entries = [e for e in parse_entries(m[bundle.ENTRIES], "e") if e.seq in keep]
    key_entries = parse_entries(m[bundle.KEYS], "k")
    proofs = {p[0]: p[1] for p in codec.decode(m[bundle.PROOFS])["proofs"]}
    key = load_private_key(root / "keys" / "signing.key")
    data = bundle.build_bundle(
        BundleInput(
            mid, False, [mid], [], key_entries, entries, m[bundle.CHECKPOINT], proofs, genuine_heads(ex)
        ),
        key,
    )
    return members_of(data)


def test_a_claim_older_than_the_checkpoint_says_what_it_leaves_out(home: Path) -> None:
    """Issue 23 item 6: heads as of L under a checkpoint of size n > L + 1 verified silently."""
    ex = export(home)
    h = genuine_heads(ex)
    with Substrate.open(home, long_lived=False) as sub:
        sub.writer.append("memory.updated", {"id": MID, "confidence": 0.9})  # about MID, after L
        sub.writer.append("note.added", {"pad": 2})
        cp, cp_raw = sub.writer.checkpoint()
        cp_size = cp.size
    m = members_of(ex.data)
    key_entries = parse_entries(m[bundle.KEYS], "k")
    with Log(home / "log") as log:
        entries = [log.entry(s) for s in ex.seqs]  # the new update left out
        proofs = {s: log.inclusion_proof(s, cp_size) for s in [*ex.seqs, *(e.seq for e in key_entries)]}
        heads = HeadsEvidence(h.entry, log.inclusion_proof(h.entry.seq, cp_size), h.proofs)
    key = load_private_key(home / "keys" / "signing.key")
    data = bundle.build_bundle(
        BundleInput(MID, False, [MID], [], key_entries, entries, cp_raw, proofs, heads), key
    )
    r = bundle.verify_members(members_of(data), policy=TRUST_GENESIS)
    assert r.completeness is not None
    assert r.completeness["as_of_tree_size"] == h.entry.seq
    assert r.completeness["tree_size"] == cp_size == h.entry.seq + 3
    assert r.completeness["uncovered_entries"] == 2
    assert (
        f"outside     2 signed entries of the checkpoint's tree (seqs {h.entry.seq}..{cp_size - 1}"
        in r.text()
    )
    # The exporter's own bundles commit to everything before their heads entry: nothing outside.
    fresh = bundle.verify_members(members_of(export(home).data), policy=TRUST_GENESIS)
    assert fresh.completeness is not None and fresh.completeness["uncovered_entries"] == 0
    assert "outside" not in fresh.text()
