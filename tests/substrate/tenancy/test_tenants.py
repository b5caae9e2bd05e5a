"""Tenant roots, the bounded cache of open tenants, and the serving lease."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemolog.eventlog.errors import NotFound, UsageError
from mnemolog.substrate.home import Home
from mnemolog.substrate.tenancy.tenants import Lease, TenantBusy, TenantCache, TenantRoot, check_tenant_name


@pytest.fixture
def root(tmp_path: Path) -> TenantRoot:
    r = TenantRoot(tmp_path / "root")
    for name in ("a", "b", "c"):
        r.add(name)
    return r


class Opened:
    def __init__(self) -> None:
        self.open: set[str] = set()
        self.closed: list[str] = []

    def opener(self, h: Home) -> str:
        self.open.add(h.root.name)
        return h.root.name

    def closer(self, name: Any) -> None:
        self.open.discard(name)
        self.closed.append(name)


def test_add_list_remove(root: TenantRoot) -> None:
    assert root.names() == ["a", "b", "c"]
    with pytest.raises(UsageError):
        root.add("a")
    out = root.remove("b")
    assert root.names() == ["a", "c"] and Path(out["moved_to"]).is_dir()  # set aside, never deleted
    with pytest.raises(NotFound):
        root.remove("b")
    assert [t["served_by"] for t in root.describe()] == [None, None]


def test_a_directory_holding_other_things_is_not_made_a_root(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "file").write_text("mine")
    with pytest.raises(UsageError):
        TenantRoot(tmp_path / "x").add("a")
    with pytest.raises(NotFound):
        TenantRoot(tmp_path / "x").names()


@given(st.text(max_size=80))
def test_a_tenant_name_is_safe_as_a_path_or_refused(name: str) -> None:
    try:
        ok = check_tenant_name(name)
    except UsageError:
        return
    assert "/" not in ok and ".." not in ok and ok == ok.strip() and ok[0].isalnum() and len(ok) < 64


def test_the_cache_keeps_at_most_its_capacity_open(root: TenantRoot) -> None:
    o = Opened()
    cache = TenantCache(root, 2, o.opener, o.closer, "test")
    for name in ("a", "b", "c", "a", "c"):
        with cache.use(name) as value:
            assert value == name
            assert len(o.open) <= 2
    assert cache.open_names() == ["a", "c"]
    assert o.closed == ["a", "b"]  # least recently used first out
    cache.close()
    assert not o.open


def test_a_tenant_in_use_is_closed_only_when_let_go(root: TenantRoot) -> None:
    o = Opened()
    cache = TenantCache(root, 1, o.opener, o.closer, "test")
    held = cache.acquire("a")
    with cache.use("b"):
        assert "a" in o.open  # evicted but in use: still open
    assert "a" in o.open
    cache.release(held)
    assert "a" not in o.open
    cache.close()


def test_the_cache_opens_a_tenant_once_under_concurrency(root: TenantRoot) -> None:
    o = Opened()
    cache = TenantCache(root, 3, o.opener, o.closer, "test")
    threads = [threading.Thread(target=lambda: cache.use("a").__enter__()) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.opened == 1


def test_a_second_lease_is_refused_naming_the_holder(root: TenantRoot) -> None:
    home = root.home("a")
    first = Lease(home, "pid 1 on host at 127.0.0.1:8100 since then")
    first.take()
    try:
        with pytest.raises(TenantBusy, match=r"served by pid 1 on host at 127\.0\.0\.1:8100"):
            Lease(home, "pid 2").take()
        assert root.describe()[0]["served_by"].startswith("pid 1")
        o = Opened()
        with pytest.raises(TenantBusy):
            TenantCache(root, 2, o.opener, o.closer, "pid 2").acquire("a")
        assert not o.open
        with pytest.raises(TenantBusy):
            root.remove("a")  # never set aside while served
    finally:
        first.release()
    Lease(home, "pid 2").take()


def test_unknown_tenants_and_bad_settings(root: TenantRoot) -> None:
    o = Opened()
    cache = TenantCache(root, 2, o.opener, o.closer, "test")
    with pytest.raises(NotFound):
        cache.acquire("nosuch")
    with pytest.raises(UsageError):
        cache.acquire("../a")
    with pytest.raises(UsageError):
        TenantCache(root, 0, o.opener, o.closer, "test")
    assert root.settings() == {"cache": 32, "rate_per_minute": None, "idle_release_ms": 60_000}
    (root.path / "tenants.toml").write_text("[serve]\ncache = 0\n")
    with pytest.raises(UsageError):
        root.settings()
    (root.path / "tenants.toml").write_text("[serve]\ncache = 4\nrate_per_minute = 60\n")
    assert root.settings() == {"cache": 4, "rate_per_minute": 60, "idle_release_ms": 60_000}
