"""Vector storage, the content-addressed cache, exact and HNSW search, and the index after a crash."""

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

from mnemolog.eventlog.errors import BadInput
from mnemolog.projections import vectors as vx
from mnemolog.projections.recall import Filters
from mnemolog.substrate.api import Substrate
from tests.projections.kit import new_home, open_sub

DIM = 16


def fake_vec(text: str) -> np.ndarray:
    """A deterministic unit vector per text (stands in for a model in projection tests)."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


class Counting:
    """An embed function that records what it was asked."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    def __call__(self, texts: list[str]) -> np.ndarray | None:
        self.calls.append(list(texts))
        if self.fail:
            return None
        return np.vstack([fake_vec(t) for t in texts])

    @property
    def texts(self) -> int:
        return sum(len(c) for c in self.calls)


def sync(sub: Substrate, embed: Any, model: str = "fake/m@1") -> vx.SyncResult:
    with sub.projections.session() as conn:
        meta = vx.configure(conn, model, DIM)
        return vx.sync(conn, embed, meta)


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


def test_sync_embeds_once_and_the_cache_serves_a_rebuild(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    with open_sub(home) as s:
        a = s.store("alpha", title="A")["id"]
        s.store("beta")
        s.store("beta")  # the same text: embedded once
        e = Counting()
        r = sync(s, e)
        assert (r.embedded, r.cached, r.pending) == (2, 0, 0)
        assert e.texts == 2
        assert sorted(x for c in e.calls for x in c) == ["A\nalpha", "beta"]
        before = stored(s)
        assert len(before) == 3
        assert sync(s, e).embedded == 0  # nothing changed
        s.rebuild()
        refused = Counting(fail=True)
        r = sync(s, refused)
        assert refused.calls == []  # every vector came from the cache
        assert r.cached == 3 and r.pending == 0
        assert stored(s) == before
        assert nearest(s, "A\nalpha")[0] == a


def test_text_changes_and_atomisation_follow_the_memories(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    with open_sub(home) as s:
        m = s.store("original text")["id"]
        e = Counting()
        sync(s, e)
        s.update(m, content="changed text")
        r = sync(s, e)
        assert (r.embedded, r.removed) == (1, 1)
        assert nearest(s, "changed text")[0] == m
        s.archive(m)  # an archived memory keeps its vector (include_archived finds it)
        assert sync(s, e).removed == 0
        assert nearest(s, "changed text", Filters(include_archived=True))[0] == m
        assert m not in nearest(s, "changed text")  # the guard hides it


def test_an_unreachable_embedder_leaves_work_pending(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    with open_sub(home) as s:
        s.store("one")
        r = sync(s, Counting(fail=True))
        assert r.pending == 1
        with s.projections.session() as conn:
            assert vx.pending_count(conn) == 1
        r = sync(s, Counting())
        assert (r.embedded, r.pending) == (1, 0)
        with s.projections.session() as conn:
            assert vx.pending_count(conn) == 0


@pytest.mark.parametrize(
    "bad",
    [
        lambda ts: np.zeros((len(ts), DIM + 1), dtype=np.float32),
        lambda ts: np.zeros((len(ts) + 1, DIM), dtype=np.float32),
        lambda ts: np.full((len(ts), DIM), np.nan, dtype=np.float32),
    ],
)
def test_wrong_vectors_are_refused_and_nothing_is_written(tmp_path: Path, bad: Any) -> None:
    home = new_home(tmp_path / "h")
    with open_sub(home) as s:
        s.store("one")
        with pytest.raises(BadInput, match="dimensions"):
            sync(s, bad)
        assert stored(s) == []
        with s.projections.session() as conn:
            assert conn.execute(f"SELECT count(*) FROM {vx.CACHE_CATALOG}.embed_cache").fetchone() == (0,)


def test_a_model_change_drops_the_old_vectors(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    with open_sub(home) as s:
        s.store("one")
        sync(s, Counting(), model="fake/a@1")
        e = Counting()
        assert sync(s, e, model="fake/b@1").embedded == 1
        assert e.texts == 1
        back = Counting()
        assert sync(s, back, model="fake/a@1").cached == 1  # switching back: the cache still has it
        assert back.calls == []


def test_filters_and_ties(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    with open_sub(home) as s:
        x = s.store("same", namespace="a")["id"]
        y = s.store("same", namespace="b")["id"]
        z = s.store("other", namespace="a/c")["id"]
        sync(s, Counting())
        assert nearest(s, "same", limit=2) == [y, x]  # equal distance: newest first
        assert nearest(s, "same", Filters(namespace="a"), limit=3) == [x, z]
        assert nearest(s, "same", Filters(namespace="a", descendants=False)) == [x]


def test_hnsw_agrees_with_the_exact_scan_and_respects_filters(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    with open_sub(home) as s:
        ids = [s.store(f"memory number {i}", namespace="odd" if i % 2 else "even")["id"] for i in range(120)]
        sync(s, Counting())
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
    from mnemolog.projections import db, vectors as vx
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
