"""The LLM triager: a verdict on one candidate, by a model served by Ollama.

The reply is read tolerantly by ``answer.parse_verdict`` (the parser
extraction uses too); a reply with no recognisable verdict is malformed, and
is asked again under the curator's retry rules.
"""

from __future__ import annotations

from functools import partial
from typing import Final

from mnemolog.curators.knowledge.answer import ParsedVerdict, parse_verdict
from mnemolog.curators.knowledge.triage import TriageItem, TriageOutcome, TriageVerdict
from mnemolog.curators.knowledge.triage_prompt import prompt_sha256, render_messages, triage_schema
from mnemolog.curators.ollama_ask import DomainAsker, Failed

VERSION: Final = "1"


class OllamaTriager(DomainAsker):
    """Triager backed by ``model`` at ``host``; ``domains`` is the home's domain vocabulary."""

    version = VERSION
    role = "triager"

    @staticmethod
    def _prompt_sha256(domains: tuple[str, ...]) -> str:
        return prompt_sha256(domains)

    def triage(self, item: TriageItem, *, max_retries: int = 3) -> TriageOutcome:
        messages = render_messages(
            content=item.content,
            layer=item.layer,
            kind=item.kind,
            project=item.project,
            domains=item.domains,
            confidence=item.confidence,
            neighbours=item.neighbours,
            vocabulary=self.domains,
        )
        parse = partial(parse_verdict, item=item, domains=self.domains)
        answer = self._asker.ask(messages, triage_schema(self.domains), parse, max_retries=max_retries)
        if isinstance(answer, Failed):
            return self.failure(answer)
        parsed: ParsedVerdict = answer.value
        return TriageVerdict(
            verdict=parsed.verdict,
            confidence=parsed.confidence,
            reason=parsed.reason,
            project=parsed.project,
            domains=parsed.domains,
            triager=self.name,
            version=self.version,
            model=self.model,
            prompt_sha256=self._sha,
            conflicts_with=parsed.conflicts_with,
            warnings=parsed.warnings,
            attempts=answer.attempts,
            responses=answer.responses,
            input_tokens=answer.input_tokens,
            output_tokens=answer.output_tokens,
        )
