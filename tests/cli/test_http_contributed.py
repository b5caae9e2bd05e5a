"""Operations other modules contribute are served as MCP tools and on their HTTP routes."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from mnemolog.cli import http_api, mcp_server, operations
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import init_home

TOOLS = [
    {
        "name": "context_show",
        "description": "Show a pack.",
        "inputSchema": {
            "type": "object",
            "properties": {"pack_id": {"type": "string"}, "full": {"type": "boolean"}},
            "required": ["pack_id"],
            "additionalProperties": False,
        },
    },
    {
        "name": "candidates_list",
        "description": "List candidates.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "statuses": {
                    "type": "array",
                    "items": {"type": "string", "enum": ["pending", "needs_human"]},
                },
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
            },
            "additionalProperties": False,
        },
    },
]


def handlers(sub: Any) -> dict[str, Any]:
    return {
        "context_show": lambda a: {"pack_id": a["pack_id"], "full": a.get("full", False)},
        "candidates_list": lambda a: {"statuses": a.get("statuses", []), "limit": a.get("limit", 50)},
    }


@pytest.fixture
def contributed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    mod = types.ModuleType("mnemolog_test_tools")
    mod.TOOLS = TOOLS  # type: ignore[attr-defined]
    mod.handlers = handlers  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mnemolog_test_tools", mod)
    ops = operations.contributed_operations(
        "mnemolog_test_tools", "TOOLS", "handlers", {"context_show": ("Show a pack", True, False, True)}
    )
    assert [o.name for o in ops] == ["context_show", "candidates_list"]
    assert ops[0].read_only and ops[1].title == "Candidates list"  # a default title for an unlisted one
    for op in ops:
        monkeypatch.setitem(operations.OPERATIONS, op.name, op)
    http_api.openapi_document.cache_clear()
    yield
    http_api.openapi_document.cache_clear()


def test_an_absent_module_contributes_nothing() -> None:
    assert operations.contributed_operations("mnemolog_no_such_module", "T", "h", {}) == []


@pytest.fixture
def sub(tmp_path: Path) -> Iterator[Substrate]:
    init_home(tmp_path / "h")
    s = Substrate.open(tmp_path / "h", long_lived=False)
    yield s
    s.close()


def test_served_on_http_with_typed_query_parameters(contributed: None, sub: Substrate) -> None:
    client = TestClient(http_api.app(sub, http_api.HttpSettings()), base_url="http://127.0.0.1")
    r = client.get("/context/p-1", params={"full": "true"})
    assert r.status_code == 200 and r.json() == {"ok": True, "pack_id": "p-1", "full": True}
    r = client.get(
        "/candidates", params=[("statuses", "pending"), ("statuses", "needs_human"), ("limit", "7")]
    )
    assert r.json() == {"ok": True, "statuses": ["pending", "needs_human"], "limit": 7}
    r = client.get("/candidates", params={"statuses": "nope"})
    assert r.status_code == 400 and r.json()["details"]["field"] == "statuses.0"
    r = client.get("/candidates", params={"limit": "x"})
    assert r.status_code == 400 and r.json()["details"]["field"] == "limit"
    r = client.get("/candidates", params={"bogus": "1"})
    assert r.status_code == 400 and r.json()["details"]["field"] == "bogus"
    doc = client.get("/openapi.json").json()
    show = doc["paths"]["/context/{pack_id}"]["get"]
    assert [p["name"] for p in show["parameters"]] == ["pack_id", "full"]
    # The knowledge loop is part of this installation: its routes are served too.
    assert doc["paths"]["/interactions"]["post"]["operationId"] == "capture_interaction"


def test_a_route_is_served_only_when_its_operation_is(
    monkeypatch: pytest.MonkeyPatch, sub: Substrate
) -> None:
    def paths() -> dict[str, Any]:
        http_api.openapi_document.cache_clear()
        client = TestClient(http_api.app(sub, http_api.HttpSettings()), base_url="http://127.0.0.1")
        return dict(client.get("/openapi.json").json()["paths"])

    optional = {ep.path for ep in http_api.ROUTES if ep.optional}
    try:
        assert optional <= set(paths())  # every contributing module is installed here
        # An installation without the knowledge loop: its module cannot be imported, so it
        # contributes no operation and none of its routes is served.
        spec = next(c for c in operations.CONTRIBUTED if c[0].endswith(".mcp_knowledge"))
        hints = spec[3]
        monkeypatch.setitem(sys.modules, spec[0], None)
        assert operations.contributed_operations(*spec) == []
        for name in hints:
            monkeypatch.delitem(operations.OPERATIONS, name)
        served = set(paths())
        gone = {ep.path for ep in http_api.ROUTES if ep.operation in hints}
        assert gone >= {"/interactions", "/project/state", "/candidates", "/memory/{id}/promote"}
        assert not gone & served
        assert {"/context/build", "/memory/{id}", "/recall"} <= served  # the rest stays
        client = TestClient(http_api.app(sub, http_api.HttpSettings()), base_url="http://127.0.0.1")
        r = client.post("/interactions", json={"prompt": "q"})
        assert r.status_code == 404 and r.json()["error"] == "no_route"
        r = client.get("/candidates")
        assert r.status_code == 404 and r.json()["error"] == "no_route"
    finally:
        http_api.openapi_document.cache_clear()  # built again, with every operation, when next asked


def test_served_as_mcp_tools(contributed: None, sub: Substrate) -> None:
    tools = {t.name: t for t in (mcp_server._tool(op) for op in operations.OPERATIONS.values())}
    assert tools["context_show"].annotations.read_only_hint is True  # type: ignore[union-attr]
    out = mcp_server.call(sub, "context_show", {"pack_id": "p"})
    assert not out.is_error and out.structured_content == {"ok": True, "pack_id": "p", "full": False}
    bad = mcp_server.call(sub, "context_show", {})
    assert bad.is_error and bad.structured_content["details"]["field"] == "pack_id"
