"""The rules extractor: labels, headings, sentence patterns, layers, length and repeat rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.curators.knowledge.extract import (
    MAX_CANDIDATES,
    MIN_CANDIDATE_CHARS,
    Extraction,
    Extractor,
    InteractionText,
)
from mnemolog.curators.knowledge.extract_rules import (
    MAX_RULE_CHARS,
    RULES_SHA256,
    RulesExtractor,
    guess_domain,
    label_rule,
    sentence_rule,
    sentences,
)

RULES = RulesExtractor()


def extract(response: str, prompt: str = "What happened?", project: str = "p04-gigabit") -> Extraction:
    return RULES.extract(InteractionText(prompt, response, project))


def contents(result: Extraction) -> list[tuple[str, str]]:
    return [(c.layer, c.content) for c in result.candidates]


def test_it_is_an_extractor_with_provenance() -> None:
    assert isinstance(RULES, Extractor)
    result = extract("Decision: we ship the 18-point whiffletree for M1.")
    assert (result.extractor, result.version, result.model) == ("rules", "1", None)
    assert result.prompt_sha256 == RULES_SHA256 and len(RULES_SHA256) == 64
    assert result.responses == () and result.attempts == 1


@pytest.mark.parametrize(
    "line",
    [
        "Decision: we ship the 18-point whiffletree for M1.",
        "- Decision: we ship the 18-point whiffletree for M1.",
        "**Decision:** we ship the 18-point whiffletree for M1.",
        "**Decision**: we ship the 18-point whiffletree for M1.",
        "Decision - we ship the 18-point whiffletree for M1.",
        "1. DECISION: we ship the 18-point whiffletree for M1.",
    ],
)
def test_labelled_lines(line: str) -> None:
    (candidate,) = extract(line).candidates
    assert candidate.content == "we ship the 18-point whiffletree for M1."
    assert (candidate.layer, candidate.kind, candidate.rule, candidate.project) == (
        "project",
        "decision",
        "decision",
        "p04-gigabit",
    )
    assert candidate.confidence == 0.85


@pytest.mark.parametrize(
    "heading", ["## Requirements", "**Requirements**", "Requirements:", "### requirements ##"]
)
def test_bullets_under_a_heading(heading: str) -> None:
    text = (
        f"{heading}\n- The mount holds the mirror within 2 arcsec.\n* First mode above 40 Hz in every axis.\n"
    )
    result = extract(text + "\n## Notes\n- Drawings are in the shared folder for everyone.")
    assert [c.content for c in result.candidates] == [
        "The mount holds the mirror within 2 arcsec.",
        "First mode above 40 Hz in every axis.",
    ]
    assert {c.rule for c in result.candidates} == {"requirement"}


@pytest.mark.parametrize(
    ("sentence", "rule"),
    [
        ("We decided to keep the pitch lap for the next three runs.", "decision"),
        ("We've agreed on nightly builds for the release branch.", "decision"),
        ("The decision was to drop the legacy endpoint in May.", "decision"),
        ("We're going with date-fns over moment for the web app.", "decision"),
        ("The requirement is a 4 hour restore time for backups.", "requirement"),
        ("Latency must not exceed 2 seconds at the 99th percentile.", "constraint"),
        ("The bond line must stay between 0.1 and 0.15 mm thick.", "constraint"),
        ("It turns out the lap flows under load above 234 N.", "insight"),
        ("We found that shared SQLite files make the tests flaky.", "insight"),
        ("The root cause was a dropped index on the invoices table.", "insight"),
        ("The removal model breaks down below 5 N of load.", "insight"),
    ],
)
def test_sentence_patterns(sentence: str, rule: str) -> None:
    assert sentence_rule(sentence) == rule
    (candidate,) = extract(f"Some context first. {sentence} And a closing remark.").candidates
    assert candidate.rule == rule
    assert candidate.content == sentence


def test_preferences_come_from_the_person_not_the_agent() -> None:
    result = extract("I prefer to keep answers short.", prompt="I prefer metric units in every report.")
    assert contents(result) == [("preference", "I prefer metric units in every report.")]
    (candidate,) = result.candidates
    assert (candidate.project, candidate.kind, candidate.source) == ("", "user", "prompt")


def test_two_marked_statements_in_one_sentence_are_two_candidates() -> None:
    result = extract("Noted.", prompt="I prefer metric units, and please never paste secrets into the chat.")
    assert contents(result) == [
        ("preference", "I prefer metric units"),
        ("preference", "please never paste secrets into the chat."),
    ]


def test_a_labelled_preference_that_is_not_the_speakers_belongs_to_the_project() -> None:
    result = extract("Preference: the finance team wants ISO 8601 dates in every export.")
    assert contents(result) == [("project", "the finance team wants ISO 8601 dates in every export.")]
    result = extract("Preference: I want ISO 8601 dates in every export.")
    assert contents(result) == [("preference", "I want ISO 8601 dates in every export.")]


def test_the_seed_example_gives_a_project_and_a_materials_candidate() -> None:
    result = extract(
        "## Decisions\n"
        "- CTE gradient analysis drove the M1 support pad layout; it is the second largest WFE "
        "contributor after gravity.\n\n"
        "Lesson learned: Zerodur CTE gradient dominates WFE contribution at fast focal ratios "
        "(about 3 nm at F/1.2)."
    )
    project, knowledge = result.candidates
    assert (project.layer, project.project, project.kind) == ("project", "p04-gigabit", "decision")
    assert (knowledge.layer, knowledge.project, knowledge.domains) == ("domain", "", ("materials",))
    assert knowledge.content.startswith("Zerodur CTE gradient dominates")


def test_an_insight_about_the_project_stays_with_the_project() -> None:
    (candidate,) = extract("Lesson: our p04 pads need the CTE map before every layout change.").candidates
    assert (candidate.layer, candidate.project) == ("project", "p04-gigabit")


def test_an_insight_with_a_project_clause_gives_both_layers() -> None:
    result = extract(
        "The root cause was the EDM recast layer, which cuts titanium fatigue life; "
        "we now specify a 0.05 mm etch after wire EDM."
    )
    layers = [(c.layer, c.domains) for c in result.candidates]
    assert layers == [("domain", ("materials",)), ("project", ("materials",))]
    assert (
        result.candidates[0].content
        == "The root cause was the EDM recast layer, which cuts titanium fatigue life"
    )


def test_an_insight_without_a_domain_is_project_knowledge() -> None:
    (candidate,) = extract("It turns out the meeting room projector needs a restart first.").candidates
    assert candidate.layer == "project"


def test_code_blocks_questions_and_short_or_long_passages_are_skipped() -> None:
    text = (
        "```python\n# Decision: retry three times in the helper\nx = 1\n```\n"
        "    Decision: an indented code line that is not prose at all\n"
        "Should we decide to migrate the database to Postgres 16 now?\n"
        "Decision: too short.\n"
        f"Decision: {'word ' * (MAX_RULE_CHARS // 5 + 1)}\n"
    )
    result = extract(text)
    assert result.candidates == ()
    assert any("length rules" in w for w in result.warnings)


def test_repeats_are_kept_once() -> None:
    result = extract(
        "Decision: we ship the 18-point whiffletree.\n\n"
        "To sum up:\n- decision: We ship the 18-point WHIFFLETREE!\n"
    )
    assert len(result.candidates) == 1
    assert any("repeated" in w for w in result.warnings)


def test_at_most_eight_candidates() -> None:
    text = "\n".join(f"Decision: we keep configuration item number {i} as it is." for i in range(12))
    result = extract(text)
    assert len(result.candidates) == MAX_CANDIDATES
    assert any("dropped" in w for w in result.warnings)


def test_nothing_marked_gives_an_empty_answer_not_a_failure() -> None:
    result = extract("Sure, here you go. Have a nice day.")
    assert isinstance(result, Extraction)
    assert result.candidates == () and result.warnings == ()


def test_no_project_means_project_candidates_have_none() -> None:
    (candidate,) = extract("Decision: we ship the 18-point whiffletree.", project="").candidates
    assert candidate.project == ""


@pytest.mark.parametrize(
    ("text", "domain"),
    [
        ("Zerodur CTE gradient dominates WFE at fast focal ratios", "materials"),
        ("The export query needs an index on the invoices table", "software"),
        ("Quotes above 50 kEUR need sign-off from procurement", "finance"),
        ("The force loop oscillates above 800 Hz bandwidth with the servo", "controls"),
        ("Interferometer readings drift unless calibration is redone", "metrology"),
        ("a feature flag", None),
        ("nothing technical here", None),
    ],
)
def test_guess_domain(text: str, domain: str | None) -> None:
    assert guess_domain(text) == domain


def test_labels() -> None:
    assert label_rule("**Lessons learned**") == "insight"
    assert label_rule("Key decisions:") == "decision"
    assert label_rule("Summary") is None


def test_sentences_keep_abbreviations_and_decimals() -> None:
    assert sentences("Use e.g. the lap. It works at F/1.2 and 3.5 mm. Done! yes") == [
        "Use e.g. the lap.",
        "It works at F/1.2 and 3.5 mm.",
        "Done! yes",
    ]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400), st.text(max_size=400), st.sampled_from(["", "p04-gigabit"]))
def test_any_text_gives_a_deterministic_bounded_answer(prompt: str, response: str, project: str) -> None:
    interaction = InteractionText(prompt, response, project)
    first = RULES.extract(interaction)
    assert first == RULES.extract(interaction)
    assert len(first.candidates) <= MAX_CANDIDATES
    for candidate in first.candidates:
        assert MIN_CANDIDATE_CHARS <= len(candidate.content) <= MAX_RULE_CHARS
        assert not candidate.content.endswith("?")
        assert candidate.project in ("", project)
        assert (candidate.layer == "domain") == (candidate.kind == "knowledge")


@given(
    st.lists(
        st.sampled_from(
            [
                "Decision:",
                "- ",
                "## Lessons",
                "We decided to",
                "\n",
                "```",
                "I prefer",
                " it turns out ",
                "x" * 30,
                ";",
                ", and ",
                "Zerodur",
                "?",
                ".",
                "p04",
            ]
        ),
        max_size=40,
    )
)
def test_marker_soup_never_breaks_the_rules(parts: list[str]) -> None:
    text = " ".join(parts)
    result = RULES.extract(InteractionText(text, text, "p04-gigabit"))
    assert len(result.candidates) <= MAX_CANDIDATES


def test_a_capture_sized_hostile_response() -> None:
    hostile = ("Decision: " + "a" * 300 + "\n" + "(" * 5000 + "\n" + "e.g. " * 5000 + "\n") * 20
    result = extract(hostile[: 256 * 1024])
    assert result.candidates == ()  # the labelled line is one 300-letter word: under four words
