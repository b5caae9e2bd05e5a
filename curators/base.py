"""The curator protocol: what a curation returns and how a curation fails.

A curator turns one long memory into 2..10 self-contained atoms. This module
owns the shapes every curator shares (Atom, DroppedAtom, CurationResult), the
Curator protocol the substrate codes against, the atom-count envelope, the retry
backoff schedule, and the curator error classes (all under MnemologError).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, runtime_checkable

from mnemolog.curators.tokens import DEFAULT_ATOM_TOKENS
from mnemolog.eventlog.errors import Informational, MnemologError, UsageError

MIN_ATOMS: Final = 2
MAX_ATOMS: Final = 10

#: Seconds slept before retry k (0-based); retries past the table reuse its last entry.
BACKOFF: Final = (0.1, 0.5, 2.5)

FailureReason = Literal["malformed_output", "envelope", "unreachable", "timeout", "server_error", "too_small"]
FAILURE_REASONS: Final[frozenset[str]] = frozenset(
    ("malformed_output", "envelope", "unreachable", "timeout", "server_error", "too_small")
)


def backoff_delay(retry: int) -> float:
    """Seconds to wait before retry ``retry`` (0 is the first retry)."""
    return BACKOFF[min(retry, len(BACKOFF) - 1)]


def check_max_retries(n: int) -> int:
    """Return ``n`` when it is a usable retry budget (an integer >= 0), else raise UsageError."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise UsageError(
            f"max_retries must be an integer >= 0 (retries after the first attempt); got {n!r}",
            expected=">= 0",
            found=repr(n),
        )
    return n


@dataclass(frozen=True, slots=True)
class Atom:
    """One accepted atom. ``over_budget`` marks an atom kept within the 25% tolerance.

    ``context`` is the heading of the section the atom comes from (what makes a
    sentence in the middle of "Root cause" readable on its own) and ``title`` a
    short title for the memory the atom becomes; a curator that cannot tell
    leaves them None.
    """

    text: str
    tokens: int
    over_budget: bool
    title: str | None = None
    context: str | None = None


@dataclass(frozen=True, slots=True)
class DroppedAtom:
    """An atom the curator proposed and the budget refused.

    ``index`` is its position in the curator's raw output; ``reason`` is
    ``"empty"`` or ``"over_budget"``.
    """

    index: int
    tokens: int
    reason: str


@dataclass(frozen=True, slots=True)
class CurationResult:
    """Everything a curation produced, so the event that uses it can store all of it.

    ``responses`` holds the raw model output of every attempt (empty for the
    rules curator): replay reads them from the log and never calls a model.
    ``input_tokens``/``output_tokens`` are summed over all attempts.
    """

    atoms: tuple[Atom, ...]
    dropped: tuple[DroppedAtom, ...]
    warnings: tuple[str, ...]
    curator: str
    model: str | None
    prompt_sha256: str | None
    input_tokens: int
    output_tokens: int
    attempts: int
    responses: tuple[str, ...]


@runtime_checkable
class Curator(Protocol):
    """Splits a long memory into 2..10 atoms of at most ``max_atom_tokens`` tokens each."""

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> str | None: ...

    def curate(
        self, text: str, *, max_atom_tokens: int = DEFAULT_ATOM_TOKENS, max_retries: int = 3
    ) -> CurationResult:
        """Atomise ``text``.

        Raises SourceTooSmall when there is nothing to split, CuratorFailed when
        no acceptable split could be had, UsageError for a bad budget.
        """
        ...


class CuratorFailed(MnemologError):
    """No acceptable atomisation (exit 4). ``reason`` is one of FAILURE_REASONS.

    ``attempts`` and ``responses`` carry what the model said on every attempt,
    so an ``atomisation.failed`` event can keep the evidence, not just the verdict.
    """

    exit_code = 4
    slug = "curator_failed"

    def __init__(
        self,
        message: str,
        *,
        reason: FailureReason,
        attempts: int = 0,
        responses: tuple[str, ...] = (),
        **details: Any,
    ) -> None:
        if reason not in FAILURE_REASONS:
            raise ValueError(f"unknown curator failure reason {reason!r}")
        super().__init__(message, reason=reason, attempts=attempts, **details)
        self.reason: FailureReason = reason
        self.attempts = attempts
        self.responses = responses


class TierLocked(MnemologError):
    """The operation needs an LLM (or embedder) that is not configured (exit 3)."""

    exit_code = 3
    slug = "TIER_LOCKED"


class SourceTooSmall(Informational):
    """Fewer than two propositions: nothing to atomise (exit 1, informational)."""

    slug = "source_too_small"
    #: The reason an ``atomisation.failed``-style record would carry for this outcome.
    reason: Final = "too_small"
