"""Reading candidate memories out of a model's reply, tolerantly.

The reply is scanned for embedded JSON values left to right (code fences and
prose around them are ignored, as for atomisation); the first value shaped
like ``{"candidates": [...]}`` or a bare list of objects is the answer. Items
are then read one by one and repaired where the intent is plain:

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
from mnemolog.curators.parse import MalformedOutput, first_answer
from mnemolog.eventlog.vocabulary.knowledge import PROJECT_NAME

DEFAULT_CONFIDENCE: Final = 0.5

_TYPE_SYNONYMS: Final[dict[str, Layer]] = {
    "project": "project",
    "knowledge": "domain",
    "domain": "domain",
    "insight": "domain",
    "preference": "preference",
    "identity": "preference",
    "user": "preference",
}

_SHAPE: Final = 'a JSON object {"candidates": [{"type", "content", "project", "domain", "confidence"}, ...]}'


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

    return first_answer(content, _SHAPE, read)


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
            f"expected {_SHAPE}; found {len(items)} item(s) and none usable ({'; '.join(warnings[:3])})"
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
    tags = _domains(item.get("domain", item.get("domains")), domains, where, warnings)
    raw_type = item.get("type")
    layer = _TYPE_SYNONYMS.get(raw_type.strip().lower()) if isinstance(raw_type, str) else None
    if layer is None:
        layer = "domain" if tags else "project"
        if raw_type not in (None, ""):
            warnings.append(f"{where} has unknown type {str(raw_type)[:40]!r}: read as {layer}")
    confidence = _confidence(item.get("confidence"), where, warnings)
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
    chosen = project or _named_project(item.get("project"), where, warnings)
    return Candidate(
        layer="project",
        content=text,
        kind=LAYER_KIND["project"],
        project=chosen,
        domains=tags,
        confidence=confidence,
    )


def _named_project(raw: Any, where: str, warnings: list[str]) -> str:
    if not isinstance(raw, str) or not raw.strip():
        return ""
    if PROJECT_NAME.fullmatch(raw.strip()) is None:
        warnings.append(f"{where} names project {raw[:40]!r}, not a valid project name: left empty")
        return ""
    return raw.strip()


def _domains(raw: Any, known: Sequence[str], where: str, warnings: list[str]) -> tuple[str, ...]:
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


def _confidence(raw: Any, where: str, warnings: list[str]) -> float:
    if raw is None:
        return DEFAULT_CONFIDENCE
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0.0 <= float(raw) <= 1.0:
        warnings.append(f"{where} has confidence {str(raw)[:20]!r}, not a number in [0, 1]: read as 0.5")
        return DEFAULT_CONFIDENCE
    return float(raw)
