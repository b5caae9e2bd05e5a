"""The rules curator: deterministic, offline atomisation without a model.

Owns the heuristics that stand in for an LLM when none is configured:

1. Blocks. The text is cut into blocks at blank lines (and lines with no
   letter or digit, such as ``---``). A Markdown heading line is a block of its
   own; a bullet or numbered line starts a list-item block that runs on over
   indented continuation lines. Other lines form prose blocks in which a single
   newline is a soft wrap, except after a short line (under 40 characters)
   followed by a capitalised line, or after a line ending in ``:``.
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
4. Gluing, for self-containedness: a heading or a lead-in ending in ``:`` joins
   what follows (a lead-in takes its list items with it), and a fragment
   (under three words) or a sentence opening with a pronoun or connective
   ("It", "This", "However", ...) joins the sentence before it in the same
   block, each only while the result stays within the budget.
5. Envelope. With more than 10 groups, adjacent groups are merged into at most
   10 atoms, minimising the largest atom and then evening out the rest; the
   budget may be exceeded by up to 25% (flagged over budget) only when 10
   atoms cannot hold the text otherwise, and beyond that the curator fails
   with reason ``envelope``.

Every atom is a verbatim slice ``text[start:end]`` of the source (trimmed of
surrounding whitespace, never rewritten or re-spaced), so the engine can always
record a source span; merged atoms keep the source's own whitespace between
their parts. Nothing here depends on time, randomness or the environment: the
same input always gives the same atoms.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from .base import (
    MAX_ATOMS,
    MIN_ATOMS,
    Atom,
    CurationResult,
    CuratorFailed,
    SourceTooSmall,
    check_max_retries,
)
from .tokens import DEFAULT_ATOM_TOKENS, check_max_atom_tokens, count_tokens, tolerated_tokens

#: A line shorter than this that ends without a soft wrap's tell-tale (it is
#: followed by a capitalised line) is a line of its own, such as "Host: db1".
SHORT_LINE: Final = 40
#: Propositions with fewer words than this are fragments and get glued.
FRAGMENT_WORDS: Final = 3

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
        # Atoms are disjoint slices of the text, so a text far beyond ten full
        # atoms cannot fit; say so before splitting megabytes into sentences.
        if total > 2 * MAX_ATOMS * hard:
            raise _envelope_failure(total, budget, hard, needed=-(-total // hard))
        warnings: list[str] = []
        units = _propositions(text, budget, warnings)
        if len(units) < MIN_ATOMS:
            raise SourceTooSmall(
                f"nothing to atomise: expected at least {MIN_ATOMS} propositions, "
                f"found {len(units)} in {len(text)} characters ({total} tokens)",
                propositions=len(units),
                tokens=total,
            )
        glued = _glue(text, units, budget)
        singles = _joined(text, [_Span(u.start, u.end, u.tokens) for u in units])
        spans = _fit(text, glued, singles, budget, hard)
        if spans is None:
            raise _envelope_failure(total, budget, hard, needed=_min_atoms(singles, hard))
        atoms: list[Atom] = []
        for index, span in enumerate(spans):
            over = span.tokens > budget
            if over:
                warnings.append(
                    f"atom {index} kept over budget: {span.tokens} tokens > max_atom_tokens="
                    f"{budget} (ten atoms could not hold the text within budget; limit {hard})"
                )
            atoms.append(Atom(text=text[span.start : span.end], tokens=span.tokens, over_budget=over))
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


def _envelope_failure(total: int, budget: int, hard: int, *, needed: int) -> CuratorFailed:
    return CuratorFailed(
        f"rules curator: the text ({total} tokens) needs at least {needed} atoms at "
        f"max_atom_tokens={budget} "
        f"(at most {hard} tokens per atom with the 25% tolerance), and the envelope allows "
        f"{MIN_ATOMS}..{MAX_ATOMS}; pass a larger max_atom_tokens (up to 1000) or split the "
        "memory first",
        reason="envelope",
        attempts=1,
        tokens=total,
        max_atom_tokens=budget,
        needed_atoms=needed,
    )


# -- 1. blocks --------------------------------------------------------------------------


def _blocks(text: str) -> list[tuple[str, int, int]]:
    """(kind, start, end) for each block; kind is "prose", "item" or "heading"."""
    blocks: list[tuple[str, int, int]] = []
    kind: str | None = None
    start = end = 0
    for line in _LINE.finditer(text):
        ls, le = line.start(), line.end()
        body = line.group()
        if not _WORD_CHAR.search(body):
            if kind is not None:
                blocks.append((kind, start, end))
                kind = None
            continue
        if _HEADING.match(body):
            if kind is not None:
                blocks.append((kind, start, end))
            blocks.append(("heading", ls, le))
            kind = None
            continue
        if _BULLET.match(body):
            if kind is not None:
                blocks.append((kind, start, end))
            kind, start, end = "item", ls, le
            continue
        continues_item = kind == "item" and body[:1] in (" ", "\t")
        if kind == "prose" or continues_item:
            end = le
            continue
        if kind is not None:
            blocks.append((kind, start, end))
        kind, start, end = "prose", ls, le
    if kind is not None:
        blocks.append((kind, start, end))
    return blocks


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


def _propositions(text: str, budget: int, warnings: list[str]) -> list[_Unit]:
    units: list[_Unit] = []
    for block, (kind, bstart, bend) in enumerate(_blocks(text)):
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
            if tokens <= budget:
                units.append(_unit(text, s, e, tokens, unit_kind, block))
                continue
            if unit_kind == "item":
                # A long list item may hold several sentences: cut there first.
                inner = _pieces(text, s, e, _sentence_cuts(text, s, e))
                if len(inner) > 1:
                    for ps, pe in inner:
                        for piece in _split_to_fit(text, ps, pe, budget, 0, warnings):
                            units.append(_unit(text, piece.start, piece.end, piece.tokens, "sentence", block))
                    continue
            for piece in _split_to_fit(text, s, e, budget, 0, warnings):
                units.append(_unit(text, piece.start, piece.end, piece.tokens, "sentence", block))
    return units


def _unit(text: str, start: int, end: int, tokens: int, kind: str, block: int) -> _Unit:
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
        out.append(_Span(span.start, span.end, span.tokens, _join_cost(text, prev.end, span.start)))
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
            under_leadin = unit.kind == "item" and last.kind in ("item", "sentence") and _has_leadin(group)
            same_block = unit.block == last.block
            wanted = (
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
        first, last = group[0], group[-1]
        tokens = first.tokens if len(group) == 1 else count_tokens(text[first.start : last.end])
        if tokens > budget:
            # The estimate was short; keep the parts apart rather than go over.
            spans.extend(_Span(u.start, u.end, u.tokens) for u in group)
        else:
            spans.append(_Span(first.start, last.end, tokens))
    return _joined(text, spans)


def _has_leadin(group: Sequence[_Unit]) -> bool:
    # A list under a lead-in: the lead-in, then nothing but items.
    for index, unit in enumerate(group):
        if unit.leadin:
            return all(u.kind == "item" for u in group[index + 1 :])
    return False


# -- 5. the envelope --------------------------------------------------------------------


def _fit(text: str, glued: list[_Span], singles: list[_Span], budget: int, hard: int) -> list[_Span] | None:
    """At most ten atoms, each within ``budget`` if possible and ``hard`` at worst."""
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
        while j + 1 < len(items) and estimate + items[j + 1].join + items[j + 1].tokens <= limit:
            j += 1
            estimate += items[j].join + items[j].tokens
        groups.append((i, j))
        i = j + 1
    return groups


def _min_atoms(items: Sequence[_Span], limit: int) -> int:
    if any(item.tokens > limit for item in items):
        return len(items)
    return len(_greedy(items, limit))


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
        while j < n and size(i, j + 1) <= cap:
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
        return [_Span(items[i].start, items[j].end, exact)]
    middle = (i + j) // 2
    return _verified(text, items, i, middle, limit) + _verified(text, items, middle + 1, j, limit)
