"""Which triager to build: ``rules`` (always available) or ``ollama`` (needs a configured LLM)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from mnemolog.eventlog.vocabulary_knowledge import DOMAINS

from .config import LlmConfig, rules_or_ollama
from .triage import Triager
from .triage_rules import RulesTriager

if TYPE_CHECKING:  # ollama is imported only when a model is asked
    import ollama

TRIAGER_NAMES: Final = ("ollama", "rules")


def make_triager(
    name: str,
    llm: LlmConfig | None,
    *,
    domains: Sequence[str] = DOMAINS,
    sleep: Callable[[float], object] = time.sleep,
    timeout: float | None = None,
    client: ollama.Client | None = None,
) -> Triager:
    """Triager ``name``; TierLocked (exit 3) for ``ollama`` without a model, UsageError for others."""

    def with_model(llm: LlmConfig, timeout: float) -> Triager:
        from .triage_ollama import OllamaTriager

        return OllamaTriager(
            llm.host, llm.model, domains=domains, sleep=sleep, timeout=timeout, client=client
        )

    return rules_or_ollama(
        "triager", name, TRIAGER_NAMES, llm, rules=RulesTriager, ollama=with_model, timeout=timeout
    )
