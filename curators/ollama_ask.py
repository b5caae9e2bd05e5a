"""Asking an Ollama model for one JSON answer, with the curator's retry and backoff rules.

The extractor and the triager both ask a model one question and parse its
answer; the atomising curator asks the same way and keeps its own retry
rules. This module owns that conversation for them: one non-streaming chat
per attempt with the reply constrained to a JSON schema, a retry after
``backoff_delay`` when the reply does not parse (``MalformedOutput``), no
retry when the server is unreachable, errs or times out (asking again only
delays the verdict), and the mapping of transport failures to the curator's
failure reasons. Every raw reply is kept, whatever the outcome, so the event
that records the answer or the failure holds the evidence.

Failures are returned as values (``Failed``), never raised: the knowledge
loop records them as events instead of losing them.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

import ollama

from mnemolog.curators.base import FailureReason, backoff_delay, check_max_retries
from mnemolog.curators.outcome import ModelFailure
from mnemolog.curators.parse import MalformedOutput
from mnemolog.curators.tokens import count_tokens
from mnemolog.eventlog.vocabulary.knowledge import DOMAINS

T = TypeVar("T")

DEFAULT_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class Answered(Generic[T]):
    value: T
    attempts: int
    responses: tuple[str, ...]
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Failed:
    reason: FailureReason
    message: str
    attempts: int
    responses: tuple[str, ...]
    details: dict[str, object]
    #: The transport exception behind a failure to get any reply (kept for ``raise ... from``).
    cause: BaseException | None = field(default=None, compare=False, repr=False)


class OllamaAsker:
    """One model on one server; ``sleep`` and ``client`` are injectable for tests."""

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
            raise ValueError("an Ollama model name is required")
        self.host = host
        self.model = model
        self.timeout = timeout
        self._sleep = sleep
        self._client = client if client is not None else ollama.Client(host=host, timeout=timeout)

    def ask(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        parse: Callable[[str], T],
        *,
        max_retries: int,
    ) -> Answered[T] | Failed:
        """Ask until ``parse`` accepts a reply or the retries run out."""
        retries = check_max_retries(max_retries)
        responses: list[str] = []
        input_tokens = output_tokens = 0
        problem = ""
        for attempt in range(retries + 1):
            if attempt:
                self._sleep(backoff_delay(attempt - 1))
            reply = self.chat(messages, schema)
            if isinstance(reply, Failed):
                return Failed(reply.reason, reply.message, attempt + 1, tuple(responses), reply.details)
            content, used_in, used_out = reply
            responses.append(content)
            input_tokens += used_in
            output_tokens += used_out
            try:
                value = parse(content)
            except MalformedOutput as exc:
                problem = str(exc)
                continue
            return Answered(value, attempt + 1, tuple(responses), input_tokens, output_tokens)
        attempts = retries + 1
        return Failed(
            "malformed_output",
            f"{self.model} at {self.host} gave no usable answer in {attempts} attempt(s); "
            f"last attempt: {problem}",
            attempts,
            tuple(responses),
            {"model": self.model, "host": self.host},
        )

    def chat(self, messages: list[dict[str, str]], schema: dict[str, Any]) -> tuple[str, int, int] | Failed:
        """One attempt: the reply's content and its input and output tokens, or why there is none.

        ``Failed.attempts`` is 0 here; the caller knows which attempt it was.
        """
        where = f"{self.model} at {self.host}"
        details: dict[str, object] = {"model": self.model, "host": self.host}
        try:
            response = self._client.chat(model=self.model, messages=messages, format=schema, stream=False)
        except ollama.ResponseError as exc:
            return Failed(
                "server_error",
                f"the Ollama server answered HTTP {exc.status_code} for {where}: {exc.error}",
                0,
                (),
                {**details, "status_code": exc.status_code},
                exc,
            )
        except ConnectionError as exc:
            # The client turns a refused or failed connect into ConnectionError.
            # Retrying a server that is not there only delays the verdict.
            return Failed(
                "unreachable", f"the Ollama server at {self.host} is unreachable ({exc})", 0, (), details, exc
            )
        except Exception as exc:
            reason = _transport_reason(exc)
            if reason is None:
                raise
            return Failed(reason, _transport_message(reason, where, self.timeout, exc), 0, (), details, exc)
        content = response.message.content or ""
        used_in = response.prompt_eval_count
        if used_in is None:
            used_in = sum(count_tokens(m["content"]) for m in messages)
        used_out = response.eval_count
        if used_out is None:
            used_out = count_tokens(content)
        return content, used_in, used_out


class DomainAsker(ABC):
    """What the ollama extractor and triager share: one asker and the home's domain vocabulary.

    A subclass names its prompt's fingerprint (``_prompt_sha256``), which
    depends on the domains the prompt lists.
    """

    name: Final = "ollama"

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
        self._sha = self._prompt_sha256(self.domains)

    @staticmethod
    @abstractmethod
    def _prompt_sha256(domains: tuple[str, ...]) -> str: ...

    @property
    def model(self) -> str:
        return self._asker.model

    @property
    def host(self) -> str:
        return self._asker.host

    #: What the subclass is, in a failure's message: ``extractor`` or ``triager``.
    role: str = "curator"

    #: The subclass's curator version, recorded with every answer.
    version: str

    def failure(self, answer: Failed) -> ModelFailure:
        """The one shape of a call that gave no usable answer, for either role."""
        return ModelFailure(
            reason=answer.reason,
            message=f"{self.role} {self.name}: {answer.message}",
            curator=self.name,
            version=self.version,
            model=self.model,
            prompt_sha256=self._sha,
            attempts=answer.attempts,
            responses=answer.responses,
            details=answer.details,
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
