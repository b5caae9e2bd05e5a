"""Governance events: `policy.set`, a namespace's policy changed field by field."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mnemolog.eventlog.vocabulary import events as v
from mnemolog.substrate.events.base import Payload
from mnemolog.substrate.events.limits import check_namespace

__all__ = ["AutoAtomiseMode", "Policy", "PolicySet", "PolicySetV1"]

AutoAtomiseMode = Literal["off", "deferred", "synchronous"]


class Policy(BaseModel):
    """A namespace's governance policy; unset fields inherit from the parent namespace."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    write: Literal["any", "none"] | None = None
    auto_atomise_mode: AutoAtomiseMode | None = None
    auto_atomise_threshold_cl100k: int | None = Field(default=None, ge=1)
    auto_atomise_max_atom_tokens: int | None = Field(default=None, ge=50, le=1000)
    auto_atomise_max_retries: int | None = Field(default=None, ge=0, le=10)
    curator: Literal["ollama", "rules"] | None = None
    # Memories of this namespace older than this are erased (`forget --expired`, long-lived processes).
    retention_days: int | None = Field(default=None, ge=1, le=36500)


class PolicySetV1(Payload):
    """`policy.set` tv 1 (written until tv 2 existed): the namespace's whole policy, or cleared.

    Kept to document the old shape; such payloads are read through the
    vocabulary's upcaster to tv 2, never written again.
    """

    TYPE = v.POLICY_SET
    TV = 1
    WRITABLE = False

    namespace: str
    policy: dict[str, Any] = Field(default_factory=dict)
    cleared: bool = False


class PolicySet(Payload):
    """`policy.set` tv 2: what the operator changed, field by field.

    `clear` drops the namespace's own policy first; then `changes` are set and
    `unset` fields removed. tv 1 recorded the merged result instead, so the log
    could not say which fields an operator actually touched.
    """

    TYPE = v.POLICY_SET
    TV = 2

    namespace: str
    changes: dict[str, Any] = Field(default_factory=dict)
    unset: list[str] = Field(default_factory=list)
    clear: bool = False

    @field_validator("namespace", mode="before")
    @classmethod
    def _namespace(cls, ns: Any) -> Any:
        return check_namespace(ns, allow_root=True)
