"""The Ollama embedder: `/api/embed` on an Ollama server, through the `ollama` client.

Owns batching (``batch_size`` texts per request), retries with backoff for
transient failures (timeouts, 5xx, dropped connections; a refused connection
or a 4xx is final), the model's identity (its digest from `/api/tags`, so
that a model pulled again under the same name gets a new cache key), and the
check of every reply (count, dimension, finite) before a vector is used.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import ollama

from mnemolog.curators.base import backoff_delay
from mnemolog.curators.embedding.embedder import (
    DEFAULT_BATCH,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    EmbedderFailed,
    EmbedFailure,
    Vectors,
    check_vectors,
)

PROBE_TEXT = "mnemolog"


class OllamaEmbedder:
    kind = "ollama"

    def __init__(
        self,
        host: str,
        model: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        batch_size: int = DEFAULT_BATCH,
        max_retries: int = DEFAULT_RETRIES,
        dim: int | None = None,
        digest: str | None = None,
        sleep: Callable[[float], object] = time.sleep,
        client: ollama.Client | None = None,
    ) -> None:
        if not model:
            raise ValueError("OllamaEmbedder needs a model name")
        if batch_size < 1 or max_retries < 0:
            raise ValueError("batch_size >= 1 and max_retries >= 0")
        self.host = host
        self.model = model
        self.timeout = timeout
        self.batch_size = batch_size
        self.max_retries = max_retries
        self._dim = dim
        self._digest = digest
        self._sleep = sleep
        self._client = client if client is not None else ollama.Client(host=host, timeout=timeout)

    @property
    def where(self) -> str:
        return f"ollama {self.model} at {self.host}"

    # -- identity --------------------------------------------------------------------------

    @property
    def digest(self) -> str:
        """The model's digest as the server lists it (asked once)."""
        if self._digest is None:
            listed = self._call(self._client.list)
            names = {self.model, self.model + ":latest"}
            for m in listed.models:
                if m.model in names and m.digest:
                    self._digest = m.digest
                    break
            else:
                have = sorted(m.model or "" for m in listed.models)
                raise EmbedderFailed(
                    f"the Ollama server at {self.host} has no model {self.model!r} "
                    f"(it has {have or 'none'}); `ollama pull {self.model}` there",
                    reason="unavailable",
                    model=self.model,
                    host=self.host,
                )
        return self._digest

    @property
    def version(self) -> str:
        return f"sha256:{self.digest.removeprefix('sha256:')}"

    @property
    def model_id(self) -> str:
        return f"ollama/{self.model}@{self.digest.removeprefix('sha256:')[:16]}"

    @property
    def dim(self) -> int:
        """The model's dimension: the recorded one, else found by embedding a probe text."""
        if self._dim is None:
            self._dim = int(self._embed_batch([PROBE_TEXT], None).shape[1])
        return self._dim

    # -- embedding -------------------------------------------------------------------------

    def embed(self, texts: Sequence[str]) -> Vectors:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        parts = []
        for lo in range(0, len(texts), self.batch_size):
            part = self._embed_batch(texts[lo : lo + self.batch_size], self._dim)
            if self._dim is None:
                self._dim = int(part.shape[1])
            parts.append(part)
        return np.vstack(parts)

    def _embed_batch(self, texts: list[str], dim: int | None) -> Vectors:
        response = self._call(lambda: self._client.embed(model=self.model, input=texts, truncate=True))
        return check_vectors(response.embeddings, count=len(texts), dim=dim, where=self.where)

    def _call(self, fn: Callable[[], Any]) -> Any:
        """Run one request, retrying transient failures up to max_retries times."""
        attempt = 0
        while True:
            try:
                return fn()
            except Exception as exc:
                reason, final, message = self._classify(exc)
                if final or attempt >= self.max_retries:
                    raise EmbedderFailed(
                        f"{message} (after {attempt + 1} attempt(s))",
                        reason=reason,
                        attempts=attempt + 1,
                        model=self.model,
                        host=self.host,
                    ) from exc
                self._sleep(backoff_delay(attempt))
                attempt += 1

    def _classify(self, exc: Exception) -> tuple[EmbedFailure, bool, str]:
        """(reason, whether retrying is pointless, message) for an exception from the client."""
        if isinstance(exc, ollama.ResponseError):
            final = exc.status_code < 500
            return (
                "server_error",
                final,
                f"the Ollama server answered HTTP {exc.status_code} to an embed request for "
                f"{self.where}: {exc.error}",
            )
        if isinstance(exc, ConnectionError):
            # The client turns a refused connect into ConnectionError: nobody is listening.
            return "unreachable", True, f"the Ollama server at {self.host} is unreachable ({exc})"
        names = {c.__name__ for c in type(exc).__mro__ if c.__module__.startswith("httpx")}
        detail = f"{type(exc).__name__}: {exc}"
        if "TimeoutException" in names or isinstance(exc, TimeoutError):
            return (
                "timeout",
                False,
                f"the Ollama server did not answer within {self.timeout:g} s for {self.where} ({detail})",
            )
        if names & {"TransportError", "ProtocolError", "DecodingError"} or isinstance(exc, ValueError):
            # A dropped connection, or a 200 whose body is not an embed response.
            message = f"the Ollama server sent a broken response for {self.where} ({detail})"
            return "server_error", False, message
        raise exc
