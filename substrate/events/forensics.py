"""Forensic events: commitments that make bundles provably complete."""

from __future__ import annotations

from pydantic import field_validator

from mnemolog.eventlog.vocabulary import events as v
from mnemolog.substrate.events.base import Payload

__all__ = ["HeadsCommitted"]


class HeadsCommitted(Payload):
    """`heads.committed` tv 1: the root of the Merkle map of every memory's newest touching entry
    among the first `size` entries (eventlog.heads), over `count` memories."""

    TYPE = v.HEADS_COMMITTED
    TV = 1

    size: int
    root: bytes
    count: int

    @field_validator("root")
    @classmethod
    def _root(cls, root: bytes) -> bytes:
        if len(root) != 32:
            raise ValueError("a heads root is 32 bytes")
        return root
