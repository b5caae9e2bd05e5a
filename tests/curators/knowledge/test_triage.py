"""Triage decisions, the rules triager, and the factories."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from mnemolog.curators.base import TierLocked
from mnemolog.curators.config import LlmConfig
from mnemolog.curators.knowledge.choice import make_extractor, make_triager
from mnemolog.curators.knowledge.extract_ollama import OllamaExtractor
from mnemolog.curators.knowledge.extract_rules import RulesExtractor
from mnemolog.curators.knowledge.triage import (
    MAX_REASON_CHARS,
    Neighbour,
    TriageItem,
    TriagePolicy,
    Triager,
    TriageVerdict,
    decide,
    one_sentence,
)
from mnemolog.curators.knowledge.triage_ollama import OllamaTriager
from mnemolog.curators.knowledge.triage_rules import RULES_SHA256, RulesTriager, quantities
from mnemolog.eventlog.errors import BadInput, UsageError

POLICY = TriagePolicy()


def verdict(kind: str = "promote", confidence: float = 0.9, **kw: Any) -> TriageVerdict:
    base = TriageVerdict(
        verdict=kind,  # type: ignore[arg-type]
        confidence=confidence,
        reason="A measured limit.",
        project="",
        domains=("materials",),
        triager="ollama",
        version="1",
        model="m",
        prompt_sha256="0" * 64,
    )
    return replace(base, **kw)


# -- decide -----------------------------------------------------------------------------


def test_promote_at_or_above_the_threshold() -> None:
    assert decide(verdict(confidence=0.8), policy=POLICY).action == "promote"
    assert decide(verdict(confidence=0.95), policy=POLICY).action == "promote"


def test_promote_below_the_threshold_waits() -> None:
    decision = decide(verdict(confidence=0.79), policy=POLICY)
    assert decision.action == "wait"
    assert "0.79" in decision.why and "0.80" in decision.why


def test_the_threshold_is_configuration() -> None:
    assert decide(verdict(confidence=0.7), policy=TriagePolicy(promote_confidence=0.7)).action == "promote"
    assert decide(verdict(confidence=0.85), policy=TriagePolicy(promote_confidence=0.9)).action == "wait"


def test_a_duplicate_waits_even_when_confident() -> None:
    decision = decide(verdict(confidence=0.99), policy=POLICY, duplicate_of="01DUP")
    assert decision.action == "wait" and "01DUP" in decision.why


def test_reject_rejects_whatever_the_confidence() -> None:
    assert decide(verdict("reject", 0.1), policy=POLICY).action == "reject"
    assert decide(verdict("reject", 0.99), policy=POLICY, duplicate_of="x").action == "reject"


@pytest.mark.parametrize("kind", ["needs_human", "contradicts"])
def test_everything_else_waits_for_a_person(kind: str) -> None:
    decision = decide(verdict(kind, 1.0, conflicts_with="01OLD"), policy=POLICY)
    assert decision.action == "wait"
    if kind == "contradicts":
        assert "01OLD" in decision.why


def test_policy_is_recorded_and_checked() -> None:
    assert POLICY.to_data() == {"promote_confidence": 0.8, "duplicate_similarity": 0.92}
    with pytest.raises(BadInput):
        TriagePolicy(promote_confidence=1.2)
    with pytest.raises(BadInput):
        TriagePolicy(duplicate_similarity=True)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("A measured limit. And more text after it.", "A measured limit."),
        ("  Spread\nover   lines  ", "Spread over lines"),
        (
            "e.g. short. Then the real sentence ends here. More.",
            "e.g. short. Then the real sentence ends here.",
        ),
        ("", ""),
    ],
)
def test_one_sentence(text: str, expected: str) -> None:
    assert one_sentence(text) == expected


def test_one_sentence_is_bounded() -> None:
    out = one_sentence("word " * 500)
    assert len(out) <= MAX_REASON_CHARS and out.endswith("…")


# -- the rules triager ------------------------------------------------------------------

RULES = RulesTriager()


def item(content: str, **kw: Any) -> TriageItem:
    base = TriageItem(
        candidate_id="01CAND",
        content=content,
        layer="project",
        kind="project",
        project="p04-gigabit",
        confidence=0.6,
        extractor="rules",
    )
    return replace(base, **kw)


def test_rules_triager_identity() -> None:
    assert isinstance(RULES, Triager)
    out = RULES.triage(item("Decision: we keep the 18-point whiffletree for M1."))
    assert (out.triager, out.version, out.model, out.prompt_sha256) == ("rules", "2", None, RULES_SHA256)


@pytest.mark.parametrize(
    ("content", "kind", "why"),
    [
        ("Too short.", "reject", "short"),
        ("Should we keep the whiffletree for the M1 mirror?", "reject", "question"),
        ("The tool is currently on run 14 of 20 at 28 nm RMS.", "reject", "passing state"),
        ("TODO finish the backfill script and the runbook.", "reject", "passing state"),
    ],
)
def test_rules_reject(content: str, kind: str, why: str) -> None:
    out = RULES.triage(item(content))
    assert out.verdict == kind
    assert why in out.reason.lower()


def test_rules_promote_explicit_markers_at_the_extractors_confidence() -> None:
    out = RULES.triage(item("we keep the 18-point whiffletree for M1.", rule="decision", confidence=0.85))
    assert (out.verdict, out.confidence) == ("promote", 0.85)
    assert decide(out, policy=POLICY).action == "promote"
    sentence = RULES.triage(
        item("We decided to keep the whiffletree for M1.", rule="decision", confidence=0.8)
    )
    assert decide(sentence, policy=POLICY).action == "promote"


def test_rules_send_insights_to_a_person() -> None:
    out = RULES.triage(
        item("Zerodur CTE gradient dominates WFE at fast focal ratios.", layer="domain", rule="insight")
    )
    assert out.verdict == "needs_human"
    assert out.domains == ("materials",)  # suggested from the text when the candidate had none


def test_rules_see_contradictions_by_negation_and_by_numbers() -> None:
    old = Neighbour("01OLD", "The quilting limit for the 16-inch tool is 234 N.", "p06", share=0.8)
    out = RULES.triage(item("The quilting limit for the 16-inch tool is 180 N.", neighbours=(old,)))
    assert (out.verdict, out.conflicts_with) == ("contradicts", "01OLD")
    assert "180" in out.reason and "234" in out.reason
    neg = Neighbour("01NEG", "Force modulation can correct coma on the M1 supports.", share=0.7, coverage=0.8)
    out = RULES.triage(item("Force modulation cannot correct coma on the M1 supports.", neighbours=(neg,)))
    assert (out.verdict, out.conflicts_with) == ("contradicts", "01NEG")


@pytest.mark.parametrize(
    ("candidate", "memory"),
    [
        # The newcomer's case: the same schedule, worded differently, one with its time zone.
        ("The nightly export retries hourly until 06:00 UTC.", "Retry the job hourly until 06:00."),
        ("Backups of the p04 database are kept 30 days.", "Keep database backups 30 days."),
        ("We ship the M1 cell on pallet 2 with 40 mm foam.", "The M1 cell ships with 40 mm foam."),
        ("Retry the export at most 5 times, 10 minutes apart.", "Retry the export at most 5 times."),
    ],
)
def test_rules_call_agreement_a_duplicate_not_a_contradiction(candidate: str, memory: str) -> None:
    same = Neighbour("01SAME", memory, share=0.8, coverage=0.8)
    out = RULES.triage(item(candidate, rule="decision", confidence=0.85, neighbours=(same,)))
    assert out.verdict == "promote" and out.conflicts_with is None
    assert out.duplicate_of == "01SAME" and "01SAME" in out.reason
    assert decide(out, policy=POLICY, duplicate_of=out.duplicate_of).action == "wait"


@pytest.mark.parametrize(
    ("candidate", "memory", "numbers"),
    [
        ("The nightly export retries hourly until 07:30.", "Retry the job hourly until 06:00.", "07:30"),
        ("Retry the export at most 3 times.", "Retry the export at most 5 times.", "3"),
        ("Backups are kept 14 days.", "Backups are kept 30 days.", "14"),
    ],
)
def test_rules_see_disagreement_on_the_same_quantity(candidate: str, memory: str, numbers: str) -> None:
    old = Neighbour("01OLD", memory, share=0.6, coverage=0.6)
    out = RULES.triage(item(candidate, rule="decision", confidence=0.85, neighbours=(old,)))
    assert (out.verdict, out.conflicts_with) == ("contradicts", "01OLD")
    assert numbers in out.reason


def test_rules_negation_on_a_loosely_related_memory_is_not_a_contradiction() -> None:
    loose = Neighbour(
        "01LOOSE", "Deploys stop at 16:00 on Fridays for the release train.", share=0.6, coverage=0.4
    )
    out = RULES.triage(item("Do not deploy after 16:00 on Fridays.", rule="decision", neighbours=(loose,)))
    assert out.verdict == "promote" and out.conflicts_with is None and out.duplicate_of is None


def test_rules_quantities_skip_names() -> None:
    assert quantities("p04 M1 at F/1.2 in eu-west-1: 3.50 mm, 40% and 6:00") == {
        "mm": {"3.5"},
        "%": {"40"},
        "time of day": {"06:00"},
    }


def test_rules_ignore_unrelated_neighbours() -> None:
    far = Neighbour("01FAR", "The quilting limit is 234 N.", share=0.3)
    out = RULES.triage(item("The quilting limit is 180 N for the big tool.", rule="fact", neighbours=(far,)))
    assert out.verdict == "needs_human"


# -- factories --------------------------------------------------------------------------

LLM = LlmConfig("http://127.0.0.1:9", "m")


def test_factories() -> None:
    assert isinstance(make_extractor("rules", None), RulesExtractor)
    assert isinstance(make_extractor("ollama", LLM), OllamaExtractor)
    assert isinstance(make_triager("rules", None), RulesTriager)
    assert isinstance(make_triager("ollama", LLM), OllamaTriager)


@pytest.mark.parametrize("factory", [make_extractor, make_triager])
def test_factories_lock_the_llm_tier_and_refuse_unknown_names(factory: Any) -> None:
    with pytest.raises(TierLocked) as info:
        factory("ollama", None)
    assert info.value.exit_code == 3
    with pytest.raises(UsageError):
        factory("magic", LLM)
