"""Context events: documents ingested and removed (with their chunks), and every pack built.

`document.ingested` carries a document version's chunks with their text, so
a pack can prove what it quoted; `context.built` carries every entry a pack
included (its text too) and every entry trimmed, so `context show`
re-renders the pack from the log alone and a bundle's verifier re-renders
it and checks the hash the event signed.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mnemolog.eventlog.bundle import packview
from mnemolog.eventlog.errors import BadInput
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.projections.context.chunker import MAX_HEADING_CHARS, MAX_MAX_CHARS
from mnemolog.substrate.events.base import Chained, Payload

__all__ = [
    "MAX_PATH_CHARS",
    "MAX_QUERY_CHARS",
    "ChunkRecord",
    "ContextBuilt",
    "DocumentIngested",
    "DocumentRemoved",
    "IncludedRecord",
    "TierRecord",
    "TrimmedRecord",
]

MAX_PATH_CHARS = 4096
MAX_QUERY_CHARS = 8192
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _sha256(x: str) -> str:
    if not _SHA256.fullmatch(x):
        raise BadInput("sha256 must be 64 lowercase hex digits", field="sha256")
    return x


def _no_nul(value: str, what: str) -> str:
    if "\x00" in value:
        raise BadInput(f"{what} contains a NUL character", field=what)
    return value


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ChunkRecord(_Part):
    index: int = Field(ge=0)
    heading_path: list[str] = Field(default_factory=list, max_length=6)
    text: str = Field(max_length=MAX_MAX_CHARS)
    start: int = Field(ge=0)
    end: int = Field(ge=0)

    @field_validator("heading_path")
    @classmethod
    def _headings(cls, hs: list[str]) -> list[str]:
        for h in hs:
            if len(h) > MAX_HEADING_CHARS:
                raise BadInput(
                    f"a heading is longer than {MAX_HEADING_CHARS} characters", field="heading_path"
                )
        return hs


class DocumentIngested(Payload):
    """`document.ingested` tv 1: a version of a file (its bytes' SHA-256 and size) and its chunks."""

    TYPE = v.DOCUMENT_INGESTED
    TV = 2

    document_id: str
    path: str = Field(min_length=1, max_length=MAX_PATH_CHARS)
    name: str = Field(min_length=1, max_length=MAX_PATH_CHARS)
    root: str = Field(max_length=MAX_PATH_CHARS)
    project: str = Field(default="", max_length=64)
    sha256: str
    size: int = Field(ge=0)
    encoding: str = Field(max_length=64)
    version: int = Field(ge=1)
    max_chars: int = Field(ge=1, le=MAX_MAX_CHARS)
    markdown: bool
    chunks: list[ChunkRecord]

    @field_validator("sha256")
    @classmethod
    def _sha(cls, x: str) -> str:
        return _sha256(x)

    @field_validator("path", "name", "root")
    @classmethod
    def _paths(cls, x: str) -> str:
        return _no_nul(x, "path")


class DocumentRemoved(Payload):
    """`document.removed` tv 1: a file gone from a directory that was ingested again."""

    TYPE = v.DOCUMENT_REMOVED
    TV = 1

    document_id: str
    path: str = Field(max_length=MAX_PATH_CHARS)
    reason: Literal["gone"] = "gone"


class IncludedRecord(_Part):
    tier: int = Field(ge=1, le=5)
    source: Literal["state", "memory", "chunk"]
    id: str
    label: str
    score: float | None = None
    chars: int = Field(ge=0)
    cost: int = Field(ge=0)
    text: str


class TrimmedRecord(_Part):
    tier: int = Field(ge=1, le=5)
    source: Literal["state", "memory", "chunk"]
    id: str
    score: float | None = None
    chars: int = Field(ge=0)
    cost: int = Field(ge=0)
    reason: Literal["tier_share", "over_budget"]


class TierRecord(_Part):
    tier: int = Field(ge=1, le=5)
    name: Literal["state", "identity", "project", "domain", "chunks"]
    share: int = Field(ge=0)
    allocated: int = Field(ge=0)
    used: int = Field(ge=0)
    included: list[IncludedRecord]
    trimmed: list[TrimmedRecord]


class ContextBuilt(Chained):
    """`context.built` tv 1: what a prompt was given, entry by entry, and the SHA-256 of its bytes."""

    TYPE = v.CONTEXT_BUILT
    TV = 2

    pack_id: str
    format: Literal["mnemolog/context-pack/v1"]
    query: str = Field(max_length=MAX_QUERY_CHARS)
    project: str | None = None
    now: int
    budget: int = Field(ge=1)
    unit: Literal["chars", "tokens"]
    config: dict[str, Any]
    sha256: str
    chars: int = Field(ge=0)
    cost: int = Field(ge=0)
    tiers: list[TierRecord]
    # The memories included, in pack order: what the `touches` rule reads.
    memory_ids: list[str] = Field(default_factory=list)

    @field_validator("sha256")
    @classmethod
    def _sha(cls, x: str) -> str:
        return _sha256(x)

    @field_validator("tiers")
    @classmethod
    def _order(cls, tiers: list[TierRecord]) -> list[TierRecord]:
        if [t.name for t in tiers] != list(packview.TIERS):
            raise BadInput(f"tiers must be {', '.join(packview.TIERS)} in that order", field="tiers")
        return tiers
