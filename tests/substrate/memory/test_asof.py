"""`recall --as-of SEQ|TIME`: the memories as the log stood then, through every door.

The story: store A, store B, update A, archive B, store C. As of each of those
points recall shows that moment's states: A's content before its update, B
before its archive, no C before its store; a time resolves to the last entry
stamped at or before it; a point outside the log is a usage error naming the
log's size; as of the log's last entry recall is the plain recall.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from mnemolog.cli.agents import http_api, mcp_server
from mnemolog.eventlog.errors import UsageError
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import Home, init_home
from tests.support.cli import Cli
from tests.support.fake_embedder import FakeEmbedder


def iso(us: int) -> str:
    return dt.datetime.fromtimestamp(us / 1e6, dt.UTC).isoformat().replace("+00:00", "Z")


class Story:
    """The home after the story, and the seq of each step's entry."""

    def __init__(self, root: Path) -> None:
        self.root = root
        init_home(root, key_name="test")
        with Substrate.open(root, long_lived=False, worker=False) as s:
            self.a = s.store("The pool size is eight workers", title="pool size")["id"]
            self.stored_a = s.log.refresh() - 1
            self.b = s.store("The pool drains every night", title="pool drain")["id"]
            self.stored_b = s.log.refresh() - 1
            s.update(self.a, content="The pool size is sixteen workers")
            self.updated_a = s.log.refresh() - 1
            s.archive(self.b, reason="no longer drained")
            self.archived_b = s.log.refresh() - 1
            self.c = s.store("The pool warms up in a minute", title="pool warmup")["id"]
            self.stored_c = s.log.refresh() - 1
            self.size = s.log.refresh()
            self.ts = [e.ts for e in s.log.iter_entries(0, self.size)]

    def expected(self, seq: int) -> dict[str, str]:
        """id -> content of what recall for "pool" shows as of `seq`."""
        out: dict[str, str] = {}
        if seq >= self.stored_a:
            out[self.a] = (
                "The pool size is sixteen workers"
                if seq >= self.updated_a
                else ("The pool size is eight workers")
            )
        if self.stored_b <= seq < self.archived_b:
            out[self.b] = "The pool drains every night"
        if seq >= self.stored_c:
            out[self.c] = "The pool warms up in a minute"
        return out


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Story:
    return Story(tmp_path_factory.mktemp("asof") / "home")


@pytest.fixture
def sub(story: Story) -> Iterator[Substrate]:
    s = Substrate.open(story.root, long_lived=False, worker=False)
    yield s
    s.close()


def shown(results: list[dict[str, Any]]) -> dict[str, str]:
    return {m["id"]: m["content"] for m in results}


def test_each_point_shows_that_moment(story: Story, sub: Substrate) -> None:
    assert story.stored_a >= 1  # genesis comes first: as of 0 there is nothing
    assert sub.recall_report("pool", as_of=0)["results"] == []
    for seq in range(story.size):
        r = sub.recall_report("pool", as_of=seq)
        assert r["as_of"] == {"seq": seq, "ts": iso(story.ts[seq])}
        assert shown(r["results"]) == story.expected(seq), seq
    # Before the update A held its first content; before the archive B was there; C came last.
    before = shown(sub.recall("pool", as_of=story.updated_a - 1))
    assert before[story.a] == "The pool size is eight workers" and story.b in before
    assert story.c not in shown(sub.recall("pool", as_of=story.stored_c - 1))
    # include_archived as of then shows B; after its archive only with include_archived.
    late = shown(sub.recall("pool", as_of=story.archived_b, include_archived=True))
    assert story.b in late
    # search and list answer as of a point too.
    assert {m["id"] for m in sub.search("pool", as_of=story.stored_b)} == {story.a, story.b}
    assert [m["id"] for m in sub.list(as_of=story.stored_b)] == [story.b, story.a]
    assert [m["content"] for m in sub.list(as_of=story.updated_a - 1) if m["id"] == story.a] == [
        "The pool size is eight workers"
    ]


def test_a_time_is_the_last_entry_stamped_at_or_before_it(story: Story, sub: Substrate) -> None:
    seq = story.updated_a
    r = sub.recall_report("pool", as_of=iso(story.ts[seq]))
    assert r["as_of"]["seq"] == max(i for i, t in enumerate(story.ts) if t <= story.ts[seq])
    assert shown(r["results"]) == story.expected(r["as_of"]["seq"])
    # After the last entry: the whole log.
    assert sub.recall_report("pool", as_of="2999-01-01T00:00:00Z")["as_of"]["seq"] == story.size - 1


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (10**6, "beyond the log's end"),
        (-1, "before genesis"),
        ("1999-01-01T00:00:00Z", "before the log's first entry"),
        ("2026-01-01T00:00:00", "UTC"),
        ("2026-01-01T00:00:00+02:00", "UTC"),
        ("yesterday", "ISO 8601 UTC time"),
        (True, "ISO 8601 UTC time"),
    ],
)
def test_a_point_outside_the_log_is_a_usage_error(
    story: Story, sub: Substrate, value: Any, words: str
) -> None:
    with pytest.raises(UsageError) as info:
        sub.recall("pool", as_of=value)
    assert info.value.exit_code == 64 and words in info.value.message
    if words in ("beyond the log's end", "before genesis"):
        assert f"the log has {story.size} entries" in info.value.message


def test_the_last_point_is_cached_and_its_directory_removed(story: Story, sub: Substrate) -> None:
    sub.recall("pool", as_of=story.stored_b)
    sub.recall("warm", as_of=story.stored_b)
    sub.list(as_of=story.stored_b)
    assert sub._asof.folds == 1  # one fold answered three questions about one moment
    sub.recall("pool", as_of=story.stored_c)
    assert sub._asof.folds == 2
    parent = Home(story.root).projections_path() / "asof"
    assert len(list(parent.iterdir())) == 1  # the previous point's files are gone
    sub.close()
    assert list(parent.iterdir()) == []


def test_as_of_reads_need_no_writer(story: Story, sub: Substrate) -> None:
    sub.recall("pool", as_of=story.stored_b)
    assert sub._writer is None


# -- the other doors ------------------------------------------------------------------------------


def test_cli(cli: Cli, story: Story) -> None:
    for seq in (story.stored_b, story.updated_a, story.archived_b, story.stored_c - 1, story.stored_c):
        code, out = cli.json(story.root, "recall", "pool", "--as-of", str(seq))
        assert code == 0 and out["as_of"]["seq"] == seq
        assert shown(out["results"]) == story.expected(seq)
    code, out = cli.json(story.root, "recall", "pool", "--as-of", iso(story.ts[story.stored_b]))
    assert code == 0 and out["as_of"]["seq"] >= story.stored_b
    code, out = cli.json(story.root, "search", "pool", "--as-of", str(story.stored_b))
    assert code == 0 and {m["id"] for m in out["results"]} == {story.a, story.b}
    code, out = cli.json(story.root, "list", "--as-of", str(story.updated_a - 1))
    assert code == 0 and shown(out["memories"])[story.a] == "The pool size is eight workers"
    code, out = cli.json(story.root, "recall", "pool", "--as-of", str(story.size))
    assert code == 64 and f"the log has {story.size} entries" in out["message"]


def test_mcp(story: Story, sub: Substrate) -> None:
    for seq in (story.stored_b, story.updated_a, story.archived_b, story.stored_c):
        result = mcp_server.call(sub, "memory_recall", {"query": "pool", "as_of": seq})
        out = result.structured_content
        assert not result.is_error and out is not None
        assert out["as_of"]["seq"] == seq and shown(out["results"]) == story.expected(seq)
    result = mcp_server.call(sub, "memory_recall", {"query": "pool", "as_of": iso(story.ts[-1])})
    assert (
        result.structured_content is not None and result.structured_content["as_of"]["seq"] == story.size - 1
    )
    result = mcp_server.call(sub, "memory_recall", {"query": "pool", "as_of": story.size})
    assert result.is_error and result.structured_content is not None
    assert result.structured_content["exit_code"] == 64
    result = mcp_server.call(sub, "memory_list", {"as_of": story.archived_b - 1})
    assert result.structured_content is not None
    assert story.b in shown(result.structured_content["memories"])


def test_http(story: Story, sub: Substrate) -> None:
    client = TestClient(http_api.app(sub, http_api.HttpSettings()), base_url="http://127.0.0.1")
    for seq in (story.stored_b, story.updated_a, story.archived_b, story.stored_c):
        r = client.post("/recall", json={"query": "pool", "as_of": seq})
        assert r.status_code == 200
        assert r.json()["as_of"]["seq"] == seq and shown(r.json()["results"]) == story.expected(seq)
    r = client.post("/recall", json={"query": "pool", "as_of": str(story.updated_a - 1)})
    assert r.status_code == 200 and shown(r.json()["results"])[story.a] == "The pool size is eight workers"
    r = client.post("/recall", json={"query": "pool", "as_of": "1999-01-01T00:00:00Z"})
    assert r.status_code == 400 and r.json()["exit_code"] == 64
    r = client.post("/search", json={"query": "pool", "as_of": story.stored_b})
    assert r.status_code == 200 and {m["id"] for m in r.json()["results"]} == {story.a, story.b}
    r = client.post("/list", json={"as_of": story.updated_a - 1})
    assert r.status_code == 200 and shown(r.json()["memories"])[story.a] == "The pool size is eight workers"


# -- as of the log's end is the plain recall ------------------------------------------------------

WORDS = ["pool", "drain", "deploy", "worker", "night", "cache", "retry", "queue"]
text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join)
step = st.one_of(
    st.tuples(st.just("store"), text),
    st.tuples(st.just("update"), text),
    st.tuples(st.just("archive"), st.just("")),
    st.tuples(st.just("restore"), st.just("")),
)


@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step, min_size=1, max_size=8), query=text, embeds=st.booleans())
def test_as_of_the_end_is_the_plain_recall(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, str]], query: str, embeds: bool
) -> None:
    root = tmp_path_factory.mktemp("prop") / "home"
    init_home(root, key_name="test")
    with Substrate.open(
        root, long_lived=False, worker=False, embedder=FakeEmbedder() if embeds else None
    ) as s:
        ids: list[str] = []
        archived: set[str] = set()
        for op, words in steps:
            if op == "store" or not ids:
                ids.append(s.store(words or "pool")["id"])
            elif op == "update":
                s.update(ids[-1], content=words)
            elif op == "archive" and ids[0] not in archived:
                s.archive(ids[0])
                archived.add(ids[0])
            elif op == "restore" and ids[0] in archived:
                s.restore(ids[0])
                archived.discard(ids[0])
        end = s.log.refresh() - 1
        for kw in ({}, {"include_archived": True}, {"mode": "bm25", "explain": True}):
            plain = s.recall_report(query, **kw)  # type: ignore[arg-type]
            then = s.recall_report(query, as_of=end, **kw)  # type: ignore[arg-type]
            assert then.pop("as_of")["seq"] == end
            assert then == plain
        assert s.list(as_of=end) == s.list()


def test_without_the_prefix_vectors_the_default_falls_back_to_bm25(tmp_path: Path) -> None:
    import sqlite3

    root = tmp_path / "home"
    init_home(root, key_name="test")
    with Substrate.open(root, long_lived=False, worker=False, embedder=FakeEmbedder()) as s:
        a = s.store("The pool size is eight workers")["id"]
        end = s.log.refresh() - 1
        assert s.recall_report("pool", as_of=end)["mode"] == "hybrid"
        with sqlite3.connect(s.projections.cache.path) as db:
            db.execute("DELETE FROM cache")
        s.store("The deploy runs at nine")  # another point: folded afresh, from the emptied cache
        r = s.recall_report("pool", as_of=end + 1)
        assert r["mode"] == "bm25" and r["fallback"] is not None and "embedding cache" in r["fallback"]
        assert [m["id"] for m in r["results"]] == [a]
        assert s.recall_report("pool")["mode"] == "hybrid"  # the live projection keeps its vectors
