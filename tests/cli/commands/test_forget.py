"""`forget` through the CLI, MCP's memory_forget and HTTP's DELETE /memory/{id}."""

from __future__ import annotations

from pathlib import Path

import httpx

from mnemolog.cli.agents import mcp_server
from mnemolog.substrate.home import init_home
from tests.cli.agents.test_http_api import Server
from tests.projections.kit import open_sub
from tests.support.cli import Cli


def test_cli_dry_run_then_forget_then_the_id_is_gone(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    init_home(home)
    code, out = cli.json(home, "store", "forget me XQCLIMARK", "--namespace", "a")
    mid = out["memory"]["id"] if "memory" in out else out["id"]
    code, dry = cli.json(home, "forget", mid, "--dry-run")
    assert code == 0 and dry["dry_run"] is True and dry["memories"] == [mid] and dry["erased"] == 0
    code, done = cli.json(home, "forget", mid, "--reason", "asked")
    assert code == 0 and done["erased"] == 1 and done["seqs"]
    code, err = cli.json(home, "get", mid)
    assert code == 2 and "erased at seq" in err["message"]
    code, err = cli.json(home, "forget")
    assert code == 64
    code, err = cli.json(home, "forget", "--namespace", "a", "--before", "yesterday")
    assert code == 64
    r = cli(home, "log", "show", "--type", "memory.erased")
    assert "asked" in r.output and "XQCLIMARK" not in r.output


def test_mcp_memory_forget(tmp_path: Path) -> None:
    home = tmp_path / "home"
    init_home(home)
    with open_sub(home) as sub:
        a = sub.store("one", namespace="x")["id"]
        b = sub.store("two", namespace="x")["id"]
        dry = mcp_server.call(sub, "memory_forget", {"namespace": "x", "dry_run": True}).structured_content
        assert dry["ok"] and sorted(dry["memories"]) == sorted([a, b]) and dry["erased"] == 0
        done = mcp_server.call(sub, "memory_forget", {"id": a, "reason": "asked"}).structured_content
        assert done["ok"] and done["erased"] == 1
        again = mcp_server.call(sub, "memory_forget", {"id": a})
        assert again.is_error and again.structured_content["exit_code"] == 2
        bad = mcp_server.call(sub, "memory_forget", {"id": 5})
        assert bad.is_error
        assert [m["id"] for m in sub.list()] == [b]


def test_http_delete_forgets(tmp_path: Path) -> None:
    home = tmp_path / "home"
    init_home(home)
    server = Server(home)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            m = http.post("/memory", json={"content": "XQHTTPMARK to forget"}).json()["memory"]
            r = http.delete(f"/memory/{m['id']}", params={"dry_run": "true"})
            assert r.status_code == 200 and r.json()["memories"] == [m["id"]] and r.json()["erased"] == 0
            r = http.delete(f"/memory/{m['id']}", params={"reason": "asked"})
            assert r.status_code == 200 and r.json()["erased"] == 1
            assert http.get(f"/memory/{m['id']}").status_code == 404
            assert http.delete(f"/memory/{m['id']}").status_code == 404
            assert any(p["path"] == "/memory/{id}" and "delete" in p["methods"] for p in _paths(http))
    finally:
        server.stop()


def _paths(http: httpx.Client) -> list[dict]:
    doc = http.get("/openapi.json").json()
    return [{"path": p, "methods": list(ops)} for p, ops in doc["paths"].items()]
