"""Erasure events: content forgotten by destroying its data keys (crypto-shredding)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from mnemolog.eventlog.vocabulary import events as v
from mnemolog.substrate.events.base import Chained
from mnemolog.substrate.events.limits import check_text

__all__ = ["MAX_ERASED_PER_EVENT", "MemoryErased"]

#: A bulk erasure is written as several events of at most this many memories each.
MAX_ERASED_PER_EVENT = 500


class MemoryErased(Chained):
    """`memory.erased` tv 1: the content of `ids` (and of what derives from it) was forgotten.

    Names what was erased and why, never the content: `ids` the memories,
    `interactions` and `documents` the other subjects whose content went
    with them, `subjects` all of those, `keys` the ids of every data key
    destroyed (those the subjects' entries name, eventlog.sealing). The
    entries that held the content stay in the log, signed and sealed.
    """

    TYPE = v.MEMORY_ERASED
    TV = 1

    ids: list[str] = Field(max_length=MAX_ERASED_PER_EVENT)
    interactions: list[str] = Field(default_factory=list, max_length=MAX_ERASED_PER_EVENT)
    documents: list[str] = Field(default_factory=list, max_length=MAX_ERASED_PER_EVENT)
    subjects: list[str] = Field(default_factory=list, max_length=4 * MAX_ERASED_PER_EVENT)
    keys: list[str] = Field(default_factory=list, max_length=40 * MAX_ERASED_PER_EVENT)
    reason: str | None = None
    requested_by: str | None = None
    selector: dict[str, Any] = Field(default_factory=dict)

    @field_validator("reason", "requested_by", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return check_text(value, "reason")
