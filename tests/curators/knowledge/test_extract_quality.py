"""The rules extractor's precision and recall on the labelled sets (floors, so a change that
loses quality fails here; bench/knowledge_bench.py prints the figures)."""

from __future__ import annotations

from mnemolog.curators.knowledge.extract import Candidate, InteractionText
from mnemolog.curators.knowledge.extract_rules import RulesExtractor
from tests.support.extraction_labels import DATA, Expected, Labelled, load, score

HELDOUT = DATA.with_name("extraction_heldout.json")
RULES = RulesExtractor()


def rules(interaction: InteractionText) -> tuple[Candidate, ...]:
    return RULES.extract(interaction).candidates


def test_the_labelled_set_is_big_enough_and_well_formed() -> None:
    labelled, heldout = load(), load(HELDOUT)
    assert len(labelled) >= 40 and len(heldout) >= 20
    ids = [item.id for item in labelled + heldout]
    assert len(ids) == len(set(ids))
    for item in labelled + heldout:
        for expected in item.expected:
            assert expected.layer in ("project", "domain", "preference")
            assert (expected.domain is not None) == (expected.layer == "domain")
    # Negatives matter as much as positives: interactions with nothing worth keeping.
    assert sum(not item.expected for item in labelled) >= 10


def test_rules_floor_on_the_labelled_set() -> None:
    result = score(load(), rules)
    assert result.precision >= 0.90, result.false_positives
    assert result.recall >= 0.60, result.misses
    assert result.domain_right / result.domain_pairs >= 0.8


def test_rules_floor_on_the_heldout_set() -> None:
    # Written after the rules were tuned and never used to tune them: the honest figure.
    result = score(load(HELDOUT), rules)
    assert result.precision >= 0.80, result.false_positives
    assert result.recall >= 0.30, result.misses


def test_the_scorer_counts_what_it_should() -> None:
    item = Labelled(
        "t",
        InteractionText("", "", ""),
        (
            Expected("domain", "Zerodur CTE gradient dominates WFE at fast focal ratios", "materials"),
            Expected("project", "CTE analysis drove the pad layout", None),
        ),
    )
    proposed = [
        Candidate(
            "domain",
            "The CTE gradient of Zerodur dominates WFE at fast focal ratios",
            "knowledge",
            domains=("optics",),
        ),
        Candidate("domain", "CTE analysis drove the pad layout", "knowledge"),  # wrong layer
    ]
    result = score([item], lambda _i: proposed)
    assert (result.proposed, result.expected, result.matched) == (2, 2, 1)
    assert (result.domain_pairs, result.domain_right) == (1, 0)
    assert result.precision == 0.5 and result.recall == 0.5
