"""Tenants: many homes under one root, served by one process, opened on demand and kept in a bounded cache.

A tenant root is a directory holding `tenants.toml` (which marks it as one)
and `tenants/<name>/`, one ordinary home per tenant: its own key, log,
checkpoints, witnesses and projections. Nothing is shared between tenants;
a tenant's home can be moved out and used alone.

`TenantCache` keeps at most `capacity` tenants open (least recently used
first out). A tenant in use by a request is never closed under it: an
evicted tenant closes when its last user lets go. Opening a tenant takes
its *serving lease* (`state/serve.lock`, an exclusive flock held while it is
open, naming the process that holds it), so two servers pointed at the same
tenant never both write to it: the second is refused, naming the first.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemolog.eventlog.errors import MnemologError, NotFound, StorageError, UsageError
from mnemolog.substrate.home import Home, InitReport, init_home

__all__ = [
    "DEFAULT_CAPACITY",
    "Lease",
    "TenantBusy",
    "TenantCache",
    "TenantRoot",
    "check_tenant_name",
]

DEFAULT_CAPACITY = 32
#: How long an open tenant keeps its projection without a request. A home served alone lets go
#: after 250 ms (its own default), so that commands in other processes get it at once; a tenant
#: reopened on every request paid for it (the benchmark measured a store at 1.3-1.5x). Other
#: processes still get it at once: a waiter announces itself and the holder lets go.
DEFAULT_IDLE_RELEASE_MS = 60_000
MARKER = "tenants.toml"
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


class TenantBusy(StorageError):
    """Another process serves this tenant (it holds the tenant's serving lease)."""

    slug = "tenant_busy"


def check_tenant_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UsageError(
            f"a tenant name is 1-63 lowercase letters, digits and '-', starting with a letter or digit; "
            f"found {str(name)[:70]!r}",
            field="tenant",
        )
    return name


class Lease:
    """The exclusive serving lease of one home: `state/serve.lock`, flocked while held.

    The holder writes who it is into the file; a refused taker reads it back
    to say who holds the lease. The OS drops the flock when its process dies.
    """

    def __init__(self, home: Home, holder: str) -> None:
        self.path = home.state_dir / "serve.lock"
        self.holder = holder
        self._fd: int | None = None

    def take(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                who = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
            finally:
                os.close(fd)
            raise TenantBusy(
                f"{self.path.parent.parent} is served by {who}; one server writes a tenant at a time",
                file=str(self.path),
                holder=who,
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, self.holder.encode("utf-8"), 0)
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing drops the flock


def holder_text(listen: str | None = None) -> str:
    """How a server names itself in a lease: its pid, host and address, since when."""
    since = dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    where = f" at {listen}" if listen else ""
    return f"pid {os.getpid()} on {os.uname().nodename}{where} since {since}"


@dataclass(frozen=True)
class TenantRoot:
    """A directory of tenant homes (see the module docstring)."""

    path: Path

    @property
    def tenants_dir(self) -> Path:
        return self.path / "tenants"

    def home(self, name: str) -> Home:
        return Home(self.tenants_dir / check_tenant_name(name))

    def exists(self) -> bool:
        return (self.path / MARKER).is_file()

    def require(self) -> TenantRoot:
        if not self.exists():
            raise NotFound(
                f"{self.path} is not a tenant root (no {MARKER}; `mnemolog tenant add` creates one)",
                file=str(self.path),
            )
        return self

    def create(self) -> None:
        """Make this directory a tenant root (idempotent; refuses a directory holding other things)."""
        if self.exists():
            return
        if self.path.exists() and any(self.path.iterdir()):
            raise UsageError(f"{self.path} is not empty and not a tenant root; choose another directory")
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.tenants_dir.mkdir(mode=0o700, exist_ok=True)
        (self.path / MARKER).write_text(
            "# A mnemolog tenant root: one home per tenant under tenants/.\n"
            f"# [serve]\n# cache = {DEFAULT_CAPACITY}      # tenants kept open at once\n"
            "# rate_per_minute = 600  # each token's default rate\n"
            f"# idle_release_ms = {DEFAULT_IDLE_RELEASE_MS}  # an open tenant keeps its projection\n",
            encoding="utf-8",
        )
        os.chmod(self.path / MARKER, 0o600)

    def settings(self) -> dict[str, Any]:
        """The `[serve]` table of tenants.toml (`cache`, `rate_per_minute`, `idle_release_ms`)."""
        import tomllib

        where = str(self.path / MARKER)
        try:
            raw = tomllib.loads((self.path / MARKER).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise UsageError(f"{where}: {exc}", file=where) from exc
        table = raw.get("serve", {})
        out: dict[str, Any] = {
            "cache": DEFAULT_CAPACITY,
            "rate_per_minute": None,
            "idle_release_ms": DEFAULT_IDLE_RELEASE_MS,
        }
        if not isinstance(table, dict) or set(table) - set(out):
            raise UsageError(
                f"{where}: [serve] takes only cache, rate_per_minute and idle_release_ms", file=where
            )
        for key, lo, hi in (
            ("cache", 1, 100_000),
            ("rate_per_minute", 1, 1_000_000),
            ("idle_release_ms", 0, 3_600_000),
        ):
            value = table.get(key, out[key])
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi
            ):
                raise UsageError(f"{where}: serve.{key} must be an integer in [{lo}, {hi}]", file=where)
            out[key] = value
        return out

    def add(self, name: str) -> InitReport:
        """A new tenant: a fresh home (own key, genesis, first checkpoint)."""
        check_tenant_name(name)
        self.create()
        home = self.home(name)
        if home.root.exists():
            raise UsageError(f"tenant {name!r} exists already ({home.root})", field="tenant")
        return init_home(home.root)

    def names(self) -> list[str]:
        self.require()
        return sorted(
            p.name
            for p in self.tenants_dir.iterdir()
            if p.is_dir() and not p.is_symlink() and _NAME.fullmatch(p.name)
        )

    def describe(self) -> list[dict[str, Any]]:
        out = []
        for name in self.names():
            home = self.home(name)
            served = _lease_holder(home)
            out.append({"tenant": name, "home": str(home.root), "served_by": served})
        return out

    def remove(self, name: str) -> dict[str, Any]:
        """Set a tenant aside under `removed/` (its log is evidence: never deleted here).

        Refused while a server holds the tenant's lease.
        """
        home = self.require().home(name)
        if not home.root.is_dir():
            raise NotFound(f"no tenant {name!r} in {self.path}", tenant=name)
        lease = Lease(home, holder_text() + " (removing)")
        lease.take()
        try:
            dest_dir = self.path / "removed"
            dest_dir.mkdir(mode=0o700, exist_ok=True)
            stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
            dest = dest_dir / f"{name}-{stamp}"
            os.rename(home.root, dest)
        finally:
            lease.release()
        return {"tenant": name, "moved_to": str(dest)}


def _lease_holder(home: Home) -> str | None:
    path = home.state_dir / "serve.lock"
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class _Open:
    def __init__(self, value: Any, lease: Lease) -> None:
        self.value = value
        self.lease = lease
        self.users = 0
        self.evicted = False


class TenantCache:
    """At most `capacity` tenants open at once, least recently used out first (see the module docstring).

    `opener(home)` opens a tenant (a Substrate); `closer(value)` closes it.
    """

    def __init__(
        self,
        root: TenantRoot,
        capacity: int,
        opener: Callable[[Home], Any],
        closer: Callable[[Any], None],
        holder: str,
    ) -> None:
        if capacity < 1:
            raise UsageError("the tenant cache holds at least one tenant", field="cache")
        self.root = root
        self.capacity = capacity
        self._opener = opener
        self._closer = closer
        self._holder = holder
        self._open: OrderedDict[str, _Open] = OrderedDict()
        self._lock = threading.Lock()
        self._opening: dict[str, threading.Lock] = {}
        self.opened = 0  # how many times a tenant was opened (evictions make it reopen)

    @contextlib.contextmanager
    def use(self, name: str) -> Iterator[Any]:
        """The open tenant `name` (opened if needed), kept open while the block runs."""
        entry = self.acquire(name)
        try:
            yield entry.value
        finally:
            self.release(entry)

    def acquire(self, name: str) -> _Open:
        """The open tenant `name` (`.value`), held until `release` (an async caller's `use`)."""
        name = check_tenant_name(name)
        with self._lock:
            entry = self._open.get(name)
            if entry is not None:
                self._open.move_to_end(name)
                entry.users += 1
                return entry
            gate = self._opening.setdefault(name, threading.Lock())
        with gate:  # one opener per tenant; others wait for it
            with self._lock:
                entry = self._open.get(name)
                if entry is not None:
                    self._open.move_to_end(name)
                    entry.users += 1
                    return entry
            home = self.root.home(name)
            if not home.exists():
                raise NotFound(f"no tenant {name!r}", tenant=name)
            lease = Lease(home, self._holder)
            lease.take()
            try:
                value = self._opener(home)
            except BaseException:
                lease.release()
                raise
            entry = _Open(value, lease)
            entry.users = 1
            self.opened += 1
            with self._lock:
                self._open[name] = entry
                evicted = self._evict_locked()
        for e in evicted:
            self._close(e)
        return entry

    def _evict_locked(self) -> list[_Open]:
        out = []
        while len(self._open) > self.capacity:
            _, old = self._open.popitem(last=False)
            old.evicted = True
            if old.users == 0:
                out.append(old)
        return out

    def release(self, entry: _Open) -> None:
        with self._lock:
            entry.users -= 1
            close = entry.evicted and entry.users == 0
        if close:
            self._close(entry)

    def _close(self, entry: _Open) -> None:
        try:
            self._closer(entry.value)
        finally:
            entry.lease.release()

    def open_names(self) -> list[str]:
        with self._lock:
            return list(self._open)

    def close(self) -> None:
        """Close every open tenant (a server's shutdown)."""
        with self._lock:
            entries = list(self._open.values())
            self._open.clear()
        errors: list[BaseException] = []
        for e in entries:
            e.evicted = True
            if e.users == 0:
                try:
                    self._close(e)
                except (MnemologError, OSError) as exc:
                    errors.append(exc)
        if errors:
            raise errors[0]
