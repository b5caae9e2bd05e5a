"""Asking an Ollama model for one JSON answer, with the curator's retry and backoff rules.

The extractor and the triager both ask a model one question and parse its
answer. This module owns that conversation for them: one non-streaming chat
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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import ollama

from .base import FailureReason, backoff_delay, check_max_retries
from .ollama import _transport_message, _transport_reason
from .parse import MalformedOutput
from .tokens import count_tokens

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
            reply = self._chat(messages, schema)
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

    def _chat(self, messages: list[dict[str, str]], schema: dict[str, Any]) -> tuple[str, int, int] | Failed:
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
            )
        except ConnectionError as exc:
            return Failed(
                "unreachable", f"the Ollama server at {self.host} is unreachable ({exc})", 0, (), details
            )
        except Exception as exc:
            reason = _transport_reason(exc)
            if reason is None:
                raise
            return Failed(reason, _transport_message(reason, where, self.timeout, exc), 0, (), details)
        content = response.message.content or ""
        used_in = response.prompt_eval_count
        if used_in is None:
            used_in = sum(count_tokens(m["content"]) for m in messages)
        used_out = response.eval_count
        if used_out is None:
            used_out = count_tokens(content)
        return content, used_in, used_out
