"""The tokenizer: one definition (the macros), the bulk and single-document paths held to it."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.projections.db import load_fts
from mnemolog.projections.recall.text import (
    MAX_TERM_LEN,
    ONE_DOC_POSTINGS,
    SEPARATOR_RANGES,
    SEPARATORS,
    STOP_WORDS,
    TITLE_WEIGHT,
    date_words_sql,
    doc_text_py,
    drop_staged,
    install_macros,
    is_separator,
    stage_postings,
)


@pytest.fixture(scope="module")
def conn() -> Iterator[duckdb.DuckDBPyConnection]:
    c = duckdb.connect()
    load_fts(c)
    install_macros(c)
    yield c
    c.close()


def words(conn: duckdb.DuckDBPyConnection, s: str | None) -> list[str]:
    row = conn.execute("SELECT ml_words(?)", [s]).fetchone()
    return list(row[0]) if row and row[0] is not None else []


def terms(conn: duckdb.DuckDBPyConnection, s: str) -> list[str]:
    row = conn.execute("SELECT ml_terms(?)", [s]).fetchone()
    return list(row[0]) if row and row[0] is not None else []


def test_words_lowercase_strip_accents_split_on_separators(conn: duckdb.DuckDBPyConnection) -> None:
    assert words(conn, "Hello, WORLD! e-mail foo_bar x.y/z") == [
        "hello",
        "world",
        "e",
        "mail",
        "foo",
        "bar",
        "x",
        "y",
        "z",
    ]
    assert words(conn, "Café Naïve Ærø Straße") == ["cafe", "naive", "ærø", "straße"]
    assert words(conn, "“quoted” — dash… ellipsis\u00a0nbsp\u200bzw") == [
        "quoted",
        "dash",
        "ellipsis",
        "nbsp",
        "zw",
    ]
    assert words(conn, "日本語のテキスト 한국어 русский текст ελληνικά") == [
        "日本語のテキスト",
        "한국어",
        "русскии",
        "текст",
        "ελληνικα",
    ]  # fmt: skip (accents are stripped in every script: й becomes и, in queries too)
    assert words(conn, "emoji🙂between ☕coffee") == ["emoji", "between", "coffee"]
    assert words(conn, "v2 2026-12-02 3.14") == ["v2", "2026", "12", "02", "3", "14"]
    assert words(conn, "") == [] and words(conn, "  ... !!! ") == []


def test_long_words_are_dropped(conn: duckdb.DuckDBPyConnection) -> None:
    assert words(conn, "a" * MAX_TERM_LEN) == ["a" * MAX_TERM_LEN]
    assert words(conn, "keep " + "b" * (MAX_TERM_LEN + 1) + " this") == ["keep", "this"]


def test_terms_drop_stop_words_and_stem(conn: duckdb.DuckDBPyConnection) -> None:
    assert terms(conn, "The and of it's I'm") == []  # "it's" splits into stop words "it", "s"
    assert terms(conn, "running runs") == ["run", "run"]
    assert terms(conn, "connection connections connected") == ["connect"] * 3
    assert terms(conn, " ".join(w for w in STOP_WORDS if "'" not in w)) == []
    assert terms(conn, "let's") == ["let"]  # split at the apostrophe: "s" is a stop word, "let" is not
    assert terms(conn, "Databases") == terms(conn, "database")


def test_title_counts_title_weight_times(conn: duckdb.DuckDBPyConnection) -> None:
    row = conn.execute(
        "SELECT ml_doc_terms('Kubernetes pods', ['ci-flaky'], 'pods restart', NULL)"
    ).fetchone()
    assert row is not None
    c = Counter(row[0])
    expected = {"kubernet": TITLE_WEIGHT, "pod": TITLE_WEIGHT + 1, "restart": 1, "ci": 1, "flaki": 1}
    assert c == Counter(expected)
    row = conn.execute("SELECT ml_doc_terms(NULL, NULL, 'only content', NULL)").fetchone()
    assert row is not None and row[0] == ["content"]


def test_the_separator_class_is_exactly_the_ranges(conn: duckdb.DuckDBPyConnection) -> None:
    """Every code point of the BMP and the emoji planes, split by SQL, against is_separator."""
    cps = [cp for cp in range(1, 0x20000) if not 0xD800 <= cp <= 0xDFFF]
    rows = conn.execute(
        f"""SELECT cp, len(regexp_split_to_array('a' || chr(cp) || 'b', '{SEPARATORS}')) = 2
            FROM unnest(?::INTEGER[]) AS t(cp)""",
        [cps],
    ).fetchall()
    wrong = [cp for cp, split in rows if split != is_separator(chr(cp))]
    assert wrong == []
    assert all(lo <= hi for lo, hi in SEPARATOR_RANGES)
    assert is_separator(" ") and is_separator("—") and not is_separator("é") and not is_separator("語")


ASCII_SEP = re.compile("[" + re.escape("".join(chr(c) for c in range(128) if not chr(c).isalnum())) + "]+")


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=1, max_codepoint=127), max_size=200))
def test_ascii_words_match_a_python_reference(text: str) -> None:
    c = duckdb.connect()
    load_fts(c)
    install_macros(c)
    expected = [w for w in ASCII_SEP.split(text.lower()) if 1 <= len(w) <= MAX_TERM_LEN]
    assert words(c, text) == expected
    c.close()


CHARS = list("abcdeéèêfghijklmnopqrstuvwxyzABCÉ0123456789 ,.;:!?-_/'\"()[]\n\t—“”…")
alphabet = st.sampled_from([*CHARS, "日", "本", "語", "ü", "ß", "Ω", "🙂", "\u00a0", "\u200b", "ﬁ"])
doc_text = st.lists(
    st.one_of(alphabet, st.sampled_from(["the ", "running ", "of ", "x" * 70 + " "])), max_size=80
).map("".join)


TAGS = st.lists(st.sampled_from(["flaky", "ci-flaky", "Kafka", "日本", "runs"]), max_size=3)


# µs since the epoch, some a microsecond either side of a UTC midnight, some before 1970.
CREATED = st.one_of(
    st.none(),
    st.integers(-(10**16), 4 * 10**16),
    st.integers(-2, 20_000).map(lambda d: d * 86_400_000_000 - 1),
    st.integers(-2, 20_000).map(lambda d: d * 86_400_000_000),
)


@settings(max_examples=60, deadline=None)
@given(
    docs=st.lists(st.tuples(st.one_of(st.none(), doc_text), doc_text, TAGS, CREATED), min_size=1, max_size=8)
)
def test_bulk_and_single_document_postings_equal_the_macro(
    docs: list[tuple[str | None, str, list[str], int | None]],
) -> None:
    c = duckdb.connect()
    load_fts(c)
    install_macros(c)
    c.execute(
        "CREATE TABLE src(doc BIGINT, title VARCHAR, content VARCHAR, tags VARCHAR[], created_at BIGINT, "
        "occurred_at BIGINT)"  # no occurred_at: each document is dated by its created_at
    )
    c.executemany(
        "INSERT INTO src (doc, title, content, tags, created_at) VALUES (?, ?, ?, ?, ?)",
        [(i, t, b, g, w) for i, (t, b, g, w) in enumerate(docs)],
    )
    expected = c.execute(
        """SELECT term, doc, count(*)::INTEGER, any_value(n)::INTEGER FROM (
               SELECT doc, unnest(t) AS term, len(t) AS n
               FROM (SELECT doc, ml_doc_terms(title, tags, content, created_at) AS t FROM src))
           GROUP BY term, doc ORDER BY ALL"""
    ).fetchall()
    lengths = c.execute(
        "SELECT doc, len(ml_doc_terms(title, tags, content, created_at))::INTEGER FROM src ORDER BY doc"
    ).fetchall()
    stage_postings(c, "src", dated=True)
    assert c.execute("SELECT term, doc, tf, dl FROM ml_post ORDER BY ALL").fetchall() == expected
    assert c.execute("SELECT doc, dl FROM ml_dl ORDER BY doc").fetchall() == lengths
    drop_staged(c)
    single = []
    for i, (t, b, g, w) in enumerate(docs):
        single += c.execute(ONE_DOC_POSTINGS, [doc_text_py(t, g, b, w), i]).fetchall()
    assert sorted(single) == expected
    c.close()


def test_a_date_is_indexed_as_day_month_name_and_year() -> None:
    c = duckdb.connect()
    load_fts(c)
    install_macros(c)
    may_8 = 1_683_547_200_000_000  # 2023-05-08T12:00:00Z
    row = c.execute("SELECT ml_doc_terms(NULL, NULL, 'went hiking', ?)", [may_8]).fetchone()
    assert row is not None and row[0] == ["went", "hike", "8", "may", "2023"]
    assert doc_text_py(None, [], "x", may_8).endswith("8 May 2023")
    # The last microsecond of a day is still that day, in both forms.
    last = 1_683_590_400_000_000 - 1  # 2023-05-08T23:59:59.999999Z
    assert doc_text_py(None, [], "x", last).endswith("8 May 2023")
    row = c.execute(f"SELECT {date_words_sql('t')} FROM (SELECT ?::BIGINT AS t)", [last]).fetchone()
    assert row is not None and row[0] == "8 May 2023"
    c.close()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.text(
            alphabet=st.sampled_from(list("abcdefghijklmnopqrstuvwxyz0123456789'")), min_size=1, max_size=12
        ),
        min_size=1,
        max_size=80,
    )
)
def test_query_terms_stemmed_here_equal_the_macro(ws: list[str]) -> None:
    # A recall stems a query's new words in one statement (a column per word, or one list
    # beyond STEM_COLUMNS) and keeps them: its terms must be the macro's.
    from mnemolog.projections.recall import bm25
    from mnemolog.projections.recall import query as q

    c = duckdb.connect()
    load_fts(c)
    install_macros(c)
    bm25.note_position(c, (0, b"", 0, 0))  # the engine's note: parse takes its fast path
    try:
        q._stems.clear()
        text = " ".join(ws)
        assert q.parse(c, text).terms == q._distinct(terms(c, text))
        assert q.parse(c, text).terms == q._distinct(terms(c, text))  # from the kept stems
    finally:
        bm25.note_position(c, None)
        c.close()
