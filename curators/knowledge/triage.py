"""Triage of candidate memories: the shapes every triager shares, and what a verdict leads to.

A triager reads one candidate (with the active memories most like it) and
gives a verdict: ``promote``, ``reject``, ``needs_human``, or ``contradicts``
(naming the memory it conflicts with), with a confidence, a one-sentence
reason, and the project and domain tags it suggests. Like extraction, an
attempt that yields no verdict is a value (``ModelFailure``), never an
exception or a silence: the candidate stays queued and is counted.

``decide`` is the one rule for what happens next. Only a ``promote`` verdict
at or above the promotion threshold, for a candidate with no duplicate among
active memories, promotes by itself; a ``reject`` verdict rejects;
everything else waits for a person.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

from mnemolog.curators.outcome import ModelCall, ModelFailure
from mnemolog.eventlog.errors import BadInput
from mnemolog.eventlog.vocabulary.knowledge import Action, Verdict

#: A reason longer than this is cut at a word boundary.
MAX_REASON_CHARS: Final = 300


@dataclass(frozen=True, slots=True)
class Neighbour:
    """An active memory like the candidate.

    ``share`` is the part of the candidate's terms it holds, ``coverage`` the
    part of its own terms the candidate holds (both high: they say the same
    thing), ``similarity`` the cosine of their embeddings when the home embeds.
    """

    id: str
    content: str
    project: str = ""
    share: float = 0.0
    coverage: float = 0.0
    similarity: float | None = None


@dataclass(frozen=True, slots=True)
class TriageItem:
    """What a triager reads about one candidate."""

    candidate_id: str
    content: str
    layer: str
    kind: str
    project: str = ""
    domains: tuple[str, ...] = ()
    confidence: float = 0.5
    extractor: str = ""
    rule: str | None = None
    neighbours: tuple[Neighbour, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TriageVerdict(ModelCall):
    """A triager's verdict on one candidate, with the record of its model call."""

    verdict: Verdict
    confidence: float
    reason: str
    project: str
    domains: tuple[str, ...]
    triager: str
    conflicts_with: str | None = None
    #: An active memory the triager found saying the same thing (the rules triager's agreement).
    duplicate_of: str | None = None


TriageOutcome = TriageVerdict | ModelFailure


@runtime_checkable
class Triager(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def model(self) -> str | None: ...

    def triage(self, item: TriageItem, *, max_retries: int = 3) -> TriageOutcome: ...


@dataclass(frozen=True, slots=True)
class TriagePolicy:
    """The thresholds of automatic decisions; recorded in every verdict's event."""

    promote_confidence: float = 0.8
    duplicate_similarity: float = 0.92

    def __post_init__(self) -> None:
        for name in ("promote_confidence", "duplicate_similarity"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, float | int) or not 0.0 <= value <= 1.0:
                raise BadInput(f"triage {name} must be in [0, 1]; found {value!r}")

    def to_data(self) -> dict[str, Any]:
        return {
            "promote_confidence": self.promote_confidence,
            "duplicate_similarity": self.duplicate_similarity,
        }


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    why: str


def decide(verdict: TriageVerdict, *, policy: TriagePolicy, duplicate_of: str | None = None) -> Decision:
    """What a verdict leads to: promote, reject, or wait for a person (and why)."""
    if verdict.verdict == "reject":
        return Decision("reject", f"rejected by {verdict.triager}: {verdict.reason}")
    if verdict.verdict == "contradicts":
        return Decision("wait", f"contradicts memory {verdict.conflicts_with}: a person decides which holds")
    if verdict.verdict == "needs_human":
        return Decision("wait", f"{verdict.triager} asks for a person: {verdict.reason}")
    if duplicate_of is not None:
        return Decision("wait", f"duplicates active memory {duplicate_of}")
    if verdict.confidence < policy.promote_confidence:
        return Decision(
            "wait",
            f"confidence {verdict.confidence:.2f} is below the promotion threshold "
            f"{policy.promote_confidence:.2f}",
        )
    return Decision("promote", f"promoted by {verdict.triager} at confidence {verdict.confidence:.2f}")


def one_sentence(text: str) -> str:
    """The first sentence of ``text``, on one line, at most MAX_REASON_CHARS characters."""
    flat = " ".join(text.split())
    for i, ch in enumerate(flat):
        if ch in ".!?" and (i + 1 == len(flat) or flat[i + 1] == " ") and i + 1 >= 12:
            flat = flat[: i + 1]
            break
    if len(flat) > MAX_REASON_CHARS:
        cut = flat[: MAX_REASON_CHARS - 1]
        flat = (cut.rsplit(" ", 1)[0] if " " in cut else cut) + "…"
    return flat
