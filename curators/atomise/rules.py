"""The rules curator: deterministic, offline atomisation without a model.

Owns the heuristics that stand in for an LLM when none is configured:

1. Blocks and sections. The text is cut into blocks at blank lines (and lines
   with no letter or digit, such as ``---``). A bullet or numbered line starts a
   list-item block that runs on over indented continuation lines. Other lines
   form prose blocks in which a single newline is a soft wrap, except after a
   short line (under 40 characters) followed by a capitalised line, or after a
   line ending in ``:``. A heading starts a section: a Markdown ``#`` line, a
   line underlined with ``===`` or ``---``, or a short line standing alone (at
   most eight words, capitalised, not a lead-in ending in ``:``, blank lines
   around it, and a longer block after it), such as a document's title or
   "Why it was so bad.". The heading is the context of every atom of its
   section; a section holding nothing but a heading lends its heading to the
   next one ("Part 2 › Costs").
2. Propositions. Prose blocks are split into sentences at ``.``, ``!``, ``?``
   or ``…`` (closing quotes and brackets stay with their sentence) followed by
   whitespace or a control character, then a character that is not lowercase,
   except after known abbreviations (``e.g.``, ``Dr.``, ``vs.``, dotted
   acronyms, initials, ``No. 5``). Decimals such as ``3.5`` never split because
   no whitespace follows the point. A list item is one proposition. Spans
   without any letter or digit are not propositions.
3. Over-long propositions are split to fit the budget at clause boundaries
   (after ``,;:`` or before a dash), failing that between words, failing that
   between characters, into pieces of even size.
4. Gluing, for self-containedness, never across a section boundary: a heading
   or a lead-in ending in ``:`` joins what follows (a lead-in takes its list
   items with it), and a fragment (under three words) or a sentence opening
   with a pronoun or connective ("It", "This", "However", ...) joins the
   sentence before it in the same block, each only while the result stays
   within the budget. A group that is nothing but headings is no atom.
5. Envelope. With more than 10 groups, adjacent groups of one section are
   merged into at most 10 atoms, minimising the largest atom and then evening
   out the rest; no atom spans two sections. When 10 atoms cannot hold the
   whole text within the budget, the budget may be exceeded by up to 25%
   (flagged over budget); when even that cannot hold it (or it has more than
   10 sections), the curator selects: up to 10 runs of adjacent groups, each
   inside one section and within the budget, chosen to cover every section it
   can and then the most informative propositions (distinct content words,
   weighted by how often the document uses them, numbers and names counting
   extra, a section's opening proposition first). A warning says what was
   left out; the archived parent keeps the whole text.
6. Titles. Each atom's title is its section heading and the opening words of
   its first proposition ("Root cause: The root cause was a certificate
   rotation…"), at most 80 characters.

Every atom is a verbatim slice ``text[start:end]`` of the source (trimmed of
surrounding whitespace, never rewritten or re-spaced), so the engine can always
record a source span; merged atoms keep the source's own whitespace between
their parts. Nothing here depends on time, randomness or the environment: the
same input always gives the same atoms.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from mnemolog.curators.base import (
    MAX_ATOMS,
    MIN_ATOMS,
    Atom,
    CurationResult,
    CuratorFailed,
    SourceTooSmall,
    check_max_retries,
)
from mnemolog.curators.tokens import (
    DEFAULT_ATOM_TOKENS,
    check_max_atom_tokens,
    count_tokens,
    tolerated_tokens,
)

#: A line shorter than this that ends without a soft wrap's tell-tale (it is
#: followed by a capitalised line) is a line of its own, such as "Host: db1".
SHORT_LINE: Final = 40
#: Propositions with fewer words than this are fragments and get glued.
FRAGMENT_WORDS: Final = 3
#: A line standing alone is a heading only when it is this short.
HEADING_MAX_WORDS: Final = 10
HEADING_MAX_CHARS: Final = 80
#: A Markdown heading line longer than this is text with a ``#`` in front.
MAX_HEADING_LINE: Final = 200
#: Titles: the section heading and at most this many opening words, within this many characters.
TITLE_WORDS: Final = 8
TITLE_CHARS: Final = 80
#: Beyond this many tokens (well above the 256 KiB a memory may hold) the text is
#: refused rather than searched for its most informative propositions.
MAX_SOURCE_TOKENS: Final = 100_000

_WORD_CHAR = re.compile(r"\w")
_WORDS = re.compile(r"\w+")
_LINE = re.compile(r"[^\n]*\n|[^\n]+")
_HEADING = re.compile(r"[ \t]{0,3}#{1,6}[ \t]+\S")
_BULLET = re.compile(
    r"[ \t]*(?:[-*+•‣◦▪●○–—]|(?:\d{1,3}|[a-z])[.)]|\((?:\d{1,3}|[a-z]|[ivx]{1,5})\))[ \t]+\S"
)
# Control characters count as spacing after a sentence end: a stray BEL or an
# ANSI escape between two sentences must not weld them together.
_TERMINAL = re.compile(r"""(?:[.!?]+|…)['"’”)\]»]*(?=[\s\x00-\x1f\x7f]|$)""")
_NEXT_VISIBLE = re.compile(r"[^\s\x00-\x1f\x7f]")
_DOTTED = re.compile(r"(?:[a-z]\.)+[a-z]")
_OPENING_PUNCT = "([{\"'“‘«"
_UNDERLINE = re.compile(r"[ \t]{0,3}(?:=+|-+)[ \t]*\r?\n?")
_HEADING_MARKS = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+|[ \t]+#+[ \t]*$")
_SPACES = re.compile(r"[\s\x00-\x1f\x7f]+")
_BULLET_MARK = re.compile(
    r"^[ \t]*(?:[-*+•‣◦▪●○–—]|(?:\d{1,3}|[a-z])[.)]|\((?:\d{1,3}|[a-z]|[ivx]{1,5})\))[ \t]+"
)


def _wordset(words: str) -> frozenset[str]:
    return frozenset(words.split())


#: Abbreviations after which a period never ends a sentence.
_NEVER_FINAL: Final = _wordset(
    "e.g i.e cf vs viz approx ca dr mr mrs ms mx prof st gen rep sen rev capt lt "
    "col sgt hon fr dept univ resp incl excl esp"
)
#: Abbreviations that do not end a sentence when a number follows ("No. 5", "Jan. 3").
_BEFORE_NUMBER: Final = _wordset(
    "no nos vol vols p pp fig figs eq eqs art sec ch para op ver v jan feb mar apr "
    "jun jul aug sep sept oct nov dec"
)
#: Dotted forms that may end a sentence ("at 5 p.m. The next day ...").
_DOTTED_MAY_END: Final = frozenset(("a.m", "p.m"))
#: Opening words that lean on the sentence before them.
_ANAPHORA: Final = _wordset(
    "it its this that these those they them their theirs he she his her hers also "
    "however but so then thus therefore hence otherwise instead and or such both "
    "meanwhile afterwards consequently moreover furthermore additionally "
    "nevertheless nonetheless still yet which whereas"
)

_CLAUSE_CUT = re.compile(r"(?<=[,;:])\s+|\s+(?=(?:--?|[—–])\s)")
_WORD_CUT = re.compile(r"\s+")
_LEVEL_NAMES: Final = ("clause boundaries", "word boundaries", "character boundaries")


@dataclass(frozen=True, slots=True)
class _Unit:
    """One proposition (or piece of one) as a trimmed span of the source."""

    start: int
    end: int
    tokens: int
    kind: str  # "sentence", "item" or "heading"
    block: int
    section: int
    fragment: bool
    forward: bool  # belongs with what follows: heading, lead-in, label
    leadin: bool
    anaphoric: bool


@dataclass(frozen=True, slots=True)
class _Span:
    start: int
    end: int
    tokens: int
    #: Tokens that joining this span to the span before it adds (its gap).
    join: int = 0
    section: int = 0


@dataclass(frozen=True, slots=True)
class _Block:
    kind: str  # "prose", "item" or "heading"
    start: int
    end: int
    lines: int
    #: The block is set off from the one before / after it by a blank or separator line.
    gap_before: bool
    gap_after: bool


class RulesCurator:
    """Deterministic sentence-level atomiser; no model, no network, no retries."""

    name = "rules"
    model: str | None = None

    def curate(
        self, text: str, *, max_atom_tokens: int = DEFAULT_ATOM_TOKENS, max_retries: int = 3
    ) -> CurationResult:
        # max_retries is part of the protocol; a deterministic curator has
        # nothing to retry, so it is only validated.
        budget = check_max_atom_tokens(max_atom_tokens)
        check_max_retries(max_retries)
        hard = tolerated_tokens(budget)
        total = count_tokens(text)
        if total > MAX_SOURCE_TOKENS:
            raise CuratorFailed(
                f"rules curator: the text has {total} tokens, more than the {MAX_SOURCE_TOKENS} it "
                "selects atoms from; split the memory first",
                reason="envelope",
                attempts=1,
                tokens=total,
                max_atom_tokens=budget,
                limit=MAX_SOURCE_TOKENS,
            )
        warnings: list[str] = []
        blocks = _blocks(text)
        sections, contexts = _sections(text, blocks)
        units = _propositions(text, blocks, sections, budget, warnings)
        content = [u for u in units if u.kind != "heading"]
        if len(content) < MIN_ATOMS:
            raise SourceTooSmall(
                f"nothing to atomise: expected at least {MIN_ATOMS} propositions, "
                f"found {len(content)} in {len(text)} characters ({total} tokens)",
                propositions=len(content),
                tokens=total,
            )
        glued = _glue(text, units, budget)
        singles = _joined(text, [_Span(u.start, u.end, u.tokens, 0, u.section) for u in content])
        spans = _fit(text, glued, singles, budget, hard)
        if spans is None:
            spans = _select(text, glued, content, budget)
            kept = sum(s.tokens for s in spans)
            left = sorted(
                {c for c in (contexts[u.section] for u in content) if c}
                - {contexts[s.section] for s in spans}
            )
            warnings.append(
                f"selected {len(spans)} atoms of the most informative propositions ({kept} of {total} "
                f"tokens): the whole text needs more than {MAX_ATOMS} atoms of max_atom_tokens={budget}"
                + (f"; sections without an atom: {', '.join(left)}" if left else "")
                + "; the archived parent keeps the full text"
            )
        atoms: list[Atom] = []
        for index, span in enumerate(spans):
            over = span.tokens > budget
            if over:
                warnings.append(
                    f"atom {index} kept over budget: {span.tokens} tokens > max_atom_tokens="
                    f"{budget} (ten atoms could not hold the text within budget; limit {hard})"
                )
            context = contexts[span.section]
            atoms.append(
                Atom(
                    text=text[span.start : span.end],
                    tokens=span.tokens,
                    over_budget=over,
                    title=_title(text, span, units, context),
                    context=context,
                )
            )
        return CurationResult(
            atoms=tuple(atoms),
            dropped=(),
            warnings=tuple(warnings),
            curator=self.name,
            model=None,
            prompt_sha256=None,
            input_tokens=total,
            output_tokens=sum(a.tokens for a in atoms),
            attempts=1,
            responses=(),
        )


# -- 1. blocks and sections ---------------------------------------------------------------


def _blocks(text: str) -> list[_Block]:
    """The blocks of ``text`` in order, headings recognised."""
    raw: list[_Block] = []
    kind: str | None = None
    start = end = lines = 0
    gap = True  # the start of the text counts as a gap

    def close(gap_after: bool) -> None:
        nonlocal kind, gap
        if kind is not None:
            raw.append(_Block(kind, start, end, lines, gap, gap_after))
            gap = False
        kind = None

    for line in _LINE.finditer(text):
        ls, le = line.start(), line.end()
        body = line.group()
        if not _WORD_CHAR.search(body):
            if kind == "prose" and lines == 1 and _UNDERLINE.fullmatch(body) and body.strip():
                kind = "heading"  # a setext heading: the line above is underlined
            close(True)
            gap = True
            continue
        if _HEADING.match(body) and len(body) <= MAX_HEADING_LINE:
            close(False)
            raw.append(_Block("heading", ls, le, 1, gap, False))
            gap = False
            continue
        if _BULLET.match(body):
            close(False)
            kind, start, end, lines = "item", ls, le, 1
            continue
        continues_item = kind == "item" and body[:1] in (" ", "\t")
        if kind == "prose" or continues_item:
            end, lines = le, lines + 1
            continue
        close(False)
        kind, start, end, lines = "prose", ls, le, 1
    close(True)
    # Backwards, so that each block is judged knowing whether a heading follows it.
    blocks: list[_Block] = []
    for i in range(len(raw) - 1, -1, -1):
        found = raw[i]
        following = blocks[-1] if blocks else None
        if found.kind == "prose" and following is not None and _stands_alone(text, found, following, i == 0):
            found = _Block("heading", found.start, found.end, 1, found.gap_before, found.gap_after)
        blocks.append(found)
    blocks.reverse()
    return blocks


def _stands_alone(text: str, block: _Block, following: _Block, first: bool) -> bool:
    """A short capitalised line set off on its own: a title, a heading, or a list's lead-in."""
    if block.lines != 1 or not block.gap_before:
        return False
    line = text[block.start : block.end].strip()
    words = _WORDS.findall(line)
    if not words or len(words) > HEADING_MAX_WORDS or len(line) > HEADING_MAX_CHARS:
        return False
    if line.endswith((",", ";")) or not (line[0].isupper() or line[0].isdigit()):
        return False
    if line.endswith(":"):
        # "Action items:" over its list: the list is its section.
        return following.kind == "item"
    if not block.gap_after:
        return False
    if following.kind == "heading":
        return first  # a document's title over its first heading
    # The body a heading introduces is longer than the heading; a short line
    # between two short lines is just a short paragraph.
    return following.end - following.start >= 2 * len(line) or following.lines > 1


def _heading_text(text: str, block: _Block) -> str:
    line = _HEADING_MARKS.sub("", text[block.start : block.end].strip())
    line = line.strip().strip("*_").strip()
    line = line.rstrip(".:").strip()
    return _SPACES.sub(" ", line)[:HEADING_MAX_CHARS]


def _sections(text: str, blocks: Sequence[_Block]) -> tuple[list[int], list[str | None]]:
    """Each block's section, and each section's context (section 0 precedes any heading).

    A lead-in heading ("Action items:") heads only its list: the blocks after
    the list return to the context of the heading before it.
    """
    of_block: list[int] = []
    contexts: list[str | None] = [None]
    outer: str | None = None  # the context of the enclosing, non-lead-in heading
    pending: list[str] = []  # headings with no body of their own yet
    in_list = False
    for i, block in enumerate(blocks):
        if block.kind == "heading":
            heading = _heading_text(text, block)
            context = " › ".join([*pending, heading]) if heading else (" › ".join(pending) or None)
            contexts.append(context)
            following = blocks[i + 1] if i + 1 < len(blocks) else None
            leadin = text[block.start : block.end].rstrip().endswith(":")
            in_list = leadin
            if not leadin:
                outer = context
            # A heading directly followed by another heading is the outer part of its context.
            has_body = following is not None and following.kind != "heading"
            pending = [] if has_body or not heading else [*pending, heading]
        elif in_list and block.kind != "item":
            in_list = False
            contexts.append(outer)
        of_block.append(len(contexts) - 1)
    return of_block, contexts


# -- 2. sentences -----------------------------------------------------------------------


def _ends_sentence(text: str, match: re.Match[str], stop: int) -> bool:
    visible = _NEXT_VISIBLE.search(text, match.end(), stop)
    if visible is None:
        return True
    following = visible.group()
    if following.islower():
        return False
    if match.group().rstrip("'\"’”)]»") != ".":
        return True
    word_start = match.start()
    while word_start > 0 and not text[word_start - 1].isspace():
        word_start -= 1
    word = text[word_start : match.start()].lstrip(_OPENING_PUNCT)
    lowered = word.lower()
    if lowered in _NEVER_FINAL:
        return False
    if len(word) == 1 and word.isupper():
        return False  # an initial: "J. Smith"
    if _DOTTED.fullmatch(lowered) and lowered not in _DOTTED_MAY_END:
        return False  # "U.S. Army"
    return not (lowered in _BEFORE_NUMBER and following.isdigit())


def _sentence_cuts(text: str, start: int, end: int) -> list[int]:
    """Offsets inside [start, end) where one sentence ends and the next may begin."""
    cuts = [m.end() for m in _TERMINAL.finditer(text, start, end) if _ends_sentence(text, m, end)]
    # A newline after a short line or a lead-in is a line break, not a soft wrap.
    line_start = start
    newline = text.find("\n", start, end)
    while newline != -1:
        line = text[line_start:newline].strip()
        visible = _NEXT_VISIBLE.search(text, newline, end)
        if visible is not None and line:
            nxt = visible.group()
            if line.endswith(":") or (len(line) < SHORT_LINE and (nxt.isupper() or nxt.isdigit())):
                cuts.append(newline)
        line_start = newline + 1
        newline = text.find("\n", line_start, end)
    return sorted(set(cuts))


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _pieces(text: str, start: int, end: int, cuts: Sequence[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in zip((start, *cuts), (*cuts, end), strict=True):
        ts, te = _trimmed(text, s, e)
        if ts < te:
            out.append((ts, te))
    return out


def _propositions(
    text: str, blocks: Sequence[_Block], sections: Sequence[int], budget: int, warnings: list[str]
) -> list[_Unit]:
    units: list[_Unit] = []
    for index, block in enumerate(blocks):
        kind, bstart, bend = block.kind, block.start, block.end
        section = sections[index]
        if kind == "prose":
            spans = _pieces(text, bstart, bend, _sentence_cuts(text, bstart, bend))
            unit_kind = "sentence"
        else:
            spans = [_trimmed(text, bstart, bend)]
            unit_kind = kind
        for s, e in spans:
            if not _WORD_CHAR.search(text, s, e):
                continue
            tokens = count_tokens(text[s:e])
            # A heading is never split: it is context, in an atom only as a lead.
            if tokens <= budget or unit_kind == "heading":
                units.append(_unit(text, s, e, tokens, unit_kind, index, section))
                continue
            if unit_kind == "item":
                # A long list item may hold several sentences: cut there first.
                inner = _pieces(text, s, e, _sentence_cuts(text, s, e))
                if len(inner) > 1:
                    for ps, pe in inner:
                        for piece in _split_to_fit(text, ps, pe, budget, 0, warnings):
                            units.append(
                                _unit(text, piece.start, piece.end, piece.tokens, "sentence", index, section)
                            )
                    continue
            for piece in _split_to_fit(text, s, e, budget, 0, warnings):
                units.append(_unit(text, piece.start, piece.end, piece.tokens, "sentence", index, section))
    return units


def _unit(text: str, start: int, end: int, tokens: int, kind: str, block: int, section: int) -> _Unit:
    body = text[start:end]
    words = _WORDS.findall(body)
    leadin = body.endswith(":")
    fragment = len(words) < FRAGMENT_WORDS
    terminated = body.rstrip("'\"’”)]»")[-1:] in (".", "!", "?", "…")
    return _Unit(
        start=start,
        end=end,
        tokens=tokens,
        kind=kind,
        block=block,
        section=section,
        fragment=fragment,
        forward=kind == "heading" or leadin or (fragment and not terminated),
        leadin=leadin,
        anaphoric=bool(words) and words[0].lower() in _ANAPHORA,
    )


# -- 3. over-long propositions ----------------------------------------------------------


def _split_to_fit(
    text: str, start: int, end: int, limit: int, level: int, warnings: list[str]
) -> list[_Span]:
    """Slices of [start, end) of at most ``limit`` tokens each, cut as coarsely as possible."""
    tokens = count_tokens(text[start:end])
    if tokens <= limit:
        return [_Span(start, end, tokens)]
    if level >= len(_LEVEL_NAMES) - 1:
        warnings.append(
            f"proposition at characters {start}..{end} split at character boundaries: "
            f"no word boundary keeps it within {limit} tokens"
        )
        return _split_chars(text, start, end, limit)
    cut = _CLAUSE_CUT if level == 0 else _WORD_CUT
    cuts = [c for m in cut.finditer(text, start, end) for c in (m.start(), m.end())]
    pieces = _pieces(text, start, end, cuts)
    if len(pieces) <= 1:
        return _split_to_fit(text, start, end, limit, level + 1, warnings)
    if level > 0:
        warnings.append(
            f"proposition at characters {start}..{end} split at {_LEVEL_NAMES[level]}: "
            f"no clause boundary keeps it within {limit} tokens"
        )
    fitted = [span for s, e in pieces for span in _split_to_fit(text, s, e, limit, level + 1, warnings)]
    return _pack(text, fitted, limit)


def _split_chars(text: str, start: int, end: int, limit: int) -> list[_Span]:
    out: list[_Span] = []
    pos = start
    while pos < end:
        # Gallop to a window that overflows, then bisect for the longest prefix
        # within the limit; a single character always fits (limit >= 50).
        good, good_tokens = pos + 1, count_tokens(text[pos : pos + 1])
        probe = min(end, pos + max(limit * 4, 1))
        bad = end + 1
        while True:
            n = count_tokens(text[pos:probe])
            if n <= limit:
                good, good_tokens = probe, n
                if probe == end:
                    break
                probe = min(end, pos + (probe - pos) * 2)
            else:
                bad = probe
                break
        while bad - good > 1:
            mid = (good + bad) // 2
            n = count_tokens(text[pos:mid])
            if n <= limit:
                good, good_tokens = mid, n
            else:
                bad = mid
        s, e = _trimmed(text, pos, good)
        if s < e:
            out.append(_Span(s, e, good_tokens if (s, e) == (pos, good) else count_tokens(text[s:e])))
        pos = good
    return out


def _pack(text: str, spans: Sequence[_Span], limit: int) -> list[_Span]:
    """Join adjacent spans into as few slices of at most ``limit`` tokens as possible."""
    joined = _joined(text, spans)
    out: list[_Span] = []
    for i, j in _balanced(joined, limit):
        out.extend(_verified(text, joined, i, j, limit))
    return out


def _joined(text: str, spans: Sequence[_Span]) -> list[_Span]:
    """``spans`` with each one's join cost relative to the span before it."""
    out = list(spans[:1])
    for prev, span in itertools.pairwise(spans):
        join = _join_cost(text, prev.end, span.start)
        out.append(_Span(span.start, span.end, span.tokens, join, span.section))
    return out


def _join_cost(text: str, prev_end: int, start: int) -> int:
    # Tokens never cross cl100k's pre-token boundaries, so what a gap costs
    # depends on the gap and the next word, not on the whole span: counting
    # those few characters twice is far cheaper than recounting joined spans.
    head_end = start
    stop = min(len(text), start + 32)
    while head_end < stop and not text[head_end].isspace():
        head_end += 1
    return _gap_cost(text[prev_end:start], text[start:head_end])


@functools.lru_cache(maxsize=4096)
def _gap_cost(gap: str, head: str) -> int:
    # Gaps and opening words repeat ("\n\n", " The"): caching skips most counts.
    return max(0, count_tokens(gap + head) - count_tokens(head))


def _exact(text: str, spans: Sequence[_Span], i: int, j: int) -> int:
    if i == j:
        return spans[i].tokens
    return count_tokens(text[spans[i].start : spans[j].end])


# -- 4. gluing --------------------------------------------------------------------------


def _glue(text: str, units: Sequence[_Unit], budget: int) -> list[_Span]:
    groups: list[list[_Unit]] = []
    for unit in units:
        if groups:
            group = groups[-1]
            last = group[-1]
            same_section = unit.section == last.section
            under_leadin = unit.kind == "item" and last.kind in ("item", "sentence") and _has_leadin(group)
            same_block = unit.block == last.block
            wanted = same_section and (
                last.forward
                or under_leadin
                or (same_block and (unit.fragment or unit.anaphoric))
                or (same_block and len(group) == 1 and last.fragment)
            )
            if wanted:
                estimate = sum(u.tokens for u in group) + len(group) + unit.tokens
                if estimate <= budget:
                    group.append(unit)
                    continue
        groups.append([unit])
    spans: list[_Span] = []
    for group in groups:
        # Headings are the context of their section's atoms, never an atom alone.
        while group and group[-1].kind == "heading":
            group.pop()
        if not group:
            continue
        first, last = group[0], group[-1]
        tokens = first.tokens if len(group) == 1 else count_tokens(text[first.start : last.end])
        if tokens > budget:
            # The estimate was short; keep the parts apart rather than go over.
            spans.extend(_Span(u.start, u.end, u.tokens, 0, u.section) for u in group if u.kind != "heading")
        else:
            spans.append(_Span(first.start, last.end, tokens, 0, first.section))
    return _joined(text, spans)


def _has_leadin(group: Sequence[_Unit]) -> bool:
    # A list under a lead-in: the lead-in, then nothing but items.
    for index, unit in enumerate(group):
        if unit.leadin:
            return all(u.kind == "item" for u in group[index + 1 :])
    return False


# -- 5. the envelope --------------------------------------------------------------------


def _fit(text: str, glued: list[_Span], singles: list[_Span], budget: int, hard: int) -> list[_Span] | None:
    """At most ten atoms holding the whole text, each within ``budget`` if possible and
    ``hard`` at worst; None when no such atoms exist (the text is then selected from)."""
    candidates = [glued] if len(glued) >= MIN_ATOMS else []
    candidates.append(singles)
    for limit in (budget, hard):
        for items in candidates:
            if len(items) <= MAX_ATOMS:
                return items
            spans = _merge_to_envelope(text, items, limit)
            if spans is not None:
                return spans
    return None


def _greedy(items: Sequence[_Span], limit: int) -> list[tuple[int, int]]:
    groups: list[tuple[int, int]] = []
    i = 0
    while i < len(items):
        j, estimate = i, items[i].tokens
        while (
            j + 1 < len(items)
            and items[j + 1].section == items[i].section
            and estimate + items[j + 1].join + items[j + 1].tokens <= limit
        ):
            j += 1
            estimate += items[j].join + items[j].tokens
        groups.append((i, j))
        i = j + 1
    return groups


def _merge_to_envelope(text: str, items: Sequence[_Span], limit: int) -> list[_Span] | None:
    low = max(item.tokens for item in items)
    if low > limit or len(_greedy(items, limit)) > MAX_ATOMS:
        return None
    # The smallest cap that still yields ten groups or fewer: atoms come out as
    # even as contiguous merging allows.
    high = limit
    while low < high:
        mid = (low + high) // 2
        if len(_greedy(items, mid)) <= MAX_ATOMS:
            high = mid
        else:
            low = mid + 1
    spans: list[_Span] = []
    for i, j in _balanced(items, high):
        spans.extend(_verified(text, items, i, j, limit))
    return spans if len(spans) <= MAX_ATOMS else None


def _balanced(items: Sequence[_Span], cap: int) -> list[tuple[int, int]]:
    """As few groups as greedy needs under ``cap``, with sizes as even as possible.

    Greedy filling leaves the remainder in the last group (32, 32, ..., 8);
    here each group aims at the average of what is left, taking any end that
    still lets the rest fit in the remaining groups.
    """
    n = len(items)
    prefix = [0] * (n + 1)
    for k, item in enumerate(items):
        prefix[k + 1] = prefix[k] + item.join + item.tokens

    def size(i: int, j: int) -> int:  # estimated tokens of items[i..j-1] joined
        return prefix[j] - prefix[i] - items[i].join

    # reach[i]: the largest j with items[i..j-1] within cap; need[i]: groups
    # the suffix items[i:] needs at least (greedy is optimal for suffixes).
    reach = [0] * n
    j = 0
    for i in range(n):
        j = max(j, i + 1)
        while j < n and items[j].section == items[i].section and size(i, j + 1) <= cap:
            j += 1
        reach[i] = j
    need = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        need[i] = 1 + need[reach[i]]
    groups: list[tuple[int, int]] = []
    left = need[0]
    i = 0
    while i < n:
        target = size(i, n) / left
        best = reach[i]
        for end in range(reach[i], i, -1):
            if need[end] > left - 1:
                break
            if abs(size(i, end) - target) <= abs(size(i, best) - target):
                best = end
        groups.append((i, best - 1))
        left -= 1
        i = best
    return groups


def _verified(text: str, items: Sequence[_Span], i: int, j: int, limit: int) -> list[_Span]:
    exact = _exact(text, items, i, j)
    if exact <= limit or i == j:
        return [_Span(items[i].start, items[j].end, exact, 0, items[i].section)]
    middle = (i + j) // 2
    return _verified(text, items, i, middle, limit) + _verified(text, items, middle + 1, j, limit)


# -- 5b. selection ---------------------------------------------------------------------

#: Words that say nothing about what a proposition is about.
_PLAIN: Final = _wordset(
    "a an the and or but if then than that this these those it its is are was were be been being "
    "have has had do does did of to in on at by for with from as into over under after before about "
    "not no nor so such there here which who whom whose what when where why how all any each some "
    "more most other our ours we us you your they them their he she his her i me my will would "
    "can could should shall may might must also only just very"
)


def _weights(text: str, units: Sequence[_Unit]) -> dict[str, float]:
    """How much each content word says: words the document keeps using say more."""
    counts: dict[str, int] = {}
    for u in units:
        for w in _WORDS.findall(text[u.start : u.end]):
            key = w.lower()
            if key not in _PLAIN and len(key) > 1:
                counts[key] = counts.get(key, 0) + 1
    return {w: 1.0 + math.log(n) for w, n in counts.items()}


def _informative(text: str, span: _Span, weights: Mapping[str, float]) -> float:
    seen: set[str] = set()
    score = 0.0
    for w in _WORDS.findall(text[span.start : span.end]):
        key = w.lower()
        if key in seen or key not in weights:
            continue
        seen.add(key)
        # Numbers and names are the facts a later question asks about.
        bonus = 0.5 if any(c.isdigit() for c in w) or w[:1].isupper() else 0.0
        score += weights[key] + bonus
    # Every span is worth something, so a run of plain words still beats nothing.
    return score + 0.01


def _select(text: str, groups: Sequence[_Span], units: Sequence[_Unit], budget: int) -> list[_Span]:
    """Up to ten runs of adjacent groups, each in one section and within ``budget``.

    Chosen to cover as many sections as possible, then to hold the most
    information; runs come back in document order.
    """
    weights = _weights(text, units)
    scores = [_informative(text, g, weights) for g in groups]
    for i, g in enumerate(groups):
        if i == 0 or groups[i - 1].section != g.section:
            scores[i] *= 1.25  # a section's opening proposition says what it is about
    sections: list[list[int]] = []
    for i, g in enumerate(groups):
        if not sections or groups[sections[-1][0]].section != g.section:
            sections.append([])
        sections[-1].append(i)
    coverage = 1.0 + sum(scores)  # one more section always beats any amount of detail
    # With more sections than atoms, the densest sections (information per token) win.
    density = [sum(scores[i] for i in idx) / max(1, sum(groups[i].tokens for i in idx)) for idx in sections]
    densest = max(density)
    bonus = [coverage * (1.0 + d / densest) for d in density]
    tables = [_runs(groups, scores, idx[0], idx[-1] + 1, budget) for idx in sections]
    # A knapsack over sections: best[k] is the best value of k runs in the sections so far.
    none = -math.inf
    best = [0.0] + [none] * MAX_ATOMS
    picks: list[list[int]] = []
    for (value, _), worth in zip(tables, bonus, strict=True):
        nxt = [none] * (MAX_ATOMS + 1)
        pick = [0] * (MAX_ATOMS + 1)
        for k in range(MAX_ATOMS + 1):
            if best[k] == none:
                continue
            for m in range(MAX_ATOMS + 1 - k):
                if value[m] == none:
                    continue
                v = best[k] + value[m] + (worth if m else 0.0)
                if v > nxt[k + m]:
                    nxt[k + m], pick[k + m] = v, m
        best = nxt
        picks.append(pick)
    k = max(range(MAX_ATOMS + 1), key=lambda n: (best[n], -n))
    counts: list[int] = []
    for pick in reversed(picks):
        counts.append(pick[k])
        k -= pick[k]
    counts.reverse()
    chosen: list[_Span] = []
    for (_, runs), m in zip(tables, counts, strict=True):
        for i, j in runs[m]:
            chosen.extend(_verified(text, groups, i, j, budget)[:1])
    return chosen


def _runs(
    groups: Sequence[_Span], scores: Sequence[float], lo: int, hi: int, budget: int
) -> tuple[list[float], list[list[tuple[int, int]]]]:
    """For m = 0..10: the best total score of m disjoint runs in groups[lo:hi], and the runs."""
    n = hi - lo
    none = -math.inf
    size = [0] * (n + 1)  # estimated tokens, joins included, as in _balanced
    gain = [0.0] * (n + 1)
    for k in range(n):
        size[k + 1] = size[k] + groups[lo + k].join + groups[lo + k].tokens
        gain[k + 1] = gain[k] + scores[lo + k]
    top = min(MAX_ATOMS, n)
    # f[i][m]: the best score of m runs within the first i groups; how[i][m] the last run's start
    # (or -1 when group i-1 is left out).
    f = [[none] * (top + 1) for _ in range(n + 1)]
    how = [[-1] * (top + 1) for _ in range(n + 1)]
    f[0][0] = 0.0
    for i in range(1, n + 1):
        row, prev = f[i], f[i - 1]
        for m in range(top + 1):
            row[m] = prev[m]
        t = i - 1
        while t >= 0 and size[i] - size[t] - groups[lo + t].join <= budget:
            value = gain[i] - gain[t]
            base = f[t]
            for m in range(1, top + 1):
                if base[m - 1] != none and base[m - 1] + value > row[m]:
                    row[m] = base[m - 1] + value
                    how[i][m] = t
            t -= 1
    values = [f[n][m] if m <= top else none for m in range(MAX_ATOMS + 1)]
    runs: list[list[tuple[int, int]]] = []
    for m in range(MAX_ATOMS + 1):
        picked: list[tuple[int, int]] = []
        if values[m] != none:
            i, left = n, m
            while left:
                t = how[i][left]
                if t < 0:  # group i-1 was left out
                    i -= 1
                    continue
                picked.append((lo + t, lo + i - 1))
                i, left = t, left - 1
        runs.append(picked[::-1])
    return values, runs


# -- 6. titles ---------------------------------------------------------------------------


def _title(text: str, span: _Span, units: Sequence[_Unit], context: str | None) -> str:
    """The section heading and the opening words of the atom's first proposition."""
    first = next(
        (u for u in units if span.start <= u.start < span.end and u.kind != "heading"),
        None,
    )
    body = text[first.start : first.end] if first is not None else text[span.start : span.end]
    body = _BULLET_MARK.sub("", body, count=1)
    words = _SPACES.sub(" ", body).strip().split(" ")
    lead = " ".join(words[:TITLE_WORDS]).rstrip(",;:.!?…—–-")
    if len(words) > TITLE_WORDS:
        lead += "…"
    title = f"{context}: {lead}" if context else lead
    if len(title) > TITLE_CHARS:
        cut = title.rfind(" ", 0, TITLE_CHARS - 1)
        title = title[: cut if cut > TITLE_CHARS // 2 else TITLE_CHARS - 1].rstrip(",;:.!?…—–- ") + "…"
    return title
