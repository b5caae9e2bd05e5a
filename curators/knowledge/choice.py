"""Which extractor or triager to build: ``rules`` (always available) or ``ollama`` (needs a configured LLM).

Both roles are chosen by one rule (``config.rules_or_ollama``) with the same
arguments; only the classes differ, so one factory (``make_curator``) builds
either, given the role.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, overload

from mnemolog.curators.config import LlmConfig, rules_or_ollama
from mnemolog.curators.knowledge.extract import Extractor
from mnemolog.curators.knowledge.extract_rules import RulesExtractor
from mnemolog.curators.knowledge.triage import Triager
from mnemolog.curators.knowledge.triage_rules import RulesTriager
from mnemolog.eventlog.vocabulary.knowledge import DOMAINS

if TYPE_CHECKING:  # ollama is imported only when a model is asked
    import ollama

    from mnemolog.curators.knowledge.extract_ollama import OllamaExtractor
    from mnemolog.curators.knowledge.triage_ollama import OllamaTriager

#: The names ``--extractor`` and ``--triager`` accept.
CURATOR_NAMES: Final = ("rules", "ollama")


Role = Literal["extractor", "triager"]


@overload
def make_curator(
    role: Literal["extractor"],
    name: str,
    llm: LlmConfig | None,
    *,
    domains: Sequence[str] = ...,
    sleep: Callable[[float], object] = ...,
    timeout: float | None = ...,
    client: ollama.Client | None = ...,
) -> Extractor: ...


@overload
def make_curator(
    role: Literal["triager"],
    name: str,
    llm: LlmConfig | None,
    *,
    domains: Sequence[str] = ...,
    sleep: Callable[[float], object] = ...,
    timeout: float | None = ...,
    client: ollama.Client | None = ...,
) -> Triager: ...


def make_curator(
    role: Role,
    name: str,
    llm: LlmConfig | None,
    *,
    domains: Sequence[str] = DOMAINS,
    sleep: Callable[[float], object] = time.sleep,
    timeout: float | None = None,
    client: ollama.Client | None = None,
) -> Extractor | Triager:
    """The ``role`` called ``name``; TierLocked (exit 3) for ``ollama`` without a model, else UsageError."""

    def with_model(llm: LlmConfig, timeout: float) -> Extractor | Triager:
        cls: type[OllamaExtractor | OllamaTriager]
        if role == "extractor":
            from mnemolog.curators.knowledge.extract_ollama import OllamaExtractor as cls
        else:
            from mnemolog.curators.knowledge.triage_ollama import OllamaTriager as cls
        return cls(llm.host, llm.model, domains=domains, sleep=sleep, timeout=timeout, client=client)

    rules: type[RulesExtractor | RulesTriager] = RulesExtractor if role == "extractor" else RulesTriager
    return rules_or_ollama(role, name, CURATOR_NAMES, llm, rules=rules, ollama=with_model, timeout=timeout)


def make_extractor(name: str, llm: LlmConfig | None, **options: Any) -> Extractor:
    """``make_curator("extractor", ...)``."""
    return make_curator("extractor", name, llm, **options)


def make_triager(name: str, llm: LlmConfig | None, **options: Any) -> Triager:
    """``make_curator("triager", ...)``."""
    return make_curator("triager", name, llm, **options)


__all__ = ["CURATOR_NAMES", "Role", "make_curator", "make_extractor", "make_triager"]
