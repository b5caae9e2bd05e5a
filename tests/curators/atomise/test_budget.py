"""Fail-soft token-budget enforcement for proposed atoms."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mnemolog.curators.atomise.budget import enforce_token_budget
from mnemolog.curators.tokens import count_tokens, tolerated_tokens


def words(n: int) -> str:
    text = " ".join(["word"] * n)
    assert count_tokens(text) == n
    return text


def test_keep_flag_and_drop_around_the_tolerance() -> None:
    result = enforce_token_budget([words(200), words(201), words(250), words(251)], 200)
    assert [(a.tokens, a.over_budget) for a in result.atoms] == [
        (200, False),
        (201, True),
        (250, True),
    ]
    assert [(d.index, d.tokens, d.reason) for d in result.dropped] == [(3, 251, "over_budget")]
    assert [w.split(":")[0] for w in result.warnings] == [
        "atom 1 kept over budget",
        "atom 2 kept over budget",
        "atom 3 dropped",
    ]


def test_empty_and_whitespace_atoms_are_dropped() -> None:
    result = enforce_token_budget(["", " \n\t", "A fact."], 50)
    assert [a.text for a in result.atoms] == ["A fact."]
    assert [(d.index, d.tokens, d.reason) for d in result.dropped] == [
        (0, 0, "empty"),
        (1, 0, "empty"),
    ]


def test_surrounding_whitespace_is_not_content() -> None:
    result = enforce_token_budget(["\n  A fact with padding.  \n"], 50)
    assert result.atoms[0].text == "A fact with padding."
    assert result.atoms[0].tokens == count_tokens("A fact with padding.")


@given(
    st.lists(st.text(max_size=120) | st.integers(0, 80).map(words), max_size=12),
    st.integers(50, 60),
)
def test_every_proposed_atom_is_kept_or_reported(raw: list[str], budget: int) -> None:
    result = enforce_token_budget(raw, budget)
    assert len(result.atoms) + len(result.dropped) == len(raw)
    dropped = {d.index for d in result.dropped}
    kept = [raw[i].strip() for i in range(len(raw)) if i not in dropped]
    assert [a.text for a in result.atoms] == kept
    assert all(0 < a.tokens <= tolerated_tokens(budget) for a in result.atoms)
    assert all(a.over_budget == (a.tokens > budget) for a in result.atoms)
    assert sum(a.over_budget for a in result.atoms) + len(result.dropped) == len(result.warnings)
