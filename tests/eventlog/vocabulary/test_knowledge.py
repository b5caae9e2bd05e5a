"""The knowledge vocabulary: closed sets and the checks that keep anything else out."""

from __future__ import annotations

from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemolog.eventlog.errors import BadInput, UsageError
from mnemolog.eventlog.vocabulary.knowledge import (
    ACTIONS,
    DOMAINS,
    STATE_CATEGORIES,
    STATUSES,
    VERDICTS,
    Action,
    Verdict,
    check_category,
    check_domains,
    check_project_name,
    check_statuses,
    domain_vocabulary,
    status_after,
)


def test_the_ten_domains_and_seven_categories() -> None:
    assert DOMAINS == (
        "physics",
        "materials",
        "optics",
        "mechanics",
        "manufacturing",
        "metrology",
        "controls",
        "software",
        "math",
        "finance",
    )
    assert STATE_CATEGORIES == ("status", "decision", "requirement", "contact", "milestone", "fact", "config")
    assert STATUSES == ("candidate", "active", "superseded", "invalid")
    assert VERDICTS == ("promote", "reject", "needs_human", "contradicts")
    assert ACTIONS == ("promote", "reject", "wait")


def test_the_literal_types_hold_the_same_names_as_the_tuples() -> None:
    assert get_args(Verdict) == VERDICTS
    assert get_args(Action) == ACTIONS


def test_configuration_extends_the_domains_after_the_built_in_ones() -> None:
    extended = domain_vocabulary(["health", "nutrition", "health", "software"])
    assert extended == (*DOMAINS, "health", "nutrition")


@pytest.mark.parametrize("bad", ["", "Health", "9lives", "a b", "x" * 33, "dom;ain", 5, None])
def test_a_malformed_configured_domain_is_bad_input(bad: object) -> None:
    with pytest.raises(BadInput) as info:
        domain_vocabulary([bad])  # type: ignore[list-item]
    assert info.value.exit_code == 65
    assert "knowledge.domains" in str(info.value.details)


def test_domains_are_normalised_deduplicated_and_checked() -> None:
    assert check_domains([" Materials", "optics", "materials"]) == ("materials", "optics")
    assert check_domains(["health"], domain_vocabulary(["health"])) == ("health",)
    with pytest.raises(BadInput) as info:
        check_domains(["alchemy"])
    assert info.value.exit_code == 65
    assert "alchemy" in info.value.message and "materials" in info.value.message


@pytest.mark.parametrize("category", STATE_CATEGORIES)
def test_every_state_category_passes(category: str) -> None:
    assert check_category(category) == category


@pytest.mark.parametrize("bad", ["Status", "decisions", "", "note", "status "])
def test_an_unknown_state_category_exits_65(bad: str) -> None:
    with pytest.raises(BadInput) as info:
        check_category(bad)
    assert info.value.exit_code == 65
    assert info.value.details["expected"] == list(STATE_CATEGORIES)


def test_status_filters() -> None:
    assert check_statuses(["candidate", "active", "candidate"]) == ("candidate", "active")
    with pytest.raises(UsageError) as info:
        check_statuses(["archived"])
    assert info.value.exit_code == 64


@pytest.mark.parametrize("name", ["p04-gigabit", "P06", "a", "x.y_z-1", "9" * 64])
def test_valid_project_names(name: str) -> None:
    assert check_project_name(f"  {name} ") == name


@pytest.mark.parametrize("name", ["-p", "p 04", "p/04", "é", "x" * 65, "p\nq", "../etc"])
def test_invalid_project_names(name: str) -> None:
    with pytest.raises(BadInput) as info:
        check_project_name(name)
    assert info.value.exit_code == 65


def test_empty_project_means_none_unless_a_name_is_required() -> None:
    assert check_project_name("  ") == ""
    with pytest.raises(BadInput):
        check_project_name("", allow_empty=False)


@given(st.text(max_size=80))
def test_project_name_check_accepts_or_refuses_never_crashes(text: str) -> None:
    try:
        out = check_project_name(text)
    except BadInput:
        return
    assert out == text.strip()
    assert out.isascii()


@pytest.mark.parametrize(
    ("event", "before", "after"),
    [
        ("memory.promoted", "candidate", "active"),
        ("memory.rejected", "candidate", "invalid"),
        ("memory.superseded", "active", "superseded"),
        ("memory.promoted", "active", None),
        ("memory.promoted", "invalid", None),
        ("memory.rejected", "active", None),
        ("memory.superseded", "candidate", None),
        ("memory.superseded", "superseded", None),
        ("memory.promoted", None, None),
        ("memory.stored", "candidate", None),
    ],
)
def test_status_transitions(event: str, before: str | None, after: str | None) -> None:
    assert status_after(event, before) == after
