"""`forget`: what it erases (and cascades to), what it records, and that everything still verifies after it.

The marker scan: memories carrying unique markers are stored, atomised,
embedded, ingested, packed, captured, extracted and rendered into a vault
inside the home; after `forget`, no file under the home holds any marker in
UTF-8, UTF-16 or base64.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from mnemolog.eventlog.bundle import verifier as bundle
from mnemolog.eventlog.errors import NotFound, UsageError
from mnemolog.eventlog.format import sealing
from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.erasure.datakeys import DataKeys
from mnemolog.substrate.forensics import service as forensics
from mnemolog.substrate.home import Home
from tests.projections.kit import new_home, open_sub

LONG = (Path(__file__).resolve().parents[3] / "examples" / "post-mortem.txt").read_text()


def variants(marker: str) -> list[bytes]:
    raw = marker.encode()
    out = [raw, marker.encode("utf-16-le"), marker.encode("utf-16-be")]
    # base64 at each of the three alignments, without the edge characters that depend on neighbours
    for pad in range(3):
        enc = base64.b64encode(b"\x00" * pad + raw)
        out.append(enc[4 if pad else 0 : -4])
    return [x for x in out if len(x) >= 8]


def scan(root: Path, markers: list[str]) -> list[tuple[str, str]]:
    """(file, marker) for every file under root holding a marker in any encoding."""
    found = []
    pats = {m: variants(m) for m in markers}
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.is_symlink():
            continue
        data = p.read_bytes()
        if data[:2] == b"\x1f\x8b":
            # A compressed file (a vault's migration snapshot) is scanned as it decompresses too.
            data += gzip.decompress(data)
        for m, vs in pats.items():
            if any(v in data for v in vs):
                found.append((str(p.relative_to(root)), m))
    return found


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return new_home(tmp_path / "home")


@pytest.fixture
def sub(home: Home) -> Iterator[Substrate]:
    s = open_sub(home)
    yield s
    s.close()


def test_forget_one_memory_erases_it_and_its_atoms_and_records_who_and_why(
    sub: Substrate, home: Home
) -> None:
    parent = sub.store(LONG.replace("Checkout", "Checkout XQPARENTMARK"), title="Outage XQTITLEMARK")
    res = sub.atomise(parent["id"], curator="rules")
    keep = sub.store("the deploy at 09:05 raised the worker count")
    sub.link(keep["id"], parent["id"], "related_to")
    dry = sub.forget([parent["id"]], dry_run=True)
    assert dry["dry_run"] and dry["erased"] == 0 and dry["seqs"] == []
    assert set(dry["atoms"]) == set(res.atom_ids) and dry["links"] >= 1 + len(res.atom_ids)
    assert sub.get(parent["id"])["content"]  # a dry run changed nothing
    named = {
        k
        for e in sub.log.iter_entries()
        for k in sealing.key_ids(e.type, e.data, {parent["id"], *res.atom_ids})
    }
    out = sub.forget([parent["id"]], reason="the user asked", requested_by="test")
    assert out["erased"] == 1 + len(res.atom_ids) and len(out["seqs"]) == 1
    for mid in [parent["id"], *res.atom_ids]:
        with pytest.raises(NotFound) as info:
            sub.get(mid)
        assert f"erased at seq {out['seqs'][0]}" in info.value.message
    assert named and all(DataKeys(home.root).get(k) is None for k in named)
    assert out["keys_destroyed"] == len(named)
    assert sub.get(keep["id"])["links"]["outgoing"] == []
    assert [m["id"] for m in sub.recall("why did workers time out")] == [keep["id"]] or not sub.recall(
        "why did workers time out"
    )
    e = sub.log.entry(out["seqs"][0])
    assert e.type == "memory.erased"
    assert e.data["reason"] == "the user asked" and e.data["requested_by"] == "test"
    # The markers, not "XQ": a ULID's Crockford base32 may hold "XQ" (the test failed at random).
    assert all(m not in json.dumps(e.data, default=str) for m in ("XQPARENTMARK", "XQTITLEMARK"))
    with pytest.raises(NotFound):
        sub.forget([parent["id"]])
    assert not scan(home.root, ["XQPARENTMARK", "XQTITLEMARK"])


def test_bulk_selectors(sub: Substrate) -> None:
    a = sub.store("alpha one", namespace="team/a")
    b = sub.store("alpha two", namespace="team/a/sub")
    c = sub.store("beta", namespace="team/ab")
    d = sub.store("gamma", namespace="other", project="")
    assert sub.forget(namespace="team/a", dry_run=True)["memories"] == sorted([a["id"], b["id"]])
    assert sub.forget(namespace="team/a", before="2000-01-01T00:00:00Z", dry_run=True)["memories"] == []
    out = sub.forget(namespace="team/a", before="2999-01-01T00:00:00Z")
    assert out["erased"] == 2
    assert {m["id"] for m in sub.list()} == {c["id"], d["id"]}
    assert sub.forget(namespace="nothing/here")["erased"] == 0
    with pytest.raises(UsageError):
        sub.forget()
    with pytest.raises(UsageError):
        sub.forget(namespace="x", before="not a time")


def test_a_bulk_erasure_of_many_memories_is_several_events(
    sub: Substrate, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mnemolog.substrate.erasure import service as erasure

    monkeypatch.setattr(erasure, "MAX_ERASED_PER_EVENT", 3)
    src = sub.home.root.parent / "bulk.jsonl"
    src.write_text(
        "".join(json.dumps({"content": f"bulk memory {i}", "namespace": "bulk"}) + "\n" for i in range(7))
    )
    sub.import_jsonl(src)
    out = sub.forget(namespace="bulk")
    assert out["erased"] == 7 and len(out["seqs"]) == 3
    assert sub.list(namespace="bulk") == []


def test_an_interaction_goes_with_its_candidates_and_a_candidate_takes_its_interaction(
    sub: Substrate,
) -> None:
    i1 = sub.capture("We decided to anneal the Invar mounts XQPROMPT", "Noted, XQRESPONSE", project="p")
    sub.extract(interaction_ids=[i1["id"]], extractor="rules")
    cands = [c["id"] for c in sub.candidates()]
    out = sub.forget(interaction=i1["id"])
    assert out["interactions"] == [i1["id"]] and set(out["candidates"]) == set(cands)
    with pytest.raises(NotFound):
        sub.interaction(i1["id"])
    assert not scan(sub.home.root, ["XQPROMPT", "XQRESPONSE"])


def test_everything_still_verifies_and_replay_and_as_of_never_bring_it_back(
    sub: Substrate, home: Home, tmp_path: Path
) -> None:
    gone = sub.store("XQREPLAYMARK the secret plan")
    kept = sub.store("an ordinary note")
    before_seq = sub.log.refresh() - 1
    exported_before = forensics.export_log(home, 0, None, tmp_path / "before.export")
    sub.forget([gone["id"]], reason="gdpr")
    from mnemolog.eventlog.verify.verifier import verify_log

    verify_log(home.log_dir, high_water=home.high_water_marks(), processes=1, policy=TRUST_GENESIS)
    sub.verify_projections()
    # A bundle of another memory verifies; one of the forgotten memory proves its entries and the erasure.
    for mid in (kept["id"], gone["id"]):
        ex = forensics.export_bundle(sub, mid)
        path = tmp_path / f"{mid}.tar"
        path.write_bytes(ex.data)
        report = bundle.verify_bundle(path, policy=TRUST_GENESIS)
        assert report.memory_id == mid
    members = bundle.read_members(tmp_path / f"{gone['id']}.tar")
    view = json.loads(members[bundle.MEMORIES])["memories"][gone["id"]]
    assert view["erased"]["reason"] == "gdpr" and view["content"] == "" and "sealed" in view
    assert sealing.decode_keys(members[bundle.DATAKEYS])[1] == {}
    assert not any(b"XQREPLAYMARK" in m for m in members.values())
    # Replay of an export made after: the memory is gone, the rest is there.
    after = forensics.export_log(home, 0, None, tmp_path / "after.export")
    rep = forensics.replay(Path(after.path), tmp_path / "copy")
    assert rep.entries > 0
    with open_sub(Home(tmp_path / "copy")) as copy:
        assert copy.get(kept["id"])["content"] == "an ordinary note"
        with pytest.raises(NotFound):
            copy.get(gone["id"])
    # As of a point before the erasure: the memory was there, its content is not readable.
    old = sub.list(as_of=before_seq)
    assert all("XQREPLAYMARK" not in json.dumps(m) for m in old)
    # An export made before the erasure still opens it: the documented limit.
    gone_keys = {k for e in sub.log.iter_entries() for k in sealing.key_ids(e.type, e.data, {gone["id"]})}
    assert gone_keys and gone_keys <= set(
        sealing.decode_keys(Path(exported_before.keys or "").read_bytes())[1]
    )
    assert not scan(home.root, ["XQREPLAYMARK"])


def test_the_marker_scan_over_every_cascade(sub: Substrate, home: Home) -> None:
    """Store, atomise, embed, ingest, pack, capture, extract, render a vault, snapshot it; forget; scan."""
    markers = {
        "memory": "XQMEMMARKALPHA",
        "atom": "XQATOMMARKBETA",
        "doc": "XQDOCMARKGAMMA",
        "prompt": "XQPROMPTMARKDELTA",
        "title": "XQTITLEMARKEPSILON",
        "tag": "xqtagmarkzeta",
    }
    long_text = LONG.replace("connection pool", f"connection pool {markers['atom']}")
    parent = sub.store(long_text, title=markers["title"], tags=[markers["tag"]], namespace="scan")
    sub.atomise(parent["id"], curator="rules")
    m = sub.store(f"The vendor is {markers['memory']} for the mounts", namespace="scan", kind="decision")
    docs = home.root / "docs-in"
    docs.mkdir()
    (docs / "notes.md").write_text(f"# Notes\n\nThe mount supplier {markers['doc']} ships in May.\n")
    doc_ids = [d["document_id"] for d in sub.ingest([docs])["ingested"]]
    assert doc_ids
    sub.build_context("who is the vendor for the mounts")
    i = sub.capture(f"Who is the vendor? {markers['prompt']}", "It is decided.", namespace="scan")
    sub.extract(interaction_ids=[i["id"]], extractor="rules")
    vault = home.root / "vault"
    from mnemolog.substrate.vault import service as vault_mod

    vault_mod.render(sub, vault)
    # A vault migration's snapshot: a copy of the vault from before it (a .tar.gz).
    from mnemolog.substrate.migrations.filesystem import FilesystemMigrationBackend

    snap = FilesystemMigrationBackend(vault).snapshot(2)
    snapshot = vault / "_migrations" / "snapshots" / snap.snapshot_id
    assert scan(home.root, [markers["memory"]])  # the marker is there before
    assert scan(snapshot.parent, [markers["memory"], markers["title"]])  # the snapshot holds it too
    out = sub.forget([parent["id"], m["id"]], vaults=[vault])
    assert f"snapshot:{snapshot}" in out["scrubbed"]
    sub.forget(namespace="scan", vaults=[vault])
    for d in doc_ids:
        assert sub.forget(document=d, vaults=[vault])["documents"] == [d]
    (docs / "notes.md").unlink()  # the source file is the user's, not a copy the home made
    vault_mod.render(sub, vault)
    assert scan(home.root, list(markers.values())) == []
    # The scrubbed snapshot still rolls the vault back, to a vault without the erased notes.
    FilesystemMigrationBackend(vault).restore(snap)
    assert scan(home.root, list(markers.values())) == []
    sub.verify_projections()


def test_a_publication_never_holds_readable_content_before_or_after_forget(
    sub: Substrate, home: Home
) -> None:
    from mnemolog.substrate.witness.publish import publish

    mark = "XQPUBLISHMARK"
    m = sub.store(f"{mark} a memory big enough " + "to be published " * 20, title=f"{mark} title")
    sub.store("a short one")
    pub = home.root.parent / "published"
    publish(home.log_dir, pub)
    assert not scan(pub, [mark])
    sub.forget([m["id"]])
    publish(home.log_dir, pub)
    assert not scan(pub, [mark]) and not scan(home.root, [mark])


def test_keys_a_crash_left_behind_are_destroyed_by_the_next_forget(
    sub: Substrate, home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = sub.store("XQCRASHMARK first")
    b = sub.store("second")
    named = {k for e in sub.log.iter_entries() for k in sealing.key_ids(e.type, e.data, {a["id"]})}
    real = sub.keys.destroy

    def crash(_ids: object) -> list[str]:
        raise OSError("killed between the event and the keys")

    monkeypatch.setattr(sub.keys, "destroy", crash)
    with pytest.raises(OSError):
        sub.forget([a["id"]])
    monkeypatch.setattr(sub.keys, "destroy", real)
    assert all(
        DataKeys(home.root).get(k) is not None for k in named
    )  # the event is durable, the keys not yet gone
    sub.forget([b["id"]])
    assert all(DataKeys(home.root).get(k) is None for k in named)
