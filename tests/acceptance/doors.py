"""The four doors of one home, for the acceptance stories: Python API, CLI, MCP and HTTP.

Each door is used as its users use it: the Python API by calling `Substrate`
methods; the CLI through its real command tree with `--json` (in process,
through tests.support.cli, the suite's one way to run the command); MCP through the server's own
tool handler (the same function the SDK server calls for `tools/call`); and
HTTP through the Starlette app with its guards, on a loopback Host. Every
door answers a JSON object; the stories compare what the doors say.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from mnemolog.cli.agents import http_api, mcp_server
from mnemolog.substrate.api import Substrate
from tests.support.cli import Cli


class Doors:
    def __init__(self, home: Path, sub: Substrate) -> None:
        self.home = home
        self.sub = sub
        self.http = TestClient(http_api.app(sub, http_api.HttpSettings()), base_url="http://127.0.0.1")
        self.command = Cli()

    def cli(self, *argv: str, code: int = 0, stdin: str | None = None) -> dict[str, Any]:
        got, out = self.command.json(self.home, *argv, stdin=stdin)
        assert got == code, (argv, got, out)
        assert isinstance(out, dict)
        return out

    def mcp(self, tool: str, *, error: bool = False, **args: Any) -> dict[str, Any]:
        result = mcp_server.call(self.sub, tool, args)
        assert bool(result.is_error) == error, (tool, result.structured_content)
        out = result.structured_content
        assert isinstance(out, dict)
        return out

    def post(self, path: str, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
        r = self.http.post(path, json=body)
        assert r.status_code == status, (path, r.status_code, r.text)
        out: dict[str, Any] = r.json()
        return out

    def get(self, path: str, status: int = 200, **params: Any) -> dict[str, Any]:
        r = self.http.get(path, params=params)
        assert r.status_code == status, (path, r.status_code, r.text)
        out: dict[str, Any] = r.json()
        return out


def ids(results: list[dict[str, Any]]) -> list[str]:
    return [r["id"] for r in results]
