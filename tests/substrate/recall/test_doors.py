"""One set of filters selects one set of memories through every door.

`recall`, `search` and `list`, the agent operations MCP serves, the HTTP
routes and context packs all build their filters in the recall service
(substrate/recall/service.py), so a namespace, a status, a project given by
an alias, domains, tags, expiry and the archive guard mean the same through
each of them. A query word every memory holds makes recall and search select
by the filters alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from mnemolog.cli.agents import http_api, operations
from mnemolog.substrate.api import Substrate
from tests.projections.kit import new_home, open_sub

WORD = "valve"

#: (the filters, the memories they select by name)
CASES: list[tuple[dict[str, Any], set[str]]] = [
    ({}, {"ops", "below", "lab", "plain"}),
    ({"namespace": "ops"}, {"ops", "below"}),
    ({"namespace": "ops", "descendants": False}, {"ops"}),
    ({"project": "p06"}, {"ops", "lab"}),
    ({"project": "p06-polisher"}, {"ops", "lab"}),
    ({"project": ""}, {"below", "plain"}),
    ({"domains": ["optics"]}, {"ops"}),
    ({"tags": ["pump"]}, {"ops", "lab"}),
    ({"kinds": ["decision"]}, {"lab"}),
    ({"statuses": ["candidate"]}, {"candidate"}),
    ({"statuses": ["superseded"]}, {"superseded"}),
    ({"include_archived": True}, {"ops", "below", "lab", "plain", "archived"}),
    ({"include_expired": True}, {"ops", "below", "lab", "plain", "expired"}),
    ({"namespace": "ops", "project": "p06", "include_archived": True}, {"ops"}),
]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Substrate, dict[str, str]]]:
    sub = open_sub(new_home(tmp_path / "h"), long_lived=True, worker=False)
    sub.register_project("p06-polisher", aliases=["p06"])
    store = sub.store
    made = {
        "ops": store(f"{WORD} one", namespace="ops", project="p06", domains=["optics"], tags=["pump"]),
        "below": store(f"{WORD} two", namespace="ops/cell"),
        "lab": store(f"{WORD} three", namespace="lab", project="p06", tags=["pump"], kind="decision"),
        "plain": store(f"{WORD} four"),
        "archived": store(f"{WORD} five", namespace="lab"),
        "expired": store(f"{WORD} six", metadata={"vault": {"expires_at": "2001-01-01"}}),
        "superseded": store(f"{WORD} seven", namespace="lab"),
    }
    ids = {name: m["id"] for name, m in made.items()}
    sub.archive(ids["archived"])
    sub.supersede(ids["superseded"], reason="replaced")
    candidate = sub.capture(f"we fixed the {WORD}", f"Lesson learned: the {WORD} needs a new seal.")
    sub.extract(interaction_ids=[candidate["id"]], extractor="rules")
    found = sub.candidates(queues=("pending",))
    assert len(found) == 1
    ids["candidate"] = found[0]["id"]
    with sub:
        yield sub, ids


def _names(ids: dict[str, str], found: list[str]) -> set[str]:
    by_id = {v: k for k, v in ids.items()}
    return {by_id.get(i, i) for i in found}


def doors(sub: Substrate, client: TestClient, filters: dict[str, Any]) -> dict[str, list[str]]:
    """The ids each door answers with for the same filters."""
    python = {
        "recall": [m["id"] for m in sub.recall(WORD, mode="bm25", limit=100, **filters)],
        "search": [m["id"] for m in sub.search(WORD, limit=100, **filters)],
        "list": [m["id"] for m in sub.list(limit=100, **filters)],
    }
    args = {"limit": 100, **filters}
    for name, op, key, extra in (
        ("mcp recall", "memory_recall", "results", {"query": WORD, "mode": "bm25"}),
        ("mcp search", "memory_search", "results", {"query": WORD}),
        ("mcp list", "memory_list", "memories", {}),
    ):
        python[name] = [m["id"] for m in operations.invoke(sub, op, {**args, **extra})[key]]
    for name, path, key, extra in (
        ("http recall", "/recall", "results", {"query": WORD, "mode": "bm25"}),
        ("http search", "/search", "results", {"query": WORD}),
        ("http list", "/list", "memories", {}),
    ):
        r = client.post(path, json={**args, **extra})
        assert r.status_code == 200, r.text
        python[name] = [m["id"] for m in r.json()[key]]
    return python


def test_the_same_filters_select_the_same_memories_through_every_door(
    world: tuple[Substrate, dict[str, str]],
) -> None:
    sub, ids = world
    client = TestClient(http_api.app(sub, http_api.HttpSettings()), base_url="http://127.0.0.1")
    for filters, expected in CASES:
        for door, found in doors(sub, client, filters).items():
            assert _names(ids, found) == expected, (filters, door)


def test_a_pack_selects_by_a_project_alias_as_recall_does(world: tuple[Substrate, dict[str, str]]) -> None:
    sub, ids = world
    by_alias = sub.build_context(f"{WORD} seal", project="p06", record=False)
    by_name = sub.build_context(f"{WORD} seal", project="p06-polisher", record=False)
    assert by_alias["text"] == by_name["text"]
    quoted = {e["id"] for tier in by_name["tiers"] for e in tier["entries"] if e["source"] == "memory"}
    # What the default recall hides, a pack leaves out too.
    hidden = {ids[n] for n in ("archived", "expired", "superseded", "candidate")}
    assert {ids["ops"], ids["lab"]} <= quoted and not quoted & hidden


def test_triage_reads_its_duplicates_from_what_recall_shows(world: tuple[Substrate, dict[str, str]]) -> None:
    sub, ids = world
    with sub.session() as s:
        pool = _names(ids, [m["id"] for m in sub.retrieval.similar(s, WORD, 50, exclude=ids["plain"])])
    # The default recall's memories, whatever namespace or project, but the one left out; a
    # candidate duplicates no expired, archived, superseded or candidate memory.
    assert pool == {"ops", "below", "lab"}
