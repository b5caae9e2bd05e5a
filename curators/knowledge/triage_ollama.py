"""The LLM triager: a verdict on one candidate, by a model served by Ollama.

The reply is read tolerantly (``parse_verdict``): the first embedded JSON
object with a ``verdict`` is the answer; verdict synonyms are accepted
("approve", "accept", "keep" promote; "discard", "drop" reject; "human",
"review", "unsure" need a person; "conflict", "contradiction" contradict);
a confidence that is missing or not in [0, 1] reads as 0.5 (which never
promotes by itself); the reason is cut to one sentence; unknown domains and
malformed project names are dropped with a warning; a ``contradicts`` that
does not name one of the listed memories becomes ``needs_human``. A reply
with no recognisable verdict is malformed, and is asked again under the
curator's retry rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from mnemolog.curators.knowledge.triage import TriageItem, TriageOutcome, TriageVerdict, one_sentence
from mnemolog.curators.knowledge.triage_prompt import prompt_sha256, render_messages, triage_schema
from mnemolog.curators.ollama_ask import DomainAsker, Failed
from mnemolog.curators.parse import first_answer
from mnemolog.eventlog.vocabulary.knowledge import PROJECT_NAME, Verdict

VERSION: Final = "1"

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
_SHAPE: Final = 'a JSON object {"verdict", "confidence", "reason", "project", "domains", "conflicts_with"}'


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
        return _read(value, verdict, item=item, domains=domains), ""

    return first_answer(content, _SHAPE, read)


def _read(
    value: dict[str, Any], verdict: Verdict, *, item: TriageItem, domains: Sequence[str]
) -> ParsedVerdict:
    warnings: list[str] = []
    raw_conf = value.get("confidence")
    if (
        isinstance(raw_conf, bool)
        or not isinstance(raw_conf, int | float)
        or not 0.0 <= float(raw_conf) <= 1.0
    ):
        warnings.append(f"confidence {str(raw_conf)[:20]!r} is not a number in [0, 1]: read as 0.5")
        confidence = 0.5
    else:
        confidence = float(raw_conf)
    raw_reason = value.get("reason")
    reason = one_sentence(raw_reason) if isinstance(raw_reason, str) else ""
    if not reason:
        warnings.append("no reason given")
        reason = "(the model gave no reason)"
    project = item.project
    raw_project = value.get("project")
    if isinstance(raw_project, str):
        if raw_project.strip() == "":
            project = ""
        elif PROJECT_NAME.fullmatch(raw_project.strip()):
            project = raw_project.strip()
        else:
            warnings.append(f"suggested project {raw_project[:40]!r} is not a valid name: kept {project!r}")
    tags = _domains(value.get("domains", value.get("domain")), domains, warnings)
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


def _domains(raw: Any, known: Sequence[str], warnings: list[str]) -> tuple[str, ...]:
    values = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    out: list[str] = []
    for value in values:
        if not isinstance(value, str) or not value.strip():
            continue
        name = value.strip().strip("[]").lower()
        if name not in known:
            warnings.append(f"unknown domain {value[:40]!r} dropped")
        elif name not in out:
            out.append(name)
    return tuple(out)


class OllamaTriager(DomainAsker):
    """Triager backed by ``model`` at ``host``; ``domains`` is the home's domain vocabulary."""

    version = VERSION
    role = "triager"

    @staticmethod
    def _prompt_sha256(domains: tuple[str, ...]) -> str:
        return prompt_sha256(domains)

    def triage(self, item: TriageItem, *, max_retries: int = 3) -> TriageOutcome:
        messages = render_messages(
            content=item.content,
            layer=item.layer,
            kind=item.kind,
            project=item.project,
            domains=item.domains,
            confidence=item.confidence,
            neighbours=item.neighbours,
            vocabulary=self.domains,
        )
        parse = partial(parse_verdict, item=item, domains=self.domains)
        answer = self._asker.ask(messages, triage_schema(self.domains), parse, max_retries=max_retries)
        if isinstance(answer, Failed):
            return self.failure(answer)
        parsed: ParsedVerdict = answer.value
        return TriageVerdict(
            verdict=parsed.verdict,
            confidence=parsed.confidence,
            reason=parsed.reason,
            project=parsed.project,
            domains=parsed.domains,
            triager=self.name,
            version=self.version,
            model=self.model,
            prompt_sha256=self._sha,
            conflicts_with=parsed.conflicts_with,
            warnings=parsed.warnings,
            attempts=answer.attempts,
            responses=answer.responses,
            input_tokens=answer.input_tokens,
            output_tokens=answer.output_tokens,
        )
