"""Events about the log itself: `log.rollback_accepted` (an operator's signed acceptance of lost entries)
and `log.not_carried` (a migrated log's stand-in for an old entry it does not carry)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from mnemolog.eventlog.vocabulary import events as v
from mnemolog.substrate.events.base import Payload

__all__ = ["NotCarried", "RollbackAccepted"]

Root = Annotated[bytes, Field(min_length=32, max_length=32)]


class RollbackAccepted(Payload):
    """`log.rollback_accepted` tv 1: the log lost entries it once had, and an operator accepted it.

    Written by `rebuild --accept-rollback` into the log as it now is, so the
    loss stays on the record: the size and root the home (its projection or
    its high-water mark, named by `source`) had recorded, and the size and
    root of the log the operator accepted instead.
    """

    TYPE = v.LOG_ROLLBACK_ACCEPTED
    TV = 1
    old_size: int = Field(ge=1)
    old_root: Root | None = None  # unknown when the projection predates recording roots
    new_size: int = Field(ge=1)
    new_root: Root
    source: str = Field(min_length=1, max_length=4096)


class NotCarried(Payload):
    """`log.not_carried` tv 1: in a log made by `migrate seal`, the old log's entry at this seq.

    Every entry of the old log keeps its seq in the new one (so back-chain
    pointers, request seqs and snapshot sizes stay true); the few that are
    not carried over (the old log's `key.rotated` entries: the new log has a
    key history of its own) leave this in their place, naming what stood there.
    """

    TYPE = v.LOG_NOT_CARRIED
    TV = 1
    type: str = Field(min_length=1, max_length=64)
    tv: int = Field(ge=0)
    reason: str = Field(min_length=1, max_length=4096)
