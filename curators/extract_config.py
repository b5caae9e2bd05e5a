"""Which extractor to build: ``rules`` (always available) or ``ollama`` (needs a configured LLM)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from mnemolog.eventlog.errors import UsageError
from mnemolog.eventlog.vocabulary_knowledge import DOMAINS

from .base import TierLocked
from .config import DEFAULT_OLLAMA_HOST, HOST_ENV, MODEL_ENV, LlmConfig
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
    if name == "rules":
        return RulesExtractor()
    if name == "ollama":
        if llm is None:
            raise TierLocked(
                f"the ollama extractor needs an LLM and none is configured: set {MODEL_ENV} "
                f"(and {HOST_ENV}, default {DEFAULT_OLLAMA_HOST}), or use --extractor rules",
                extractor=name,
                env=[MODEL_ENV, HOST_ENV],
            )
        from .extract_ollama import OllamaExtractor
        from .ollama_ask import DEFAULT_TIMEOUT

        if timeout is None:
            timeout = DEFAULT_TIMEOUT
        return OllamaExtractor(
            llm.host, llm.model, domains=domains, sleep=sleep, timeout=timeout, client=client
        )
    raise UsageError(
        f"unknown extractor {name!r}; expected one of {list(EXTRACTOR_NAMES)}",
        expected=list(EXTRACTOR_NAMES),
        found=name,
    )
