"""A deterministic embedder for projection and substrate tests (the real ones have their own tests).

Each text's vector is a unit vector seeded by the text's SHA-256: equal texts
get equal vectors, different texts nearly orthogonal ones. It records what
it was asked, and can be switched to fail like an unreachable server or to
answer like a broken one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mnemolog.curators.embedding.embedder import EmbedderFailed, Vectors, check_vectors

DIM = 16


def fake_vec(text: str, dim: int = DIM) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    v = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


class FakeEmbedder:
    """Stands in for an Ollama model (`kind` "ollama"), so a home records it like one."""

    kind = "ollama"

    def __init__(self, model: str = "fake", *, dim: int = DIM, version: str = "1") -> None:
        self.model = model
        self.dim = dim
        self._version = version
        self.calls: list[list[str]] = []
        self.unreachable = False
        # Replaces the vectors returned (a broken server); raw output, checked like a reply.
        self.corrupt: Callable[[list[str]], Any] | None = None

    def _reach(self) -> None:
        if self.unreachable:
            raise EmbedderFailed("the fake server is unreachable", reason="unreachable")

    @property
    def version(self) -> str:
        """Like Ollama's digest, known only by asking the server."""
        self._reach()
        return self._version

    @property
    def model_id(self) -> str:
        return f"ollama/{self.model}@{self.version}"

    @property
    def texts(self) -> int:
        return sum(len(c) for c in self.calls)

    def embed(self, texts: Sequence[str]) -> Vectors:
        texts = list(texts)
        self.calls.append(texts)
        self._reach()
        if self.corrupt is not None:
            # Unchecked: what the substrate does with a broken reply is what is under test.
            return self.corrupt(texts)  # type: ignore[no-any-return]
        raw = np.vstack([fake_vec(t, self.dim) for t in texts]) if texts else np.zeros((0, self.dim))
        return check_vectors(raw, count=len(texts), dim=self.dim, where=f"fake {self.model}")
