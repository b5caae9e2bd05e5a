"""What recall and search mean: any term or all keywords, BM25, tokenizer, ties, filters, no side effects."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemolog.projections.recall.query import SCORE_SCALE
from mnemolog.substrate.api import Substrate
from tests.projections.kit import FakeClock, log_digest, new_home, open_sub, snapshot


@pytest.fixture
def sub(tmp_path: Path) -> Iterator[Substrate]:
    s = open_sub(new_home(tmp_path / "home"), long_lived=True, clock=FakeClock())
    yield s
    s.close()


def ids(results: list[dict[str, object]]) -> list[object]:
    return [r["id"] for r in results]


# -- any term vs all keywords ---------------------------------------------------------


def test_recall_ranks_by_any_term_even_when_no_memory_has_all(sub: Substrate) -> None:
    a = sub.store("the connection pool of the orders database was exhausted")["id"]
    b = sub.store("a deploy raised the worker count from 8 to 32")["id"]
    sub.store("lunch was pizza")
    q = "why did the deploy exhaust the database connection pool and page on-call"
    assert sub.search(q) == []  # no memory has every keyword
    got = ids(sub.recall(q))
    assert set(got) == {a, b}
    assert got[0] == a  # more of the query's terms


def test_search_needs_every_keyword_as_a_whole_word(sub: Substrate) -> None:
    both = sub.store("rollback of the deploy at 09:41")["id"]
    sub.store("the deploy went fine")
    stemmed = sub.store("rollbacks of deploys")["id"]  # same stems, other words
    assert ids(sub.search("deploy rollback")) == [both]
    assert ids(sub.search("DEPLOY, Rollback!")) == [both]  # case and punctuation do not matter
    assert set(ids(sub.recall("deploy rollback"))) == {both, stemmed, *ids(sub.search("deploy"))}
    assert ids(sub.search("rollbacks deploys")) == [stemmed]


def test_stemming_and_stop_words(sub: Substrate) -> None:
    run = sub.store("She runs every morning")["id"]
    sub.store("completely unrelated text")
    assert ids(sub.recall("running")) == [run]
    assert ids(sub.recall("RUNS")) == [run]
    # Stop words are not terms: alone they find nothing, beside a term they change nothing.
    assert ids(sub.recall("the and of she every")) == [run]  # "every" is a term, the rest are not
    assert sub.recall("the of and") == []
    assert sub.recall("the running of") == sub.recall("running")
    # Search keeps stop words as words that must be present.
    assert ids(sub.search("she runs")) == [run]
    assert sub.search("he runs") == []


def test_accents_and_case_fold_and_unicode_letters_are_words(sub: Substrate) -> None:
    m = sub.store("Le Café naïve über — 日本語 テキスト")["id"]
    assert ids(sub.recall("cafe")) == [m]
    assert ids(sub.recall("NAIVE Uber")) == [m]
    assert ids(sub.recall("日本語")) == [m]
    assert ids(sub.search("café")) == [m]  # search folds accents too: words, not bytes


def test_title_counts_twice(sub: Substrate) -> None:
    in_title = sub.store("notes about the week", title="Kubernetes")["id"]
    in_body = sub.store("Kubernetes notes about the week")["id"]
    got = sub.recall("kubernetes")
    assert ids(got) == [in_title, in_body]
    assert got[0]["score"] > got[1]["score"]


def test_ties_break_by_newest_memory_and_are_stable(sub: Substrate) -> None:
    first = sub.store("identical words here")["id"]
    second = sub.store("identical words here")["id"]
    third = sub.store("identical words here")["id"]
    got = sub.recall("identical words")
    assert ids(got) == [third, second, first]
    assert len({r["score"] for r in got}) == 1
    # The order is the memories' (newest store first), not their texts': an equivalent edit keeps it.
    sub.update(first, content="Identical, words here!")
    assert ids(sub.recall("identical words")) == [third, second, first]
    assert ids(sub.search("identical words")) == [third, second, first]
    assert all(sub.recall("identical words") == sub.recall("identical words") for _ in range(3))


def test_limit(sub: Substrate) -> None:
    for i in range(15):
        sub.store(f"alpha memory {i}")
    assert len(sub.recall("alpha")) == 10
    assert len(sub.recall("alpha", limit=3)) == 3
    assert len(sub.recall("alpha", limit=100)) == 15
    assert len(sub.search("alpha", limit=4)) == 4


# -- BM25 against a reference --------------------------------------------------------------


def reference_bm25(sub: Substrate, query: str) -> dict[str, float]:
    """BM25 computed in Python from the memories, with the projection's own tokenizer."""
    with sub.projections.session() as conn:
        rows = conn.execute(
            "SELECT id, ml_doc_terms(title, tags, content, created_at) FROM memories"
        ).fetchall()
        qterms = list(dict.fromkeys(conn.execute("SELECT ml_terms(?)", [query]).fetchone()[0]))  # type: ignore[index]
    docs = {mid: Counter(terms) for mid, terms in rows}
    n = len(docs)
    avgdl = max(sum(sum(c.values()) for c in docs.values()), 1) / max(n, 1)
    out: dict[str, float] = {}
    for t in qterms:
        df = sum(1 for c in docs.values() if t in c)
        for mid, c in docs.items():
            if t in c:
                dl = sum(c.values())
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                part = idf * c[t] * 2.2 / (c[t] + 1.2 * (1 - 0.5 + 0.5 * dl / avgdl))
                out[mid] = out.get(mid, 0.0) + round(part * SCORE_SCALE)
    return {k: v / SCORE_SCALE for k, v in out.items()}


vocab = st.sampled_from(
    ["pool", "pools", "deploy", "worker", "workers", "database", "the", "of", "alert", "page", "café"]
)
doc = st.lists(vocab, min_size=1, max_size=12).map(" ".join)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=st.lists(st.tuples(st.one_of(st.none(), doc), doc), min_size=1, max_size=12), query=doc)
def test_scores_are_bm25(
    tmp_path_factory: pytest.TempPathFactory, docs: list[tuple[str | None, str]], query: str
) -> None:
    with open_sub(new_home(tmp_path_factory.mktemp("bm25") / "h"), long_lived=True) as s:
        for title, content in docs:
            s.store(content, title=title)
        s.archive(s.list(limit=1)[0]["id"])  # archived memories still count in N and df
        ref = reference_bm25(s, query)
        got = s.recall(query, limit=100, include_archived=True)
        assert {r["id"]: r["score"] for r in got} == pytest.approx(ref, rel=1e-12, abs=1e-9)
        scores = [r["score"] for r in got]
        assert scores == sorted(scores, reverse=True)
        assert all(s > 0 for s in scores)


# -- filters -------------------------------------------------------------------------------


def test_filters_namespace_kind_tags(sub: Substrate) -> None:
    a = sub.store("widget alpha", namespace="team")["id"]
    ab = sub.store("widget beta", namespace="team/backend", kind="decision", tags=["db", "prod"])["id"]
    abc = sub.store("widget gamma", namespace="team/backend/pg", tags=["db"])["id"]
    other = sub.store("widget delta", namespace="teamwork", tags=["prod"])["id"]
    for fn in (sub.recall, sub.search):
        assert set(ids(fn("widget", namespace="team"))) == {a, ab, abc}  # not "teamwork"
        assert set(ids(fn("widget", namespace="team", descendants=False))) == {a}
        assert set(ids(fn("widget", namespace="team/backend"))) == {ab, abc}
        assert set(ids(fn("widget", kinds=["decision"]))) == {ab}
        assert set(ids(fn("widget", kinds=["decision", "observation"]))) == {a, ab, abc, other}
        assert set(ids(fn("widget", tags=["db"]))) == {ab, abc}
        assert set(ids(fn("widget", tags=["db", "prod"]))) == {ab}
        assert set(ids(fn("widget", tags=["prod"], namespace="team"))) == {ab}
        assert fn("widget", namespace="nobody") == []
    assert set(ids(sub.list(namespace="team"))) == {a, ab, abc}
    assert set(ids(sub.list(tags=["prod"]))) == {ab, other}
    # Filters do not change scores: statistics are over the whole corpus.
    full = {r["id"]: r["score"] for r in sub.recall("widget alpha")}
    for r in sub.recall("widget alpha", namespace="team/backend"):
        assert r["score"] == full[r["id"]]


# -- immediacy and side effects ------------------------------------------------------------------


def test_a_stored_memory_is_recallable_as_soon_as_store_returns(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    with open_sub(home, long_lived=True) as writer, open_sub(home, long_lived=False) as reader:
        for i in range(20):
            m = writer.store(f"zebra number {i} grazes")
            assert ids(writer.recall(f"zebra {i}"))[0] == m["id"]
            assert m["id"] in ids(writer.search("zebra grazes", limit=100))
            assert writer.get(m["id"])["content"] == m["content"]
            # Another Substrate (another lock holder) sees it too, at once.
            assert m["id"] in ids(reader.recall("zebra", limit=100))


def test_reads_have_no_side_effects(sub: Substrate) -> None:
    for i in range(30):
        m = sub.store(f"memory {i} about caching and queues", tags=["t"] if i % 2 else [])
        if i % 7 == 0:
            sub.archive(m["id"])
    sub.update(sub.list(limit=1)[0]["id"], content="edited text about queues")
    sub.writer.checkpoint()  # so the periodic checkpointer has nothing left to cover meanwhile
    before_log = log_digest(sub.home)
    before_rows = snapshot(sub)
    for _ in range(3):
        sub.recall("caching queues")
        sub.recall("caching", include_archived=True, tags=["t"])
        sub.search("queues")
        sub.search("about caching", namespace="default", descendants=False)
        sub.list(limit=100)
        sub.stats()
        for m in sub.list(limit=5):
            sub.get(m["id"])
    assert log_digest(sub.home) == before_log
    assert snapshot(sub) == before_rows
    # And in a fresh process-like reopen, the same answers.
    with open_sub(sub.home) as again:
        assert again.recall("caching queues") == sub.recall("caching queues")


def test_empty_and_degenerate_queries(sub: Substrate) -> None:
    sub.store("something to find")
    assert sub.recall("the") == []
    assert sub.recall("!!! ... ???") == []
    assert sub.search("...") == []
    assert sub.recall("x" * 65) == []  # longer than a term can be
    assert ids(sub.recall("find " + "unmatched " * 200))  # long queries are cut to 64 terms, still work


def test_search_checks_words_beyond_the_first_chunk_of_candidates(sub: Substrate) -> None:
    # Forty memories match the stem of "fox" better than the one that has the word itself.
    for i in range(40):
        sub.store(f"foxes foxes foxes {i}")
    exact = sub.store("a fox among many words that dilute its weight in this memory")["id"]
    ranked = ids(sub.recall("fox", limit=100))
    assert ranked.index(exact) == 40  # last: beyond the first chunk (16) of candidates checked
    assert ids(sub.search("fox", limit=1)) == [exact]
    assert ids(sub.search("foxes", limit=100)) == ranked[:40] == [m for m in ranked if m != exact]
