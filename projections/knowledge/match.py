"""When a response echoes a memory: the reinforcement matcher, and text equality for duplicates.

Owns
- ``words``: the recall tokenizer's notion of a word (same separators, same
  lowercasing and accent stripping, same length cap), computed in Python;
- ``terms``: a text's distinct words without stop words, each reduced by a
  small suffix-stripping stemmer (``stem``), so "decided" and "decides" meet;
- ``echo``: whether a response reinforces a memory. A memory matches when
  the response contains at least ``min_share`` of the memory's terms (the
  short mode), or, for a memory of more than ``long_after`` terms, at least
  ``long_min_overlap`` of them making up at least ``long_min_share`` (the long
  mode: a long memory is rarely repeated whole);
- ``normalised``: the text two memories must share to be duplicates.

The stop words and separators are imported from ``projections.text``, their
one home; the stemmer is deliberately simpler than the Snowball stemmer recall
uses in SQL, because it runs in Python over every captured response.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

from mnemolog.eventlog.errors import BadInput
from mnemolog.projections.recall.text import MAX_TERM_LEN, SEPARATOR_RANGES, STOP_WORDS


def _python_class(ranges: tuple[tuple[int, int], ...]) -> str:
    parts = []
    for lo, hi in ranges:
        parts.append(re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}")
    return "[" + "".join(parts) + "]+"


_SEPARATORS: Final = re.compile(_python_class(SEPARATOR_RANGES))
_STOP: Final = frozenset(STOP_WORDS)
_VOWELS: Final = frozenset("aeiouy")


def _fold(text: str) -> str:
    # Lowercase, then drop combining marks after NFKD: "Café" and "cafe" are one word.
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def words(text: str) -> list[str]:
    """The words of ``text`` in order (lowercased, accents stripped, overlong words dropped)."""
    return [w for w in _SEPARATORS.split(_fold(text)) if w and len(w) <= MAX_TERM_LEN]


def stem(word: str) -> str:
    """A light English stem: plural, -ing/-ed, -ly and a final e come off; digits are left alone."""
    if len(word) <= 3 or not word.isalpha():
        return word
    w = word
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    for suffix in ("ing", "ed"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3 and _VOWELS & set(w[: -len(suffix)]):
            w = w[: -len(suffix)]
            if len(w) >= 3 and w[-1] == w[-2] and w[-1] not in "lsz" and w[-1] not in _VOWELS:
                w = w[:-1]
            break
    if w.endswith("ly") and len(w) >= 5:
        w = w[:-2]
    if w.endswith("e") and len(w) >= 5:
        w = w[:-1]
    return w


def terms(text: str) -> frozenset[str]:
    """The distinct stemmed non-stop words of ``text``."""
    return frozenset(stem(w) for w in words(text) if w not in _STOP)


def normalised(text: str) -> str:
    """``text`` as its words joined by single spaces: equal for duplicates that differ only in
    case, accents, punctuation or spacing."""
    return " ".join(words(text))


# -- reinforcement ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReinforcePolicy:
    """The matcher's thresholds and the confidence step; recorded in every reinforcement."""

    min_share: float = 0.70
    long_after: int = 15
    long_min_overlap: int = 12
    long_min_share: float = 0.35
    step: float = 0.02

    def __post_init__(self) -> None:
        for name in ("min_share", "long_min_share", "step"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, float | int) or not 0.0 <= value <= 1.0:
                raise BadInput(f"reinforcement {name} must be in [0, 1]; found {value!r}")
        for name in ("long_after", "long_min_overlap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise BadInput(f"reinforcement {name} must be an integer >= 0; found {value!r}")

    def to_data(self) -> dict[str, Any]:
        return {
            "min_share": self.min_share,
            "long_after": self.long_after,
            "long_min_overlap": self.long_min_overlap,
            "long_min_share": self.long_min_share,
            "step": self.step,
        }


EchoMode = Literal["short", "long"]


@dataclass(frozen=True, slots=True)
class Echo:
    """How a response matched a memory: shared terms, the memory's term count, the mode."""

    overlap: int
    size: int
    mode: EchoMode

    @property
    def share(self) -> float:
        return self.overlap / self.size


def echo(memory: frozenset[str], response: frozenset[str], policy: ReinforcePolicy) -> Echo | None:
    """The match of a memory's terms in a response's terms, or None when the response does not echo it."""
    size = len(memory)
    if size == 0:
        return None
    overlap = len(memory & response)
    if overlap / size >= policy.min_share:
        return Echo(overlap, size, "short")
    if (
        size > policy.long_after
        and overlap >= policy.long_min_overlap
        and overlap / size >= policy.long_min_share
    ):
        return Echo(overlap, size, "long")
    return None


def echoed(
    memories: Iterable[tuple[str, str]], response: str, policy: ReinforcePolicy
) -> list[tuple[str, Echo]]:
    """The (id, match) of every memory in ``memories`` (id, text) that ``response`` echoes, in order."""
    response_terms = terms(response)
    out: list[tuple[str, Echo]] = []
    for memory_id, text in memories:
        match = echo(terms(text), response_terms, policy)
        if match is not None:
            out.append((memory_id, match))
    return out
