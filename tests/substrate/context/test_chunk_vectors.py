"""Tier 5 by meaning: chunks are embedded at ingest and ranked by the hybrid recall policy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mnemolog.eventlog.errors import VerificationError
from mnemolog.projections.context import store
from mnemolog.projections.embedding import vectors
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import init_home

QUERY = "how warm does the machine get"
# Shares no word with QUERY (nor does its heading), but is about heat.
NEAR = "Spindle temperature climbs to 45 degrees Celsius after an hour of running."
FAR = "Quarterly invoices are archived in the accounting folder."


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MNEMOLOG_EMBED", "minilm")  # the default embedder, offline
    h = tmp_path / "home"
    init_home(h)
    d = tmp_path / "docs"
    d.mkdir()
    (d / "bench.md").write_text(f"# Bench\n\n## Spindle\n{NEAR}\n\n## Paperwork\n{FAR}\n")
    with Substrate.open(h, long_lived=False) as s:
        s.register_project("p06-polisher")
        s.ingest([d], project="p06-polisher")
    return h


@pytest.fixture
def sub(home: Path) -> Iterator[Substrate]:
    with Substrate.open(home, long_lived=False) as s:
        yield s


def chunk_texts(pack: dict[str, Any]) -> list[str]:
    return [e["id"] for t in pack["tiers"] if t["name"] == "chunks" for e in t["entries"]]


def test_a_chunk_close_in_meaning_enters_tier_5(sub: Substrate) -> None:
    with sub.projections.session() as conn:
        assert conn.execute("SELECT count(*) FROM chunk_vectors").fetchone() == (2,)
        assert vectors.pending_count(conn) == 0
        # BM25 alone finds nothing: no word in common.
        assert store.chunk_candidates(conn, QUERY, None, 10) == []
    pack = sub.build_context(QUERY, record=False)
    assert pack["config"]["recall_mode"] == "hybrid"
    assert "Spindle temperature" in pack["text"] and "invoices" not in pack["text"]
    (cid,) = chunk_texts(pack)
    assert cid.endswith("/1/0")
    # The project in scope boosts its chunks, as with BM25.
    scoped = sub.build_context(QUERY, project="p06-polisher", record=False)
    (entry,) = [e for t in scoped["tiers"] if t["name"] == "chunks" for e in t["entries"]]
    assert entry["id"] == cid and entry["score"] == pytest.approx(1.5)


def test_chunk_vectors_come_from_the_cache_on_rebuild_and_verify_passes(
    sub: Substrate, monkeypatch: pytest.MonkeyPatch
) -> None:
    def rows() -> list[tuple[Any, ...]]:
        with sub.projections.session() as conn:
            return [
                (d, bytes(s), np.asarray(v, dtype=np.float32).tobytes())
                for d, s, v in conn.execute("SELECT doc, sha, vec FROM chunk_vectors ORDER BY doc").fetchall()
            ]

    before = rows()
    assert len(before) == 2
    # A rebuild must not call the model: the cache holds every chunk's vector.
    e = sub.embedding.build("minilm", None)
    assert e is not None

    def refuse(texts: list[str]) -> Any:
        raise AssertionError(f"the model was called for {texts!r}")

    monkeypatch.setattr(e, "embed", refuse)
    sub.rebuild()
    assert rows() == before
    report = sub.verify_projections()
    assert report["tables"]["ctx_chunks"] == 2 and report["tables"]["chunk_vectors"] == 2
    # A forged chunk vector on disk is found.
    with sub.projections.raw_session() as conn:
        conn.execute(
            "UPDATE chunk_vectors SET vec = (SELECT vec FROM chunk_vectors ORDER BY doc DESC LIMIT 1)"
        )
    with pytest.raises(VerificationError) as err:
        sub.verify_projections()
    assert err.value.details["table"] == "chunk_vectors"


def test_python_and_sql_chunk_texts_agree(sub: Substrate) -> None:
    with sub.projections.session() as conn:
        got = conn.execute(
            f"SELECT heading_path, text, {vectors.CHUNK_EMBED_TEXT.format(c='c')}, "
            f"{vectors.CHUNK_TEXT_SHA.format(c='c')} FROM ctx_chunks c ORDER BY doc"
        ).fetchall()
    for hp, text, sql_text, sha in got:
        assert vectors.chunk_embed_text(hp, text) == sql_text
        assert vectors.text_sha(sql_text) == bytes(sha)
    assert vectors.chunk_embed_text(["Bench", "Spindle"], NEAR) == f"Bench › Spindle\n{NEAR}"
    assert vectors.chunk_embed_text([], "x") == "x"


def test_with_embeddings_off_chunks_rank_by_bm25(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNEMOLOG_EMBED", "off")
    h = tmp_path / "off"
    init_home(h)
    d = tmp_path / "d"
    d.mkdir()
    (d / "bench.md").write_text(f"# Spindle\n{NEAR}\n")
    with Substrate.open(h, long_lived=False) as s:
        s.ingest([d])
        assert chunk_texts(s.build_context(QUERY, record=False)) == []
        assert len(chunk_texts(s.build_context("spindle temperature", record=False))) == 1


def test_chunks_wait_when_the_embedder_is_down_and_drain_embeds_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mnemolog.curators.embedding.embedder import EmbedderFailed

    monkeypatch.setenv("MNEMOLOG_EMBED", "minilm")
    h = tmp_path / "down"
    init_home(h)
    d = tmp_path / "d"
    d.mkdir()
    (d / "bench.md").write_text(f"# Spindle\n{NEAR}\n\n# Paper\n{FAR}\n")
    with Substrate.open(h, long_lived=False) as s:
        s.store("warm up the cache and record the embedder")
        e = s.embedding.build("minilm", None)
        assert e is not None
        real = e.embed

        def down(texts: list[str]) -> Any:
            raise EmbedderFailed("down for the test", reason="unavailable")

        monkeypatch.setattr(e, "embed", down)
        r = s.ingest([d])
        assert r["chunks"] == 2
        assert s.embedding_status()["pending"] == 2
        with s.projections.session() as conn:
            assert conn.execute("SELECT count(*) FROM chunk_vectors").fetchone() == (0,)
        # Pending chunks rank by words meanwhile.
        assert chunk_texts(s.build_context("spindle temperature", record=False))
        monkeypatch.setattr(e, "embed", real)
        assert s.embed_pending()["pending"] == 0
        with s.projections.session() as conn:
            assert conn.execute("SELECT count(*) FROM chunk_vectors").fetchone() == (2,)
        assert "Spindle temperature" in s.build_context(QUERY, record=False)["text"]
        assert s.verify_projections()["tables"]["chunk_vectors"] == 2


def test_a_new_version_or_a_removal_takes_the_old_chunks_vectors_away(
    home: Path, tmp_path: Path, sub: Substrate
) -> None:
    d = tmp_path / "docs"

    def docs() -> tuple[list[int], list[int]]:
        with sub.projections.session() as conn:
            have = [r[0] for r in conn.execute("SELECT doc FROM chunk_vectors ORDER BY doc").fetchall()]
            want = [r[0] for r in conn.execute("SELECT doc FROM ctx_chunks ORDER BY doc").fetchall()]
        return have, want

    (d / "bench.md").write_text(f"# Spindle\n{NEAR}\n")
    sub.ingest([d], project="p06-polisher")
    have, want = docs()
    assert have == want and len(want) == 1
    (d / "bench.md").unlink()
    (d / "other.md").write_text(f"# Paper\n{FAR}\n")
    sub.ingest([d], project="p06-polisher")
    have, want = docs()
    assert have == want and len(want) == 1
    assert sub.verify_projections()["tables"]["chunk_vectors"] == 1
