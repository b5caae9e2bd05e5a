"""Which extractor or triager to build: ``rules`` (always available) or ``ollama`` (needs a configured LLM).

Both roles are chosen by one rule (``config.rules_or_ollama``) with the same
arguments; only the classes differ, so they are built here side by side.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from mnemolog.curators.config import LlmConfig, rules_or_ollama
from mnemolog.curators.knowledge.extract import Extractor
from mnemolog.curators.knowledge.extract_rules import RulesExtractor
from mnemolog.curators.knowledge.triage import Triager
from mnemolog.curators.knowledge.triage_rules import RulesTriager
from mnemolog.eventlog.vocabulary.knowledge import DOMAINS

if TYPE_CHECKING:  # ollama is imported only when a model is asked
    import ollama

#: The names ``--extractor`` and ``--triager`` accept.
CURATOR_NAMES: Final = ("rules", "ollama")


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
        from mnemolog.curators.knowledge.extract_ollama import OllamaExtractor

        return OllamaExtractor(
            llm.host, llm.model, domains=domains, sleep=sleep, timeout=timeout, client=client
        )

    return rules_or_ollama(
        "extractor", name, CURATOR_NAMES, llm, rules=RulesExtractor, ollama=with_model, timeout=timeout
    )


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
        from mnemolog.curators.knowledge.triage_ollama import OllamaTriager

        return OllamaTriager(
            llm.host, llm.model, domains=domains, sleep=sleep, timeout=timeout, client=client
        )

    return rules_or_ollama(
        "triager", name, CURATOR_NAMES, llm, rules=RulesTriager, ollama=with_model, timeout=timeout
    )


__all__ = ["CURATOR_NAMES", "make_extractor", "make_triager"]
