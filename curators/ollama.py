"""The LLM curator: atomisation by a model served by Ollama.

Owns the conversation with the server (the real ``ollama`` client, one
non-streaming chat per attempt with the output constrained to the atoms JSON
schema), the retry loop for malformed or out-of-envelope replies, and the
mapping of transport failures to CuratorFailed reasons. Parsing and the token
budget are pure functions in ``parse`` and ``budget``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import ollama

from .base import (
    MAX_ATOMS,
    MIN_ATOMS,
    CurationResult,
    CuratorFailed,
    FailureReason,
    SourceTooSmall,
    backoff_delay,
    check_max_retries,
)
from .budget import enforce_token_budget
from .parse import MalformedOutput, extract_atoms
from .prompt import ATOMS_SCHEMA, prompt_sha256, render_messages
from .tokens import DEFAULT_ATOM_TOKENS, check_max_atom_tokens, count_tokens, tolerated_tokens

DEFAULT_TIMEOUT = 120.0


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
        self._client = client if client is not None else ollama.Client(host=host, timeout=timeout)

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
        where = f"{self._model} at {self.host}"
        try:
            response = self._client.chat(
                model=self._model, messages=messages, format=ATOMS_SCHEMA, stream=False
            )
        except ollama.ResponseError as exc:
            raise self._failure(
                f"the Ollama server answered HTTP {exc.status_code} for {where}: {exc.error}",
                "server_error",
                attempt,
                responses,
                status_code=exc.status_code,
            ) from exc
        except ConnectionError as exc:
            # The client turns a refused or failed connect into ConnectionError.
            # Retrying a server that is not there only delays the verdict.
            raise self._failure(
                f"the Ollama server at {self.host} is unreachable ({exc})",
                "unreachable",
                attempt,
                responses,
            ) from exc
        except Exception as exc:
            reason = _transport_reason(exc)
            if reason is None:
                raise
            raise self._failure(
                _transport_message(reason, where, self.timeout, exc), reason, attempt, responses
            ) from exc
        content = response.message.content or ""
        input_tokens = response.prompt_eval_count
        if input_tokens is None:
            input_tokens = sum(count_tokens(m["content"]) for m in messages)
        output_tokens = response.eval_count
        if output_tokens is None:
            output_tokens = count_tokens(content)
        return _Reply(content=content, input_tokens=input_tokens, output_tokens=output_tokens)

    def _failure(
        self,
        message: str,
        reason: FailureReason,
        attempt: int,
        responses: list[str],
        **details: object,
    ) -> CuratorFailed:
        return CuratorFailed(
            message,
            reason=reason,
            attempts=attempt + 1,
            responses=tuple(responses),
            model=self._model,
            host=self.host,
            **details,
        )


def _transport_reason(exc: BaseException) -> FailureReason | None:
    """Classify an exception escaping the ollama client, or None when it is not transport.

    The client's transport is httpx, which is ollama's dependency rather than
    ours; its exception classes are recognised by name along the MRO so this
    package imports only ollama.
    """
    httpx_names = {cls.__name__ for cls in type(exc).__mro__ if cls.__module__.startswith("httpx")}
    if "TimeoutException" in httpx_names or isinstance(exc, TimeoutError):
        return "timeout"
    if "ProtocolError" in httpx_names or "DecodingError" in httpx_names:
        return "server_error"
    if "TransportError" in httpx_names:
        return "unreachable"
    if isinstance(exc, ValueError):
        # A 200 whose body is not JSON (JSONDecodeError) or not a chat
        # response (pydantic's ValidationError): both subclass ValueError.
        return "server_error"
    return None


def _transport_message(reason: FailureReason, where: str, timeout: float, exc: BaseException) -> str:
    detail = f"{type(exc).__name__}: {exc}"
    if reason == "timeout":
        return f"the Ollama server did not answer within {timeout:g} s for {where} ({detail})"
    if reason == "server_error":
        return f"the Ollama server sent a broken or non-chat response for {where} ({detail})"
    return f"the Ollama server for {where} could not be reached ({detail})"
