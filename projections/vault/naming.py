"""File names in a vault: atomic notes, wiki pages, indexes, and topic slugs.

The vault format's conventions (docs/vault.md, Naming), as exact patterns (TOPIC is
lowercase ASCII snake_case, `[a-z0-9]+(_[a-z0-9]+)*`):

- evergreen note      `{type}_{TOPIC}.md`                  feedback_debt_priority_order.md
- time-bounded note   `{type}_{YYYY}_{TOPIC}.md`           decision_2026_income_target.md
                      `{type}_{YYYY}-q{1-4}_{TOPIC}.md`    decision_2026-q3_income_target.md
                      `{type}_{YYYY}_{month}_{TOPIC}.md`   project_2026_april_consulting_launch.md
- wiki page           `{TOPIC}.md`, versioned `{TOPIC}_{YYYY}.md`
- indexes             `INDEX.md`, sub-indexes `INDEX_{slice}.md`

The quarter is lowercase (`-q3`): the format's examples and the reference
validator agree on that, and the reference rejects `-Q3`. A date scope on an
evergreen type (user, feedback, reference) and a topic outside 2-5 words are
style warnings, not errors: the format leaves names to the operator's style.

Pure functions only.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace
from datetime import date, timedelta
from typing import Final, Literal, TypeVar

from mnemolog.projections.recall.text import MONTH_NAMES

NOTE_TYPES: Final = ("user", "feedback", "project", "decision", "reference")
EVERGREEN_TYPES: Final = frozenset({"user", "feedback", "reference"})
#: Month names as note names spell them (lowercase English, whatever the locale).
MONTHS: Final = tuple(m.lower() for m in MONTH_NAMES)
INDEX_FILENAME: Final = "INDEX.md"
MIN_TOPIC_WORDS: Final = 2
MAX_TOPIC_WORDS: Final = 5
# Long enough to stay specific, short enough that five words plus prefix and
# scope stay far below the 255-byte file name limit.
MAX_WORD_CHARS: Final = 32
SUFFIX_HEX: Final = 6

TOPIC_PATTERN: Final = r"[a-z0-9]+(?:_[a-z0-9]+)*"
_TOPIC_RE = re.compile(TOPIC_PATTERN)
_NOTE_RE = re.compile(
    r"(?P<type>" + "|".join(NOTE_TYPES) + r")_"
    r"(?:(?P<year>\d{4})(?:-q(?P<quarter>[1-4])|_(?P<month>" + "|".join(MONTHS) + r"))?_)?"
    r"(?P<topic>" + TOPIC_PATTERN + r")\.md"
)
_INDEX_RE = re.compile(r"INDEX(?:_(?P<slice>" + TOPIC_PATTERN + r"))?\.md")
_STOPWORDS: Final = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "in",
        "into",
        "is",
        "it",
        "of",
        "on",
        "or",
        "over",
        "that",
        "the",
        "this",
        "to",
        "with",
    ]
)

Severity = Literal["error", "warning"]


@dataclass(frozen=True, order=True)
class Scope:
    """The validity window a time-bounded filename carries: a year, a quarter or a month."""

    year: int
    quarter: int | None = None
    month: int | None = None

    def __str__(self) -> str:
        if self.quarter is not None:
            return f"{self.year:04d}-q{self.quarter}"
        if self.month is not None:
            return f"{self.year:04d}_{MONTHS[self.month - 1]}"
        return f"{self.year:04d}"

    @classmethod
    def from_expiry(cls, expires_at: date) -> Scope:
        """The narrowest window whose last day is `expires_at` (the last valid day).

        Dec 31 names the year, the last day of a quarter names the quarter, any
        other date names its month: a Q3 2026 target expiring 2026-09-30 becomes
        `2026-q3`, a launch expiring 2026-04-17 becomes `2026_april`.
        """
        next_day = expires_at + timedelta(days=1)
        if expires_at.month == 12 and expires_at.day == 31:
            return cls(expires_at.year)
        if next_day.day == 1 and expires_at.month % 3 == 0:
            return cls(expires_at.year, quarter=expires_at.month // 3)
        return cls(expires_at.year, month=expires_at.month)


@dataclass(frozen=True)
class NoteName:
    type: str
    topic: str
    scope: Scope | None = None

    @property
    def filename(self) -> str:
        scope = f"{self.scope}_" if self.scope is not None else ""
        return f"{self.type}_{scope}{self.topic}.md"

    def with_topic(self, topic: str) -> NoteName:
        return replace(self, topic=topic)


@dataclass(frozen=True)
class WikiName:
    topic: str
    year: int | None = None

    @property
    def filename(self) -> str:
        return f"{self.topic}_{self.year:04d}.md" if self.year is not None else f"{self.topic}.md"

    def with_topic(self, topic: str) -> WikiName:
        return replace(self, topic=topic)


def parse_note_filename(name: str) -> NoteName | None:
    """The parts of an atomic note filename, or None when it matches no note pattern."""
    m = _NOTE_RE.fullmatch(name)
    if m is None:
        return None
    scope = None
    if m["year"] is not None:
        quarter = int(m["quarter"]) if m["quarter"] else None
        month = MONTHS.index(m["month"]) + 1 if m["month"] else None
        scope = Scope(int(m["year"]), quarter=quarter, month=month)
    return NoteName(m["type"], m["topic"], scope)


def parse_wiki_filename(name: str) -> WikiName | None:
    """The topic (and version year) of a wiki page filename, or None."""
    if not name.endswith(".md") or not _TOPIC_RE.fullmatch(name[:-3]):
        return None
    words = name[:-3].split("_")
    if len(words) > 1 and re.fullmatch(r"\d{4}", words[-1]):
        return WikiName("_".join(words[:-1]), int(words[-1]))
    return WikiName(name[:-3])


def index_slice(name: str) -> str | None:
    """'' for INDEX.md, the slice for INDEX_{slice}.md, None for anything else."""
    m = _INDEX_RE.fullmatch(name)
    if m is None:
        return None
    return m["slice"] or ""


def is_index_filename(name: str) -> bool:
    return index_slice(name) is not None


def index_filename(slice_name: str = "") -> str:
    if slice_name and not _TOPIC_RE.fullmatch(slice_name):
        raise ValueError(f"index slice must be snake_case, found {slice_name!r}")
    return f"INDEX_{slice_name}.md" if slice_name else INDEX_FILENAME


def _topic_words(topic: str) -> int:
    return len(topic.split("_"))


def check_note_filename(filename: str, declared_type: str | None) -> list[tuple[str, str, Severity]]:
    """Filename rules for a note: the pattern, the prefix agreeing with `type`, style hints."""
    parsed = parse_note_filename(filename)
    if parsed is None:
        return [
            (
                "filename",
                f"expected {{type}}_[YYYY[-q#]_]{{topic}}.md with a lowercase snake_case "
                f"topic, found {filename!r}",
                "error",
            )
        ]
    out: list[tuple[str, str, Severity]] = []
    if declared_type in NOTE_TYPES and parsed.type != declared_type:
        out.append(
            (
                "filename",
                f"prefix {parsed.type!r} disagrees with type {declared_type!r}",
                "error",
            )
        )
    if parsed.scope is not None and parsed.type in EVERGREEN_TYPES:
        out.append(
            (
                "filename",
                f"{parsed.type} notes are evergreen; a date scope ({parsed.scope}) is meant "
                "for time-bounded decisions and projects",
                "warning",
            )
        )
    n = _topic_words(parsed.topic)
    if not MIN_TOPIC_WORDS <= n <= MAX_TOPIC_WORDS:
        out.append(
            (
                "filename",
                f"topic should be {MIN_TOPIC_WORDS}-{MAX_TOPIC_WORDS} words, found {n} in {parsed.topic!r}",
                "warning",
            )
        )
    return out


def check_wiki_filename(filename: str) -> list[tuple[str, str, Severity]]:
    parsed = parse_wiki_filename(filename)
    if parsed is None:
        return [
            (
                "filename",
                f"expected {{topic}}.md or {{topic}}_{{YYYY}}.md with a lowercase snake_case "
                f"topic, found {filename!r}",
                "error",
            )
        ]
    return []


def _ascii_words(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return [w[:MAX_WORD_CHARS] for w in re.split(r"[^a-z0-9]+", folded.lower()) if w]


def slugify_topic(text: str, *, max_words: int = MAX_TOPIC_WORDS) -> str:
    """A lowercase ASCII snake_case topic of 2 to `max_words` words for a title.

    Accents fold to ASCII (Café → cafe), other characters separate words.
    Stop words go first when the title is too long to fit, so the topic keeps
    the words that make it specific. A one-word title gets `note` appended and
    a title with no ASCII letters at all becomes `untitled_note`. A leading
    four-digit word gets `about_` in front, so it never reads as a date scope.
    """
    words = _ascii_words(text)
    if len(words) > max_words:
        content = [w for w in words if w not in _STOPWORDS]
        words = content if len(content) >= MIN_TOPIC_WORDS else words
    if words and re.fullmatch(r"\d{4}", words[0]):
        words = ["about", *words]
    words = words[:max_words]
    if not words or words == ["note"]:
        words = ["untitled", "note"]
    elif len(words) == 1:
        words = [*words, "note"]
    return "_".join(words)


def suffix_for(key: str, length: int = SUFFIX_HEX) -> str:
    """The deterministic disambiguation suffix of a record: hex of SHA-256 of its id."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:length]


def _suffixed(topic: str, suffix: str) -> str:
    return "_".join([*topic.split("_")[: MAX_TOPIC_WORDS - 1], suffix])


N = TypeVar("N", NoteName, WikiName)
K = TypeVar("K", bound=Hashable)


def unique_filenames(items: Sequence[tuple[str, N, K]]) -> dict[str, str]:
    """Give every (key, name, order) a filename unique among `items`.

    When names collide, the item first in `order` (callers pass
    (captured, memory_id)) keeps the plain name and each later one gets the
    first 6 hex digits of SHA-256(key) as its last topic word, lengthened
    until unique. The result depends only on the set of items, and a
    memory captured later than an existing one never renames it.
    """
    groups: dict[str, list[tuple[K, str, N]]] = defaultdict(list)
    for key, name, order in items:
        groups[name.filename].append((order, key, name))
    result: dict[str, str] = {}
    taken: set[str] = set()
    later: list[tuple[K, str, N]] = []
    for filename, members in groups.items():
        members.sort()
        _, first_key, _ = members[0]
        if first_key in result:
            raise ValueError(f"duplicate key {first_key!r}")
        result[first_key] = filename
        taken.add(filename)
        later.extend(members[1:])
    for _, key, name in sorted(later, key=lambda m: m[1]):
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        length = SUFFIX_HEX
        while True:
            if length <= 64:
                candidate = name.with_topic(_suffixed(name.topic, suffix_for(key, length))).filename
            else:  # 64 hex digits collided: only a hostile key set gets here
                candidate = name.with_topic(
                    _suffixed(name.topic, f"{suffix_for(key, 64)}{length - 64}")
                ).filename
            if candidate not in taken:
                break
            length += 2
        taken.add(candidate)
        result[key] = candidate
    return result
