"""From what configuration a model-backed curator is built.

Owns the LLM configuration (host and model, from arguments or the
MNEMOLOG_OLLAMA_HOST / MNEMOLOG_OLLAMA_MODEL environment variables) and the
rule every room uses to choose ``rules`` or ``ollama``. No model configured
means the LLM tier is locked; the caller decides whether that is an error
(TierLocked) or a fall back to rules.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from mnemolog.curators.base import TierLocked
from mnemolog.eventlog.errors import UsageError

HOST_ENV: Final = "MNEMOLOG_OLLAMA_HOST"
MODEL_ENV: Final = "MNEMOLOG_OLLAMA_MODEL"
#: Ollama's own default address, used when a model is named but no host is.
DEFAULT_OLLAMA_HOST: Final = "http://127.0.0.1:11434"


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LlmConfig:
    host: str
    model: str


def resolve_llm(
    host: str | None, model: str | None, *, environ: Mapping[str, str] | None = None
) -> LlmConfig | None:
    """The configured LLM, or None when no model is named anywhere.

    An argument wins over its environment variable; an empty value counts as
    unset. A model without a host talks to Ollama's default local address.
    """
    env = os.environ if environ is None else environ
    chosen_model = model if model is not None else env.get(MODEL_ENV)
    chosen_host = host if host is not None else env.get(HOST_ENV)
    if not chosen_model or not chosen_model.strip():
        return None
    return LlmConfig(host=(chosen_host or "").strip() or DEFAULT_OLLAMA_HOST, model=chosen_model)


def rules_or_ollama(
    role: str,
    name: str,
    names: Sequence[str],
    llm: LlmConfig | None,
    *,
    rules: Callable[[], T],
    ollama: Callable[[LlmConfig, float], T],
    timeout: float | None,
) -> T:
    """The ``role`` (extractor, triager) called ``name``: ``rules()`` or ``ollama(llm, timeout)``.

    TierLocked (exit 3) for ``ollama`` without a model, UsageError for a name
    not in ``names``. ``timeout`` None means the asker's default; the ollama
    modules are imported only here, once a model is known to be configured,
    so a command that never asks a model never imports the client.
    """
    if name == "rules":
        return rules()
    if name == "ollama":
        if llm is None:
            raise TierLocked(
                f"the ollama {role} needs an LLM and none is configured: set {MODEL_ENV} "
                f"(and {HOST_ENV}, default {DEFAULT_OLLAMA_HOST}), or use --{role} rules",
                **{role: name},
                env=[MODEL_ENV, HOST_ENV],
            )
        from mnemolog.curators.ollama_ask import DEFAULT_TIMEOUT

        return ollama(llm, DEFAULT_TIMEOUT if timeout is None else timeout)
    raise UsageError(
        f"unknown {role} {name!r}; expected one of {list(names)}",
        expected=list(names),
        found=name,
    )
