"""The heading-aware chunker: a document's text into chunks of at most `max_chars` characters.

A chunk is a span of the document's (newline-normalised) text, cut so that it
never crosses a heading, carrying the path of headings above it. Pure
functions of the text and the limit; `substrate.documents` reads the files.

How a document is cut:

1. Markdown headings (ATX `#`..`######`, and setext `===` / `---`
   underlines) split the text into sections; fenced code blocks (``` and
   ~~~) and a leading YAML frontmatter block are opaque, so a `#` line
   inside them is text. A section's heading path is the titles of the
   headings it sits under, outermost first (so `## B` under `# A` is
   `("A", "B")`). The heading line itself is in the path, not in the text.
2. A section body that fits is one chunk. A longer one is split
   recursively: at blank lines, then line breaks, then sentence ends, then
   spaces, and only a run with none of those is cut every `max_chars`
   characters. Adjacent pieces are merged back while the merged span fits,
   so chunks are as large as the limit allows.

Every chunk's text is exactly `text[start:end]`, stripped of surrounding
whitespace, never longer than `max_chars`, and chunks come in document
order without overlapping. Plain text (`markdown=False`) is one section
with an empty heading path.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

DEFAULT_MAX_CHARS: Final = 800
MIN_MAX_CHARS: Final = 50
MAX_MAX_CHARS: Final = 100_000
#: A heading title longer than this is cut (a path rides along with every chunk).
MAX_HEADING_CHARS: Final = 200

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_NOT_PARAGRAPH = re.compile(r" {4}|\t| {0,3}(?:[-*+>|#]|\d{1,9}[.)])(?:[ \t]|$)")
_WS = " \t\n\r\f\v"

# The recursive levels: blank lines, line breaks, sentence ends, spaces.
_SEPARATORS: Final = (
    re.compile(r"\n[ \t]*\n\s*"),
    re.compile(r"\n"),
    re.compile(r"(?<=[.!?;:])[ \t]+"),
    re.compile(r"[ \t\f\v]+"),
)


@dataclass(frozen=True)
class Chunk:
    """One chunk: its position, heading path and text (`text == source[start:end]`)."""

    index: int
    heading_path: tuple[str, ...]
    text: str
    start: int
    end: int


def check_max_chars(max_chars: int) -> int:
    if isinstance(max_chars, bool) or not isinstance(max_chars, int):
        raise ValueError(f"max_chars must be an integer, found {max_chars!r}")
    if not MIN_MAX_CHARS <= max_chars <= MAX_MAX_CHARS:
        raise ValueError(f"max_chars must be in [{MIN_MAX_CHARS}, {MAX_MAX_CHARS}], found {max_chars}")
    return max_chars


def normalise_newlines(text: str) -> str:
    """CRLF and lone CR become LF: chunk offsets are into this form."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _heading_title(raw: str) -> str:
    title = " ".join(raw.split())
    if len(title) > MAX_HEADING_CHARS:
        title = title[: MAX_HEADING_CHARS - 1].rstrip() + "…"
    return title


def _frontmatter_end(lines: list[str]) -> int:
    """Index of the line closing a leading YAML block, or -1 when there is none."""
    if not lines or lines[0].rstrip() != "---":
        return -1
    for i in range(1, len(lines)):
        if lines[i].rstrip() in ("---", "..."):
            return i
    return -1


@dataclass(frozen=True)
class Section:
    heading_path: tuple[str, ...]
    start: int
    end: int


# Lines starting with none of these can only be paragraph text (the common case, kept cheap).
_SPECIAL = frozenset(" \t#`~=-")
_NOT_PARAGRAPH_START = frozenset("*+>|0123456789")


def sections(text: str, markdown: bool = True) -> list[Section]:
    """The heading sections of `text` (newline-normalised), in order; bodies may be blank."""
    if not markdown:
        return [Section((), 0, len(text))]
    lines = text.split("\n")
    starts = [0] * len(lines)
    pos = 0
    for i, line in enumerate(lines):
        starts[i] = pos
        pos += len(line) + 1
    # (level, title, first line, last line): a setext heading spans two lines.
    headings: list[tuple[int, str, int, int]] = []
    fence: tuple[str, int] | None = None
    opaque_until = _frontmatter_end(lines)
    prev_paragraph = -1  # a lone paragraph line that a setext underline may turn into a heading
    prev_blank = True  # the line before is blank, the start, or the end of a heading
    for i in range(opaque_until + 1, len(lines)):
        s = lines[i]
        c = s[:1]
        if fence is None and c and c not in _SPECIAL:
            # Plain text: a paragraph line, unless it starts a list, a quote or a table.
            if prev_blank and not (c in _NOT_PARAGRAPH_START and _NOT_PARAGRAPH.match(s)):
                prev_paragraph = i
            else:
                prev_paragraph = -1
            prev_blank = False
            continue
        if fence is not None:
            m = _FENCE.match(s)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= fence[1] and not s[m.end() :].strip():
                fence = None
            prev_paragraph, prev_blank = -1, False
            continue
        m = _FENCE.match(s)
        if m:
            fence = (m.group(1)[0], len(m.group(1)))
            prev_paragraph, prev_blank = -1, False
            continue
        atx = _ATX.fullmatch(s)
        if atx:
            headings.append((len(atx.group(1)), _heading_title(atx.group(2) or ""), i, i))
            prev_paragraph, prev_blank = -1, True
            continue
        setext = _SETEXT.fullmatch(s)
        if setext and prev_paragraph >= 0:
            level = 1 if setext.group(1)[0] == "=" else 2
            headings.append((level, _heading_title(lines[prev_paragraph]), prev_paragraph, i))
            prev_paragraph, prev_blank = -1, True
            continue
        if not s.strip():
            prev_paragraph, prev_blank = -1, True
            continue
        prev_paragraph = i if prev_blank and not _NOT_PARAGRAPH.match(s) else -1
        prev_blank = False
    out: list[Section] = []
    stack: list[tuple[int, str]] = []
    body_start = 0
    path: tuple[str, ...] = ()
    for level, title, first, last in headings:
        out.append(Section(path, body_start, starts[first]))
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        path = tuple(t for _, t in stack)
        body_start = starts[last] + len(lines[last]) + 1 if last + 1 < len(lines) else len(text)
    out.append(Section(path, min(body_start, len(text)), len(text)))
    return out


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start] in _WS:
        start += 1
    while end > start and text[end - 1] in _WS:
        end -= 1
    return start, end


def _pieces(text: str, start: int, end: int, max_chars: int, level: int) -> Iterator[tuple[int, int]]:
    """Trimmed spans covering text[start:end], each at most max_chars, in order."""
    start, end = _trim(text, start, end)
    if start == end:
        return
    if end - start <= max_chars:
        yield start, end
        return
    if level == len(_SEPARATORS):
        for s in range(start, end, max_chars):
            yield from _pieces(text, s, min(s + max_chars, end), max_chars, level)
        return
    cut = start
    found = False
    for m in _SEPARATORS[level].finditer(text, start, end):
        if m.start() == m.end():
            continue
        found = True
        yield from _pieces(text, cut, m.start(), max_chars, level + 1)
        cut = m.end()
    if not found:
        yield from _pieces(text, start, end, max_chars, level + 1)
        return
    yield from _pieces(text, cut, end, max_chars, level + 1)


def _merged(spans: Iterator[tuple[int, int]], max_chars: int) -> Iterator[tuple[int, int]]:
    cur: tuple[int, int] | None = None
    for s, e in spans:
        if cur is None:
            cur = (s, e)
        elif e - cur[0] <= max_chars:
            cur = (cur[0], e)
        else:
            yield cur
            cur = (s, e)
    if cur is not None:
        yield cur


def chunk_text(text: str, *, max_chars: int = DEFAULT_MAX_CHARS, markdown: bool = True) -> list[Chunk]:
    """Chunks of `text` (call `normalise_newlines` first for offsets into that form)."""
    check_max_chars(max_chars)
    out: list[Chunk] = []
    for sec in sections(text, markdown):
        for s, e in _merged(_pieces(text, sec.start, sec.end, max_chars, 0), max_chars):
            out.append(Chunk(len(out), sec.heading_path, text[s:e], s, e))
    return out


def is_markdown(name: str) -> bool:
    """Whether a file name is read as Markdown (headings) rather than plain text."""
    return name.lower().endswith((".md", ".markdown", ".mdown", ".mkd", ".mdx"))
