"""Atomisation events: a request, its completion (with the curator's raw output), or its failure."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from mnemolog.eventlog.vocabulary import events as v
from mnemolog.substrate.events.base import Chained

__all__ = ["AtomisationCompleted", "AtomisationFailed", "AtomisationRequested"]


class AtomisationRequested(Chained):
    """`atomisation.requested` tv 2: a deferred policy asks a worker to atomise `source_id`."""

    TYPE = v.ATOMISATION_REQUESTED
    TV = 2

    source_id: str
    curator: str
    max_atom_tokens: int
    max_retries: int
    mode: Literal["deferred", "manual"] = "deferred"


class AtomisationCompleted(Chained):
    """Everything an auditor needs, LLM output included (docs/curators.md, the completion record)."""

    TYPE = v.ATOMISATION_COMPLETED
    TV = 3

    source_id: str
    atom_ids: list[str]
    curator: str
    model: str | None = None
    prompt_sha256: str | None = None
    input_tokens: int
    output_tokens: int
    atom_tokens: list[int]
    max_atom_tokens: int
    attempts: int
    dropped: list[dict[str, Any]] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    responses: list[str] = Field(default_factory=list)
    forced: bool = False
    previous_atom_ids: list[str] = Field(default_factory=list)
    request_seq: int | None = None


class AtomisationFailed(Chained):
    """`atomisation.failed` tv 2: why an atomisation (or a request) ended without atoms."""

    TYPE = v.ATOMISATION_FAILED
    TV = 2

    source_id: str
    curator: str
    reason: str
    message: str
    attempts: int = 0
    refused_atom_index: int | None = None
    atom_ids: list[str] = Field(default_factory=list)
    request_seq: int | None = None
