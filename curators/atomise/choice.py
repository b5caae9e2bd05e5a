"""Which atomiser to build: ``rules`` (offline) or ``ollama`` (needs a configured LLM)."""

from __future__ import annotations

from typing import Any, Final

from mnemolog.curators.base import Curator, TierLocked
from mnemolog.curators.config import DEFAULT_OLLAMA_HOST, HOST_ENV, MODEL_ENV, LlmConfig
from mnemolog.eventlog.errors import UsageError

CURATOR_NAMES: Final = ("ollama", "rules")
_OLLAMA_OPTIONS: Final = frozenset(("sleep", "timeout", "client"))


def make_curator(name: str, llm: LlmConfig | None, **kw: Any) -> Curator:
    """Build curator ``name`` ("ollama" or "rules").

    ``kw`` are OllamaCurator options (sleep, timeout, client); the rules
    curator needs none and ignores them, so callers can pass one set of
    options whichever curator a namespace chose.
    """
    unknown = sorted(set(kw) - _OLLAMA_OPTIONS)
    if unknown:
        raise UsageError(
            f"unknown curator option(s) {unknown}; expected some of {sorted(_OLLAMA_OPTIONS)}",
            found=unknown,
        )
    # Each curator is imported when it is built: the ollama client alone costs
    # a third of a second, which a store that never atomises must not pay.
    if name == "rules":
        from mnemolog.curators.atomise.rules import RulesCurator

        return RulesCurator()
    if name == "ollama":
        if llm is None:
            raise TierLocked(
                f"the ollama curator needs an LLM and none is configured: set {MODEL_ENV} "
                f"(and {HOST_ENV}, default {DEFAULT_OLLAMA_HOST}), or use the rules curator",
                curator=name,
                env=[MODEL_ENV, HOST_ENV],
            )
        from mnemolog.curators.atomise.ollama import OllamaCurator

        return OllamaCurator(llm.host, llm.model, **kw)
    raise UsageError(
        f"unknown curator {name!r}; expected one of {list(CURATOR_NAMES)}",
        expected=list(CURATOR_NAMES),
        found=name,
    )


__all__ = ["CURATOR_NAMES", "make_curator"]
