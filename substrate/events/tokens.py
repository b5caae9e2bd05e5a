"""Token events: `token.issued` and `token.revoked`, the scoped tokens a tenant's home accepts.

A token is shown once, when it is made, and never written anywhere: the log
holds the SHA-256 of its secret, what it may do (its level, the namespaces
and projects it is bound to, when it expires, its rate) and who revoked it
when. Who could read the log learns what each token may do, never a token.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from mnemolog.eventlog.errors import BadInput
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.substrate.events.base import Payload
from mnemolog.substrate.events.limits import check_namespace, check_text

__all__ = ["MAX_BINDINGS", "Level", "TokenIssued", "TokenRevoked"]

Level = Literal["read", "write", "admin"]
#: At most this many namespaces, and as many projects, bind one token.
MAX_BINDINGS = 64
MAX_RATE_PER_MINUTE = 1_000_000
_TOKEN_ID = re.compile(r"[a-z0-9]{8,32}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_PROJECT = re.compile(r"[^\x00-\x1f/\\]{1,128}")


def _token_id(x: Any) -> Any:
    if not isinstance(x, str) or not _TOKEN_ID.fullmatch(x):
        raise BadInput(f"a token id is 8-32 lowercase letters and digits; found {x!r:.60}", field="token_id")
    return x


class TokenIssued(Payload):
    """`token.issued` tv 1: a token whose secret hashes to `sha256` may act at `level`.

    `namespaces` (empty: every namespace) bind its reads and writes to those
    namespaces and the ones below them; `projects` (empty: every project) to
    memories of those projects (and of no project). `expires_at` is µs since
    the epoch (None: never); `rate_per_minute` bounds its requests (None: the
    server's default).
    """

    TYPE = v.TOKEN_ISSUED
    TV = 1

    token_id: str
    sha256: str
    level: Level
    namespaces: list[str] = Field(default_factory=list, max_length=MAX_BINDINGS)
    projects: list[str] = Field(default_factory=list, max_length=MAX_BINDINGS)
    expires_at: int | None = Field(default=None, ge=0, le=2**62)
    rate_per_minute: int | None = Field(default=None, ge=1, le=MAX_RATE_PER_MINUTE)
    label: str | None = None

    @field_validator("token_id", mode="before")
    @classmethod
    def _id(cls, x: Any) -> Any:
        return _token_id(x)

    @field_validator("sha256", mode="before")
    @classmethod
    def _hash(cls, x: Any) -> Any:
        if not isinstance(x, str) or not _SHA256.fullmatch(x):
            raise BadInput("sha256 must be 64 lowercase hex digits", field="sha256")
        return x

    @field_validator("namespaces", mode="before")
    @classmethod
    def _namespaces(cls, x: Any) -> Any:
        if not isinstance(x, list):
            return x
        return sorted({check_namespace(ns) for ns in x})

    @field_validator("projects", mode="before")
    @classmethod
    def _projects(cls, x: Any) -> Any:
        if not isinstance(x, list):
            return x
        for p in x:
            if not isinstance(p, str) or not _PROJECT.fullmatch(p):
                raise BadInput(
                    f"a project is 1-128 characters, no / or control; found {p!r:.60}", field="projects"
                )
        return sorted(set(x))

    @field_validator("label", mode="before")
    @classmethod
    def _label(cls, x: Any) -> Any:
        return check_text(x, "label", 200)


class TokenRevoked(Payload):
    """`token.revoked` tv 1: the token `token_id` is accepted no more, from this entry on."""

    TYPE = v.TOKEN_REVOKED
    TV = 1

    token_id: str
    reason: str | None = None

    @field_validator("token_id", mode="before")
    @classmethod
    def _id(cls, x: Any) -> Any:
        return _token_id(x)

    @field_validator("reason", mode="before")
    @classmethod
    def _reason(cls, x: Any) -> Any:
        return check_text(x, "reason", 1000)
