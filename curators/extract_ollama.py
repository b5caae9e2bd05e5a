"""The LLM extractor: candidates from an interaction, by a model served by Ollama.

One schema-constrained chat per attempt with the pinned extraction prompt
(``extract_prompt``), tolerant reading of the reply (``extract_parse``), and
the curator's retry and backoff rules (``ollama_ask``). Whatever happens, the
result is a value: an ``Extraction`` with every raw reply, or an
``ExtractionFailure`` with the reason and every raw reply seen before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Final

import ollama

from mnemolog.eventlog.vocabulary_knowledge import DOMAINS

from .extract import Extraction, ExtractionFailure, ExtractionOutcome, InteractionText
from .extract_parse import ParsedCandidates, parse_candidates
from .extract_prompt import extraction_schema, prompt_sha256, render_messages
from .ollama_ask import DEFAULT_TIMEOUT, Failed, OllamaAsker

VERSION: Final = "1"


class OllamaExtractor:
    """Extractor backed by ``model`` at ``host``; ``domains`` is the home's domain vocabulary."""

    name: Final = "ollama"
    version: Final = VERSION

    def __init__(
        self,
        host: str,
        model: str,
        *,
        domains: Sequence[str] = DOMAINS,
        sleep: Callable[[float], object] = time.sleep,
        timeout: float = DEFAULT_TIMEOUT,
        client: ollama.Client | None = None,
    ) -> None:
        self._asker = OllamaAsker(host, model, sleep=sleep, timeout=timeout, client=client)
        self.domains = tuple(domains)
        self._sha = prompt_sha256(self.domains)

    @property
    def model(self) -> str:
        return self._asker.model

    @property
    def host(self) -> str:
        return self._asker.host

    def extract(self, interaction: InteractionText, *, max_retries: int = 3) -> ExtractionOutcome:
        messages = render_messages(
            interaction.prompt, interaction.response, interaction.project, self.domains
        )
        parse = partial(parse_candidates, project=interaction.project, domains=self.domains)
        answer = self._asker.ask(messages, extraction_schema(self.domains), parse, max_retries=max_retries)
        if isinstance(answer, Failed):
            return ExtractionFailure(
                reason=answer.reason,
                message=f"extractor {self.name}: {answer.message}",
                extractor=self.name,
                version=self.version,
                model=self.model,
                prompt_sha256=self._sha,
                attempts=answer.attempts,
                responses=answer.responses,
                details=answer.details,
            )
        parsed: ParsedCandidates = answer.value
        return Extraction(
            candidates=parsed.candidates,
            extractor=self.name,
            version=self.version,
            model=self.model,
            prompt_sha256=self._sha,
            warnings=parsed.warnings,
            attempts=answer.attempts,
            responses=answer.responses,
            input_tokens=answer.input_tokens,
            output_tokens=answer.output_tokens,
        )
