"""The rules triager: deterministic verdicts for when no model is configured.

It judges only what rules can judge, in this order:

1. too short (under 20 characters or four words) or a question: reject;
2. a passing state ("currently", "right now", "in progress", "TODO" ...):
   reject, it will not be true tomorrow;
3. an active memory that shares most of the candidate's terms (at least half)
   but says the opposite (one negates, the other does not) or gives other
   numbers: contradicts, naming that memory;
4. a candidate the extractor found under an explicit label or phrase for a
   decision, requirement, constraint or preference: promote, at the
   extractor's confidence (so only labelled ones, at 0.85, clear the default
   promotion threshold);
5. anything else, insights above all: needs_human. Telling earned insight
   from what anyone could look up in 30 seconds takes judgement rules do not
   have.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Final

from .extract import MIN_CANDIDATE_CHARS
from .extract_rules import MIN_WORDS, guess_domain
from .triage import Neighbour, TriageItem, TriageVerdict

VERSION: Final = "1"
#: A neighbour sharing at least this part of the candidate's terms is "about the same thing".
SAME_SUBJECT_SHARE: Final = 0.5
EXPLICIT_RULES: Final = frozenset(("decision", "requirement", "constraint", "preference"))

_PASSING: Final = re.compile(
    r"\b(?:currently|right now|at the moment|for now|as of today|today|tonight|this morning|"
    r"this afternoon|in progress|still running|is running|wip|todo|tbd)\b",
    re.IGNORECASE,
)
_NEGATION: Final = re.compile(
    r"\b(?:not|no|never|none|cannot|can't|don't|doesn't|didn't|isn't|aren't|wasn't|won't|"
    r"shouldn't|mustn't|avoid|without)\b",
    re.IGNORECASE,
)
_NUMBER: Final = re.compile(r"\d+(?:[.,]\d+)?")
_WORD: Final = re.compile(r"\w+")


def _fingerprint() -> str:
    material = json.dumps(
        {
            "version": VERSION,
            "passing": _PASSING.pattern,
            "negation": _NEGATION.pattern,
            "same_subject_share": SAME_SUBJECT_SHARE,
            "explicit": sorted(EXPLICIT_RULES),
            "min": [MIN_CANDIDATE_CHARS, MIN_WORDS],
        },
        sort_keys=True,
    )
    return hashlib.sha256(material.encode()).hexdigest()


RULES_SHA256: Final = _fingerprint()


def _conflict(content: str, neighbour: Neighbour) -> str | None:
    if neighbour.share < SAME_SUBJECT_SHARE:
        return None
    if bool(_NEGATION.search(content)) != bool(_NEGATION.search(neighbour.content)):
        return "one of them negates what the other asserts"
    ours, theirs = set(_NUMBER.findall(content)), set(_NUMBER.findall(neighbour.content))
    if ours and theirs and ours != theirs:
        return f"it gives {', '.join(sorted(ours))} where the memory gives {', '.join(sorted(theirs))}"
    return None


class RulesTriager:
    """The deterministic triager; the same candidate and neighbours always give the same verdict."""

    name: Final = "rules"
    version: Final = VERSION
    model: Final = None

    def triage(self, item: TriageItem, *, max_retries: int = 0) -> TriageVerdict:
        del max_retries  # deterministic: nothing to retry
        content = " ".join(item.content.split())
        domains = item.domains
        if item.layer == "domain" and not domains:
            guessed = guess_domain(content)
            domains = (guessed,) if guessed else ()

        def verdict(
            kind: str, confidence: float, reason: str, conflicts_with: str | None = None
        ) -> TriageVerdict:
            return TriageVerdict(
                verdict=kind,  # type: ignore[arg-type]  # one of the four, by construction below
                confidence=confidence,
                reason=reason,
                project=item.project,
                domains=domains,
                triager=self.name,
                version=self.version,
                model=None,
                prompt_sha256=RULES_SHA256,
                conflicts_with=conflicts_with,
            )

        if len(content) < MIN_CANDIDATE_CHARS or len(_WORD.findall(content)) < MIN_WORDS:
            return verdict("reject", 0.9, "Too short to stand on its own as a memory.")
        if content.endswith("?"):
            return verdict("reject", 0.9, "A question, not knowledge.")
        passing = _PASSING.search(content)
        if passing:
            return verdict(
                "reject", 0.8, f"Describes a passing state ({passing.group(0)!r}), not lasting knowledge."
            )
        for neighbour in sorted(item.neighbours, key=lambda n: (-n.share, n.id)):
            why = _conflict(content, neighbour)
            if why is not None:
                return verdict(
                    "contradicts", 0.6, f"Conflicts with memory {neighbour.id}: {why}.", neighbour.id
                )
        if item.rule in EXPLICIT_RULES:
            return verdict("promote", item.confidence, f"Explicitly stated as a {item.rule} in the exchange.")
        return verdict(
            "needs_human",
            item.confidence,
            "Rules cannot tell earned insight from common knowledge; a person decides.",
        )
