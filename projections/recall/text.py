r"""How text becomes search terms: one tokenizer, defined in SQL, used for indexing and queries.

A *word* is a maximal run of characters that are not separators, after
lowercasing and stripping accents; words longer than MAX_TERM_LEN characters
are dropped. A *term* is a word that is not an English stop word, stemmed
with Snowball English (DuckDB fts's `stem`). Recall and the index use terms;
search additionally checks words, so that its keywords match exactly.

Separators are spelled out as code-point ranges (SEPARATOR_RANGES): ASCII
controls, spaces, punctuation and symbols, and the Unicode blocks of
punctuation, symbols, spaces and controls. Letters, digits and marks of any
script are word characters. The ranges are explicit, rather than
`[^\p{L}\p{N}]`, because RE2 needs about 2.5 ms to compile those Unicode
classes and DuckDB compiles the pattern on every statement: that alone
would be most of a recall.

The tokenizer exists once, as DuckDB macros, so a query can never be
tokenised differently from the documents it is matched against. The bulk
path (`stage_postings`) computes exactly what the macros compute, but stems
each distinct word once instead of every occurrence (10 times faster on a
rebuild); tests hold the two to the same output.

Title terms count TITLE_WEIGHT times: a title is a summary, so a match there
says more. Tags are indexed once, like content.
"""

from __future__ import annotations

import datetime

import duckdb

# The Snowball English stop-word list (as shipped with Snowball and DuckDB fts).
STOP_WORDS: tuple[str, ...] = (
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "aren't",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can't",
    "cannot",
    "could",
    "couldn't",
    "did",
    "didn't",
    "do",
    "does",
    "doesn't",
    "doing",
    "don't",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "hadn't",
    "has",
    "hasn't",
    "have",
    "haven't",
    "having",
    "he",
    "he'd",
    "he'll",
    "he's",
    "her",
    "here",
    "here's",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "how's",
    "i",
    "i'd",
    "i'll",
    "i'm",
    "i've",
    "if",
    "in",
    "into",
    "is",
    "isn't",
    "it",
    "it's",
    "its",
    "itself",
    "let's",
    "me",
    "more",
    "most",
    "mustn't",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "ought",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "same",
    "shan't",
    "she",
    "she'd",
    "she'll",
    "she's",
    "should",
    "shouldn't",
    "so",
    "some",
    "such",
    "than",
    "that",
    "that's",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "there's",
    "these",
    "they",
    "they'd",
    "they'll",
    "they're",
    "they've",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "wasn't",
    "we",
    "we'd",
    "we'll",
    "we're",
    "we've",
    "were",
    "weren't",
    "what",
    "what's",
    "when",
    "when's",
    "where",
    "where's",
    "which",
    "while",
    "who",
    "who's",
    "whom",
    "why",
    "why's",
    "with",
    "won't",
    "would",
    "wouldn't",
    "you",
    "you'd",
    "you'll",
    "you're",
    "you've",
    "your",
    "yours",
    "yourself",
    "yourselves",
    "s",
    "t",
    "d",
    "ll",
    "m",
    "re",
    "ve",
    "don",
    "isn",
    "aren",
    "wasn",
    "weren",
    "hasn",
    "haven",
    "hadn",
    "doesn",
    "didn",
    "won",
    "wouldn",
    "shan",
    "shouldn",
    "mustn",
    "can",
    "couldn",
)

MAX_TERM_LEN = 64
TITLE_WEIGHT = 2

# Inclusive code-point ranges of separator characters.
SEPARATOR_RANGES: tuple[tuple[int, int], ...] = (
    (0x00, 0x2F),  # controls, space, !"#$%&'()*+,-./
    (0x3A, 0x40),  # :;<=>?@
    (0x5B, 0x60),  # [\]^_`
    (0x7B, 0xA9),  # {|}~, DEL, C1 controls, NBSP, ¡¢£¤¥¦§¨©
    (0xAB, 0xB1),  # «¬ SHY ®¯°±
    (0xB4, 0xB4),  # ´
    (0xB6, 0xB8),  # ¶·¸
    (0xBB, 0xBB),  # »
    (0xBF, 0xBF),  # ¿
    (0xD7, 0xD7),  # ×
    (0xF7, 0xF7),  # ÷
    (0x037E, 0x037E),  # Greek question mark
    (0x0387, 0x0387),  # Greek ano teleia
    (0x055A, 0x055F),  # Armenian punctuation
    (0x0589, 0x058A),
    (0x05BE, 0x05BE),  # Hebrew maqaf
    (0x05C0, 0x05C0),
    (0x05C3, 0x05C3),
    (0x05C6, 0x05C6),
    (0x05F3, 0x05F4),
    (0x0600, 0x060F),  # Arabic signs and punctuation
    (0x061B, 0x061F),
    (0x066A, 0x066D),
    (0x06D4, 0x06D4),
    (0x0964, 0x0965),  # Devanagari danda
    (0x0970, 0x0970),
    (0x0E4F, 0x0E4F),  # Thai
    (0x0E5A, 0x0E5B),
    (0x10FB, 0x10FB),
    (0x1360, 0x1368),  # Ethiopic punctuation
    (0x166D, 0x166E),
    (0x1680, 0x1680),  # Ogham space
    (0x180E, 0x180E),
    (0x2000, 0x206F),  # General Punctuation: spaces, dashes, quotes, bullets, ZW characters
    (0x20A0, 0x20CF),  # currency symbols
    (0x2190, 0x23FF),  # arrows, mathematical operators, technical symbols
    (0x2500, 0x27BF),  # box drawing, blocks, shapes, symbols, dingbats
    (0x27C0, 0x2BFF),  # mathematical symbols, supplemental arrows
    (0x2E00, 0x2E7F),  # supplemental punctuation
    (0x3000, 0x3004),  # ideographic space and punctuation
    (0x3008, 0x3020),
    (0x3030, 0x3030),
    (0x303D, 0x303F),
    (0x30FB, 0x30FB),  # katakana middle dot
    (0xFD3E, 0xFD3F),
    (0xFE00, 0xFE0F),  # variation selectors
    (0xFE10, 0xFE1F),  # vertical forms
    (0xFE30, 0xFE4F),  # CJK compatibility forms
    (0xFE50, 0xFE6F),  # small form variants
    (0xFEFF, 0xFEFF),  # byte order mark
    (0xFF01, 0xFF0F),  # fullwidth punctuation
    (0xFF1A, 0xFF20),
    (0xFF3B, 0xFF40),
    (0xFF5B, 0xFF65),
    (0xFFE0, 0xFFEE),
    (0xFFF0, 0xFFFF),  # specials
    (0x1F000, 0x1FAFF),  # mahjong .. emoji and pictographs
    (0xE0000, 0xE007F),  # tags
)


def _class(ranges: tuple[tuple[int, int], ...]) -> str:
    parts = []
    for lo, hi in ranges:
        parts.append(f"\\x{{{lo:x}}}" if lo == hi else f"\\x{{{lo:x}}}-\\x{{{hi:x}}}")
    return "[" + "".join(parts) + "]+"


SEPARATORS = _class(SEPARATOR_RANGES)


def is_separator(ch: str) -> bool:
    """Python's view of the separator class (for tests and diagnostics)."""
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in SEPARATOR_RANGES)


def _sql_list(words: tuple[str, ...]) -> str:
    return ", ".join("'" + w.replace("'", "''") + "'" for w in sorted(set(words)))


def doc_text(title: str, tags: str, content: str, created_at: str | None = None) -> str:
    """SQL for the text a document is tokenised from: the title TITLE_WEIGHT times, the tags, the
    content, and (given `created_at`, a column of µs) its date as words (`date_words`).

    Separated by spaces, which split words, so its words are exactly those of
    the parts: one tokenizer pass instead of one per part. Tags are words of
    the memory like any other (`search flaky` finds a memory tagged `flaky`);
    a tag such as `ci-flaky` gives the words `ci` and `flaky`. The index is
    built from the dated text; search checks a memory's words without the
    date (its keywords are the memory's own words).
    """
    parts = [f"coalesce({title}, '')"] * TITLE_WEIGHT + [
        f"array_to_string(coalesce({tags}, []::VARCHAR[]), ' ')",
        f"coalesce({content}, '')",
    ]
    if created_at is not None:
        parts.append(date_words_sql(created_at))
    return " || ' ' || ".join(parts)


def doc_text_py(
    title: str | None, tags: list[str] | tuple[str, ...], content: str, created_at: int | None = None
) -> str:
    """`doc_text` in Python, for a parameter (a test holds the two equal)."""
    parts = [title or ""] * TITLE_WEIGHT + [" ".join(tags), content]
    if created_at is not None:
        # Whole seconds, floored as in SQL: a float division could round 23:59:59.9999995 up a day.
        day = datetime.datetime.fromtimestamp(created_at // 1_000_000, datetime.UTC)
        parts.append(date_words(day.year, day.month, day.day))
    return " ".join(parts)


MONTH_NAMES: tuple[str, ...] = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def date_words(year: int, month: int, day: int) -> str:
    """A date as the words a question names it by, in English: "8 May 2023".

    Indexed with a memory's text so that "what did she do in May 2023" finds
    memories of that day by its month and year (docs/recall.md, "Dates as words").
    """
    return f"{day} {MONTH_NAMES[month - 1]} {year}"


def date_words_sql(micros: str) -> str:
    """`date_words` in SQL, of a column of µs since the epoch (UTC); '' when NULL.

    Month names are spelled from MONTH_NAMES, not strftime's %B, so that the
    two forms cannot differ by locale.
    """
    months = ", ".join(f"'{m}'" for m in MONTH_NAMES)
    ts = f"make_timestamp({micros})"
    return f"coalesce(day({ts})::VARCHAR || ' ' || [{months}][month({ts})] || ' ' || year({ts})::VARCHAR, '')"


def install_macros(conn: duckdb.DuckDBPyConnection) -> None:
    """Create the tokenizer macros on a connection (temporary: they use fts's stem)."""
    # strip_accents costs a third of the tokenizer and changes nothing in ASCII text.
    conn.execute(
        f"""
        CREATE OR REPLACE TEMP MACRO ml_words(s) AS list_filter(
            regexp_split_to_array(
                lower(CASE WHEN strlen(s) = length(s) THEN s ELSE strip_accents(s) END),
                '{SEPARATORS}'),
            t -> length(t) BETWEEN 1 AND {MAX_TERM_LEN})
        """
    )
    # The stop words as one '|'-delimited string ('|' is a separator, never inside a word):
    # binding a 174-element list literal cost half of a query's tokenisation.
    bar = ("|" + "|".join(sorted(set(STOP_WORDS))) + "|").replace("'", "''")
    conn.execute(
        f"""
        CREATE OR REPLACE TEMP MACRO ml_terms(s) AS list_transform(
            list_filter(ml_words(s), t -> NOT contains('{bar}', '|' || t || '|')),
            t -> stem(t, 'english'))
        """
    )
    # The definition of a document's terms; the fold computes the same set-wise.
    conn.execute(
        "CREATE OR REPLACE TEMP MACRO ml_doc_terms(title, tags, content, created_at) AS "
        f"ml_terms({doc_text('title', 'tags', 'content', 'created_at')})"
    )
    conn.execute("CREATE OR REPLACE TEMP TABLE ml_stop_words(w VARCHAR PRIMARY KEY)")
    conn.execute(f"INSERT INTO ml_stop_words SELECT unnest([{_sql_list(STOP_WORDS)}])")


# Postings (term, doc, tf, dl) of one document, from parameters (text, doc): set-wise,
# so that a 256 KiB memory costs one stem per distinct word and a hash probe per
# word, not a scan of the stop-word list and a stem per occurrence.
ONE_DOC_POSTINGS = """
    WITH w AS (SELECT unnest(ml_words(?)) AS w),
    t AS (SELECT w FROM w WHERE w NOT IN (SELECT w FROM ml_stop_words)),
    v AS (SELECT w, stem(w, 'english') AS term FROM (SELECT DISTINCT w FROM t)),
    f AS (SELECT v.term, count(*)::INTEGER AS tf FROM t JOIN v USING (w) GROUP BY v.term)
    SELECT term, ?::BIGINT AS doc, tf, (SELECT sum(tf) FROM f)::INTEGER AS dl FROM f
"""


#: The date a memory's words are dated by: when it happened, if given, else when it was stored.
DATED_BY = "coalesce(occurred_at, created_at)"


def stage_postings(conn: duckdb.DuckDBPyConnection, source: str, *, dated: bool = False) -> None:
    """Tokenise the documents of table `source` (doc, title, tags, content, and occurred_at and
    created_at when `dated`: a memory's date, `DATED_BY`, is indexed as words) into two temp tables.

    `ml_post(term, doc, tf, dl)`: their postings, the same as grouping
    `unnest(ml_doc_terms(title, tags, content, created_at))` by term, dl being the length of
    that list. `ml_dl(doc, dl)`: the length of every document of `source`, 0
    when it has no terms. One statement, so that DuckDB pipelines the steps
    instead of materialising each. Drop them with `drop_staged`. The text is built in a
    subquery and named: the macro, given the expression itself, spells it out once per use
    of its argument, and DuckDB then builds each document's text several times (10 % of
    the statement, 100k memories).
    """
    text = doc_text("title", "tags", "content", DATED_BY if dated else None)
    conn.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE ml_post AS
        WITH tok AS MATERIALIZED (
            SELECT doc, w
            FROM (SELECT doc, unnest(ml_words(s)) AS w FROM (SELECT doc, {text} AS s FROM {source}))
            WHERE w NOT IN (SELECT w FROM ml_stop_words)),
        vocab AS (SELECT w, stem(w, 'english') AS term FROM (SELECT DISTINCT w FROM tok)),
        tf AS (
            SELECT v.term, t.doc, count(*)::INTEGER AS tf
            FROM tok t JOIN vocab v USING (w) GROUP BY v.term, t.doc)
        SELECT term, doc, tf, (sum(tf) OVER (PARTITION BY doc))::INTEGER AS dl FROM tf
        """
    )
    conn.execute(
        f"""CREATE OR REPLACE TEMP TABLE ml_dl AS
            SELECT s.doc, coalesce(d.dl, 0)::INTEGER AS dl
            FROM {source} s
            LEFT JOIN (SELECT doc, any_value(dl) AS dl FROM ml_post GROUP BY doc) d USING (doc)"""
    )


def drop_staged(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute("DROP TABLE IF EXISTS ml_post")
    conn.execute("DROP TABLE IF EXISTS ml_dl")
