"""Scoped tokens: what a caller holding a token may read and write, and the one check of it.

A `Scope` is what a token allows: a level (read < write < admin), the
namespaces it is bound to (empty: all of them) with the namespaces declared
shared with those (read only), and the projects it is bound to (empty: all
of them; memories of no project stay visible). Every door applies it the
same way:

  * `Access` is what an operation needs: a level, and the arguments naming
    memories, namespaces and projects it reads or writes. `authorise` checks
    a scope against it before the operation runs; a refusal is
    `ScopeRefused` (exit 5: HTTP 403, an MCP tool error), counted and
    recorded in the home (`Refusals`), and nothing runs.
  * While the operation runs the scope is *applied* (a context variable):
    every read that lists memories (recall, search, list, context packs,
    candidates, stats) is filtered by it in the projection's own query
    (`Filters.within`), so what lies outside is never fetched, and a write
    is refused at the governance check that every write passes.

Shared namespaces are declared in a home's config.toml:

    [sharing]
    "team/shared" = ["agents"]      # readable by tokens bound to agents or below it
    "handbook" = ["*"]              # readable by every namespace-bound token

The token itself: `mlt.<tenant>.<token id>.<secret>`. The tenant part lets a
server holding many homes open the right one before it looks the token up;
the home keeps only the SHA-256 of the secret (`token.issued`).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import hashlib
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from mnemolog.eventlog.errors import BadInput, MnemologError, UsageError
from mnemolog.projections.recall.query import Filters

__all__ = [
    "LEVELS",
    "Access",
    "Level",
    "RateLimited",
    "RateLimiter",
    "Refusals",
    "Scope",
    "ScopeRefused",
    "Scoped",
    "TokenRefused",
    "applied",
    "current",
    "hash_secret",
    "mint",
    "parse_expiry",
    "parse_token",
    "refusal_counts",
    "sharing",
]

Level = Literal["read", "write", "admin"]
LEVELS: tuple[Level, ...] = ("read", "write", "admin")
_RANK = {lvl: i for i, lvl in enumerate(LEVELS)}
TOKEN_PREFIX = "mlt"
#: The tenant part of a token for a home served alone.
NO_TENANT = "_"
_TOKEN = re.compile(r"mlt\.([a-z0-9][a-z0-9-]{0,62}|_)\.([a-z0-9]{8,32})\.([A-Za-z0-9_-]{32,128})")


class ScopeRefused(MnemologError):
    """The token's scope does not allow this (exit 5; HTTP 403); nothing ran."""

    exit_code = 5
    slug = "scope_refused"


class TokenRefused(MnemologError):
    """No valid token: unknown, revoked, expired or malformed (HTTP 401)."""

    exit_code = 5
    slug = "unauthorized"


class RateLimited(MnemologError):
    """The token sent more requests than its rate allows (HTTP 429); nothing ran."""

    exit_code = 6  # transient, as a lock timeout is
    slug = "rate_limited"


def _under(ns: str, roots: Sequence[str]) -> bool:
    return any(ns == r or ns.startswith(r.rstrip("/") + "/") for r in roots)


@dataclass(frozen=True)
class Scope:
    """What one token allows (see the module docstring). `Scope.full()` allows everything."""

    level: Level
    namespaces: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()
    projects: tuple[str, ...] = ()
    token_id: str | None = None
    tenant: str | None = None
    rate_per_minute: int | None = None

    @classmethod
    def full(cls) -> Scope:
        return cls("admin")

    @property
    def bound(self) -> bool:
        """True when the scope restricts namespaces or projects."""
        return bool(self.namespaces or self.projects)

    def allows(self, level: Level) -> bool:
        return _RANK[self.level] >= _RANK[level]

    def reads_namespace(self, ns: str) -> bool:
        return not self.namespaces or _under(ns, self.namespaces + self.shared)

    def writes_namespace(self, ns: str) -> bool:
        return not self.namespaces or _under(ns, self.namespaces)

    def reads_project(self, project: str | None) -> bool:
        return not self.projects or not project or project in self.projects

    def sees(self, memory: Mapping[str, Any]) -> bool:
        """Whether a memory (a row with namespace and project) is readable in this scope."""
        return self.reads_namespace(str(memory.get("namespace", ""))) and self.reads_project(
            memory.get("project") or ""
        )

    def writes(self, memory: Mapping[str, Any]) -> bool:
        return (
            self.allows("write")
            and self.writes_namespace(str(memory.get("namespace", "")))
            and self.reads_project(memory.get("project") or "")
        )

    def within(self) -> tuple[str, ...] | None:
        """The namespace roots a read is confined to (None: no bound)."""
        return self.namespaces + self.shared if self.namespaces else None

    def projects_within(self) -> tuple[str, ...] | None:
        return self.projects or None

    def describe(self) -> str:
        parts: list[str] = [self.level]
        if self.namespaces:
            parts.append("namespaces " + ", ".join(self.namespaces))
        if self.shared:
            parts.append("shared " + ", ".join(self.shared))
        if self.projects:
            parts.append("projects " + ", ".join(self.projects))
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "token_id": self.token_id,
            "tenant": self.tenant,
            "level": self.level,
            "namespaces": list(self.namespaces),
            "shared": list(self.shared),
            "projects": list(self.projects),
        }


@dataclass(frozen=True)
class Access:
    """What an operation needs: a level, and which of its arguments name what it touches.

    `ids` name memories it reads (or writes, at level write and above),
    `namespaces` the namespaces it writes into (or reads, for a read),
    `projects` the projects it touches, `project_data` the projects whose
    trusted state it reads or writes. `tenant_wide` marks an operation
    whose answer is about the whole home (verifying its log): a bound
    scope may not run it whatever its level.
    """

    level: Level
    ids: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    projects: tuple[str, ...] = ()
    tenant_wide: bool = False
    #: Memories only read, even by a write (a link's far end).
    read_ids: tuple[str, ...] = ()
    #: Projects whose home-wide data (trusted state) it touches: a bound token must list them.
    project_data: tuple[str, ...] = ()
    #: Memories whose whole signed history it returns (history, bundles): every memory those
    #: entries touch must be in the scope too.
    histories: tuple[str, ...] = ()


# -- the ambient scope ----------------------------------------------------------------------

_CURRENT: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("mnemolog_scope", default=None)


def current() -> Scope | None:
    """The scope applied to the operation running in this context (None: unscoped)."""
    return _CURRENT.get()


@contextlib.contextmanager
def applied(scope: Scope | None) -> Iterator[None]:
    """Apply `scope` to everything this context runs until the block ends."""
    token = _CURRENT.set(scope)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def bound(f: Filters, sc: Scope | None) -> Filters:
    """The filters confined to a token's scope, if one is applied (the one confinement of reads)."""
    if sc is None or not sc.bound:
        return f
    return replace(f, within=sc.within(), projects_within=sc.projects_within())


def everything(sc: Scope | None) -> Filters:
    """Every memory, archived or not and of any status, that the scope lets its holder see."""
    return bound(Filters(include_archived=True, statuses=()), sc)


# -- tokens ---------------------------------------------------------------------------------


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def mint(tenant: str | None) -> tuple[str, str, str]:
    """A new token: (token, token id, SHA-256 of its secret)."""
    token_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    return f"{TOKEN_PREFIX}.{tenant or NO_TENANT}.{token_id}.{secret}", token_id, hash_secret(secret)


def parse_token(text: str) -> tuple[str | None, str, str]:
    """(tenant or None, token id, SHA-256 of the secret); TokenRefused for anything else."""
    m = _TOKEN.fullmatch(text.strip()) if isinstance(text, str) and len(text) < 300 else None
    if m is None:
        raise TokenRefused("a valid bearer token is required (Authorization: Bearer mlt....)")
    tenant = None if m.group(1) == NO_TENANT else m.group(1)
    return tenant, m.group(2), hash_secret(m.group(3))


_DURATION = re.compile(r"(\d{1,6})([mhdw])")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_expiry(text: str | None, now_us: int) -> int | None:
    """`--expires`: a duration (`90m`, `12h`, `30d`, `2w`) or an ISO 8601 UTC time, as µs."""
    if text is None or text == "":
        return None
    m = _DURATION.fullmatch(text.strip())
    if m:
        return now_us + int(m.group(1)) * _UNIT_S[m.group(2)] * 1_000_000
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise UsageError(
            f"--expires: a duration such as 30d or an ISO 8601 UTC time; found {text[:40]!r}", field="expires"
        ) from exc
    if when.tzinfo is None:
        raise UsageError(f"--expires: say the time zone (Z for UTC); found {text[:40]!r}", field="expires")
    us = int(when.timestamp() * 1_000_000)
    if us <= now_us:
        raise UsageError(f"--expires: {text[:40]!r} is in the past", field="expires")
    return us


def sharing(raw: Mapping[str, Any], where: str = "config.toml") -> dict[str, tuple[str, ...]]:
    """The `[sharing]` table: shared namespace -> the namespaces (or "*") it is shared with."""
    from mnemolog.substrate.events.limits import check_namespace

    table = raw.get("sharing", {})
    if not isinstance(table, dict):
        raise BadInput(f"{where}: [sharing] must be a table", file=where, field="sharing")
    out: dict[str, tuple[str, ...]] = {}
    for ns, readers in table.items():
        check_namespace(ns)
        if not isinstance(readers, list) or not all(isinstance(r, str) for r in readers):
            raise BadInput(
                f'{where}: sharing.{ns} must be a list of namespaces (or "*")', file=where, field="sharing"
            )
        out[ns] = tuple(r if r == "*" else check_namespace(r) for r in readers)
    return out


def shared_with(table: Mapping[str, Sequence[str]], namespaces: Sequence[str]) -> tuple[str, ...]:
    """The namespaces declared shared with any of `namespaces` (and not already among them)."""
    if not namespaces:
        return ()
    out = [
        ns
        for ns, readers in sorted(table.items())
        if not _under(ns, namespaces)
        and any(r == "*" or any(_under(own, [r]) for own in namespaces) for r in readers)
    ]
    return tuple(out)


# -- refusals and rates ----------------------------------------------------------------------

MAX_REFUSAL_LOG = 1 << 20


@dataclass
class Refusals:
    """Refusals counted per token, and recorded one JSON line each in `state/refusals.jsonl`.

    The record is local, not a log entry: a caller probing its scope must not
    be able to grow the signed log. The file is rotated at 1 MiB (one old
    generation kept); the counts live as long as the process.
    """

    path: Path
    counts: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, scope: Scope, operation: str, exc: MnemologError) -> None:
        key = scope.token_id or "(none)"
        line = json.dumps(
            {
                "ts": dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
                "token_id": scope.token_id,
                "operation": operation,
                "reason": exc.message,
            },
            ensure_ascii=False,
        )
        with self._lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            with contextlib.suppress(OSError):  # a record that cannot be kept must not hide the refusal
                if self.path.exists() and self.path.stat().st_size > MAX_REFUSAL_LOG:
                    os.replace(self.path, self.path.with_suffix(".jsonl.1"))
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                with os.fdopen(fd, "a", encoding="utf-8") as f:
                    f.write(line + "\n")


def refusal_counts(path: Path) -> dict[str, int]:
    """Refusals recorded per token id in a home's refusal record (both generations)."""
    counts: dict[str, int] = {}
    for p in (path.with_suffix(".jsonl.1"), path):
        try:
            lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                tid = json.loads(line).get("token_id")
            except (ValueError, AttributeError):
                continue  # a torn or foreign line counts for nothing
            if isinstance(tid, str):
                counts[tid] = counts.get(tid, 0) + 1
    return counts


class RateLimiter:
    """A token bucket per token: `rate` requests a minute, in bursts of at most that many."""

    def __init__(self, default_per_minute: int | None) -> None:
        self.default = default_per_minute
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, scope: Scope, now: float | None = None) -> None:
        rate = scope.rate_per_minute or self.default
        if rate is None or scope.token_id is None:
            return
        t = time.monotonic() if now is None else now
        with self._lock:
            tokens, last = self._buckets.get(scope.token_id, (float(rate), t))
            tokens = min(float(rate), tokens + (t - last) * rate / 60.0)
            if tokens < 1.0:
                self._buckets[scope.token_id] = (tokens, t)
                wait = (1.0 - tokens) * 60.0 / rate
                raise RateLimited(
                    f"token {scope.token_id} is over its rate of {rate} requests a minute; "
                    f"retry in {wait:.1f} s",
                    limit=rate,
                    retry_after_s=round(wait, 1),
                )
            self._buckets[scope.token_id] = (tokens - 1.0, t)


# -- the Python API with a token ------------------------------------------------------------

#: What each Substrate method a token's holder may call needs, by its parameter names.
METHOD_ACCESS: dict[str, Access] = {
    "store": Access("write", namespaces=("namespace",), projects=("project",)),
    "get": Access("read", ids=("memory_id",)),
    "recall": Access("read", namespaces=("namespace",), projects=("project",)),
    "recall_report": Access("read", namespaces=("namespace",), projects=("project",)),
    "search": Access("read", namespaces=("namespace",), projects=("project",)),
    "list": Access("read", namespaces=("namespace",), projects=("project",)),
    "stats": Access("read"),
    "update": Access("write", ids=("memory_id",), namespaces=("namespace",), projects=("project",)),
    "archive": Access("write", ids=("memory_id",)),
    "restore": Access("write", ids=("memory_id",)),
    "link": Access("write", ids=("src",), read_ids=("dst",)),
    "unlink": Access("write", ids=("src",), read_ids=("dst",)),
    "atomise": Access("write", ids=("memory_id",)),
    "capture": Access("write", namespaces=("namespace",), projects=("project",)),
    "candidates": Access("read", projects=("project",)),
    "promote": Access("write", ids=("memory_id",), projects=("project",)),
    "reject": Access("write", ids=("memory_id",)),
    "get_state": Access("read", project_data=("project",)),
    "set_state": Access("write", project_data=("project",)),
    "build_context": Access("read", projects=("project",)),
    "show_context": Access("read"),
}


class Scoped:
    """A Substrate as one token's holder sees it (`Substrate.with_token`).

    Each method of METHOD_ACCESS is checked by `Substrate.authorise` (the
    check MCP and HTTP use) and runs with the scope applied; any other
    method is refused, so a token cannot reach around its scope.
    """

    def __init__(self, sub: Any, scope: Scope) -> None:
        self._sub = sub
        self.scope = scope

    def __getattr__(self, name: str) -> Any:
        access = METHOD_ACCESS.get(name)
        if access is None:
            exc = ScopeRefused(f"{name} is not available to a token's holder", operation=name)
            self._sub.refusals.record(self.scope, name, exc)
            raise exc
        import inspect

        method = getattr(self._sub, name)
        signature = inspect.signature(method)

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise UsageError(f"{name}: {exc}") from exc
            self._sub.authorise(self.scope, access, bound.arguments, name)
            with applied(self.scope):
                return method(*args, **kwargs)

        return call
