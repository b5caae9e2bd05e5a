"""The knowledge loop's and the context packs' routes: typed query parameters and OpenAPI from the models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from mnemolog.cli.agents import http_api
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import init_home


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    init_home(tmp_path / "h")
    sub = Substrate.open(tmp_path / "h", long_lived=False)
    http_api.openapi_document.cache_clear()
    yield TestClient(http_api.app(sub, http_api.HttpSettings()), base_url="http://127.0.0.1")
    http_api.openapi_document.cache_clear()
    sub.close()


def test_get_routes_type_their_query_parameters(client: TestClient) -> None:
    r = client.get(
        "/candidates", params=[("statuses", "pending"), ("statuses", "needs_human"), ("limit", "7")]
    )
    assert r.status_code == 200 and r.json() == {"ok": True, "candidates": []}
    r = client.get("/candidates", params={"statuses": "nope"})
    assert r.status_code == 400 and r.json()["details"]["field"] == "statuses.0"
    r = client.get("/candidates", params={"limit": "x"})
    assert r.status_code == 400 and r.json()["details"]["field"] == "limit"
    r = client.get("/candidates", params={"bogus": "1"})
    assert r.status_code == 400 and r.json()["details"]["field"] == "bogus"
    r = client.get("/project/state", params={"project": "p04", "history": "true"})
    assert r.status_code == 200 and r.json() == {"ok": True, "project": "p04", "entries": []}


def test_openapi_is_generated_from_the_models(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    assert doc["paths"]["/interactions"]["post"]["operationId"] == "capture_interaction"
    body = doc["paths"]["/interactions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["prompt"] and body["additionalProperties"] is False
    show = doc["paths"]["/context/{pack_id}"]["get"]
    assert show["operationId"] == "context_show"
    assert [p["name"] for p in show["parameters"]] == ["pack_id"]
    state = doc["paths"]["/project/state"]["get"]
    assert [p["name"] for p in state["parameters"]] == ["project", "category", "history"]
