"""Result types, the backoff schedule and the curator error classes."""

from __future__ import annotations

import dataclasses

import pytest

from mnemolog.curators.base import (
    BACKOFF,
    FAILURE_REASONS,
    Atom,
    CurationResult,
    CuratorFailed,
    DroppedAtom,
    SourceTooSmall,
    TierLocked,
    backoff_delay,
    check_max_retries,
)
from mnemolog.eventlog.errors import Informational, MnemologError, UsageError


def test_backoff_schedule() -> None:
    assert BACKOFF == (0.1, 0.5, 2.5)
    assert [backoff_delay(k) for k in range(5)] == [0.1, 0.5, 2.5, 2.5, 2.5]


@pytest.mark.parametrize("n", [0, 1, 3, 10])
def test_retry_budgets_accepted(n: int) -> None:
    assert check_max_retries(n) == n


@pytest.mark.parametrize("n", [-1, True, 1.0, "3"])
def test_bad_retry_budgets(n: object) -> None:
    with pytest.raises(UsageError):
        check_max_retries(n)  # type: ignore[arg-type]


def test_results_are_frozen() -> None:
    atom = Atom(text="a", tokens=1, over_budget=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        atom.text = "b"  # type: ignore[misc]
    result = CurationResult(
        atoms=(atom,),
        dropped=(DroppedAtom(index=1, tokens=900, reason="over_budget"),),
        warnings=(),
        curator="rules",
        model=None,
        prompt_sha256=None,
        input_tokens=1,
        output_tokens=1,
        attempts=1,
        responses=(),
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.attempts = 2  # type: ignore[misc]
    assert result == dataclasses.replace(result)


def test_curator_failed_carries_reason_attempts_and_responses() -> None:
    failure = CuratorFailed("no atoms", reason="timeout", attempts=2, responses=("x",), model="m", host=None)
    assert isinstance(failure, MnemologError)
    assert (failure.exit_code, failure.slug) == (4, "curator_failed")
    assert failure.reason == "timeout"
    assert failure.responses == ("x",)
    assert failure.to_json() == {
        "ok": False,
        "error": "curator_failed",
        "message": "no atoms",
        "exit_code": 4,
        "details": {"reason": "timeout", "attempts": 2, "model": "m"},
    }


def test_failure_reasons_are_closed() -> None:
    assert {
        "malformed_output",
        "envelope",
        "unreachable",
        "timeout",
        "server_error",
        "too_small",
    } == FAILURE_REASONS
    with pytest.raises(ValueError, match="unknown curator failure reason"):
        CuratorFailed("x", reason="flaky")  # type: ignore[arg-type]


def test_tier_locked_and_source_too_small() -> None:
    locked = TierLocked("needs an LLM")
    assert (locked.exit_code, locked.slug) == (3, "TIER_LOCKED")
    small = SourceTooSmall("one sentence")
    assert isinstance(small, Informational)
    assert (small.exit_code, small.slug, small.reason) == (1, "source_too_small", "too_small")
