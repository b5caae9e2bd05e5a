"""Every recall mode under the knowledge loop's filters: statuses, project, domains.

The default recall shows active memories only. BM25 leaves the others out of
its scores (`inactive`, like `hidden`), the vector search joins them out, and
a long-lived process's copy of the index forgets its lists when a status
changes. The agent operation takes the mode and explain too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemolog.cli.agents import operations
from mnemolog.eventlog.errors import UsageError
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.events import MemoryStored
from tests.projections.kit import new_home, open_sub
from tests.support.fake_embedder import FakeEmbedder

MODES = ("bm25", "vector", "hybrid")
TEXT = "the pump seal leaks under thermal load"


def ids(sub: Substrate, mode: str, **kw: object) -> set[str]:
    return {m["id"] for m in sub.recall(TEXT, mode=mode, limit=50, **kw)}  # type: ignore[arg-type]


def candidate(sub: Substrate, content: str) -> str:
    """A memory as an extraction proposes it: status candidate (never recalled until promoted)."""
    payload = MemoryStored.new(content, status="candidate")
    sub.require_writer()
    with sub.session() as s:
        s.append(payload)
    return payload.id


@pytest.fixture
def sub(tmp_path: Path) -> Substrate:
    home = new_home(tmp_path / "h")
    s = open_sub(home, long_lived=True, worker=False, embedder=FakeEmbedder())
    s.register_project("p06-polisher", aliases=["p06"])
    return s


def test_every_mode_shows_active_memories_unless_asked(sub: Substrate) -> None:
    with sub:
        active = sub.store(TEXT, project="p06", domains=["optics"])["id"]
        plain = sub.store(TEXT + " again")["id"]
        cand = candidate(sub, TEXT + " maybe")
        old = sub.store(TEXT + " before the fix")["id"]
        sub.supersede(old, reason="fixed")
        for mode in MODES:
            for _ in range(4):  # the third recall on a connection builds the numpy copy
                assert ids(sub, mode) == {active, plain}, mode
            assert ids(sub, mode, statuses=("candidate",)) == {cand}, mode
            assert ids(sub, mode, statuses=("superseded", "candidate")) == {old, cand}, mode
            assert ids(sub, mode, project="p06-polisher") == {active}, mode
            assert ids(sub, mode, project="p06") == {active}, mode  # an alias is canonicalised
            assert ids(sub, mode, project="") == {plain}, mode
            assert ids(sub, mode, domains=["optics"]) == {active}, mode
        # A status change moves the projection: the copy's lists follow.
        sub.promote(cand)
        sub.archive(plain)
        for mode in MODES:
            assert ids(sub, mode) == {active, cand}, mode
            assert ids(sub, mode, include_archived=True) == {active, cand, plain}, mode


def test_recall_report_explains_under_filters(sub: Substrate) -> None:
    with sub:
        active = sub.store(TEXT, project="p06")["id"]
        candidate(sub, TEXT + " maybe")
        r = sub.recall_report(TEXT, explain=True, project="p06")
        assert r["mode"] == "hybrid" and r["fallback"] is None
        [m] = r["results"]
        assert m["id"] == active
        assert m["explain"]["bm25_rank"] == 1 and m["explain"]["vector_rank"] == 1
        assert m["explain"]["fusion"] == sub.fusion.method


def test_the_recall_operation_takes_mode_and_explain(sub: Substrate) -> None:
    with sub:
        active = sub.store(TEXT, project="p06")["id"]
        cand = candidate(sub, TEXT + " maybe")
        out = operations.invoke(sub, "memory_recall", {"query": TEXT, "mode": "bm25", "explain": True})
        assert out["mode"] == "bm25" and out["fallback"] is None
        assert [m["id"] for m in out["results"]] == [active]
        assert out["results"][0]["explain"]["bm25_rank"] == 1
        assert out["results"][0]["explain"]["vector_rank"] is None
        out = operations.invoke(sub, "memory_recall", {"query": TEXT, "statuses": ["candidate"]})
        assert out["mode"] == "hybrid" and [m["id"] for m in out["results"]] == [cand]
        assert "explain" not in out["results"][0]
        with pytest.raises(UsageError) as exc:
            operations.invoke(sub, "memory_recall", {"query": TEXT, "mode": "fts"})
        assert exc.value.exit_code == 64 and exc.value.details["field"] == "mode"
