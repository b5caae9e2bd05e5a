"""File naming: the exact patterns the validator accepts, slugs, disambiguation."""

from __future__ import annotations

import random
import re
from datetime import date

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemolog.projections.vault import naming
from mnemolog.projections.vault.naming import NoteName, Scope, WikiName

TOPIC = re.compile(naming.TOPIC_PATTERN)


@pytest.mark.parametrize(
    ("filename", "parsed"),
    [
        ("feedback_debt_priority_order.md", NoteName("feedback", "debt_priority_order")),
        ("user_risk_tolerance.md", NoteName("user", "risk_tolerance")),
        (
            "decision_2026-q3_income_target.md",
            NoteName("decision", "income_target", Scope(2026, quarter=3)),
        ),
        (
            "project_2026_april_consulting_launch.md",
            NoteName("project", "consulting_launch", Scope(2026, month=4)),
        ),
        ("decision_2026_income_target.md", NoteName("decision", "income_target", Scope(2026))),
        ("reference_42.md", NoteName("reference", "42")),
    ],
)
def test_seed_examples_parse(filename: str, parsed: NoteName) -> None:
    assert naming.parse_note_filename(filename) == parsed
    assert parsed.filename == filename


@pytest.mark.parametrize(
    "filename",
    [
        "decision_2026-Q3_income_target.md",  # the reference validator rejects uppercase Q
        "decision_2026-q5_income_target.md",
        "Feedback_debt.md",
        "feedback_Debt_order.md",
        "feedback-debt-order.md",
        "feedback_debt__order.md",
        "feedback__debt.md",
        "feedback_debt_.md",
        "feedback_.md",
        "feedback.md",
        "wiki_page_x.md",
        "observation_x_y.md",
        "feedback_debt order.md",
        "feedback_débt_order.md",
        "feedback_debt_order.markdown",
        "feedback_debt_order.md.bak",
        "INDEX.md",
    ],
)
def test_names_that_are_not_notes(filename: str) -> None:
    assert naming.parse_note_filename(filename) is None
    [(field, message, severity)] = naming.check_note_filename(filename, "feedback")
    assert (field, severity) == ("filename", "error")
    assert filename in message


def test_prefix_must_agree_with_type() -> None:
    findings = naming.check_note_filename("user_risk_tolerance.md", "feedback")
    assert ("filename", "prefix 'user' disagrees with type 'feedback'", "error") in findings


def test_style_rules_are_warnings() -> None:
    dated = naming.check_note_filename("feedback_2026_debt_order.md", "feedback")
    assert [s for _, _, s in dated] == ["warning"]
    assert "evergreen" in dated[0][1]
    long_topic = naming.check_note_filename("user_a_b_c_d_e_f.md", "user")
    assert [s for _, _, s in long_topic] == ["warning"]
    assert naming.check_note_filename("decision_2026-q3_income_target.md", "decision") == []


@pytest.mark.parametrize(
    ("filename", "parsed"),
    [
        ("debt_payoff_methods.md", WikiName("debt_payoff_methods")),
        ("tax_strategy_2026.md", WikiName("tax_strategy", 2026)),
        ("2026.md", WikiName("2026")),
    ],
)
def test_wiki_names(filename: str, parsed: WikiName) -> None:
    assert naming.parse_wiki_filename(filename) == parsed
    assert parsed.filename == filename
    assert naming.check_wiki_filename(filename) == []


@pytest.mark.parametrize("filename", ["Tax.md", "tax-strategy.md", "tax_.md", "x", ".md"])
def test_bad_wiki_names(filename: str) -> None:
    assert naming.parse_wiki_filename(filename) is None
    assert naming.check_wiki_filename(filename)[0][2] == "error"


@pytest.mark.parametrize(
    ("name", "slice_name"),
    [("INDEX.md", ""), ("INDEX_decisions.md", "decisions"), ("INDEX_reference_001.md", "reference_001")],
)
def test_index_names(name: str, slice_name: str) -> None:
    assert naming.index_slice(name) == slice_name
    assert naming.index_filename(slice_name) == name


@pytest.mark.parametrize("name", ["index.md", "INDEX_.md", "INDEX_Decisions.md", "INDEX-x.md"])
def test_not_index_names(name: str) -> None:
    assert naming.index_slice(name) is None
    assert not naming.is_index_filename(name)


@pytest.mark.parametrize("slice_name", ["Decisions", "a-b", "_x", "x/y"])
def test_index_filename_refuses_bad_slices(slice_name: str) -> None:
    with pytest.raises(ValueError):
        naming.index_filename(slice_name)


@pytest.mark.parametrize(
    ("expires", "scope"),
    [
        (date(2026, 12, 31), "2026"),
        (date(2026, 9, 30), "2026-q3"),
        (date(2026, 3, 31), "2026-q1"),
        (date(2026, 4, 17), "2026_april"),
        (date(2026, 4, 30), "2026_april"),
        (date(2024, 2, 29), "2024_february"),
    ],
)
def test_scope_from_expiry(expires: date, scope: str) -> None:
    assert str(Scope.from_expiry(expires)) == scope


@pytest.mark.parametrize(
    ("title", "topic"),
    [
        ("Debt priority order", "debt_priority_order"),
        ("Café naïve Über", "cafe_naive_uber"),
        ("Q3 2026: income-target!", "q3_2026_income_target"),
        ("Python", "python_note"),
        ("", "untitled_note"),
        ("日本語", "untitled_note"),
        ("note", "untitled_note"),
        ("The history of the debt of the nation and its risk", "history_debt_nation_its_risk"),
        ("one two three four five six", "one_two_three_four_five"),
        ("2026-02-30", "about_2026_02_30"),
        ("2026", "about_2026"),
    ],
)
def test_slugify_examples(title: str, topic: str) -> None:
    assert naming.slugify_topic(title) == topic


@given(st.text())
def test_slug_is_always_a_valid_2_to_5_word_ascii_topic(title: str) -> None:
    topic = naming.slugify_topic(title)
    assert TOPIC.fullmatch(topic)
    assert topic.isascii()
    assert 2 <= len(topic.split("_")) <= 5
    assert all(len(w) <= naming.MAX_WORD_CHARS for w in topic.split("_"))
    assert naming.parse_note_filename(NoteName("user", topic).filename) == NoteName("user", topic)


_items = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=6),
        st.sampled_from(["debt_order", "risk_tolerance", "a_b_c_d_e"]),
        st.dates(),
    ),
    max_size=30,
    unique_by=lambda t: t[0],
)


@given(_items, st.randoms())
def test_unique_filenames_are_unique_valid_and_order_free(
    items: list[tuple[str, str, date]], rnd: random.Random
) -> None:
    names = [(k, NoteName("user", topic), (d, k)) for k, topic, d in items]
    result = naming.unique_filenames(names)
    assert set(result) == {k for k, _, _ in items}
    assert len(set(result.values())) == len(result)
    for filename in result.values():
        parsed = naming.parse_note_filename(filename)
        assert parsed is not None and 2 <= len(parsed.topic.split("_")) <= 5
    shuffled = list(names)
    rnd.shuffle(shuffled)
    assert naming.unique_filenames(shuffled) == result
    # The earliest of each colliding group keeps the plain name.
    for topic in {t for _, t, _ in items}:
        group = sorted((d, k) for k, t, d in items if t == topic)
        assert result[group[0][1]] == f"user_{topic}.md"


def test_a_later_memory_never_renames_an_earlier_one() -> None:
    first = naming.unique_filenames([("old", NoteName("user", "risk_tolerance"), (date(2026, 1, 1), "old"))])
    both = naming.unique_filenames(
        [
            ("old", NoteName("user", "risk_tolerance"), (date(2026, 1, 1), "old")),
            ("new", NoteName("user", "risk_tolerance"), (date(2026, 2, 1), "new")),
        ]
    )
    assert both["old"] == first["old"] == "user_risk_tolerance.md"
    assert both["new"] == f"user_risk_tolerance_{naming.suffix_for('new')}.md"


def test_suffix_lengthens_when_it_collides_with_a_taken_name() -> None:
    clash = naming.suffix_for("b")
    items = [
        ("a", NoteName("user", "x_y"), (date(2026, 1, 1), "a")),
        ("b", NoteName("user", "x_y"), (date(2026, 1, 2), "b")),
        ("c", NoteName("user", f"x_y_{clash}"), (date(2026, 1, 3), "c")),
    ]
    result = naming.unique_filenames(items)
    assert result["c"] == f"user_x_y_{clash}.md"
    assert result["b"] == f"user_x_y_{naming.suffix_for('b', 8)}.md"
