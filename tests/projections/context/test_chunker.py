"""The heading-aware chunker: limits, verbatim spans, heading paths, recursive splitting."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.projections.context.chunker import (
    MAX_HEADING_CHARS,
    check_max_chars,
    chunk_text,
    is_markdown,
    normalise_newlines,
    sections,
)

_WS = re.compile(r"\s+")

# Markdown-ish documents: headings, fences, paragraphs, long runs, blank lines.
_line = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=120),
    st.builds(lambda n, t: "#" * n + " " + t, st.integers(1, 7), st.text(max_size=40)),
    st.sampled_from(["```", "~~~", "---", "===", "", "", "  ", "- item", "> quote", "    code"]),
    st.builds(lambda n: "x" * n, st.integers(0, 2000)),
    st.builds(lambda n: "word " * n, st.integers(0, 400)),
    st.builds(lambda n: "Sentence here. " * n, st.integers(0, 200)),
)
documents = st.lists(_line, max_size=40).map("\n".join)


def _check(text: str, max_chars: int, markdown: bool) -> None:
    chunks = chunk_text(text, max_chars=max_chars, markdown=markdown)
    last_end = 0
    for i, c in enumerate(chunks):
        assert c.index == i
        assert 0 < len(c.text) <= max_chars
        assert c.text == text[c.start : c.end]
        assert c.text == c.text.strip(" \t\n\r\f\v")
        assert c.start >= last_end
        last_end = c.end
        assert len(c.heading_path) <= 6
        assert all(len(h) <= MAX_HEADING_CHARS for h in c.heading_path)
    # Every non-blank character of every section body is in some chunk.
    covered = [False] * len(text)
    for c in chunks:
        for k in range(c.start, c.end):
            covered[k] = True
    for sec in sections(text, markdown):
        for k in range(sec.start, sec.end):
            if not text[k].isspace() and text[k] not in "\f\v":
                assert covered[k], (k, text[k], sec)


@settings(max_examples=300, deadline=None)
@given(documents, st.sampled_from([50, 80, 200, 800]))
def test_chunks_are_verbatim_bounded_ordered_and_cover_every_body(text: str, max_chars: int) -> None:
    _check(normalise_newlines(text), max_chars, markdown=True)


@settings(max_examples=200, deadline=None)
@given(documents, st.sampled_from([50, 800]))
def test_plain_text_keeps_every_non_blank_character(text: str, max_chars: int) -> None:
    text = normalise_newlines(text)
    _check(text, max_chars, markdown=False)
    chunks = chunk_text(text, max_chars=max_chars, markdown=False)
    assert _WS.sub("", "".join(c.text for c in chunks)) == _WS.sub("", text)
    assert all(c.heading_path == () for c in chunks)


@settings(max_examples=200, deadline=None)
@given(documents)
def test_sections_tile_the_document_between_heading_lines(text: str) -> None:
    text = normalise_newlines(text)
    secs = sections(text)
    assert secs[0].start == 0 and secs[-1].end == len(text)
    for a, b in itertools.pairwise(secs):
        assert a.end <= b.start
        gap = text[a.end : b.start]
        # What lies between two sections is a heading (one ATX line, or a setext pair).
        lines = gap.rstrip("\n").split("\n")
        assert 1 <= len(lines) <= 2
        if len(lines) == 1:
            assert lines[0].lstrip(" ").startswith("#")
        else:
            assert set(lines[1].strip()) <= {"=", "-"}


@settings(max_examples=100, deadline=None)
@given(documents)
def test_adjacent_chunks_of_a_section_could_not_be_merged(text: str) -> None:
    text = normalise_newlines(text)
    secs = sections(text)
    chunks = chunk_text(text, max_chars=200)

    def section_of(pos: int) -> int:
        return next(i for i, s in enumerate(secs) if s.start <= pos < s.end)

    for a, b in itertools.pairwise(chunks):
        if section_of(a.start) == section_of(b.start):
            assert b.end - a.start > 200


def test_heading_paths_follow_nesting() -> None:
    text = "intro\n# A\na body\n## B\nb body\n### C\nc body\n## D\nd body\n# E\ne body\n"
    got = [(c.heading_path, c.text) for c in chunk_text(text)]
    assert got == [
        ((), "intro"),
        (("A",), "a body"),
        (("A", "B"), "b body"),
        (("A", "B", "C"), "c body"),
        (("A", "D"), "d body"),
        (("E",), "e body"),
    ]


def test_setext_headings_and_closing_hashes() -> None:
    text = "Title\n=====\n\nbody one\n\nSub\n---\nbody two\n\n## Closed ##\nbody three"
    got = [(c.heading_path, c.text) for c in chunk_text(text)]
    assert got == [
        (("Title",), "body one"),
        (("Title", "Sub"), "body two"),
        (("Title", "Closed"), "body three"),
    ]


def test_a_thematic_break_after_a_list_or_a_blank_line_is_not_a_heading() -> None:
    text = "# H\n- item\n---\nafter\n\n---\nmore"
    chunks = chunk_text(text)
    assert [c.heading_path for c in chunks] == [("H",)]
    assert chunks[0].text == "- item\n---\nafter\n\n---\nmore"


def test_fenced_code_and_frontmatter_are_opaque() -> None:
    text = "---\ntitle: x\n# not a heading\n---\n# Real\n```python\n# comment, not a heading\n```\nafter"
    chunks = chunk_text(text)
    assert chunks[0].heading_path == ()
    assert "# not a heading" in chunks[0].text
    assert chunks[1].heading_path == ("Real",)
    assert "# comment, not a heading" in chunks[1].text and chunks[1].text.endswith("after")


def test_unclosed_fence_swallows_the_rest() -> None:
    chunks = chunk_text("# A\n~~~\n# B\ntext")
    assert [c.heading_path for c in chunks] == [("A",)]


def test_seven_hashes_is_text_and_empty_sections_make_no_chunks() -> None:
    chunks = chunk_text("# A\n\n# B\n####### seven\n")
    assert [(c.heading_path, c.text) for c in chunks] == [(("B",), "####### seven")]


def test_long_sections_split_at_paragraphs_then_lines_then_sentences_then_words() -> None:
    para = "alpha " * 50  # 300 characters
    text = f"# S\n{para}\n\n{para}\n\n{para}"
    chunks = chunk_text(text, max_chars=700)
    assert len(chunks) == 2
    assert chunks[0].text == f"{para}\n\n{para}".strip()
    sentences = "One two three. " * 40
    chunks = chunk_text(sentences, max_chars=100)
    assert all(c.text.endswith(".") for c in chunks)
    words = "word " * 100
    chunks = chunk_text(words, max_chars=52)
    assert all(c.text.startswith("word") and c.text.endswith("word") for c in chunks)


def test_a_run_without_separators_is_cut_every_max_chars() -> None:
    chunks = chunk_text("x" * 2001, max_chars=800)
    assert [len(c.text) for c in chunks] == [800, 800, 401]


def test_long_headings_are_cut_and_whitespace_collapsed() -> None:
    chunks = chunk_text("#   Many    spaces\there  \nbody\n# " + "h" * 500 + "\nbody")
    assert chunks[0].heading_path == ("Many spaces here",)
    assert len(chunks[1].heading_path[0]) == MAX_HEADING_CHARS
    assert chunks[1].heading_path[0].endswith("…")


def test_newlines_normalise() -> None:
    assert normalise_newlines("a\r\nb\rc\n") == "a\nb\nc\n"


def test_max_chars_is_checked() -> None:
    for bad in (0, 49, 100_001, True, 1.5, "800"):
        with pytest.raises(ValueError):
            check_max_chars(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        chunk_text("x", max_chars=10)


def test_markdown_by_name() -> None:
    assert is_markdown("README.MD") and is_markdown("a.markdown")
    assert not is_markdown("notes.txt")
