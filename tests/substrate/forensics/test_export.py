"""The exporter against real homes: selection, chain, sparseness, determinism, views, replay."""

from __future__ import annotations

import functools
import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.bundle import memview
from mnemolog.eventlog.bundle import verifier as bundle
from mnemolog.eventlog.bundle.format import MEMORIES
from mnemolog.eventlog.bundle.offline import split_sequence
from mnemolog.eventlog.errors import (
    BadInput,
    NotFound,
    SignerError,
    StorageError,
    UsageError,
    VerificationError,
)
from mnemolog.eventlog.format import codec, merkle
from mnemolog.eventlog.format.note import peek_checkpoint
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.writer import Durability
from mnemolog.eventlog.verify.trust import TRUST_GENESIS, PinnedKey
from mnemolog.eventlog.verify.verifier import verify_log
from mnemolog.eventlog.vocabulary.events import iso_time as iso
from mnemolog.projections.engine import Projections
from mnemolog.projections.memory import queries
from mnemolog.projections.recall import query as q
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.events import upcast
from mnemolog.substrate.forensics import service as forensics
from mnemolog.substrate.home import Home
from tests.support.cli import Cli
from tests.support.forensic_data import (
    Atomised,
    FakeClock,
    atomise_by_hand,
    atomised_home,
    make_home,
    members_of,
)
from tests.support.views import as_row

PROJECTION_ONLY = {"atom_ids", "links", "seqs", "knowledge"}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Atomised:
    return atomised_home(tmp_path_factory.mktemp("export") / "home")


@pytest.fixture
def world(built: Atomised, tmp_path: Path) -> Iterator[Atomised]:
    """A private copy of the atomised home, free to grow."""
    root = tmp_path / "home"
    shutil.copytree(built.home.root, root)
    yield Atomised(Home(root), built.parent, built.atoms, built.other)


def export(home: Home, memory_id: str, include_chain: bool = True) -> forensics.ExportedBundle:
    with Substrate.open(home, long_lived=False) as sub:
        return forensics.export_bundle(sub, memory_id, include_chain)


def touches(home: Home, ids: set[str], below: int) -> set[int]:
    """The projection's view of which entries touch `ids` (a cross-check; the exporter never reads it)."""
    with Substrate.open(home, long_lived=False) as sub, sub.projections.session() as conn:
        return queries.touching_seqs(conn, ids, below)


def test_a_deleted_projection_row_does_not_drop_an_entry(world: Atomised) -> None:
    """Attack 5: delete one row of the projection's `touches` table; the bundle still holds the entry."""
    before = export(world.home, world.parent, include_chain=False)
    victim = before.seqs[len(before.seqs) // 2]
    with Substrate.open(world.home, long_lived=False) as sub, sub.projections.session() as conn:
        conn.execute("DELETE FROM touches WHERE seq = ?", [victim])
        # And a forged row claiming an unrelated entry is about the memory.
        stranger = next(s for s in range(1, before.tree_size) if s not in before.seqs)
        conn.execute("INSERT INTO touches VALUES (?, ?, 'memory.updated')", [world.parent, stranger])
        assert victim not in {r[0] for r in conn.execute("SELECT seq FROM touches").fetchall()}
    after = export(world.home, world.parent, include_chain=False)
    assert after.seqs == before.seqs
    assert victim in after.seqs and stranger not in after.seqs
    bundle.verify_members(members_of(after.data), policy=TRUST_GENESIS)


# -- selection and chain ------------------------------------------------------------


def test_from_the_parent_every_atom(world: Atomised) -> None:
    ex = export(world.home, world.parent)
    assert ex.memories == sorted([world.parent, *world.atoms])
    assert ex.unstored == []
    assert set(ex.seqs) == touches(world.home, {world.parent, *world.atoms}, ex.tree_size)
    r = bundle.verify_members(members_of(ex.data), policy=TRUST_GENESIS)
    assert r.envelopes[world.parent]["atom_ids"] == world.atoms


def test_from_an_atom_its_parent_and_siblings(world: Atomised) -> None:
    ex = export(world.home, world.atoms[1])
    assert ex.memories == sorted([world.parent, *world.atoms])
    r = bundle.verify_members(members_of(ex.data), policy=TRUST_GENESIS)
    assert r.memory_id == world.atoms[1]
    assert r.envelopes[world.atoms[1]]["atom_of"] == world.parent


def test_without_the_chain_only_the_memory(world: Atomised) -> None:
    ex = export(world.home, world.parent, include_chain=False)
    assert ex.memories == [world.parent]
    assert set(ex.seqs) == touches(world.home, {world.parent}, ex.tree_size)
    r = bundle.verify_members(members_of(ex.data), policy=TRUST_GENESIS)
    assert r.include_chain is False
    # The atomisation entries touch the parent, so they are in; the atoms' own later updates are not.
    chain = export(world.home, world.parent)
    assert set(ex.seqs) < set(chain.seqs)


def test_atom_without_chain(world: Atomised) -> None:
    ex = export(world.home, world.atoms[0], include_chain=False)
    assert ex.memories == [world.atoms[0]]
    bundle.verify_members(members_of(ex.data), policy=TRUST_GENESIS)


def test_unrelated_entries_are_left_out(world: Atomised) -> None:
    ex = export(world.home, world.parent)
    with world.home.open_log() as log:
        selected = {log.entry(s).data.get("content") for s in ex.seqs}
    assert not any(isinstance(c, str) and "nothing in particular" in c for c in selected)
    assert ex.key_seqs == [0]


def test_unknown_memory(world: Atomised) -> None:
    with pytest.raises(NotFound):
        export(world.home, "01HZZZZZZZZZZZZZZZZZZZZZZZ")


def test_chain_member_the_log_never_stored(world: Atomised) -> None:
    ghost = "01HGHOSTGHOSTGHOSTGHOSTGHO"
    with Substrate.open(world.home, long_lived=False) as sub:
        parent = sub.store("a parent whose atomisation names an atom that was never stored")["id"]
        with sub.projections.session() as conn:
            sub.writer.append(
                "atomisation.completed",
                {
                    "source_id": parent,
                    "atom_ids": [ghost],
                    "curator": "rules",
                    "input_tokens": 1,
                    "output_tokens": 1,
                    "atom_tokens": [1],
                    "max_atom_tokens": 50,
                    "attempts": 1,
                },
            )
            sub.projections.catch_up(conn)
        ex = forensics.export_bundle(sub, parent)
    assert ex.unstored == [ghost] and ex.memories == [parent]
    assert bundle.verify_members(members_of(ex.data), policy=TRUST_GENESIS).unstored == [ghost]


# -- sparse ------------------------------------------------------------------------------


def test_sparse_selection_at_far_apart_seqs(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    mid = "01HSPARSESPARSESPARSESPARS"
    with Substrate.open(home, long_lived=False, durability=Durability("group")) as sub:
        w = sub.writer

        def pad_to(seq: int) -> None:
            w.append_many([("note.added", {"pad": i}, 1) for i in range(seq - w.size)])

        pad_to(5)
        w.append("memory.stored", {"id": mid, "namespace": "default", "kind": "observation", "content": "x"})
        pad_to(90)
        w.append("memory.updated", {"id": mid, "confidence": 0.5})
        w.append("memory.archived", {"id": mid, "by": "operator", "reason": "old"})
        pad_to(200)
        w.append("memory.restored", {"id": mid})
        pad_to(5000)
        ex = forensics.export_bundle(sub, mid)
    assert ex.seqs == [5, 90, 91, 200]
    assert ex.tree_size == 5001  # the export committed the heads at seq 5000, then the checkpoint
    members = members_of(ex.data)
    proofs = codec.decode(members[bundle.PROOFS])["proofs"]
    assert [p[0] for p in proofs] == [0, 5, 90, 91, 200]
    # Each proof has one hash per level: size grows with entries x log(n), not with n.
    assert all(len(p[1]) <= math.ceil(math.log2(5001)) for p in proofs)
    assert len(members[bundle.ENTRIES]) < 2000
    r = bundle.verify_members(members, policy=TRUST_GENESIS)
    assert r.seqs == [5, 90, 91, 200]
    view = r.envelopes[mid]
    assert view == {
        "memory_id": mid,
        "atomised_into": None,
        "archived_at": None,
        "atom_ids": [],
        "atom_of": None,
    }


# -- determinism and growth -------------------------------------------------------------


def test_exporting_twice_gives_the_same_bytes(world: Atomised) -> None:
    a = export(world.home, world.parent)
    b = export(world.home, world.parent)
    assert a.data == b.data
    assert export(world.home, world.parent, include_chain=False).data != a.data


def test_bundle_from_a_log_that_later_grew(cli: Cli, world: Atomised, tmp_path: Path) -> None:

    ex = export(world.home, world.parent)
    with Substrate.open(world.home, long_lived=False) as sub:
        sub.store("something new after the export")
        sub.update(world.parent, confidence=0.1)
    later = export(world.home, world.parent)
    assert later.tree_size > ex.tree_size
    path = tmp_path / "old.tar"
    path.write_bytes(ex.data)
    r = bundle.verify_bundle(path, policy=TRUST_GENESIS)
    assert r.tree_size == ex.tree_size
    res = cli(world.home.root, "log", "consistency", str(ex.tree_size), str(later.tree_size), json=True)
    assert res.code == 0, res.output
    import base64
    import json

    out = json.loads(res.output)
    assert base64.b64decode(out["old_root"]) == ex.root
    merkle.verify_consistency(
        ex.tree_size,
        later.tree_size,
        ex.root,
        later.root,
        [base64.b64decode(h) for h in out["proof"]],
    )


def test_views_equal_the_projection(world: Atomised) -> None:
    ex = export(world.home, world.parent)
    import json

    views = json.loads(members_of(ex.data)[bundle.MEMORIES])["memories"]
    with Substrate.open(world.home, long_lived=False) as sub, sub.projections.session() as conn:
        for mid in ex.memories:
            row = q.get(conn, mid)
            assert row is not None
            assert as_row(views[mid]) == row
            assert views[mid]["links"] == q.links_of(conn, mid)


# -- the fold is the projection ------------------------------------------------------------

IDS = ["01HAAAAAAAAAAAAAAAAAAAAAAA", "01HBBBBBBBBBBBBBBBBBBBBBBB", "01HCCCCCCCCCCCCCCCCCCCCCCC"]
ids = st.sampled_from(IDS)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-1000, 1000), st.text(max_size=5))
metadata = st.dictionaries(st.sampled_from(["a", "b", "c"]), json_scalars, max_size=3)


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


events = st.one_of(
    st.builds(
        lambda i, parent, title, tags, conf, meta, span: (
            "memory.stored",
            _clean(
                {
                    "id": i,
                    "namespace": "ns",
                    "kind": "observation",
                    "content": f"content of {i}",
                    "title": title,
                    "tags": tags,
                    "confidence": conf,
                    "metadata": {k: v for k, v in meta.items() if v is not None},
                    "atom_of": parent,
                    "source_span": span,
                }
            ),
        ),
        ids,
        st.one_of(st.none(), ids),
        st.one_of(st.none(), st.text(min_size=1, max_size=8)),
        st.lists(st.sampled_from(["x", "y", "z"]), max_size=2, unique=True),
        st.one_of(st.none(), st.floats(0, 1)),
        metadata,
        st.one_of(st.none(), st.tuples(st.integers(0, 5), st.integers(6, 9)).map(list)),
    ),
    st.builds(
        lambda i, title, content, tags, conf, meta: (
            "memory.updated",
            _clean(
                {
                    "id": i,
                    "title": title,
                    "content": content,
                    "tags": tags,
                    "confidence": conf,
                    "metadata": meta,
                }
            ),
        ),
        ids,
        st.one_of(st.none(), st.text(min_size=1, max_size=8)),
        st.one_of(st.none(), st.just("new content")),
        st.one_of(st.none(), st.lists(st.sampled_from(["x", "q"]), max_size=2, unique=True)),
        st.one_of(st.none(), st.floats(0, 1)),
        st.one_of(st.none(), metadata),
    ),
    st.builds(
        lambda i, by, reason: ("memory.archived", _clean({"id": i, "by": by, "reason": reason})),
        ids,
        st.sampled_from(["operator", "atomisation"]),
        st.one_of(st.none(), st.text(max_size=5)),
    ),
    st.builds(lambda i: ("memory.restored", {"id": i}), ids),
    st.builds(
        lambda s, d, rel: ("link.created", {"src": s, "dst": d, "relation": rel, "metadata": {}}),
        ids,
        ids,
        st.sampled_from(["related_to", "derives_from"]),
    ),
    st.builds(
        lambda s, atoms: (
            "atomisation.completed",
            {
                "source_id": s,
                "atom_ids": atoms,
                "curator": "rules",
                "input_tokens": 1,
                "output_tokens": 1,
                "atom_tokens": [1] * len(atoms),
                "max_atom_tokens": 50,
                "attempts": 1,
            },
        ),
        ids,
        st.lists(ids, max_size=3, unique=True),
    ),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(events, min_size=1, max_size=25))
def test_pure_fold_equals_the_projection(tmp_path_factory: pytest.TempPathFactory, evs: list[Any]) -> None:
    home = make_home(tmp_path_factory.mktemp("fold") / "home")
    with home.open_writer(durability=Durability("group"), clock=FakeClock()) as w:
        w.append_many([(t, d, 1) for t, d in evs])
    with Log(home.log_dir) as log:
        entries = list(log.iter_entries())
        proj = Projections(home.projections_dir, log, upcast)
        try:
            views = memview.fold_views(entries, IDS)
            with proj.session() as conn:
                for mid in IDS:
                    row = q.get(conn, mid)
                    if row is None:
                        assert mid not in views
                        continue
                    v = views[mid]
                    assert as_row(v) == row
                    assert v["links"] == q.links_of(conn, mid)
                    touched = {
                        s
                        for (s,) in conn.execute(
                            "SELECT seq FROM touches WHERE memory_id = ?", [mid]
                        ).fetchall()
                    }
                    # The pure touches are a superset (a repeated store of an id is still "about" it).
                    assert touched <= set(v["seqs"])
        finally:
            proj.close()


# -- replay --------------------------------------------------------------------------------


def log_export(home: Home, path: Path, start: int = 0, last: int | None = None) -> Path:
    forensics.export_log(home, start, last, path)
    return path


def segments_bytes(home: Home) -> bytes:
    with Log(home.log_dir) as log:
        return b"".join(log.raw(i) for i in range(log.size))


def test_replay_rebuilds_an_identical_home(world: Atomised, tmp_path: Path) -> None:
    exp = log_export(world.home, tmp_path / "all.cbor")
    new = tmp_path / "new"
    r = forensics.replay(exp, new, signing_key=world.home.signing_key_path)
    assert r.entries == r.tree_size and r.checkpoint == r.tree_size and r.signing_key
    assert segments_bytes(Home(new)) == segments_bytes(world.home)
    verify_log(Home(new).log_dir, policy=TRUST_GENESIS)
    with (
        Substrate.open(world.home, long_lived=False) as old,
        Substrate.open(Home(new), long_lived=False) as fresh,
    ):
        for mid in [world.parent, *world.atoms, world.other]:
            assert fresh.get(mid) == old.get(mid)
        assert fresh.recall("deploy rollbacks", include_archived=True) == old.recall(
            "deploy rollbacks", include_archived=True
        )
        assert fresh.recall("deploy rollbacks") == old.recall("deploy rollbacks")
        assert fresh.list(limit=100) == old.list(limit=100)
        assert fresh.stats()["memories"] == old.stats()["memories"]
        # The replayed home carries on: same key, same chain.
        fresh.store("written after the replay")
    verify_log(Home(new).log_dir, policy=TRUST_GENESIS)


def test_replay_without_a_signing_key_is_read_only(world: Atomised, tmp_path: Path) -> None:
    exp = log_export(world.home, tmp_path / "all.cbor")
    new = tmp_path / "new"
    r = forensics.replay(exp, new)
    assert not r.signing_key
    home = Home(new)
    assert not home.signing_key_path.exists()
    assert list(home.keys_dir.glob("*.pub"))
    with Log(home.log_dir) as log:
        cp, _ = log.latest_checkpoint()
        assert cp.size == log.size
    # Read-only means it reads (audits need no secrets) and refuses to sign.
    with Substrate.open(home, long_lived=False) as sub:
        assert sub.stats()["log"]["size"] == r.entries
        with pytest.raises(SignerError):
            sub.store("cannot be signed here")


def test_replay_of_a_prefix(world: Atomised, tmp_path: Path) -> None:
    exp = log_export(world.home, tmp_path / "prefix.cbor", 0, 9)
    new = tmp_path / "new"
    r = forensics.replay(exp, new, signing_key=world.home.signing_key_path)
    assert r.entries == 10 and r.tree_size > 10 and r.checkpoint == 10
    assert segments_bytes(Home(new)) == segments_bytes(world.home)[: len(segments_bytes(Home(new)))]
    verify_log(Home(new).log_dir, policy=TRUST_GENESIS)
    # Without the key the new home could hold no checkpoint of its own: refused, nothing written.
    unsigned = tmp_path / "unsigned"
    with pytest.raises(UsageError):
        forensics.replay(exp, unsigned)
    assert not unsigned.exists()


def test_replay_refuses_an_export_that_does_not_start_at_zero(world: Atomised, tmp_path: Path) -> None:
    exp = log_export(world.home, tmp_path / "mid.cbor", 3, 12)
    with pytest.raises(UsageError):
        forensics.replay(exp, tmp_path / "new")
    assert not (tmp_path / "new").exists()


def test_replay_of_a_tampered_export_writes_nothing(world: Atomised, tmp_path: Path) -> None:
    exp = log_export(world.home, tmp_path / "all.cbor")
    items = split_sequence(exp.read_bytes(), "x")
    raws = [raw for raw, _ in items]
    # Content is sealed: change the name of a sealed field instead (same length).
    i = next(i for i, r in enumerate(raws) if b"sealed" in r and i > 0)
    victim = raws[i]
    raws[i] = victim.replace(b"sealed", b"sealeD", 1)
    exp.write_bytes(b"".join(raws))
    new = tmp_path / "new"
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(VerificationError) as info:
        forensics.replay(exp, new)
    assert info.value.seq == i - 1  # item 0 is the header
    assert info.value.check == "entry.signature"
    assert not new.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_replay_refuses_an_oversized_export(
    world: Atomised, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exp = log_export(world.home, tmp_path / "all.cbor")
    monkeypatch.setattr(forensics, "MAX_EXPORT_BYTES", exp.stat().st_size - 1)
    with pytest.raises(BadInput):
        forensics.replay(exp, tmp_path / "new")
    assert not (tmp_path / "new").exists()
    with pytest.raises(NotFound):
        forensics.replay(tmp_path / "absent.cbor", tmp_path / "new")


def test_replay_refuses_a_home_that_is_not_empty(world: Atomised, tmp_path: Path) -> None:
    exp = log_export(world.home, tmp_path / "all.cbor")
    with pytest.raises(StorageError):
        forensics.replay(exp, world.home.root)
    empty = tmp_path / "empty"
    empty.mkdir()
    forensics.replay(exp, empty)
    assert Home(empty).exists()


def test_replay_refuses_a_key_that_does_not_sign_the_log(world: Atomised, tmp_path: Path) -> None:
    other = make_home(tmp_path / "other")
    exp = log_export(world.home, tmp_path / "all.cbor")
    with pytest.raises(SignerError):
        forensics.replay(exp, tmp_path / "new", signing_key=other.signing_key_path)
    assert not (tmp_path / "new").exists()


def test_replay_with_a_pinned_key(world: Atomised, tmp_path: Path) -> None:
    exp = log_export(world.home, tmp_path / "all.cbor")
    with world.home.open_log() as log:
        genesis = log.key_history()[0].key
    r = forensics.replay(exp, tmp_path / "new", policy=PinnedKey(genesis))
    assert r.export["trust"]["pinned"] is True
    from mnemolog.eventlog.format.keys import SigningKey

    with pytest.raises(VerificationError):
        forensics.replay(exp, tmp_path / "new2", policy=PinnedKey(SigningKey.generate("k").verifier))
    assert not (tmp_path / "new2").exists()


def test_bundle_exported_from_a_replayed_home_equals_the_original(world: Atomised, tmp_path: Path) -> None:
    # The export commits the heads (an entry), so the log is exported after it and carries it.
    original = export(world.home, world.parent)
    exp = log_export(world.home, tmp_path / "all.cbor")
    new = Home(tmp_path / "new")
    forensics.replay(exp, new.root, signing_key=world.home.signing_key_path)
    again = export(new, world.parent)
    assert peek_checkpoint(members_of(again.data)[bundle.CHECKPOINT]).size == original.tree_size
    assert again.data == original.data


def test_atomisation_helper_writes_the_engine_shape(tmp_path: Path) -> None:
    home = make_home(tmp_path / "h")
    with Substrate.open(home, long_lived=False) as sub:
        parent = sub.store("one. two.")["id"]
        atoms = atomise_by_hand(sub, parent, "one. two.", ["one.", "two."])
        m = sub.get(parent)
    assert m["atomised_into"] == 2 and m["atomisation_archived_at"] is not None
    assert {link["src"] for link in m["links"]["incoming"]} == set(atoms)


# -- the atomisation archive mirrored in metadata ---------------------------------------------


def test_the_parent_metadata_mirrors_its_atomisation_archive(world: Atomised) -> None:
    with Substrate.open(world.home, long_lived=False) as sub:
        parent = sub.get(world.parent)
        atom = sub.get(world.atoms[0])
    archived = parent["atomisation_archived_at"]
    assert archived is not None
    # The contract's name and an ISO time (the result envelope's `archived_at`), next to
    # the keys the memory was stored and updated with.
    assert parent["metadata"] == {"team": "infra", "reviewed": True, "atomisation_archived_at": iso(archived)}
    assert "atomisation_archived_at" not in atom["metadata"]
    views = json.loads(members_of(export(world.home, world.parent).data)[MEMORIES])["memories"]
    assert views[world.parent]["metadata"]["atomisation_archived_at"] == iso(archived)
    with Substrate.open(world.home, long_lived=False) as sub:
        sub.restore(world.parent)
        assert sub.get(world.parent)["metadata"] == {"team": "infra", "reviewed": True}
    bundle.verify_members(members_of(export(world.home, world.parent).data), policy=TRUST_GENESIS)


def test_a_bundle_exported_before_the_mirror_still_verifies(
    world: Atomised, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The exporter of an earlier release: its views had no metadata mirror.
    monkeypatch.setattr(memview, "fold_views", functools.partial(memview.fold_views, mirror=False))
    old = members_of(export(world.home, world.parent).data)
    monkeypatch.undo()
    assert "atomisation_archived_at" not in json.loads(old[MEMORIES])["memories"][world.parent]["metadata"]
    r = bundle.verify_members(old, policy=TRUST_GENESIS)
    assert r.memory_id == world.parent
    # The legacy fold is a second accepted rendering of the same entries, no loophole:
    # a changed view is still refused.
    forged = json.loads(old[MEMORIES])
    forged["memories"][world.parent]["metadata"]["team"] = "someone else"
    tampered = dict(old)
    tampered[MEMORIES] = json.dumps(forged).encode()
    with pytest.raises(VerificationError):
        bundle.verify_members(tampered, policy=TRUST_GENESIS)
