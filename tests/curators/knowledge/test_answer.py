"""Reading candidates out of a model's reply: tolerant where the intent is plain, strict otherwise."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemolog.curators.knowledge.answer import parse_candidates
from mnemolog.curators.knowledge.extract import MAX_CANDIDATES
from mnemolog.curators.parse import MalformedOutput
from mnemolog.eventlog.vocabulary.knowledge import DOMAINS

TEXT = "Zerodur CTE gradient dominates WFE at fast focal ratios."


def parse(content: str, project: str = "p04-gigabit") -> Any:
    return parse_candidates(content, project=project, domains=DOMAINS)


def item(**kw: Any) -> dict[str, Any]:
    return {
        "type": "knowledge",
        "content": TEXT,
        "project": "",
        "domain": "materials",
        "confidence": 0.6,
        **kw,
    }


@pytest.mark.parametrize(
    "content",
    [
        json.dumps({"candidates": [item()]}),
        json.dumps([item()]),
        "```json\n" + json.dumps({"candidates": [item()]}, indent=2) + "\n```",
        "Here you go: " + json.dumps({"candidates": [item()]}) + " Anything else?",
        json.dumps({"note": 1}) + json.dumps({"candidates": [item()]}),
    ],
)
def test_wrappings(content: str) -> None:
    (candidate,) = parse(content).candidates
    assert (candidate.layer, candidate.content, candidate.domains, candidate.project) == (
        "domain",
        TEXT,
        ("materials",),
        "",
    )
    assert candidate.confidence == 0.6 and candidate.kind == "knowledge"


def test_an_empty_list_is_an_answer() -> None:
    parsed = parse(json.dumps({"candidates": []}))
    assert parsed.candidates == () and parsed.warnings == ()


@pytest.mark.parametrize(
    ("raw_type", "layer"),
    [("project", "project"), ("Knowledge", "domain"), ("insight", "domain"), ("identity", "preference")],
)
def test_type_synonyms(raw_type: str, layer: str) -> None:
    (candidate,) = parse(json.dumps([item(type=raw_type)])).candidates
    assert candidate.layer == layer


def test_missing_or_unknown_type_is_inferred_from_the_domain() -> None:
    (a, b) = parse(
        json.dumps([item(type=None), item(type="weird", domain="", content=TEXT + " Again.")])
    ).candidates
    assert a.layer == "domain"
    assert b.layer == "project"


def test_project_candidates_take_the_interactions_project() -> None:
    (candidate,) = parse(json.dumps([item(type="project", project="other-project")])).candidates
    assert candidate.project == "p04-gigabit"
    (candidate,) = parse(json.dumps([item(type="project", project="other-project")]), project="").candidates
    assert candidate.project == "other-project"
    parsed = parse(json.dumps([item(type="project", project="not a name!")]), project="")
    assert parsed.candidates[0].project == ""
    assert any("not a valid project name" in w for w in parsed.warnings)


def test_knowledge_never_keeps_a_project() -> None:
    (candidate,) = parse(json.dumps([item(project="p04-gigabit")])).candidates
    assert candidate.project == ""


def test_unknown_domains_are_dropped_with_a_warning() -> None:
    parsed = parse(json.dumps([item(domain="alchemy")]))
    assert parsed.candidates[0].domains == ()
    assert any("alchemy" in w for w in parsed.warnings)
    (candidate,) = parse(json.dumps([item(domain=["[Optics]", "materials"])])).candidates
    assert candidate.domains == ("optics",)  # a domain candidate has exactly one tag


@pytest.mark.parametrize("confidence", [1.5, -0.1, "high", True, None, float("nan")])
def test_bad_confidence_reads_as_a_half(confidence: Any) -> None:
    parsed = parse(json.dumps([item(confidence=confidence)], allow_nan=True))
    assert parsed.candidates[0].confidence == 0.5


def test_bad_items_are_dropped_and_repeats_kept_once() -> None:
    parsed = parse(
        json.dumps(
            [
                item(),
                item(content="too short"),
                item(content=42),
                item(content="x " * 600),
                item(content=" " + TEXT.upper() + " "),
            ]
        )
    )
    assert len(parsed.candidates) == 1
    assert len(parsed.warnings) == 4


def test_more_than_eight_are_cut() -> None:
    items = [item(content=f"{TEXT} Variant number {i}.") for i in range(MAX_CANDIDATES + 3)]
    assert len(parse(json.dumps(items)).candidates) == MAX_CANDIDATES


@pytest.mark.parametrize(
    ("content", "found"),
    [
        ("", "no JSON value"),
        ("I could not find anything.", "no JSON value"),
        (json.dumps({"atoms": ["a", "b"]}), "no 'candidates'"),
        (json.dumps({"candidates": "none"}), "not a list"),
        (json.dumps(["a", "b"]), "not all objects"),
        (json.dumps("just a string"), "a JSON str"),
        (json.dumps({"candidates": [{"content": 5}, {"type": "project"}]}), "none usable"),
        ('{"candidates": [', "no JSON value"),
    ],
)
def test_malformed_replies_say_what_they_held(content: str, found: str) -> None:
    with pytest.raises(MalformedOutput) as info:
        parse(content)
    assert found in str(info.value)


@given(st.text(max_size=300))
def test_any_reply_parses_or_is_malformed(content: str) -> None:
    try:
        parsed = parse(content)
    except MalformedOutput:
        return
    assert len(parsed.candidates) <= MAX_CANDIDATES


json_leaf = st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(max_size=40)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20,
)


@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["type", "content", "project", "domain", "confidence"]), json_value, max_size=5
        ),
        max_size=10,
    )
)
def test_any_candidate_list_parses_or_is_malformed(items: list[dict[str, Any]]) -> None:
    try:
        parsed = parse(json.dumps({"candidates": items}))
    except MalformedOutput:
        return
    for candidate in parsed.candidates:
        assert 0.0 <= candidate.confidence <= 1.0
        assert set(candidate.domains) <= set(DOMAINS)
        if candidate.layer != "project":
            assert candidate.project == ""
