"""Vectors: embed-on-insert, the content-addressed cache, model changes, bad replies refused,
exact and HNSW search, and the index after a crash."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

from mnemolog.curators.embedding.embedder import EmbedderFailed
from mnemolog.projections.embedding import vectors as vx
from mnemolog.projections.recall.query import Filters
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.embedding.service import Unchanged
from mnemolog.substrate.home import Home
from tests.projections.kit import log_digest, new_home, open_sub
from tests.support.fake_embedder import DIM, FakeEmbedder, fake_vec


def sub_with(home: Home, fake: FakeEmbedder, **kw: Any) -> Substrate:
    return open_sub(home, embedder=fake, **kw)


def stored(sub: Substrate) -> list[tuple[int, bytes, list[float]]]:
    with sub.projections.session() as conn:
        return [
            (int(d), bytes(s), list(v))
            for d, s, v in conn.execute("SELECT doc, sha, vec FROM vectors ORDER BY doc").fetchall()
        ]


def nearest(
    sub: Substrate, text: str, filters: Filters | None = None, limit: int = 5, **kw: Any
) -> list[str]:
    with sub.projections.session() as conn:
        meta = vx.read_meta(conn)
        assert meta is not None
        hits = vx.search(conn, fake_vec(text), filters or Filters(), limit, meta=meta, **kw)
        ids = {int(d): i for d, i in conn.execute("SELECT stored_seq, id FROM memories").fetchall()}
        return [ids[d] for d, _ in hits]


def pending(sub: Substrate) -> int:
    with sub.projections.session() as conn:
        return vx.pending_count(conn)


def test_embed_text_is_the_same_in_sql_and_python(tmp_path: Path) -> None:
    cases = [
        ("T", "content", ["a", "b-c"]),
        (None, "content", []),
        ("", "content", ["x"]),
        ("Tïtle 日本", "multi\nline", []),
    ]
    home = new_home(tmp_path / "h")
    with open_sub(home) as s, s.projections.session() as conn:
        for title, content, tags in cases:
            row = conn.execute(
                f"SELECT {vx.EMBED_TEXT.format(m='m')}, {vx.TEXT_SHA.format(m='m')} "
                "FROM (SELECT ?::VARCHAR AS title, ?::VARCHAR AS content, ?::VARCHAR[] AS tags) m",
                [title, content, tags],
            ).fetchone()
            assert row is not None
            text = vx.embed_text(title, content, tags)
            assert row[0] == text
            assert bytes(row[1]) == vx.text_sha(text) == hashlib.sha256(text.encode()).digest()


def test_stores_are_embedded_once_per_text_and_a_rebuild_asks_the_cache(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    fake = FakeEmbedder()
    with sub_with(home, fake) as s:
        a = s.store("alpha", title="A", tags=["t1"])
        assert a["embedding"] == "embedded"
        s.store("beta")
        s.store("beta")  # the same text: embedded once
        assert sorted(x for c in fake.calls for x in c) == ["A\nalpha\nt1", "beta"]
        before = stored(s)
        assert len(before) == 3
        fake.unreachable = True  # a rebuild must not need the embedder
        s.rebuild()
        assert stored(s) == before
        assert fake.texts == 2
        assert nearest(s, "A\nalpha\nt1")[0] == a["id"]
        status = s.embedding_status()
        assert status["recorded"] is not None and status["recorded"]["model_id"] == "ollama/fake@1"
        assert (status["vectors"], status["pending"], status["cached"]) == (3, 0, 2)


def test_text_changes_and_archives_follow_the_memories(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    fake = FakeEmbedder()
    with sub_with(home, fake) as s:
        m = s.store("original text")["id"]
        assert s.update(m, content="changed text")["embedding"] == "embedded"
        assert nearest(s, "changed text")[0] == m
        assert s.update(m, tags=["x"])["embedding"] == "embedded"
        assert nearest(s, "changed text\nx")[0] == m
        assert "embedding" not in s.update(m, confidence=0.5)  # no text changed: nothing to embed
        assert len(stored(s)) == 1
        s.archive(m)  # an archived memory keeps its vector (include_archived finds it)
        assert nearest(s, "changed text\nx", Filters(include_archived=True))[0] == m
        assert m not in nearest(s, "changed text\nx")  # the guard hides it


def test_an_unreachable_embedder_leaves_work_pending(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    fake = FakeEmbedder()
    with sub_with(home, fake) as s:
        s.store("one")
        fake.unreachable = True
        m = s.store("two")
        assert m["embedding"] == "pending"
        assert any("unreachable" in w for w in m["warnings"])
        assert pending(s) == 1
        with pytest.raises(EmbedderFailed):
            s.embed_pending()
        fake.unreachable = False
        assert s.embed_pending() == {"embedded": 1, "filled": 1, "pending": 0}
        assert pending(s) == 0 and len(stored(s)) == 2


def test_the_choice_waits_for_an_embedder_that_can_be_reached(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    fake = FakeEmbedder()
    fake.unreachable = True
    with sub_with(home, fake) as s:
        size = s.log.size
        m = s.store("one")
        assert m["embedding"] == "pending"
        assert s.log.size == size + 1  # nothing recorded: the embedder could not be asked
        assert s.embedding_status()["recorded"] is None
        fake.unreachable = False
        s.store("two")  # the first write that reaches it records the choice
        rec = s.embedding_status()["recorded"]
        assert rec is not None and rec["model_id"] == fake.model_id
        assert s.embed_pending()["pending"] == 0 and len(stored(s)) == 2


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (lambda ts: np.zeros((len(ts), DIM + 1)), "17-dimensional"),
        (lambda ts: np.ones((len(ts) + 1, DIM)), "shape"),
        (lambda ts: np.full((len(ts), DIM), np.nan), "NaN"),
        (lambda ts: np.full((len(ts), DIM), np.inf), "NaN or infinity"),
        (lambda ts: np.zeros((len(ts), DIM)), "all-zero"),
        (lambda ts: [["x"] * DIM for _ in ts], "not a list of number vectors"),
    ],
)
def test_wrong_vectors_are_refused_and_nothing_is_written(tmp_path: Path, bad: Any, match: str) -> None:
    home = new_home(tmp_path / "h")
    fake = FakeEmbedder()
    with sub_with(home, fake) as s:
        s.store("first")
        size, digest = s.log.size, log_digest(home)
        fake.corrupt = bad
        with pytest.raises(EmbedderFailed, match=match) as info:
            s.store("second")
        assert info.value.reason == "bad_vectors" and info.value.exit_code == 4
        first = s.list()[0]["id"]
        with pytest.raises(EmbedderFailed):
            s.update(first, content="changed")
        assert s.log.size == size and log_digest(home) == digest
        assert [m["content"] for m in s.list()] == ["first"]
        assert len(stored(s)) == 1 and pending(s) == 0
        assert s.projections.cache.count() == 1


def test_a_model_change_re_embeds_and_switching_back_uses_the_cache(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    fake = FakeEmbedder()
    with sub_with(home, fake) as s:
        s.store("one")
        s.store("two")
        first = stored(s)
        rec = s.set_embedder("wordllama")
        assert rec["kind"] == "wordllama" and rec["dim"] == 256
        assert stored(s) == [] and pending(s) == 2
        assert s.embed_pending() == {"embedded": 2, "filled": 2, "pending": 0}
        assert len(stored(s)) == 2
        calls = fake.texts
        s.set_embedder("ollama", "fake")
        assert stored(s) == first  # from the cache: the fake was not asked again
        assert fake.texts == calls
        with pytest.raises(Unchanged):
            s.set_embedder("ollama", "fake")
        s.set_embedder("off")
        assert s.recall("one")[0]["content"] == "one"  # bm25 still works
        with s.projections.session() as conn:
            assert vx.read_meta(conn) is None
        hist = s.embedding_status()["history"]
        assert [h["kind"] for h in hist] == ["ollama", "wordllama", "ollama", "off"]


def test_filters_and_ties(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    with sub_with(home, FakeEmbedder()) as s:
        x = s.store("same", namespace="a")["id"]
        y = s.store("same", namespace="b")["id"]
        z = s.store("other", namespace="a/c")["id"]
        assert nearest(s, "same", limit=2) == [y, x]  # equal distance: newest first
        assert nearest(s, "same", Filters(namespace="a"), limit=3) == [x, z]
        assert nearest(s, "same", Filters(namespace="a", descendants=False)) == [x]


def test_hnsw_agrees_with_the_exact_scan_and_respects_filters(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    with sub_with(home, FakeEmbedder()) as s:
        ids = [s.store(f"memory number {i}", namespace="odd" if i % 2 else "even")["id"] for i in range(120)]
        with s.projections.session() as conn:
            meta = vx.read_meta(conn)
            assert meta is not None
            assert vx.maintain_index(conn, meta, min_rows=50)
            assert vx.has_index(conn)
        for i in (0, 7, 119):
            assert nearest(s, f"memory number {i}", use_index=True)[0] == ids[i]
            assert nearest(s, f"memory number {i}", limit=10, use_index=True) == nearest(
                s, f"memory number {i}", limit=10
            )
        odd = nearest(s, "memory number 4", Filters(namespace="odd"), limit=60, use_index=True)
        assert len(odd) == 60 and set(odd) == {ids[i] for i in range(1, 120, 2)}
        with s.projections.session() as conn:
            meta = vx.read_meta(conn)
            assert meta is not None
            assert not vx.maintain_index(conn, meta, min_rows=1000)  # too small again: dropped
            assert not vx.has_index(conn)


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    from mnemolog.projections import db
    from mnemolog.projections.embedding import vectors as vx
    conn = db.duckdb.connect(":memory:")
    db.load_vss(conn)
    conn.execute(f"ATTACH '{sys.argv[1]}' AS p")
    conn.execute("USE p")
    conn.execute("SET checkpoint_threshold = '1GB'")  # keep the inserts in the WAL
    rng = np.random.default_rng(int(sys.argv[2]))
    for doc in range(1000, 1040):
        v = rng.standard_normal(16).astype(np.float32)
        conn.execute("INSERT INTO vectors VALUES (?, ?, ?::VARCHAR::FLOAT[16])",
                     [doc, b"x", vx.vector_literal(v)])
    conn.execute("UPDATE vector_meta SET rows = (SELECT count(*) FROM vectors)")
    print("written", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_the_index_is_checked_and_rebuilt_after_a_killed_writer(tmp_path: Path) -> None:
    """Vectors a SIGKILLed process had only in its WAL are found after reopening, index or not."""
    path = tmp_path / "p.duckdb"
    conn = duckdb.connect(":memory:")
    from mnemolog.projections import db

    db.load_vss(conn)
    conn.execute(f"ATTACH '{path}' AS p")
    conn.execute("USE p")
    conn.execute("CREATE TABLE proj_state(last_seq BIGINT)")
    # The default filters leave out the memories that are not active (none here).
    conn.execute("CREATE TABLE inactive(id VARCHAR NOT NULL, doc BIGINT NOT NULL)")
    vx.configure(conn, "fake/m@1", DIM)
    rng = np.random.default_rng(1)
    for doc in range(100):
        conn.execute(
            "INSERT INTO vectors VALUES (?, ?, ?::VARCHAR::FLOAT[16])",
            [doc, b"x", vx.vector_literal(rng.standard_normal(DIM).astype(np.float32))],
        )
    conn.execute("UPDATE vector_meta SET rows = 100")
    vx.build_index(conn)
    conn.execute("CHECKPOINT")
    conn.execute("USE memory")
    conn.execute("DETACH p")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    p = subprocess.run(
        [sys.executable, str(script), str(path), "7"], capture_output=True, text=True, check=False
    )
    assert p.returncode == -signal.SIGKILL, p.stderr
    assert "written" in p.stdout
    assert os.path.exists(str(path) + ".wal")
    conn.execute(f"ATTACH '{path}' AS p")
    conn.execute("USE p")
    vx.distrust_index(conn)  # what attaching the projection file does
    meta = vx.read_meta(conn)
    assert meta is not None and meta.rows == 140
    lost = not vx.index_is_sound(conn, meta)  # whichever DuckDB does, the check decides
    assert vx.maintain_index(conn, meta, min_rows=50)
    rng = np.random.default_rng(7)
    for doc in range(1000, 1040):
        v = rng.standard_normal(DIM).astype(np.float32)
        hits = vx.search(conn, v, Filters(include_archived=True), 1, meta=meta, use_index=True)
        assert hits[0][0] == doc
    assert vx.index_is_sound(conn, meta)
    conn.close()
    print("index lost entries across the kill:", lost)


def test_the_vector_metadata_read_is_kept_only_while_it_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """read_meta is kept per connection and position; a fill, committed or rolled back, drops it."""

    def in_table(conn: duckdb.DuckDBPyConnection) -> vx.Meta:
        row = conn.execute("SELECT model_id, dim, synced_seq, rows FROM vector_meta").fetchone()
        assert row is not None
        return vx.Meta(str(row[0]), int(row[1]), int(row[2]), int(row[3]))

    home = new_home(tmp_path / "h")
    fake = FakeEmbedder()
    with sub_with(home, fake, long_lived=True, worker=False) as s:
        s.store("one")
        fake.unreachable = True
        s.store("two")  # pending
        fake.unreachable = False
        with s.projections.session() as conn:
            before = vx.read_meta(conn)
            assert before is not None and before == in_table(conn) and before.rows == 1
            assert vx.read_meta(conn) is before  # kept: no statement
            sha = bytes(conn.execute("SELECT sha FROM vector_pending").fetchone()[0])

            def read_then_fail(c: duckdb.DuckDBPyConnection) -> int:
                # Inside fill's transaction, after it wrote the metadata: what is read here
                # must not outlive the rollback.
                got = vx.read_meta(c)
                assert got is not None and got.rows == 2
                raise RuntimeError("boom")

            monkeypatch.setattr(vx, "pending_count", read_then_fail)
            with pytest.raises(RuntimeError, match="boom"):
                vx.fill(conn, before, s.projections.cache, {sha: fake_vec("two")})
            monkeypatch.undo()
            assert vx.read_meta(conn) == in_table(conn) == before
            vx.fill(conn, before, s.projections.cache, {sha: fake_vec("two")})
            after = vx.read_meta(conn)
            assert after is not None and after == in_table(conn) and after.rows == 2
