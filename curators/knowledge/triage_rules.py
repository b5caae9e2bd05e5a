"""The rules triager: deterministic verdicts for when no model is configured.

It judges only what rules can judge, in this order:

1. too short (under 20 characters or four words) or a question: reject;
2. a passing state ("currently", "right now", "in progress", "TODO" ...):
   reject, it will not be true tomorrow;
3. an active memory about the same thing (it holds at least half of the
   candidate's terms) that disagrees on the same quantity (both give a
   number in the same unit, and no value in common: "234 N" against
   "180 N"), or that says the same claim negated (each holds most of the
   other's terms, and one of them negates): contradicts, naming that memory.
   Numbers inside names (p04, M1, F/1.2, eu-west-1) are not quantities, and a
   number only one of them gives is not a disagreement;
   an active memory that says the same thing (each holds most of the other's
   terms, the same quantities, the same polarity) is a duplicate: the
   verdict names it, and the candidate waits instead of being promoted;
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

from mnemolog.curators.knowledge.extract import MIN_CANDIDATE_CHARS
from mnemolog.curators.knowledge.extract_rules import MIN_WORDS, guess_domain
from mnemolog.curators.knowledge.triage import Neighbour, TriageItem, TriageVerdict

VERSION: Final = "2"  # 2: contradictions need the same quantity; agreement is a duplicate
#: A neighbour sharing at least this part of the candidate's terms is "about the same thing".
SAME_SUBJECT_SHARE: Final = 0.5
#: Each holding this part of the other's terms: the same claim (a duplicate, or its negation).
SAME_CLAIM_SHARE: Final = 0.7
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
#: A quantity: a number standing on its own (not inside a name such as p04, M1, F/1.2 or
#: eu-west-1), a time of day as one value, and the unit word that follows it, if any.
_QUANTITY: Final = re.compile(
    r"(?<![\w./-])(\d{1,2}:\d{2}|\d+(?:[.,]\d+)?)(?![\w.,:/]*\d)(?:[\s-]?(%|°[CF]?|[^\W\d_]+))?"
)
#: Words after a number that are not its unit.
_NOT_UNITS: Final = frozenset(
    [
        "a",
        "an",
        "and",
        "as",
        "at",
        "by",
        "for",
        "from",
        "in",
        "into",
        "is",
        "of",
        "on",
        "or",
        "per",
        "than",
        "that",
        "the",
        "then",
        "to",
        "until",
        "up",
        "with",
    ]
)
_WORD: Final = re.compile(r"\w+")


def _fingerprint() -> str:
    material = json.dumps(
        {
            "version": VERSION,
            "passing": _PASSING.pattern,
            "negation": _NEGATION.pattern,
            "same_subject_share": SAME_SUBJECT_SHARE,
            "same_claim_share": SAME_CLAIM_SHARE,
            "quantity": _QUANTITY.pattern,
            "explicit": sorted(EXPLICIT_RULES),
            "min": [MIN_CANDIDATE_CHARS, MIN_WORDS],
        },
        sort_keys=True,
    )
    return hashlib.sha256(material.encode()).hexdigest()


RULES_SHA256: Final = _fingerprint()


def quantities(text: str) -> dict[str, set[str]]:
    """The values ``text`` gives, by unit ("" for a bare number; "time of day" for 06:00)."""
    out: dict[str, set[str]] = {}
    for match in _QUANTITY.finditer(text):
        value, unit = match.group(1), (match.group(2) or "").lower()
        if ":" in value:
            unit = "time of day"
            value = value.zfill(5)
        else:
            value = value.replace(",", ".")
            value = value.rstrip("0").rstrip(".") if "." in value else value.lstrip("0") or "0"
            if unit in _NOT_UNITS:
                unit = ""
            elif len(unit) > 3 and unit.endswith("s"):
                unit = unit[:-1]  # hours, times, days: one unit with its singular
        out.setdefault(unit, set()).add(value)
    return out


def _disagreement(ours: dict[str, set[str]], theirs: dict[str, set[str]]) -> str | None:
    """Other values of the same quantity, or None (a number only one of them gives is no conflict)."""
    for unit in sorted(set(ours) & set(theirs) - {""}):
        if not ours[unit] & theirs[unit]:
            what = "" if unit == "time of day" else f" {unit}"
            mine = ", ".join(f"{v}{what}" for v in sorted(ours[unit]))
            other = ", ".join(f"{v}{what}" for v in sorted(theirs[unit]))
            return f"it gives {mine} where the memory gives {other}"
    bare_ours, bare_theirs = ours.get("", set()), theirs.get("", set())
    if len(ours) == len(theirs) == 1 and len(bare_ours) == len(bare_theirs) == 1 and bare_ours != bare_theirs:
        return f"it gives {next(iter(bare_ours))} where the memory gives {next(iter(bare_theirs))}"
    return None


def _same_claim(neighbour: Neighbour) -> bool:
    return neighbour.share >= SAME_CLAIM_SHARE and neighbour.coverage >= SAME_CLAIM_SHARE


def _conflict(content: str, neighbour: Neighbour) -> str | None:
    if neighbour.share < SAME_SUBJECT_SHARE:
        return None
    why = _disagreement(quantities(content), quantities(neighbour.content))
    if why is not None:
        return why
    if _same_claim(neighbour) and bool(_NEGATION.search(content)) != bool(
        _NEGATION.search(neighbour.content)
    ):
        return "one of them negates what the other asserts"
    return None


def _agreement(content: str, neighbour: Neighbour) -> bool:
    """The neighbour says the same thing: the same claim, polarity and quantities."""
    if not _same_claim(neighbour):
        return False
    if bool(_NEGATION.search(content)) != bool(_NEGATION.search(neighbour.content)):
        return False
    ours, theirs = quantities(content), quantities(neighbour.content)
    return all(ours[u] == theirs[u] for u in set(ours) & set(theirs))


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
            kind: str,
            confidence: float,
            reason: str,
            conflicts_with: str | None = None,
            duplicate_of: str | None = None,
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
                duplicate_of=duplicate_of,
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
        ranked = sorted(item.neighbours, key=lambda n: (-n.share, n.id))
        for neighbour in ranked:
            why = _conflict(content, neighbour)
            if why is not None:
                return verdict(
                    "contradicts", 0.6, f"Conflicts with memory {neighbour.id}: {why}.", neighbour.id
                )
        same = next((n.id for n in ranked if _agreement(content, n)), None)
        if item.rule in EXPLICIT_RULES:
            return verdict(
                "promote",
                item.confidence,
                f"Explicitly stated as a {item.rule} in the exchange."
                + (f" Memory {same} already says it." if same else ""),
                duplicate_of=same,
            )
        return verdict(
            "needs_human",
            item.confidence,
            f"Memory {same} already says it; a person decides whether it adds anything."
            if same
            else "Rules cannot tell earned insight from common knowledge; a person decides.",
            duplicate_of=same,
        )
