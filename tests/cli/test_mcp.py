"""`mnemolog mcp`: a real subprocess speaking MCP on stdio, beside CLI commands in other processes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mnemolog.substrate.home import Home
from tests.support.mcp_client import Client


@pytest.fixture
def client(make_home: Callable[..., Home], mcp_server: Callable[[Home], Client]) -> Client:
    return mcp_server(make_home())


def cli(home: Path, *args: str) -> Any:
    r = subprocess.run(
        [sys.executable, "-m", "mnemolog.cli.main", "--home", str(home), "--json", *args],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    return r.returncode, json.loads(r.stdout)


def test_handshake_tools_and_errors(client: Client) -> None:
    init = client.send(
        "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}
    )
    assert init["result"]["protocolVersion"] == "2025-06-18"
    assert "tools" in init["result"]["capabilities"]
    assert client.send("notifications/initialized", notify=True) is None
    tools = {t["name"] for t in client.send("tools/list")["result"]["tools"]}
    assert {"memory_store", "memory_recall", "memory_atomise", "memory_link"} <= tools
    assert client.send("ping")["result"] == {}
    assert client.send("no/such")["error"]["code"] == -32601
    assert client.raw("{not json")["error"]["code"] == -32700
    assert client.raw('{"jsonrpc": "2.0", "id": 9}')["error"]["code"] == -32600
    bad = client.send("tools/call", {"name": "nope", "arguments": {}})
    assert bad["error"]["code"] == -32602
    err, out = client.tool("memory_get", id="01ABCDEFGHJKMNPQRSTVWXYZ00")
    assert err and out["error"] == "not_found" and out["exit_code"] == 2
    err, out = client.tool("memory_store", content="")
    assert err and out["exit_code"] == 65
    err, out = client.tool("memory_store", content="x", bogus=1)
    assert err and out["exit_code"] == 64


def test_server_and_cli_share_a_home(client: Client, tmp_path: Path) -> None:
    home = tmp_path / "home"
    client.send("initialize", {"protocolVersion": "2025-11-25"})
    err, stored = client.tool(
        "memory_store", content="The MCP server stored this note about kafka lag.", tags=["mcp"]
    )
    assert not err
    # A CLI command in another process, while the server holds the store open.
    code, out = cli(home, "store", "The CLI stored this note about kafka consumers.")
    assert code == 0
    code, found = cli(home, "recall", "kafka")
    assert code == 0 and {r["id"] for r in found["results"]} == {stored["id"], out["memory"]["id"]}
    err, hits = client.tool("memory_recall", query="kafka consumers")
    assert not err, hits
    assert hits["results"][0]["id"] == out["memory"]["id"]
    err, linked = client.tool("memory_link", src=stored["id"], dst=out["memory"]["id"], relation="related_to")
    assert not err and linked["relation"] == "related_to"
    code, got = cli(home, "get", out["memory"]["id"])
    assert got["memory"]["links"]["incoming"][0]["src"] == stored["id"]
    assert client.close() == 0
