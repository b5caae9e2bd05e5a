"""Which extractor to build: ``rules`` (always available) or ``ollama`` (needs a configured LLM)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from mnemolog.eventlog.vocabulary_knowledge import DOMAINS

from .config import LlmConfig, rules_or_ollama
from .extract import Extractor
from .extract_rules import RulesExtractor

if TYPE_CHECKING:  # ollama is imported only when a model is asked
    import ollama

EXTRACTOR_NAMES: Final = ("rules", "ollama")


def make_extractor(
    name: str,
    llm: LlmConfig | None,
    *,
    domains: Sequence[str] = DOMAINS,
    sleep: Callable[[float], object] = time.sleep,
    timeout: float | None = None,
    client: ollama.Client | None = None,
) -> Extractor:
    """Extractor ``name``; TierLocked (exit 3) for ``ollama`` without a model, UsageError for others."""

    def with_model(llm: LlmConfig, timeout: float) -> Extractor:
        from .extract_ollama import OllamaExtractor

        return OllamaExtractor(
            llm.host, llm.model, domains=domains, sleep=sleep, timeout=timeout, client=client
        )

    return rules_or_ollama(
        "extractor", name, EXTRACTOR_NAMES, llm, rules=RulesExtractor, ollama=with_model, timeout=timeout
    )
