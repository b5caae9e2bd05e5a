"""LLM configuration and the curator factory."""

from __future__ import annotations

import pytest

from mnemolog.curators.atomise.choice import make_curator
from mnemolog.curators.atomise.ollama import OllamaCurator
from mnemolog.curators.atomise.rules import RulesCurator
from mnemolog.curators.base import TierLocked
from mnemolog.curators.config import (
    DEFAULT_OLLAMA_HOST,
    HOST_ENV,
    MODEL_ENV,
    LlmConfig,
    resolve_llm,
)
from mnemolog.eventlog.errors import UsageError

ENV = {HOST_ENV: "http://10.0.0.5:11434", MODEL_ENV: "gemma-env"}


def test_arguments_win_over_the_environment() -> None:
    assert resolve_llm("http://h:1", "m", environ=ENV) == LlmConfig("http://h:1", "m")


def test_environment_fills_missing_arguments() -> None:
    assert resolve_llm(None, None, environ=ENV) == LlmConfig("http://10.0.0.5:11434", "gemma-env")
    assert resolve_llm("http://h:1", None, environ=ENV) == LlmConfig("http://h:1", "gemma-env")


def test_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MODEL_ENV, "from-process")
    monkeypatch.delenv(HOST_ENV, raising=False)
    assert resolve_llm(None, None) == LlmConfig(DEFAULT_OLLAMA_HOST, "from-process")


@pytest.mark.parametrize(
    ("host", "model", "environ"),
    [
        (None, None, {}),
        (None, None, {HOST_ENV: "http://h:1"}),
        (None, "", ENV),
        (None, None, {MODEL_ENV: "  "}),
    ],
)
def test_no_model_means_no_llm(host: str | None, model: str | None, environ: dict[str, str]) -> None:
    assert resolve_llm(host, model, environ=environ) is None


def test_a_model_without_a_host_uses_ollamas_default() -> None:
    assert resolve_llm(None, "m", environ={}) == LlmConfig(DEFAULT_OLLAMA_HOST, "m")
    assert resolve_llm("", "m", environ={}) == LlmConfig(DEFAULT_OLLAMA_HOST, "m")


def test_factory_builds_each_curator() -> None:
    rules = make_curator("rules", None)
    assert isinstance(rules, RulesCurator)
    llm = make_curator("ollama", LlmConfig("http://127.0.0.1:1", "m"), timeout=3.0)
    assert isinstance(llm, OllamaCurator)
    assert (llm.name, llm.model, llm.host, llm.timeout) == ("ollama", "m", "http://127.0.0.1:1", 3.0)


def test_rules_ignores_ollama_options() -> None:
    assert isinstance(make_curator("rules", None, timeout=1.0), RulesCurator)


def test_ollama_without_an_llm_is_tier_locked() -> None:
    with pytest.raises(TierLocked) as caught:
        make_curator("ollama", None)
    assert caught.value.exit_code == 3
    assert MODEL_ENV in caught.value.message
    assert HOST_ENV in caught.value.message


def test_unknown_curator_and_options_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="unknown curator 'gpt'"):
        make_curator("gpt", None)
    with pytest.raises(UsageError, match="unknown curator option"):
        make_curator("rules", None, temperature=0.2)
