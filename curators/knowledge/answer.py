"""Reading a model's answer, tolerantly: the one parser for extraction and triage.

The reply is scanned for embedded JSON values left to right (code fences and
prose around them are ignored, as for atomisation, ``curators.parse``); the
first value shaped like the role's answer is the answer, and its fields are
read by the same readers whichever role asked (domains, confidence, project
names), so a repair is made, and worded, the same way in both.

Extraction (``parse_candidates``): the answer is ``{"candidates": [...]}`` or
a bare list of objects. Items are read one by one and repaired where the
intent is plain:

- ``type`` may be project, knowledge or preference (domain, insight, identity
  and user are read as their synonyms); missing or unknown, it is knowledge
  when a known domain is given, else project;
- ``domain`` may be a string or a list; unknown domains are dropped with a
  warning; a knowledge item keeps no project, a project item takes the
  interaction's project when it has one;
- ``confidence`` outside [0, 1] or not a number becomes 0.5, with a warning;
- content is stripped; items without text, or outside the length limits, are
  dropped with a warning; repeats are kept once; at most MAX_CANDIDATES.

An empty list is an answer ("nothing worth keeping"). A reply with items of
which none could be read is malformed, so the caller asks again.

Triage (``parse_verdict``): the first embedded JSON object with a ``verdict``
is the answer; verdict synonyms are accepted ("approve", "accept", "keep"
promote; "discard", "drop" reject; "human", "review", "unsure" need a person;
"conflict", "contradiction" contradict); a confidence that is missing or not
in [0, 1] reads as 0.5 (which never promotes by itself); the reason is cut to
one sentence; unknown domains and malformed project names are dropped with a
warning; a ``contradicts`` that does not name one of the listed memories
becomes ``needs_human``. A reply with no recognisable verdict is malformed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from mnemolog.curators.knowledge.extract import (
    LAYER_KIND,
    MAX_CANDIDATE_CHARS,
    MIN_CANDIDATE_CHARS,
    Candidate,
    Layer,
    kept,
)
from mnemolog.curators.knowledge.triage import TriageItem, one_sentence
from mnemolog.curators.parse import MalformedOutput, first_answer
from mnemolog.eventlog.vocabulary.knowledge import PROJECT_NAME, Verdict

#: What a confidence the model left out, or gave out of range, reads as (never promotes by itself).
DEFAULT_CONFIDENCE: Final = 0.5

# -- the readers both roles use -------------------------------------------------------------


def read_domains(raw: Any, known: Sequence[str], where: str, warnings: list[str]) -> tuple[str, ...]:
    """The known domains ``raw`` names (a string or a list), each once; unknown ones warned and dropped."""
    values = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    out: list[str] = []
    for value in values:
        if not isinstance(value, str) or not value.strip():
            continue
        name = value.strip().strip("[]").lower()
        if name not in known:
            warnings.append(f"{where} names unknown domain {value[:40]!r}: tag dropped")
            continue
        if name not in out:
            out.append(name)
    return tuple(out)


def read_confidence(raw: Any, where: str, warnings: list[str], *, required: bool) -> float:
    """``raw`` if a number in [0, 1], else DEFAULT_CONFIDENCE (warned unless left out, not ``required``)."""
    if raw is None and not required:
        return DEFAULT_CONFIDENCE
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0.0 <= float(raw) <= 1.0:
        warnings.append(f"{where} has confidence {str(raw)[:20]!r}, not a number in [0, 1]: read as 0.5")
        return DEFAULT_CONFIDENCE
    return float(raw)


def read_project(raw: Any, where: str, warnings: list[str], *, otherwise: str) -> str:
    """The project ``raw`` names ("" if blank); ``otherwise`` if it names none, or an invalid one (warned)."""
    if not isinstance(raw, str):
        return otherwise
    if not raw.strip():
        return ""
    if PROJECT_NAME.fullmatch(raw.strip()) is None:
        warnings.append(
            f"{where} names project {raw[:40]!r}, not a valid project name: "
            + (f"kept {otherwise!r}" if otherwise else "left empty")
        )
        return otherwise
    return raw.strip()


# -- extraction ----------------------------------------------------------------------------

_TYPE_SYNONYMS: Final[dict[str, Layer]] = {
    "project": "project",
    "knowledge": "domain",
    "domain": "domain",
    "insight": "domain",
    "preference": "preference",
    "identity": "preference",
    "user": "preference",
}

_CANDIDATES_SHAPE: Final = (
    'a JSON object {"candidates": [{"type", "content", "project", "domain", "confidence"}, ...]}'
)


@dataclass(frozen=True, slots=True)
class ParsedCandidates:
    candidates: tuple[Candidate, ...]
    warnings: tuple[str, ...]


def parse_candidates(content: str, *, project: str, domains: Sequence[str]) -> ParsedCandidates:
    """The candidates in ``content``, or MalformedOutput saying what was found instead."""

    def read(value: Any) -> tuple[ParsedCandidates | None, str]:
        items, problem = _items(value)
        if items is None:
            return None, problem
        return _read_items(items, project=project, domains=domains), ""

    return first_answer(content, _CANDIDATES_SHAPE, read)


def _items(value: Any) -> tuple[list[Any] | None, str]:
    if isinstance(value, dict):
        if "candidates" not in value:
            return None, f"a JSON object with keys {sorted(map(str, value))[:8]!r} and no 'candidates'"
        items = value["candidates"]
        if not isinstance(items, list):
            return None, f"'candidates' holding {type(items).__name__}, not a list"
        return items, ""
    if isinstance(value, list):
        if all(isinstance(item, dict) for item in value):
            return value, ""
        return None, "a JSON list whose items are not all objects"
    return None, f"a JSON {type(value).__name__}"


def _read_items(items: list[Any], *, project: str, domains: Sequence[str]) -> ParsedCandidates:
    warnings: list[str] = []
    out: list[Candidate] = []
    for index, item in enumerate(items):
        candidate = _read_item(index, item, project=project, domains=domains, warnings=warnings)
        if candidate is not None:
            out.append(candidate)
    if items and not out:
        raise MalformedOutput(
            f"expected {_CANDIDATES_SHAPE}; found {len(items)} item(s) and none usable "
            f"({'; '.join(warnings[:3])})"
        )
    unique = kept(out, warnings)
    return ParsedCandidates(tuple(unique), tuple(warnings))


def _read_item(
    index: int, item: Any, *, project: str, domains: Sequence[str], warnings: list[str]
) -> Candidate | None:
    where = f"item {index}"
    if not isinstance(item, dict):
        warnings.append(f"{where} is a {type(item).__name__}, not an object: dropped")
        return None
    text = item.get("content")
    if not isinstance(text, str) or not text.strip():
        warnings.append(f"{where} has no text in 'content': dropped")
        return None
    text = " ".join(text.split())
    if not MIN_CANDIDATE_CHARS <= len(text) <= MAX_CANDIDATE_CHARS:
        warnings.append(
            f"{where} is {len(text)} characters, "
            f"outside {MIN_CANDIDATE_CHARS}..{MAX_CANDIDATE_CHARS}: dropped"
        )
        return None
    tags = read_domains(item.get("domain", item.get("domains")), domains, where, warnings)
    raw_type = item.get("type")
    layer = _TYPE_SYNONYMS.get(raw_type.strip().lower()) if isinstance(raw_type, str) else None
    if layer is None:
        layer = "domain" if tags else "project"
        if raw_type not in (None, ""):
            warnings.append(f"{where} has unknown type {str(raw_type)[:40]!r}: read as {layer}")
    confidence = read_confidence(item.get("confidence"), where, warnings, required=False)
    if layer == "domain":
        if not tags:
            warnings.append(f"{where} is knowledge without a known domain: kept untagged for triage")
        return Candidate(
            layer="domain",
            content=text,
            kind=LAYER_KIND["domain"],
            project="",
            domains=tags[:1],
            confidence=confidence,
        )
    if layer == "preference":
        return Candidate(
            layer="preference", content=text, kind=LAYER_KIND["preference"], project="", confidence=confidence
        )
    chosen = project or read_project(item.get("project"), where, warnings, otherwise="")
    return Candidate(
        layer="project",
        content=text,
        kind=LAYER_KIND["project"],
        project=chosen,
        domains=tags,
        confidence=confidence,
    )


# -- triage --------------------------------------------------------------------------------

_SYNONYMS: Final[dict[str, Verdict]] = {
    "promote": "promote",
    "approve": "promote",
    "accept": "promote",
    "keep": "promote",
    "reject": "reject",
    "discard": "reject",
    "drop": "reject",
    "needs_human": "needs_human",
    "needs human": "needs_human",
    "needs-human": "needs_human",
    "human": "needs_human",
    "review": "needs_human",
    "unsure": "needs_human",
    "contradicts": "contradicts",
    "contradict": "contradicts",
    "contradiction": "contradicts",
    "conflict": "contradicts",
    "conflicts": "contradicts",
}
_VERDICT_SHAPE: Final = (
    'a JSON object {"verdict", "confidence", "reason", "project", "domains", "conflicts_with"}'
)


@dataclass(frozen=True, slots=True)
class ParsedVerdict:
    verdict: Verdict
    confidence: float
    reason: str
    project: str
    domains: tuple[str, ...]
    conflicts_with: str | None
    warnings: tuple[str, ...]


def parse_verdict(content: str, *, item: TriageItem, domains: Sequence[str]) -> ParsedVerdict:
    """The verdict in ``content``, or MalformedOutput saying what was found instead."""

    def read(value: Any) -> tuple[ParsedVerdict | None, str]:
        if not isinstance(value, dict):
            return None, f"a JSON {type(value).__name__}"
        raw = value.get("verdict")
        verdict = _SYNONYMS.get(raw.strip().lower()) if isinstance(raw, str) else None
        if verdict is None:
            return None, (
                f"a JSON object whose verdict is {str(raw)[:40]!r}"
                if "verdict" in value
                else f"a JSON object with keys {sorted(map(str, value))[:8]!r} and no 'verdict'"
            )
        return _read_verdict(value, verdict, item=item, domains=domains), ""

    return first_answer(content, _VERDICT_SHAPE, read)


def _read_verdict(
    value: dict[str, Any], verdict: Verdict, *, item: TriageItem, domains: Sequence[str]
) -> ParsedVerdict:
    warnings: list[str] = []
    confidence = read_confidence(value.get("confidence"), "the verdict", warnings, required=True)
    raw_reason = value.get("reason")
    reason = one_sentence(raw_reason) if isinstance(raw_reason, str) else ""
    if not reason:
        warnings.append("no reason given")
        reason = "(the model gave no reason)"
    project = read_project(value.get("project"), "the verdict", warnings, otherwise=item.project)
    tags = read_domains(value.get("domains", value.get("domain")), domains, "the verdict", warnings)
    if not tags and value.get("domains") is None and value.get("domain") is None:
        tags = item.domains
    conflicts_with: str | None = None
    raw_conflict = value.get("conflicts_with")
    if verdict == "contradicts":
        ids = {n.id for n in item.neighbours}
        if isinstance(raw_conflict, str) and raw_conflict.strip() in ids:
            conflicts_with = raw_conflict.strip()
        else:
            warnings.append(
                f"verdict contradicts names {str(raw_conflict)[:40]!r}, not one of the memories shown: "
                "read as needs_human"
            )
            verdict = "needs_human"
    return ParsedVerdict(verdict, confidence, reason, project, tags, conflicts_with, tuple(warnings))


__all__ = [
    "DEFAULT_CONFIDENCE",
    "ParsedCandidates",
    "ParsedVerdict",
    "parse_candidates",
    "parse_verdict",
    "read_confidence",
    "read_domains",
    "read_project",
]
