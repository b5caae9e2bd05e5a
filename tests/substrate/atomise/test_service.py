"""The atomise engine: the contract of docs/curators.md (invariants, exit codes, governance, hooks, modes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemolog.cli.demo import POST_MORTEM
from mnemolog.curators.base import CuratorFailed, SourceTooSmall, TierLocked
from mnemolog.eventlog.errors import NotFound
from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.eventlog.verify.verifier import verify_log
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.atomise.service import MAX_DEPTH, DepthExceeded
from mnemolog.substrate.events import MemoryStored
from mnemolog.substrate.home import init_home
from mnemolog.substrate.hooks import GovernanceRefused, HookEvent
from tests.support.fake_ollama import FakeOllama, atoms_json


@pytest.fixture
def home(tmp_path: Path) -> Path:
    init_home(tmp_path / "home")
    return tmp_path / "home"


@pytest.fixture
def sub(home: Path) -> Iterator[Substrate]:
    s = Substrate.open(home, long_lived=False)
    yield s
    s.close()


def types_after(sub: Substrate, seq: int) -> list[str]:
    sub.log.refresh()
    return [e.type for e in sub.log.iter_entries(seq + 1)]


def test_the_six_hermetic_invariants(sub: Substrate, home: Path) -> None:
    parent = sub.store(POST_MORTEM, title="Checkout outage", tags=["postmortem"], namespace="ops")
    res = sub.atomise(parent["id"], curator="rules", max_atom_tokens=60)
    n = len(res.atom_ids)
    assert 2 <= n <= 10 and res.exit_code == 0

    # 1. the parent is marked atomised (both signals)
    p = sub.get(parent["id"])
    assert p["atomised_into"] == n and p["atomisation_archived_at"] is not None
    # ... and its metadata mirrors the archive with the envelope's time (the contract's name)
    assert res.archived_at is not None and p["metadata"]["atomisation_archived_at"] == res.archived_at
    # 2. atoms point back to it: atom_of, a derives_from edge, a verbatim source span
    for aid in res.atom_ids:
        a = sub.get(aid)
        assert a["atom_of"] == parent["id"] and a["kind"] == "observation"
        assert a["namespace"] == "ops" and a["tags"] == ["postmortem"]
        assert [e["relation"] for e in a["links"]["outgoing"]] == ["derives_from"]
        start, end = a["source_span"]
        assert POST_MORTEM[start:end] == a["content"]
    # 3. default recall hides the parent; 4. the atoms appear in recall
    hits = sub.recall("why did workers time out waiting for connections")
    assert parent["id"] not in {h["id"] for h in hits}
    assert hits and hits[0]["atom_of"] == parent["id"]
    assert "pool" in hits[0]["content"]
    # 5. include_archived shows the parent
    assert parent["id"] in {h["id"] for h in sub.recall("checkout outage", include_archived=True, limit=20)}
    # 6. the log holds the whole chain, signed: atoms with edges, completion, archive
    kinds = types_after(sub, parent["stored_seq"])
    assert kinds == ["memory.stored", "link.created"] * n + ["atomisation.completed", "memory.archived"]
    completed = next(e for e in sub.log.iter_entries(0) if e.type == "atomisation.completed")
    assert completed.data["atom_ids"] == res.atom_ids and completed.data["curator"] == "rules"
    assert completed.data["input_tokens"] > 0 and len(completed.data["atom_tokens"]) == n
    links = [e for e in sub.log.iter_entries(0) if e.type == "link.created"]
    assert all(e.data["relation"] == "derives_from" and e.data["dst"] == parent["id"] for e in links)
    verify_log(home / "log", processes=1, policy=TRUST_GENESIS)


def test_repeat_is_informational_and_force_reatomises(sub: Substrate) -> None:
    parent = sub.store(POST_MORTEM)
    first = sub.atomise(parent["id"], curator="rules", max_atom_tokens=60)
    again = sub.atomise(parent["id"], curator="rules")
    assert again.already_atomised and again.exit_code == 1
    assert again.atom_ids == first.atom_ids
    assert again.envelope()["already_atomised"] is True

    forced = sub.atomise(parent["id"], curator="rules", max_atom_tokens=120, force=True)
    assert set(forced.atom_ids).isdisjoint(first.atom_ids)
    p = sub.get(parent["id"])
    assert p["atomised_into"] == len(forced.atom_ids)
    # old atoms are retained (still in the store) but out of default recall
    for old in first.atom_ids:
        m = sub.get(old)
        assert m["archived_at"] is not None
    visible = {m["id"] for m in sub.list(limit=100)}
    assert visible == set(forced.atom_ids)
    assert {m["id"] for m in sub.list(limit=100, include_archived=True)} >= set(first.atom_ids)


def test_depth_cap(sub: Substrate) -> None:
    # A chain of atoms MAX_DEPTH deep: the deepest one may not be atomised again.
    parent = sub.store(POST_MORTEM)
    cur = parent["id"]
    with sub.session() as s:
        for _ in range(MAX_DEPTH):
            p = MemoryStored.new(POST_MORTEM, atom_of=cur)
            s.write_memory(p)
            cur = p.id
    with pytest.raises(DepthExceeded) as ei:
        sub.atomise(cur, curator="rules")
    assert ei.value.exit_code == 7
    assert ei.value.details["depth"] == MAX_DEPTH


def test_not_found_tier_locked_too_small(sub: Substrate, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MNEMOLOG_OLLAMA_MODEL", raising=False)
    with pytest.raises(NotFound):
        sub.atomise("01ABCDEFGHJKMNPQRSTVWXYZ00", curator="rules")
    # Tier gating happens before any read: even an unknown id is TIER_LOCKED.
    with pytest.raises(TierLocked) as ei:
        sub.atomise("01ABCDEFGHJKMNPQRSTVWXYZ00", curator="ollama")
    assert ei.value.exit_code == 3
    short = sub.store("A short note that fits in one atom.")
    size = sub.log.refresh()
    with pytest.raises(SourceTooSmall) as st:
        sub.atomise(short["id"], curator="rules")
    assert st.value.exit_code == 1
    assert sub.log.refresh() == size  # nothing written


def test_governance_refusal_mid_batch_keeps_earlier_atoms(home: Path) -> None:
    calls: list[tuple[str, int | None]] = []

    def pre_store(ev: HookEvent) -> Any:
        calls.append((ev.point, ev.atom_index))
        if ev.atom_index == 2:
            return "atom 2 mentions a customer count"
        return None

    def record(ev: HookEvent) -> None:
        calls.append((ev.point, ev.atom_index))

    hooks = {"pre_store": [pre_store], "post_store": [record], "pre_link": [record], "post_link": [record]}
    with Substrate.open(home, long_lived=False, hooks=hooks) as sub:
        parent = sub.store(POST_MORTEM)
        with pytest.raises(GovernanceRefused) as ei:
            sub.atomise(parent["id"], curator="rules", max_atom_tokens=60)
        err = ei.value
        assert err.exit_code == 5 and err.details["refused_atom_index"] == 2
        kept = err.details["atom_ids"]
        assert len(kept) == 2
        for aid in kept:
            assert sub.get(aid)["atom_of"] == parent["id"]
        p = sub.get(parent["id"])
        assert not p["atomised_into"] and p["atomisation_archived_at"] is None  # not archived
        failed = [e for e in sub.log.iter_entries(0) if e.type == "atomisation.failed"]
        assert failed and failed[-1].data["refused_atom_index"] == 2
        assert failed[-1].data["reason"] == "governance_refused"
        assert sub.stats()["atomisation"]["failed"] == 1
    # hooks fired for every atom and every edge, in order, until the refusal
    atom_calls = [c for c in calls if c[1] is not None]
    assert atom_calls[:8] == [
        ("pre_store", 0), ("post_store", 0), ("pre_link", 0), ("post_link", 0),
        ("pre_store", 1), ("post_store", 1), ("pre_link", 1), ("post_link", 1),
    ]  # fmt: skip
    assert atom_calls[8:] == [("pre_store", 2)]


def test_write_none_policy_refuses_store(sub: Substrate) -> None:
    sub.set_policy("locked", write="none")
    size = sub.log.refresh()
    with pytest.raises(GovernanceRefused):
        sub.store("anything", namespace="locked/child")
    assert sub.log.refresh() == size
    sub.clear_policy("locked")
    assert sub.store("now fine", namespace="locked/child")["namespace"] == "locked/child"


def test_policy_inheritance_leaf_first(sub: Substrate) -> None:
    sub.set_policy("", auto_atomise_threshold_cl100k=900)
    sub.set_policy("a", auto_atomise_mode="deferred", curator="rules")
    sub.set_policy("a/b/c", auto_atomise_mode="synchronous")
    p = sub.get_policy("a/b/c")
    assert p["policy"]["auto_atomise_mode"] == "synchronous" and p["sources"]["auto_atomise_mode"] == "a/b/c"
    assert p["policy"]["curator"] == "rules" and p["sources"]["curator"] == "a"
    assert (
        p["policy"]["auto_atomise_threshold_cl100k"] == 900
        and p["sources"]["auto_atomise_threshold_cl100k"] == ""
    )
    assert p["policy"]["write"] == "any" and p["sources"]["write"] == "(default)"


# -- synchronous mode through a real HTTP server speaking Ollama's API ------------


def ollama_substrate(home: Path, server: FakeOllama, sleeps: list[float]) -> Substrate:
    return Substrate.open(home, long_lived=False, curator_options={"sleep": sleeps.append, "timeout": 5.0})


@pytest.fixture
def ollama_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOllama]:
    with FakeOllama() as server:
        monkeypatch.setenv("MNEMOLOG_OLLAMA_HOST", server.host)
        monkeypatch.setenv("MNEMOLOG_OLLAMA_MODEL", "fake-model")
        yield server


SYNC_POLICY: dict[str, Any] = {
    "auto_atomise_mode": "synchronous",
    "curator": "ollama",
    "auto_atomise_threshold_cl100k": 201,
}
ATOMS = [
    "The checkout service returned HTTP 500 for 40% of requests from 09:12 UTC on 14 March.",
    "The root cause was connection pool exhaustion in the orders database after a deploy raised workers.",
    "A rollback at 09:41 restored normal error rates within four minutes.",
]


def test_synchronous_store_atomises_before_returning(home: Path, ollama_env: FakeOllama) -> None:
    sleeps: list[float] = []
    with ollama_substrate(home, ollama_env, sleeps) as sub:
        sub.set_policy(
            "ops", auto_atomise_mode="synchronous", curator="ollama", auto_atomise_threshold_cl100k=201
        )
        ollama_env.push(atoms_json(ATOMS))
        m = sub.store(POST_MORTEM, namespace="ops")
        assert m["atomise_mode"] == "synchronous" and m["atomise_outcome"] == "atomised"
        assert m["atomised_into"] == 3 and m["atomisation_archived_at"] is not None
        hits = sub.recall("connection pool exhaustion", namespace="ops")
        assert hits[0]["atom_of"] == m["id"]
        done = next(e for e in sub.log.iter_entries(0) if e.type == "atomisation.completed")
        assert done.data["model"] == "fake-model" and done.data["prompt_sha256"]
        assert sub.keys.upcast(done.type, done.tv, done.data)["responses"] == [
            atoms_json(ATOMS)
        ]  # replay never needs the model
        # below the threshold: skipped
        small = sub.store("Short note about the outage.", namespace="ops")
        assert small["atomise_outcome"] == "skipped_below_threshold"
        assert len(ollama_env.chat_requests) == 1
        assert sleeps == []


def test_synchronous_failure_is_an_event_and_respects_retry_budget(
    home: Path, ollama_env: FakeOllama
) -> None:
    sleeps: list[float] = []
    with ollama_substrate(home, ollama_env, sleeps) as sub:
        sub.set_policy(
            "ops", auto_atomise_mode="synchronous", curator="ollama", auto_atomise_threshold_cl100k=201
        )
        ollama_env.push("not json at all", "still not json", "nope", "never")
        m = sub.store(POST_MORTEM, namespace="ops")
        assert m["atomise_outcome"] == "failed"
        assert m["atomise_error"]["error"] == "curator_failed"
        assert len(ollama_env.chat_requests) == 2  # synchronous default: 1 retry
        assert sleeps == [0.1]
        failed = [e for e in sub.log.iter_entries(0) if e.type == "atomisation.failed"]
        assert failed[-1].data["reason"] == "malformed_output" and failed[-1].data["attempts"] == 2
        assert sub.get(m["id"])["atomised_into"] is None  # the store itself stands
        assert sub.stats()["atomisation"]["failed"] == 1
        # per-namespace override: 3 retries, 4 attempts, the full backoff
        sub.set_policy("ops", auto_atomise_max_retries=3)
        ollama_env.push("x", "y", "z", "w")
        sleeps.clear()
        before = len(ollama_env.chat_requests)
        m2 = sub.store(POST_MORTEM + " (second copy)", namespace="ops")
        assert m2["atomise_outcome"] == "failed"
        assert len(ollama_env.chat_requests) - before == 4
        assert sleeps == [0.1, 0.5, 2.5]


# -- deferred mode ---------------------------------------------------------------


def test_deferred_store_queues_and_worker_completes_once(sub: Substrate) -> None:
    sub.set_policy(
        "team",
        auto_atomise_mode="deferred",
        curator="rules",
        auto_atomise_max_atom_tokens=60,
        auto_atomise_threshold_cl100k=100,
    )
    m = sub.store(POST_MORTEM, namespace="team")
    assert m["atomise_mode"] == "deferred" and m["atomise_outcome"] == "requested"
    assert sub.stats()["atomisation"] == {"requested": 1, "completed": 0, "failed": 0, "pending": 1}
    # the store returned before any atom existed
    assert sub.get(m["id"])["atomised_into"] is None
    done = sub.drain_atomisations()
    assert [d["outcome"] for d in done] == ["atomised"]
    assert sub.get(m["id"])["atomised_into"] == done[0]["atom_count"]
    assert sub.stats()["atomisation"]["pending"] == 0
    assert sub.drain_atomisations() == []  # exactly once
    completions = [e for e in sub.log.iter_entries(0) if e.type == "atomisation.completed"]
    assert len(completions) == 1 and completions[0].data["request_seq"] is not None


def test_deferred_failure_is_visible(sub: Substrate, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MNEMOLOG_OLLAMA_MODEL", raising=False)
    sub.set_policy("team", auto_atomise_mode="deferred", curator="ollama", auto_atomise_threshold_cl100k=201)
    sub.store(POST_MORTEM * 2, namespace="team")
    done = sub.drain_atomisations()
    assert done[0]["outcome"] == "failed" and done[0]["error"]["error"] == "TIER_LOCKED"
    st = sub.stats()["atomisation"]
    assert st["failed"] == 1 and st["pending"] == 0
    failed = [e for e in sub.log.iter_entries(0) if e.type == "atomisation.failed"]
    assert failed[0].data["reason"] == "TIER_LOCKED"


def test_long_lived_worker_thread_drains(home: Path) -> None:
    import time

    with Substrate.open(home, long_lived=True) as sub:
        sub.set_policy(
            "team",
            auto_atomise_mode="deferred",
            curator="rules",
            auto_atomise_max_atom_tokens=60,
            auto_atomise_threshold_cl100k=100,
        )
        m = sub.store(POST_MORTEM, namespace="team")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not sub.get(m["id"])["atomised_into"]:
            time.sleep(0.05)
        assert sub.get(m["id"])["atomised_into"]


def test_curator_failure_raises_and_records(home: Path, ollama_env: FakeOllama) -> None:
    sleeps: list[float] = []
    with ollama_substrate(home, ollama_env, sleeps) as sub:
        m = sub.store(POST_MORTEM)
        ollama_env.push("garbage", "garbage")
        with pytest.raises(CuratorFailed) as ei:
            sub.atomise(m["id"], curator="ollama")
        assert ei.value.exit_code == 4
        assert [e.type for e in sub.log.iter_entries(0)][-1] == "atomisation.failed"
