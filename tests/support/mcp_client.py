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
    """Starts `mnemolog --home HOME mcp`; `send` a request, `tool` a tools/call, `close` to end."""

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

    def send(self, method: str, params: dict[str, Any] | None = None, *, notify: bool = False) -> Any:
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
