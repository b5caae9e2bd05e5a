"""Embed-on-insert meets atomisation and the background worker: what gets a vector, and when."""

from __future__ import annotations

from pathlib import Path

from mnemolog.cli.demo import POST_MORTEM
from mnemolog.projections.embedding import vectors as vx
from mnemolog.substrate.api import Substrate
from tests.projections.kit import new_home, open_sub
from tests.support.fake_embedder import FakeEmbedder


def vector_docs(sub: Substrate) -> set[str]:
    """The ids of the memories that have a vector."""
    with sub.projections.session() as conn:
        rows = conn.execute("SELECT m.id FROM vectors v JOIN memories m ON m.stored_seq = v.doc").fetchall()
        return {r[0] for r in rows}


def pending(sub: Substrate) -> int:
    with sub.projections.session() as conn:
        return vx.pending_count(conn)


def test_a_synchronous_auto_atomise_source_is_not_embedded_but_its_atoms_are(tmp_path: Path) -> None:
    fake = FakeEmbedder()
    with open_sub(new_home(tmp_path / "h"), embedder=fake) as s:
        s.set_policy(
            "ops",
            auto_atomise_mode="synchronous",
            curator="rules",
            auto_atomise_threshold_cl100k=100,
            auto_atomise_max_atom_tokens=60,
        )
        m = s.store(POST_MORTEM, namespace="ops")
        assert m["atomise_outcome"] == "atomised" and m["atomised_into"]
        assert m["embedding"] == "skipped_synchronous_atomise"
        atoms = {a["id"] for a in s.list(limit=100) if a["atom_of"] == m["id"]}
        assert len(atoms) == m["atomised_into"]
        assert vector_docs(s) == atoms
        assert not any(POST_MORTEM in t for c in fake.calls for t in c)  # never embedded
        assert pending(s) == 0
        # Under the threshold nothing is atomised: the memory is embedded like any other.
        small = s.store("Short note about the outage.", namespace="ops")
        assert small["atomise_outcome"] == "skipped_below_threshold" and small["embedding"] == "embedded"
        # Restored, the source is a memory like any other again: it waits for its vector.
        s.restore(m["id"])
        assert pending(s) == 1
        assert s.embed_pending()["pending"] == 0
        assert m["id"] in vector_docs(s)


def test_a_deferred_source_is_embedded_then_gives_way_to_its_atoms(tmp_path: Path) -> None:
    with open_sub(new_home(tmp_path / "h"), embedder=FakeEmbedder()) as s:
        m = s.store(POST_MORTEM, namespace="ops")
        assert m["embedding"] == "embedded" and vector_docs(s) == {m["id"]}
        res = s.atomise(m["id"], curator="rules", max_atom_tokens=60)
        atoms = set(res.atom_ids)
        assert vector_docs(s) == atoms  # the fully atomised source carries no vector


def test_the_background_worker_embeds_what_is_pending(tmp_path: Path) -> None:
    fake = FakeEmbedder()
    home = new_home(tmp_path / "h")
    with open_sub(home, embedder=fake) as s:
        s.store("first")  # records the embedder
    with open_sub(home, embedder=fake, long_lived=True) as s:
        fake.unreachable = True
        m = s.store("second")
        assert m["embedding"] == "pending"
        fake.unreachable = False
        s.embedding.wake()
        # The worker runs in its own thread: wait for its result, however long it takes here.
        for _ in range(600):
            if pending(s) == 0:
                break
            s.embedding.wake()
            s.embedding._stop.wait(0.5)
        assert pending(s) == 0
        assert m["id"] in vector_docs(s)
