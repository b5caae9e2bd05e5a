"""A client of `mnemolog mcp` for tests: the real server in a subprocess, JSON-RPC lines on stdio."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


class Client:
    """Starts `mnemolog --home HOME mcp`; `send` a request, `tool` a tools/call, `close` to end.

    Raw JSON-RPC lines, for tests that look at the wire. The server (the MCP
    SDK's) serves nothing before the initialize handshake, so the first
    request that is not `initialize` is preceded by one; an `initialize`
    sent with only a protocol version gets the fields the protocol requires.
    For tool-level tests prefer the SDK's own client (tests/cli/agents/test_mcp.py).
    """

    def __init__(self, home: Path) -> None:
        self.p = subprocess.Popen(
            [sys.executable, "-m", "mnemolog.cli.main", "--home", str(home), "mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        self.next_id = 0
        self.initialized = False

    def send(self, method: str, params: dict[str, Any] | None = None, *, notify: bool = False) -> Any:
        if method == "initialize":
            params = {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "tests", "version": "0"},
                **(params or {}),
            }
            params["clientInfo"] = {"version": "0", **params["clientInfo"]}
            self.initialized = True
            out = self._send(method, params, notify=False)
            self._send("notifications/initialized", None, notify=True)
            return out
        if not self.initialized:
            self.send("initialize")
        return self._send(method, params, notify=notify)

    def _send(self, method: str, params: dict[str, Any] | None, *, notify: bool) -> Any:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        if not notify:
            self.next_id += 1
            msg["id"] = self.next_id
        assert self.p.stdin and self.p.stdout
        self.p.stdin.write(json.dumps(msg) + "\n")
        self.p.stdin.flush()
        if notify:
            return None
        return json.loads(self.p.stdout.readline())

    def raw(self, line: str) -> Any:
        assert self.p.stdin and self.p.stdout
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def tool(self, name: str, **args: Any) -> tuple[bool, dict[str, Any]]:
        r = self.send("tools/call", {"name": name, "arguments": args})
        res = r["result"]
        return res["isError"], json.loads(res["content"][0]["text"])

    def close(self) -> int:
        assert self.p.stdin
        self.p.stdin.close()
        return self.p.wait(timeout=60)
