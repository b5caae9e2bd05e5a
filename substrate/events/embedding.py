"""Embedding events: `embedder.configured`, the home's choice of embedding model.

Vectors are derived data, but which model derives them is a fact of the
home: it decides every vector ranking. So the choice, and every change of
it, is a signed event; replay reads the model id (the cache key) from it and
never needs to ask an embedder what it is.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from mnemolog.curators.embedding.embedder import EMBED_KINDS, MAX_DIM
from mnemolog.eventlog.errors import BadInput
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.substrate.events.base import Payload
from mnemolog.substrate.events.limits import check_text

__all__ = ["EmbedderConfigured"]

MAX_MODEL_CHARS = 256
MAX_VERSION_CHARS = 512


class EmbedderConfigured(Payload):
    """`embedder.configured` tv 1: the home embeds with this model from now on (or not at all).

    `kind` is "off" (pure BM25: no model, no vectors) or an embedder kind with
    its `model`, the `version` that pins its weights (a package version and
    file digest, or the server's digest), its dimension `dim`, and `model_id`,
    the key under which its vectors are cached.
    """

    TYPE = v.EMBEDDER_CONFIGURED
    TV = 1

    kind: str
    model: str | None = None
    version: str | None = None
    dim: int | None = Field(default=None, ge=1, le=MAX_DIM)
    model_id: str | None = None

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, x: Any) -> Any:
        if x not in EMBED_KINDS:
            raise BadInput(
                f"embedder kind must be one of {', '.join(EMBED_KINDS)}; found {x!r}", field="kind"
            )
        return x

    @field_validator("model", "model_id", mode="before")
    @classmethod
    def _model(cls, x: Any) -> Any:
        return check_text(x, "model", MAX_MODEL_CHARS)

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, x: Any) -> Any:
        return check_text(x, "version", MAX_VERSION_CHARS)

    @model_validator(mode="after")
    def _complete(self) -> EmbedderConfigured:
        given = [self.model, self.version, self.dim, self.model_id]
        if self.kind == "off":
            if any(x is not None for x in given):
                raise BadInput("embedder kind off has no model, version, dim or model_id", field="kind")
        elif any(x is None for x in given):
            raise BadInput(f"embedder kind {self.kind} needs model, version, dim and model_id", field="model")
        return self
