"""Events of the link graph beyond its creation: an edge taken back."""

from __future__ import annotations

from typing import Any

from pydantic import field_validator

from mnemolog.eventlog.vocabulary import events as v
from mnemolog.substrate.events.base import Chained
from mnemolog.substrate.events.limits import check_relation, check_text
from mnemolog.substrate.events.memory import Relation

__all__ = ["LinkRemoved"]


class LinkRemoved(Chained):
    """`link.removed` tv 1: every edge src -> dst of `relation` created before it is taken back.

    The edges stay in the log (a bundle shows both events); the projection and
    the views drop them from the graph.
    """

    TYPE = v.LINK_REMOVED
    TV = 1

    src: str
    dst: str
    relation: Relation
    reason: str | None = None

    @field_validator("relation", mode="before")
    @classmethod
    def _relation(cls, relation: Any) -> Any:
        return check_relation(relation)

    @field_validator("reason", mode="before")
    @classmethod
    def _reason(cls, reason: Any) -> Any:
        return check_text(reason, "reason")
