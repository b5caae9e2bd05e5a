"""Token-budget enforcement for atoms a model proposed.

Fail-soft, as the atomisation contract asks: an atom up to 25% over the budget
is kept and flagged with a warning; a larger one, or an empty one, is dropped
and reported so a pathological response cannot pollute the store silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mnemolog.curators.base import Atom, DroppedAtom
from mnemolog.curators.tokens import OVER_BUDGET_TOLERANCE, count_tokens, tolerated_tokens


@dataclass(frozen=True, slots=True)
class Budgeted:
    atoms: tuple[Atom, ...]
    dropped: tuple[DroppedAtom, ...]
    warnings: tuple[str, ...]


def enforce_token_budget(raw: Sequence[str], max_atom_tokens: int) -> Budgeted:
    """Keep, flag or drop each proposed atom against ``max_atom_tokens``.

    Surrounding whitespace is stripped from every atom (a model's padding is
    not content); the text is otherwise kept exactly as proposed.
    """
    limit = tolerated_tokens(max_atom_tokens)
    atoms: list[Atom] = []
    dropped: list[DroppedAtom] = []
    warnings: list[str] = []
    for index, proposed in enumerate(raw):
        text = proposed.strip()
        if not text:
            dropped.append(DroppedAtom(index=index, tokens=0, reason="empty"))
            warnings.append(f"atom {index} dropped: empty or whitespace only")
            continue
        tokens = count_tokens(text)
        if tokens > limit:
            dropped.append(DroppedAtom(index=index, tokens=tokens, reason="over_budget"))
            warnings.append(
                f"atom {index} dropped: {tokens} tokens exceeds max_atom_tokens="
                f"{max_atom_tokens} by more than {OVER_BUDGET_TOLERANCE:.0%} (limit {limit})"
            )
            continue
        over = tokens > max_atom_tokens
        if over:
            warnings.append(
                f"atom {index} kept over budget: {tokens} tokens > max_atom_tokens="
                f"{max_atom_tokens} (within the {OVER_BUDGET_TOLERANCE:.0%} tolerance, "
                f"limit {limit})"
            )
        atoms.append(Atom(text=text, tokens=tokens, over_budget=over))
    return Budgeted(atoms=tuple(atoms), dropped=tuple(dropped), warnings=tuple(warnings))
