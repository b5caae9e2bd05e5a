"""The LLM extractor: candidates from an interaction, by a model served by Ollama.

One schema-constrained chat per attempt with the pinned extraction prompt
(``extract_prompt``), tolerant reading of the reply (``answer``), and
the curator's retry and backoff rules (``ollama_ask``). Whatever happens, the
result is a value: an ``Extraction`` with every raw reply, or an
``ModelFailure`` with the reason and every raw reply seen before it.
"""

from __future__ import annotations

from functools import partial
from typing import Final

from mnemolog.curators.knowledge.answer import ParsedCandidates, parse_candidates
from mnemolog.curators.knowledge.extract import Extraction, ExtractionOutcome, InteractionText
from mnemolog.curators.knowledge.extract_prompt import extraction_schema, prompt_sha256, render_messages
from mnemolog.curators.ollama_ask import DomainAsker, Failed

VERSION: Final = "1"


class OllamaExtractor(DomainAsker):
    """Extractor backed by ``model`` at ``host``; ``domains`` is the home's domain vocabulary."""

    version = VERSION
    role = "extractor"

    @staticmethod
    def _prompt_sha256(domains: tuple[str, ...]) -> str:
        return prompt_sha256(domains)

    def extract(self, interaction: InteractionText, *, max_retries: int = 3) -> ExtractionOutcome:
        messages = render_messages(
            interaction.prompt, interaction.response, interaction.project, self.domains
        )
        parse = partial(parse_candidates, project=interaction.project, domains=self.domains)
        answer = self._asker.ask(messages, extraction_schema(self.domains), parse, max_retries=max_retries)
        if isinstance(answer, Failed):
            return self.failure(answer)
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
