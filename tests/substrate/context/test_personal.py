"""The personal scope: personal-domain memories enter only packs that ask; those hold no project data."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mnemolog.eventlog.errors import UsageError
from mnemolog.projections.context.config import PackConfig
from mnemolog.substrate.api import Substrate
from tests.projections.kit import FakeClock, new_home, open_sub

QUERY = "blood pressure medication budget"


@pytest.fixture
def sub(tmp_path: Path) -> Iterator[Substrate]:
    home = new_home(tmp_path / "home")
    # "health" is not a built-in knowledge domain: a home adds it, and the default
    # personal_domains setting only names it.
    home.config_path.write_text(home.config_path.read_text() + '\n[knowledge]\ndomains = ["health"]\n')
    s = open_sub(home.root, clock=FakeClock())
    yield s
    s.close()


def seeded(sub: Substrate, tmp_path: Path) -> dict[str, str]:
    sub.register_project("p06-polisher")
    sub.set_state("p06-polisher", "status", "phase", "blood pressure sensor integration")
    d = tmp_path / "docs"
    d.mkdir()
    (d / "notes.md").write_text("# Sensors\nThe blood pressure sensor medication budget is tight.\n")
    sub.ingest([d / "notes.md"], project="p06-polisher")
    (tmp_path / "mine.md").write_text("# Me\nMy blood pressure medication is taken at breakfast.\n")
    sub.ingest([tmp_path / "mine.md"])
    return {
        "health": sub.store("Blood pressure medication: one tablet each morning", domains=["health"])["id"],
        "finance": sub.store("Medication budget is 40 a month", domains=["finance"])["id"],
        "project": sub.store(
            "Blood pressure sensor medication budget for the polisher", project="p06-polisher"
        )["id"],
        "global": sub.store("Blood pressure readings vary with posture", kind="knowledge")["id"],
    }


def ids_of(pack: dict[str, object], source: str) -> set[str]:
    tiers = pack["tiers"]
    assert isinstance(tiers, list)
    return {e["id"] for t in tiers for e in t["entries"] if e["source"] == source}


def test_personal_memories_stay_out_of_packs_that_do_not_ask(sub: Substrate, tmp_path: Path) -> None:
    ids = seeded(sub, tmp_path)
    for project in (None, "p06-polisher"):
        pack = sub.build_context(QUERY, project=project, record=False)
        mems = ids_of(pack, "memory")
        assert ids["health"] not in mems and ids["finance"] not in mems
        assert ids["global"] in mems
        excluded = {(x["id"], x["reason"]) for x in pack["excluded"]}
        assert (ids["health"], "personal") in excluded and (ids["finance"], "personal") in excluded
        assert pack["config"]["personal"] is False
    assert ids["project"] in ids_of(sub.build_context(QUERY, project="p06-polisher", record=False), "memory")


def test_a_personal_pack_holds_them_and_no_project_data(sub: Substrate, tmp_path: Path) -> None:
    ids = seeded(sub, tmp_path)
    pack = sub.build_context(QUERY, personal=True)
    mems = ids_of(pack, "memory")
    assert {ids["health"], ids["finance"], ids["global"]} <= mems
    assert ids["project"] not in mems
    assert ids_of(pack, "state") == set()
    chunks = ids_of(pack, "chunk")
    assert len(chunks) == 1 and "breakfast" in pack["text"] and "sensor" not in pack["text"]
    assert pack["project"] is None and pack["config"]["personal"] is True
    assert pack["config"]["personal_domains"] == ["finance", "health", "personal"]
    shown = sub.show_context(pack["pack_id"])
    assert shown["text"] == pack["text"] and shown["config"]["personal"] is True
    with pytest.raises(UsageError):
        sub.build_context(QUERY, project="p06-polisher", personal=True)


def test_personal_domains_are_configurable(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    home.config_path.write_text(home.config_path.read_text() + '\n[context]\npersonal_domains = ["Health"]\n')
    s = open_sub(home.root, clock=FakeClock())
    try:
        fin = s.store("Medication budget is 40 a month", domains=["finance"])["id"]
        pack = s.build_context(QUERY, record=False)
        assert fin in ids_of(pack, "memory") and pack["config"]["personal_domains"] == ["health"]
    finally:
        s.close()
    assert PackConfig.from_mapping({"personal_domains": ["x"]}).personal_domains == ("x",)
    with pytest.raises(UsageError):
        PackConfig.from_mapping({"personal_domains": "health"})


def test_http_asks_for_the_personal_scope_as_the_api_does(sub: Substrate, tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from mnemolog.cli.agents import http_api

    ids = seeded(sub, tmp_path)
    client = TestClient(http_api.app(sub, http_api.HttpSettings()), base_url="http://127.0.0.1")
    body = {"query": QUERY, "record": False}
    plain = client.post("/context/build", json=body)
    mine = client.post("/context/build", json={**body, "personal": True})
    assert plain.status_code == 200 and mine.status_code == 200, (plain.text, mine.text)
    assert ids["health"] not in ids_of(plain.json(), "memory")
    assert ids["health"] in ids_of(mine.json(), "memory")
    assert mine.json()["text"] == sub.build_context(QUERY, personal=True, record=False)["text"]
    both = client.post("/context/build", json={**body, "personal": True, "project": "p06-polisher"})
    assert both.status_code == 400
