"""Extraction of candidate memories from a captured interaction: the shapes every extractor shares.

An extractor reads one interaction (the user's prompt, the agent's response,
the project it happened in) and proposes candidate memories in up to three
layers:

- ``project``: applied knowledge of the interaction's project;
- ``domain``: earned, generalisable knowledge, with no project and a domain tag;
- ``preference``: who the person is and how they work, with no project.

An extraction either yields an ``Extraction`` (possibly with no candidates:
"nothing worth keeping" is an answer) or an ``ModelFailure`` naming why
it could not answer. Both are values, never exceptions or a silent empty
list, so the substrate records every outcome as an event. Each carries what
replay needs without calling a model again: extractor name and version, the
fingerprint of the instructions it followed, and every raw model output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal, Protocol, runtime_checkable

from mnemolog.curators.outcome import ModelCall, ModelFailure
from mnemolog.eventlog.vocabulary.knowledge import DOMAINS

Layer = Literal["project", "domain", "preference"]
LAYERS: Final[tuple[str, ...]] = ("project", "domain", "preference")

#: Memory kind each layer's candidates are stored as unless the extractor says otherwise.
LAYER_KIND: Final[dict[str, str]] = {"project": "project", "domain": "knowledge", "preference": "user"}

#: Candidates shorter than this say too little to be worth a person's review.
MIN_CANDIDATE_CHARS: Final = 20
#: A candidate longer than this is a passage, not a memory.
MAX_CANDIDATE_CHARS: Final = 1000
#: At most this many candidates from one interaction; extra ones are dropped with a warning.
MAX_CANDIDATES: Final = 8

_WORD: Final = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class InteractionText:
    """What an extractor reads: the exchange and the (canonical) project it happened in."""

    prompt: str
    response: str
    project: str = ""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One proposed memory.

    ``project`` is empty for the domain and preference layers; ``domains``
    holds the domain tags (one for a domain candidate, possibly none
    otherwise). ``rule`` names the rule that produced it (rules extractor) and
    ``source`` which side of the exchange it came from ("prompt" or "response").
    """

    layer: Layer
    content: str
    kind: str
    project: str = ""
    domains: tuple[str, ...] = ()
    confidence: float = 0.5
    rule: str | None = None
    source: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Extraction(ModelCall):
    """The candidates an extractor found, with the record of its model call."""

    candidates: tuple[Candidate, ...]
    extractor: str


ExtractionOutcome = Extraction | ModelFailure


@runtime_checkable
class Extractor(Protocol):
    """Turns one interaction into candidates; never raises for a model's misbehaviour."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def model(self) -> str | None: ...

    def extract(self, interaction: InteractionText, *, max_retries: int = 3) -> ExtractionOutcome: ...


def dedupe_key(candidate: Candidate) -> tuple[str, str]:
    """Two candidates of one interaction with this key in common are one: same layer, same words.

    Only repeats within one extraction are caught here; duplicates of stored
    memories are the triage step's concern, by the memory store's own rule.
    """
    return candidate.layer, " ".join(_WORD.findall(candidate.content.casefold()))


def deduplicated(candidates: list[Candidate]) -> tuple[list[Candidate], int]:
    """``candidates`` without repeats (first kept), and how many were dropped."""
    seen: set[tuple[str, str]] = set()
    out: list[Candidate] = []
    for candidate in candidates:
        key = dedupe_key(candidate)
        if key in seen:
            continue
        seen.add(key)
        out.append(candidate)
    return out, len(candidates) - len(out)


def kept(candidates: list[Candidate], warnings: list[str]) -> list[Candidate]:
    """What an extraction keeps: no repeats, at most MAX_CANDIDATES; each cut noted in ``warnings``."""
    unique, repeats = deduplicated(candidates)
    if repeats:
        warnings.append(f"{repeats} repeated candidate(s) kept once")
    if len(unique) > MAX_CANDIDATES:
        warnings.append(
            f"{len(unique) - MAX_CANDIDATES} candidate(s) past the first {MAX_CANDIDATES} dropped"
        )
        unique = unique[:MAX_CANDIDATES]
    return unique


__all__ = [
    "DOMAINS",
    "LAYERS",
    "LAYER_KIND",
    "MAX_CANDIDATES",
    "MAX_CANDIDATE_CHARS",
    "MIN_CANDIDATE_CHARS",
    "Candidate",
    "Extraction",
    "ExtractionOutcome",
    "Extractor",
    "InteractionText",
    "Layer",
    "deduplicated",
    "kept",
]
