"""The isolation suite: every operation, with a token of every level, against what lies outside its scope.

Two tenants under one root. In tenant `acme` a token is bound to the
namespace `agents/a` (with `team/shared` declared shared with `agents`);
outside it lie `agents/b`, project `p1`'s trusted state, a recorded pack
quoting `agents/b`, a candidate of another user, and tenant `globex`. Each
operation of cli.operations runs (through `invoke`, the layer MCP and HTTP
share) with arguments aimed outside the scope. It must be refused or answer
without a byte of what lies outside, and nothing outside may change. A new
operation fails `test_every_operation_has_hostile_arguments` until it is
given its cases here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mnemolog.cli.agents import operations
from mnemolog.eventlog.errors import MnemologError
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import Home
from mnemolog.substrate.tenancy import scope
from mnemolog.substrate.tenancy.tenants import TenantRoot

MARKERS = ("BSECRET", "GLOBEXSECRET", "STATESECRET", "CANDSECRET")
ALL_STATUSES = ["candidate", "active", "superseded", "invalid"]


@dataclass
class World:
    root: TenantRoot
    acme: Substrate
    globex: Substrate
    ids: dict[str, str]
    tokens: dict[str, scope.Scope]


def _mem0(path: Path) -> Path:
    path.write_text(
        json.dumps({"results": [{"id": "m-1", "memory": "CANDSECRET the user b likes tea", "user_id": "b"}]})
    )
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    base = tmp_path_factory.mktemp("isolation")
    root = TenantRoot(base / "root")
    root.add("acme")
    root.add("globex")
    cfg = root.home("acme").config_path
    cfg.write_text(cfg.read_text() + '\n[sharing]\n"team/shared" = ["agents"]\n')
    acme = Substrate.open(Home(root.home("acme").root), long_lived=False, worker=False)
    globex = Substrate.open(Home(root.home("globex").root), long_lived=False, worker=False)
    try:
        for s in (acme, globex):
            s.set_embedder("off")
        ids = {
            "a": acme.store("ASECRET alpha note of agent a", namespace="agents/a", project="p1")["id"],
            "a2": acme.store("alpha second note of agent a", namespace="agents/a")["id"],
            "b": acme.store("BSECRET alpha note of agent b " + "word " * 300, namespace="agents/b")["id"],
            "b2": acme.store("BSECRET beta note of agent b", namespace="agents/b")["id"],
            "shared": acme.store("SHAREDOK alpha handbook", namespace="team/shared")["id"],
            "g": globex.store("GLOBEXSECRET alpha note", namespace="agents/a")["id"],
        }
        acme.link(ids["b"], ids["b2"], "related_to")
        acme.link(ids["a2"], ids["b"], "related_to")  # an admin's edge out of the scope
        acme.archive(ids["b2"], reason="archived for restore")
        acme.set_state("p1", "decision", "vendor", "STATESECRET vendor x")
        ids["pack"] = acme.build_context("alpha BSECRET note")["pack_id"]
        acme.import_from("mem0", _mem0(base / "mem0.json"))
        ids["cand"] = acme.candidates(queues=("pending", "needs_human"))[0]["id"]
        tokens = {
            lvl: acme.with_token(
                acme.issue_token(lvl, namespaces=["agents/a"], tenant="acme")["token"], tenant="acme"
            ).scope
            for lvl in scope.LEVELS
        }
        yield World(root, acme, globex, ids, tokens)
    finally:
        acme.close()
        globex.close()


def cases(i: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """Per operation: arguments aimed outside the scope (another namespace, project, or tenant)."""
    every = {"statuses": ALL_STATUSES, "include_archived": True, "include_expired": True}
    return {
        "memory_store": [
            {"content": "x", "namespace": "agents/b"},
            {"content": "x", "namespace": "team/shared"},
            {"content": "x", "namespace": "agents"},
            {"content": "x", "namespace": "default"},
        ],
        "memory_recall": [
            {"query": "alpha BSECRET GLOBEXSECRET CANDSECRET", "limit": 100, **every},
            {"query": "alpha", "namespace": "agents/b"},
            {"query": "alpha", "namespace": "agents", **every},
            {"query": "alpha note agent", "explain": True, "verbose": True, "limit": 100},
        ],
        "memory_search": [{"query": "BSECRET", **every}, {"query": "alpha", "namespace": "agents/b"}],
        "memory_get": [
            {"id": i["b"]},
            {"id": i["g"]},
            {"id": i["cand"]},
            {"id": i["a"], "verbose": True},
            {"id": i["a2"], "verbose": True},
        ],
        "memory_list": [
            {"limit": 1000, **every},
            {"namespace": "agents/b"},
            {"namespace": "agents", **every},
        ],
        "memory_link": [
            {"src": i["a"], "dst": i["b"]},
            {"src": i["b"], "dst": i["a"]},
            {"src": i["shared"], "dst": i["a"]},
            {"src": i["a"], "dst": i["g"]},
        ],
        "memory_unlink": [{"src": i["b"], "dst": i["b2"]}],
        "memory_update": [
            {"id": i["b"], "content": "overwritten"},
            {"id": i["shared"], "title": "mine now"},
            {"id": i["a2"], "namespace": "agents/b"},
            {"id": i["g"], "content": "x"},
        ],
        "memory_archive": [{"id": i["b"]}, {"id": i["shared"]}, {"id": i["g"]}],
        "memory_restore": [{"id": i["b2"]}],
        "memory_forget": [
            {"id": i["b"]},
            {"ids": [i["b"], i["g"]]},
            {"namespace": "agents/b"},
            {"project": "p1"},
            {"before": "2999-01-01T00:00:00Z"},
            {"expired": True},
        ],
        "memory_atomise": [{"id": i["b"], "curator": "rules"}],
        "memory_stats": [{}],
        "memory_history": [{"id": i["b"]}, {"id": i["g"]}, {"id": i["a2"]}],
        "log_verify": [{}],
        "bundle_export": [{"memory_id": i["b"]}, {"memory_id": i["g"]}, {"memory_id": i["a2"]}],
        "bundle_verify": [{"path": "bundle.tar"}],
        "capture_interaction": [
            {"prompt": "p", "namespace": "agents/b"},
            {"prompt": "p", "namespace": "default"},
        ],
        "project_state_get": [{"project": "p1", "history": True}],
        "project_state_set": [{"project": "p1", "category": "decision", "key": "vendor", "value": "y"}],
        "candidates_list": [{"statuses": ["pending", "needs_human", "promoted", "rejected"]}],
        "candidate_promote": [{"id": i["cand"]}],
        "candidate_reject": [{"id": i["cand"], "reason": "no"}],
        "context_build": [
            {"query": "alpha BSECRET STATESECRET CANDSECRET", "record": False},
            {"query": "alpha vendor", "project": "p1"},
        ],
        "context_show": [{"pack_id": i["pack"]}],
    }


def test_every_operation_has_hostile_arguments() -> None:
    fake = dict.fromkeys(("a", "a2", "b", "b2", "shared", "g", "pack", "cand"), "x")
    assert set(cases(fake)) == set(operations.OPERATIONS)


def _outside(w: World) -> str:
    """Everything outside the token's write scope, and the other tenant, as the home itself sees it."""
    rows = w.acme.list(limit=1000, statuses=ALL_STATUSES, include_archived=True, include_expired=True)
    mine = [r for r in rows if not r["namespace"].startswith("agents/a")]
    links = [w.acme.get(r["id"])["links"] for r in mine]
    state = w.acme.get_state("p1", history=True)
    return json.dumps([mine, links, state, w.globex.stats()["log"]], default=str, sort_keys=True)


@pytest.mark.parametrize("level", scope.LEVELS)
@pytest.mark.parametrize("name", sorted(operations.OPERATIONS))
def test_nothing_outside_the_scope_is_readable_or_writable(world: World, name: str, level: str) -> None:
    sc = world.tokens[level]
    before = _outside(world)
    hidden = [*MARKERS, world.ids["b"], world.ids["b2"], world.ids["g"], world.ids["cand"]]
    for args in cases(world.ids)[name]:
        try:
            out = operations.invoke(world.acme, name, args, sc)
        except MnemologError as exc:
            text = json.dumps(exc.to_json(), default=str)
            assert not any(m in text for m in MARKERS), text
            continue
        text = json.dumps(out, default=str)
        leaked = [h for h in hidden if h in text and h not in json.dumps(args)]
        assert not leaked, (name, args, leaked, text[:500])
    assert _outside(world) == before, f"{name} with a {level} token changed what lies outside its scope"


def test_the_scope_still_sees_its_own_and_the_shared(world: World) -> None:
    sc = world.tokens["read"]
    out = operations.invoke(world.acme, "memory_recall", {"query": "alpha", "limit": 50}, sc)
    got = {r["id"] for r in out["results"]}
    assert {world.ids["a"], world.ids["a2"], world.ids["shared"]} <= got
    assert operations.invoke(world.acme, "memory_stats", {}, sc)["stats"]["scoped"] is True


def test_refusals_are_counted_per_token(world: World) -> None:
    sc = world.tokens["read"]
    before = world.acme.refusals.counts.get(str(sc.token_id), 0)
    with pytest.raises(scope.ScopeRefused):
        operations.invoke(world.acme, "memory_store", {"content": "x", "namespace": "agents/a"}, sc)
    assert world.acme.refusals.counts[str(sc.token_id)] == before + 1
