"""The LLM curator: atomisation by a model served by Ollama.

Owns the retry loop for malformed or out-of-envelope atomisations and the
CuratorFailed raised when none is usable. Each attempt is one schema-constrained
chat through ``ollama_ask.OllamaAsker.chat``, which owns the conversation with
the server and the mapping of transport failures to failure reasons. Parsing and the token
budget are pure functions in ``parse`` and ``budget``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import ollama

from mnemolog.curators.atomise.budget import enforce_token_budget
from mnemolog.curators.atomise.prompt import ATOMS_SCHEMA, prompt_sha256, render_messages
from mnemolog.curators.base import (
    MAX_ATOMS,
    MIN_ATOMS,
    CurationResult,
    CuratorFailed,
    FailureReason,
    SourceTooSmall,
    backoff_delay,
    check_max_retries,
)
from mnemolog.curators.ollama_ask import DEFAULT_TIMEOUT, Failed, OllamaAsker
from mnemolog.curators.parse import MalformedOutput, extract_atoms
from mnemolog.curators.tokens import DEFAULT_ATOM_TOKENS, check_max_atom_tokens, tolerated_tokens


@dataclass(frozen=True, slots=True)
class _Reply:
    content: str
    input_tokens: int
    output_tokens: int


class OllamaCurator:
    """Curator backed by ``model`` on the Ollama server at ``host``.

    ``sleep`` is injectable so tests observe the backoff without waiting;
    ``client`` replaces the ``ollama.Client`` built from host and timeout.
    """

    name = "ollama"

    def __init__(
        self,
        host: str,
        model: str,
        *,
        sleep: Callable[[float], object] = time.sleep,
        timeout: float = DEFAULT_TIMEOUT,
        client: ollama.Client | None = None,
    ) -> None:
        if not model:
            raise ValueError("OllamaCurator needs a model name")
        self.host = host
        self.model: str | None = model
        self._model = model
        self.timeout = timeout
        self._sleep = sleep
        self._asker = OllamaAsker(host, model, sleep=sleep, timeout=timeout, client=client)

    def curate(
        self, text: str, *, max_atom_tokens: int = DEFAULT_ATOM_TOKENS, max_retries: int = 3
    ) -> CurationResult:
        budget = check_max_atom_tokens(max_atom_tokens)
        retries = check_max_retries(max_retries)
        if not text.strip():
            raise SourceTooSmall(
                "nothing to atomise: the memory is empty or whitespace only",
                found_chars=len(text),
            )
        messages = render_messages(text, budget)
        responses: list[str] = []
        input_tokens = output_tokens = 0
        reason: FailureReason = "malformed_output"
        problem = ""
        for attempt in range(retries + 1):
            if attempt:
                self._sleep(backoff_delay(attempt - 1))
            reply = self._chat(messages, attempt=attempt, responses=responses)
            responses.append(reply.content)
            input_tokens += reply.input_tokens
            output_tokens += reply.output_tokens
            try:
                raw = extract_atoms(reply.content)
            except MalformedOutput as exc:
                reason, problem = "malformed_output", str(exc)
                continue
            budgeted = enforce_token_budget(raw, budget)
            kept = len(budgeted.atoms)
            if not MIN_ATOMS <= kept <= MAX_ATOMS:
                reason = "envelope"
                problem = (
                    f"expected {MIN_ATOMS}..{MAX_ATOMS} atoms within the token budget "
                    f"(max_atom_tokens={budget}, dropped above {tolerated_tokens(budget)}); "
                    f"found {kept} after dropping {len(budgeted.dropped)} of {len(raw)} proposed"
                )
                continue
            return CurationResult(
                atoms=budgeted.atoms,
                dropped=budgeted.dropped,
                warnings=budgeted.warnings,
                curator=self.name,
                model=self._model,
                prompt_sha256=prompt_sha256(),
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                attempts=attempt + 1,
                responses=tuple(responses),
            )
        attempts = retries + 1
        raise CuratorFailed(
            f"curator {self.name} ({self._model} at {self.host}) gave no usable atomisation "
            f"in {attempts} attempt(s); last attempt: {problem}",
            reason=reason,
            attempts=attempts,
            responses=tuple(responses),
            model=self._model,
            host=self.host,
        )

    def _chat(self, messages: list[dict[str, str]], *, attempt: int, responses: list[str]) -> _Reply:
        reply = self._asker.chat(messages, ATOMS_SCHEMA)
        if isinstance(reply, Failed):
            # reply.details name the model and host (and the HTTP status where there is one).
            raise CuratorFailed(
                reply.message,
                reason=reply.reason,
                attempts=attempt + 1,
                responses=tuple(responses),
                **reply.details,
            ) from reply.cause
        content, input_tokens, output_tokens = reply
        return _Reply(content=content, input_tokens=input_tokens, output_tokens=output_tokens)
