"""mnemolog.curators: atomisation of long memories into 2..10 self-contained atoms.

The curator protocol and result types live in ``base``; token budgets in
``tokens``; the Ollama-backed LLM curator in ``ollama`` with its pinned prompt in
``prompt``; the deterministic offline curator in ``rules``; configuration and
the factory in ``config``. See docs/curators.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import (
        BACKOFF,
        Atom,
        CurationResult,
        Curator,
        CuratorFailed,
        DroppedAtom,
        SourceTooSmall,
        TierLocked,
    )
    from .config import LlmConfig, make_curator, resolve_llm
    from .ollama import OllamaCurator
    from .prompt import CURATOR_SYSTEM_PROMPT, prompt_sha256
    from .rules import RulesCurator
    from .tokens import (
        DEFAULT_ATOM_TOKENS,
        MAX_ATOM_TOKENS,
        MIN_ATOM_TOKENS,
        OVER_BUDGET_TOLERANCE,
        check_max_atom_tokens,
        count_tokens,
    )

# The package's names resolve on first use (PEP 562), so importing one
# submodule (the substrate needs `base`) never loads the ollama client,
# tiktoken or the rules curator.
_HOME = {
    **dict.fromkeys(
        (
            *("BACKOFF", "Atom", "CurationResult", "Curator", "CuratorFailed", "DroppedAtom"),
            *("SourceTooSmall", "TierLocked"),
        ),
        "base",
    ),
    **dict.fromkeys(("LlmConfig", "make_curator", "resolve_llm"), "config"),
    "OllamaCurator": "ollama",
    "CURATOR_SYSTEM_PROMPT": "prompt",
    "prompt_sha256": "prompt",
    "RulesCurator": "rules",
    **dict.fromkeys(
        (
            *("DEFAULT_ATOM_TOKENS", "MAX_ATOM_TOKENS", "MIN_ATOM_TOKENS", "OVER_BUDGET_TOLERANCE"),
            *("check_max_atom_tokens", "count_tokens"),
        ),
        "tokens",
    ),
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "BACKOFF",
    "CURATOR_SYSTEM_PROMPT",
    "DEFAULT_ATOM_TOKENS",
    "MAX_ATOM_TOKENS",
    "MIN_ATOM_TOKENS",
    "OVER_BUDGET_TOLERANCE",
    "Atom",
    "CurationResult",
    "Curator",
    "CuratorFailed",
    "DroppedAtom",
    "LlmConfig",
    "OllamaCurator",
    "RulesCurator",
    "SourceTooSmall",
    "TierLocked",
    "check_max_atom_tokens",
    "count_tokens",
    "make_curator",
    "prompt_sha256",
    "resolve_llm",
]
