"""Which triager to build: ``rules`` (always available) or ``ollama`` (needs a configured LLM)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from mnemolog.eventlog.errors import UsageError
from mnemolog.eventlog.vocabulary_knowledge import DOMAINS

from .base import TierLocked
from .config import DEFAULT_OLLAMA_HOST, HOST_ENV, MODEL_ENV, LlmConfig
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
    if name == "rules":
        return RulesTriager()
    if name == "ollama":
        if llm is None:
            raise TierLocked(
                f"the ollama triager needs an LLM and none is configured: set {MODEL_ENV} "
                f"(and {HOST_ENV}, default {DEFAULT_OLLAMA_HOST}), or use --triager rules",
                triager=name,
                env=[MODEL_ENV, HOST_ENV],
            )
        from .ollama_ask import DEFAULT_TIMEOUT
        from .triage_ollama import OllamaTriager

        if timeout is None:
            timeout = DEFAULT_TIMEOUT
        return OllamaTriager(
            llm.host, llm.model, domains=domains, sleep=sleep, timeout=timeout, client=client
        )
    raise UsageError(
        f"unknown triager {name!r}; expected one of {list(TRIAGER_NAMES)}",
        expected=list(TRIAGER_NAMES),
        found=name,
    )
