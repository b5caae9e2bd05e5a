"""`serve --tenants`: one server, many homes; a request's tenant and scope come from its token."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from mnemolog.cli.agents import http_api
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import Home
from mnemolog.substrate.tenancy.tenants import TenantCache, TenantRoot, holder_text


def _open(h: Home) -> Substrate:
    return Substrate.open(h, long_lived=False, worker=False)


@pytest.fixture
def root(tmp_path: Path) -> TenantRoot:
    root = TenantRoot(tmp_path / "root")
    for name in ("acme", "globex"):
        root.add(name)
        with _open(root.home(name)) as s:
            s.set_embedder("off")
            s.store(f"{name.upper()}SECRET alpha note", namespace="agents/a")
    return root


def _token(root: TenantRoot, tenant: str, level: str, **kw: Any) -> str:
    with _open(root.home(tenant)) as s:
        return str(s.issue_token(level, tenant=tenant, **kw)["token"])


@pytest.fixture
def client(root: TenantRoot) -> Iterator[tuple[TestClient, TenantCache]]:
    cache = TenantCache(root, 1, opener=_open, closer=lambda s: s.close(), holder=holder_text("test"))
    tenants = http_api.Tenants(cache)
    app = http_api.app(None, http_api.HttpSettings(loopback_only=False), tenants, http_api.RateLimiter(None))
    with TestClient(app) as c:
        yield c, cache
    tenants.close()


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_tenant_sees_only_its_own_home(root: TenantRoot, client: tuple[TestClient, TenantCache]) -> None:
    c, cache = client
    acme = _token(root, "acme", "admin")
    globex = _token(root, "globex", "admin")
    r = c.post("/recall", json={"query": "alpha"}, headers=_auth(acme))
    assert r.status_code == 200 and "ACMESECRET" in r.text and "GLOBEXSECRET" not in r.text
    gid = c.post("/list", json={}, headers=_auth(globex)).json()["memories"][0]["id"]
    assert c.get(f"/memory/{gid}", headers=_auth(acme)).status_code == 404
    # A token whose tenant part is changed opens the other home and is unknown there.
    forged = acme.replace("mlt.acme.", "mlt.globex.")
    assert c.post("/recall", json={"query": "alpha"}, headers=_auth(forged)).status_code == 401
    assert cache.opened >= 3 and len(cache.open_names()) == 1  # the cache holds one tenant


def test_requests_without_a_tenant_token_are_refused(client: tuple[TestClient, TenantCache]) -> None:
    c, _ = client
    for headers in (
        {},
        {"Authorization": "Bearer plain-token-of-16-chars"},
        _auth("mlt.nosuch.0123456789abcdef." + "x" * 43),
    ):
        r = c.post("/recall", json={"query": "alpha"}, headers=headers)
        assert r.status_code == 401, r.text
        assert "SECRET" not in r.text
    assert c.get("/openapi.json").status_code == 401


def test_a_read_token_is_refused_writes_and_sees_read_routes_only(
    root: TenantRoot, client: tuple[TestClient, TenantCache]
) -> None:
    c, _ = client
    read = _token(root, "acme", "read", namespaces=["agents/a"])
    r = c.post("/memory", json={"content": "x", "namespace": "agents/a"}, headers=_auth(read))
    assert r.status_code == 403 and r.json()["error"] == "scope_refused"
    doc = c.get("/openapi.json", headers=_auth(read)).json()
    methods = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert ("post", "/recall") in methods and ("post", "/memory") not in methods
    health = c.get("/health", headers=_auth(read)).json()
    assert "log" not in health and health["scope"]["level"] == "read"


def test_a_token_over_its_rate_gets_429(root: TenantRoot, client: tuple[TestClient, TenantCache]) -> None:
    c, _ = client
    tok = _token(root, "acme", "read", rate_per_minute=2)
    codes = [c.post("/recall", json={"query": "alpha"}, headers=_auth(tok)).status_code for _ in range(3)]
    assert codes == [200, 200, 429]


def test_a_revoked_token_is_refused_at_once(root: TenantRoot, client: tuple[TestClient, TenantCache]) -> None:
    c, _ = client
    with _open(root.home("acme")) as s:
        t = s.issue_token("read", tenant="acme")
        assert c.post("/recall", json={"query": "alpha"}, headers=_auth(t["token"])).status_code == 200
        s.revoke_token(t["token_id"])
    assert c.post("/recall", json={"query": "alpha"}, headers=_auth(t["token"])).status_code == 401


# -- two servers, one tenant ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(args: list[str], port: int) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(
        [sys.executable, "-m", "mnemolog.cli.main", *args, "--listen", f"127.0.0.1:{port}"],
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return p
        except OSError:
            assert p.poll() is None, p.stderr.read() if p.stderr else ""
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)


def _stop(p: subprocess.Popen[bytes]) -> None:
    p.terminate()
    p.wait(timeout=30)


@pytest.mark.serial
def test_two_servers_never_both_write_one_tenant(root: TenantRoot) -> None:
    token = _token(root, "acme", "write")
    ports = [_free_port(), _free_port()]
    first = _start(["serve", "--tenants", str(root.path)], ports[0])
    try:
        second = _start(["serve", "--tenants", str(root.path)], ports[1])
        try:
            body = {"content": "from the first", "namespace": "agents/a"}
            r1 = httpx.post(
                f"http://127.0.0.1:{ports[0]}/memory", json=body, headers=_auth(token), timeout=60
            )
            assert r1.status_code == 201, r1.text
            r2 = httpx.post(
                f"http://127.0.0.1:{ports[1]}/memory", json=body, headers=_auth(token), timeout=60
            )
            assert r2.status_code == 503 and r2.json()["error"] == "tenant_busy"
            assert (
                f"pid {first.pid}" in r2.json()["message"] and f"127.0.0.1:{ports[0]}" in r2.json()["message"]
            )
            # The other tenant is free: the second server serves it.
            other = _token(root, "globex", "read")
            r3 = httpx.post(
                f"http://127.0.0.1:{ports[1]}/recall", json={"query": "alpha"}, headers=_auth(other)
            )
            assert r3.status_code == 200 and "GLOBEXSECRET" in r3.text
        finally:
            _stop(second)
    finally:
        _stop(first)
    listed = subprocess.run(
        [sys.executable, "-m", "mnemolog.cli.main", "--json", "tenant", "list", "--tenants", str(root.path)],
        capture_output=True,
        check=True,
    )
    assert [t["served_by"] for t in json.loads(listed.stdout)["tenants"]] == [None, None]


@pytest.mark.serial
def test_a_second_server_of_one_home_is_refused_naming_the_first(root: TenantRoot) -> None:
    home = str(root.home("acme").root)
    port = _free_port()
    first = _start(["--home", home, "serve"], port)
    try:
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "mnemolog.cli.main",
                "--home",
                home,
                "serve",
                "--listen",
                f"127.0.0.1:{_free_port()}",
            ],
            capture_output=True,
            check=False,
            timeout=60,
        )
        assert second.returncode == 6
        assert re.search(rf"served by pid {first.pid} .* at 127\.0\.0\.1:{port}", second.stderr.decode())
    finally:
        _stop(first)


# -- MCP over streamable HTTP, many tenants ------------------------------------------------------


def test_mcp_over_http_serves_each_token_its_tenant_and_scope(root: TenantRoot) -> None:
    import anyio
    import httpx2
    import mcp_types as types
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    acme = _token(root, "acme", "read", namespaces=["agents/a"])
    globex = _token(root, "globex", "write")
    port = _free_port()
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mnemolog.cli.main",
            "mcp",
            "--http",
            f"127.0.0.1:{port}",
            "--tenants",
            str(root.path),
        ],
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/mcp"

    async def session(token: str) -> tuple[list[str], dict[str, Any], types.CallToolResult]:
        async with (
            httpx2.AsyncClient(headers=_auth(token), timeout=60) as http,
            Client(streamable_http_client(url, http_client=http), read_timeout_seconds=60) as c,
        ):
            tools = [t.name for t in (await c.list_tools()).tools]
            found = await c.call_tool("memory_recall", {"query": "alpha"})
            stored = await c.call_tool("memory_store", {"content": "x", "namespace": "agents/a"})
            assert isinstance(found.structured_content, dict)
            return tools, found.structured_content, stored

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                assert p.poll() is None, p.stderr.read() if p.stderr else ""
                assert time.monotonic() < deadline
                time.sleep(0.1)
        tools, found, stored = anyio.run(session, acme)
        assert "memory_recall" in tools and "memory_store" not in tools  # a read token's tools
        assert "ACMESECRET" in json.dumps(found) and "GLOBEXSECRET" not in json.dumps(found)
        assert stored.is_error and stored.structured_content["error"] == "scope_refused"  # type: ignore[index]
        tools, found, stored = anyio.run(session, globex)
        assert "memory_store" in tools and "GLOBEXSECRET" in json.dumps(found) and not stored.is_error
        r = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=30)
        assert r.status_code == 401 and r.json()["error"] == "unauthorized"  # no token: nothing served
    finally:
        p.terminate()
        assert p.wait(timeout=30) == 0
        assert b"Traceback" not in (p.stderr.read() if p.stderr else b"")


def test_bundles_and_uploads_are_checked_like_every_operation(
    root: TenantRoot, client: tuple[TestClient, TenantCache]
) -> None:
    c, _ = client
    with _open(root.home("acme")) as s:
        other = s.store("BSECRET of agent b", namespace="agents/b")["id"]
        mine = s.store("mine", namespace="agents/a")["id"]
    read = _token(root, "acme", "read", namespaces=["agents/a"])
    r = c.post("/bundles", json={"memory_id": other}, headers=_auth(read))
    assert r.status_code == 403 and "BSECRET" not in r.text
    ok = c.post("/bundles", json={"memory_id": mine}, headers=_auth(read))
    assert ok.status_code == 200 and ok.headers["content-type"] == "application/x-tar"
    up = c.post("/verify", content=ok.content, headers={**_auth(read), "Content-Type": "application/x-tar"})
    assert up.status_code == 403  # verifying answers about the whole home: not a bound token's
    assert c.get(f"/memory/{other}", headers=_auth(read)).status_code == 403
    assert c.get("/stats", headers=_auth(read)).json()["stats"]["memories"] == 2
