"""mnemolog.curators: what turns text into other text or vectors, never touching the log.

Rooms by feature: ``atomise/`` (long memories into atoms), ``embedding/``
(text to vectors), ``knowledge/`` (interactions into candidates, candidates
into verdicts). Shared by them: result types and errors (``base``), token
counting (``tokens``), LLM configuration and the atomiser factory
(``config``), asking an Ollama model with retries (``ollama_ask``), tolerant
reading of model answers (``parse``) and the failure of a model call
(``outcome``). This module re-exports the atomisation API, resolved on first
use. See docs/curators.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mnemolog.curators.atomise.choice import make_curator
    from mnemolog.curators.atomise.ollama import OllamaCurator
    from mnemolog.curators.atomise.prompt import CURATOR_SYSTEM_PROMPT, prompt_sha256
    from mnemolog.curators.atomise.rules import RulesCurator
    from mnemolog.curators.base import (
        BACKOFF,
        Atom,
        CurationResult,
        Curator,
        CuratorFailed,
        DroppedAtom,
        SourceTooSmall,
        TierLocked,
    )
    from mnemolog.curators.config import LlmConfig, resolve_llm
    from mnemolog.curators.tokens import (
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
    **dict.fromkeys(("LlmConfig", "resolve_llm"), "config"),
    "make_curator": "atomise.choice",
    "OllamaCurator": "atomise.ollama",
    "CURATOR_SYSTEM_PROMPT": "atomise.prompt",
    "prompt_sha256": "atomise.prompt",
    "RulesCurator": "atomise.rules",
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
