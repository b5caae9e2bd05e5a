"""Projects and aliases at every boundary, trusted state, capture and interactions, domains,
the [domain] prefix migration, and hostile input (refused with its exit code, nothing written)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemolog.eventlog.errors import BadInput, Informational, MnemologError, NotFound, UsageError
from mnemolog.substrate.api import MAX_CONTENT_BYTES, Substrate
from tests.projections.kit import FakeClock, log_digest, new_home, open_sub

#: After the genesis entry (written with the real clock): the log never lets time go back.
LATER = 4_000_000_000_000_000


@pytest.fixture
def sub(tmp_path: Path) -> Iterator[Substrate]:
    # `refused` compares the log's bytes around a call: no checkpoint may be signed in between
    # because five seconds of wall clock passed since the first write (it did, under load).
    s = open_sub(new_home(tmp_path / "home", timed_checkpoints=False), clock=FakeClock(LATER))
    yield s
    s.close()


def refused(
    sub: Substrate, fn: Callable[[], Any], error: type[MnemologError], exit_code: int
) -> MnemologError:
    """``fn`` raises ``error`` with ``exit_code`` and the log is byte for byte unchanged."""
    before = log_digest(sub.home)
    with pytest.raises(error) as info:
        fn()
    assert info.value.exit_code == exit_code
    assert log_digest(sub.home) == before
    return info.value


# -- projects and aliases ------------------------------------------------------------------------


def test_projects_and_their_aliases(sub: Substrate) -> None:
    p = sub.register_project("p04-gigabit", aliases=["p04"], description="1.2 m telescope")
    assert (p["name"], p["aliases"], p["description"]) == ("p04-gigabit", ["p04"], "1.2 m telescope")
    sub.alias_project("P04", "gigabit")  # through an alias, in any case
    assert [(x["name"], x["aliases"]) for x in sub.projects()] == [("p04-gigabit", ["p04", "gigabit"])]
    refused(sub, lambda: sub.register_project("p04-GIGABIT"), Informational, 1)
    refused(sub, lambda: sub.register_project("p04"), BadInput, 65)
    refused(sub, lambda: sub.alias_project("p09", "nine"), NotFound, 2)
    sub.register_project("p06-polisher")
    refused(sub, lambda: sub.alias_project("p06-polisher", "p04"), BadInput, 65)
    refused(sub, lambda: sub.register_project("not a name"), BadInput, 65)


def test_an_alias_registered_later_resolves_old_rows_at_every_boundary(sub: Substrate) -> None:
    # Written under names nobody registered yet: they pass through unchanged.
    m = sub.store("The pad layout follows the CTE map", project="gb")
    iid = sub.capture("layout?", "It follows the CTE map.", project="GB")["id"]
    sub.set_state("gb", "status", "phase", "design review")
    assert sub.get(m["id"])["project"] == "gb"
    assert sub.interaction(iid)["project"] == "GB"
    # Registered afterwards, with those names as aliases: every old row resolves.
    sub.register_project("p04-gigabit", aliases=["gb"])
    assert sub.get(m["id"])["project"] == "p04-gigabit"
    assert sub.interaction(iid)["project"] == "p04-gigabit"
    for name in ("p04-gigabit", "GB", "gb", " P04-Gigabit "):
        assert [x["id"] for x in sub.list(project=name)] == [m["id"]], name
        assert [x["id"] for x in sub.recall("CTE map", project=name)] == [m["id"]], name
        assert [x["id"] for x in sub.interactions(project=name)] == [iid], name
        assert [e["value"] for e in sub.get_state(name)] == ["design review"], name
    # New writes through an alias land under the registered name.
    n = sub.store("Another one", project="GB")
    assert sub.get(n["id"])["project"] == "p04-gigabit"
    assert sub.set_state("GB", "status", "phase", "build")["project"] == "p04-gigabit"
    updated = sub.update(m["id"], project="gb")
    assert updated["project"] == "p04-gigabit"
    # And a rebuild agrees.
    before = [(x["id"], x["project"]) for x in sub.list(limit=100)]
    sub.rebuild()
    assert [(x["id"], x["project"]) for x in sub.list(limit=100)] == before


# -- trusted state ------------------------------------------------------------------------------------


def test_state_upserts_keeps_history_and_invalidates(sub: Substrate) -> None:
    sub.register_project("p04-gigabit", aliases=["p04"])
    a = sub.set_state("p04", "decision", "vendor_path", "4D technical lead", source="review 1")
    assert (a["changed"], a["state"], a["project"]) == (True, "current", "p04-gigabit")
    size = sub.log.refresh()
    assert (
        sub.set_state("p04", "decision", "vendor_path", "4D technical lead", source="review 1")["changed"]
        is False
    )
    assert sub.log.refresh() == size  # the same value again writes nothing
    sub.set_state("p04", "decision", "vendor_path", "Twyman-Green preferred", source="review 2")
    sub.set_state("p04", "requirement", "wfe", "<= 15 nm RMS")
    sub.set_state("p04", "status", "phase", "design")
    current = sub.get_state("p04")
    assert [(e["category"], e["key"], e["value"]) for e in current] == [
        ("status", "phase", "design"),
        ("decision", "vendor_path", "Twyman-Green preferred"),
        ("requirement", "wfe", "<= 15 nm RMS"),
    ]
    assert [e["value"] for e in sub.get_state("p04", category="decision")] == ["Twyman-Green preferred"]
    gone = sub.invalidate_state("p04", "requirement", "wfe", reason="relaxed by the customer")
    assert (gone["state"], gone["reason"]) == ("invalid", "relaxed by the customer")
    history = sub.get_state("p04", history=True)
    assert [(e["key"], e["state"]) for e in history] == [
        ("phase", "current"),
        ("vendor_path", "replaced"),
        ("vendor_path", "current"),
        ("wfe", "invalid"),
    ]
    refused(sub, lambda: sub.invalidate_state("p04", "requirement", "wfe"), NotFound, 2)


@pytest.mark.parametrize("category", ["Status", "notes", "", "decisions"])
def test_an_unknown_state_category_is_bad_input(sub: Substrate, category: str) -> None:
    refused(sub, lambda: sub.set_state("p04", category, "k", "v"), BadInput, 65)
    refused(sub, lambda: sub.get_state("p04", category=category), BadInput, 65)
    refused(sub, lambda: sub.invalidate_state("p04", category, "k"), BadInput, 65)


@pytest.mark.parametrize(
    ("key", "value"),
    [("", "v"), ("k", ""), ("k" * 201, "v"), ("k", "v" * 4097), ("k\x00", "v"), ("k", "\ud800")],
)
def test_malformed_state_is_bad_input(sub: Substrate, key: str, value: str) -> None:
    refused(sub, lambda: sub.set_state("p04", "fact", key, value), BadInput, 65)


# -- capture and interactions ------------------------------------------------------------------------


def test_capture_writes_one_event_and_changes_no_memory(sub: Substrate) -> None:
    m = sub.store("The pad layout follows the CTE map")
    size = sub.log.refresh()
    out = sub.capture(
        "How is the layout decided?",
        "The pad layout follows the CTE map.",
        project="p04",
        client="claude-code",
        session="s-1",
        context_id="ctx-9",
    )
    assert sub.log.refresh() == size + 1
    assert out["reinforced"] == []
    assert sub.get(m["id"])["reference_count"] == 0  # no --reinforce: nothing changes
    row = sub.interaction(out["id"])
    assert (row["client"], row["session"], row["context_id"], row["extraction"]) == (
        "claude-code",
        "s-1",
        "ctx-9",
        "pending",
    )
    assert sub.stats()["knowledge"]["interactions"] == {"pending": 1}


def test_interactions_newest_first_with_filters(sub: Substrate) -> None:
    ids = [
        sub.capture(f"prompt {i}", "r", project="p04" if i % 2 else "", session=f"s{i % 3}")["id"]
        for i in range(6)
    ]
    assert [r["id"] for r in sub.interactions()] == ids[::-1]
    assert [r["id"] for r in sub.interactions(project="p04")] == [ids[5], ids[3], ids[1]]
    assert [r["id"] for r in sub.interactions(session="s0")] == [ids[3], ids[0]]
    assert [r["id"] for r in sub.interactions(limit=2)] == ids[:-3:-1]
    since = sub.interaction(ids[4])["captured_at"]
    assert [r["id"] for r in sub.interactions(since=since)] == [ids[5], ids[4]]
    refused(sub, lambda: sub.interaction("01NOPE"), NotFound, 2)


@pytest.mark.parametrize(
    ("prompt", "response", "kw"),
    [
        ("", "r", {}),
        ("   ", "r", {}),
        ("x" * (MAX_CONTENT_BYTES + 1), "r", {}),
        ("p", "y" * (MAX_CONTENT_BYTES + 1), {}),
        ("p\x00", "r", {}),
        ("p", "r", {"project": "not a name"}),
        ("p", "r", {"project": "x" * 65}),
        ("p", "r", {"client": "c" * 201}),
        ("\ud800", "r", {}),
    ],
)
def test_hostile_captures_are_refused(sub: Substrate, prompt: str, response: str, kw: dict[str, Any]) -> None:
    refused(sub, lambda: sub.capture(prompt, response, **kw), BadInput, 65)


def test_a_capture_at_the_size_limit_is_accepted(sub: Substrate) -> None:
    out = sub.capture("p" * MAX_CONTENT_BYTES, "r" * MAX_CONTENT_BYTES)
    row = sub.interaction(out["id"])
    assert len(row["prompt"]) == len(row["response"]) == MAX_CONTENT_BYTES


def test_extract_and_triage_need_a_selection(sub: Substrate) -> None:
    refused(sub, sub.extract, UsageError, 64)
    refused(sub, lambda: sub.extract(interaction_ids=["x"], pending=True), UsageError, 64)
    refused(sub, lambda: sub.extract(interaction_ids=["01NOPE"]), NotFound, 2)
    refused(sub, lambda: sub.extract(pending=True), Informational, 1)
    refused(sub, lambda: sub.triage(pending=True, triager="rules"), Informational, 1)
    refused(sub, lambda: sub.triage(candidate_ids=["01NOPE"], triager="rules"), NotFound, 2)
    m = sub.store("not a candidate")
    refused(sub, lambda: sub.triage(candidate_ids=[m["id"]], triager="rules"), NotFound, 2)
    refused(sub, lambda: sub.extract(pending=True, extractor="magic"), UsageError, 64)
    refused(sub, lambda: sub.candidates(queues=["waiting"]), UsageError, 64)


def test_the_ollama_tier_is_locked_without_a_model(sub: Substrate, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MNEMOLOG_OLLAMA_MODEL", raising=False)
    sub.capture("q", "r")
    err = refused(sub, lambda: sub.extract(pending=True, extractor="ollama"), MnemologError, 3)
    assert err.slug == "TIER_LOCKED"


# -- domains ---------------------------------------------------------------------------------------------


def test_domains_on_store_update_and_filters(sub: Substrate) -> None:
    a = sub.store("Zerodur CTE gradient dominates WFE", domains=["Materials", "optics", "materials"])
    b = sub.store("Preston removal breaks down below 5 N", domains=["manufacturing"])
    assert a["domains"] == ["materials", "optics"]
    assert [m["id"] for m in sub.list(domains=["materials"])] == [a["id"]]
    assert [m["id"] for m in sub.list(domains=["materials", "optics"])] == [a["id"]]
    assert sub.list(domains=["materials", "manufacturing"]) == []
    assert [m["id"] for m in sub.search("Preston", domains=["manufacturing"])] == [b["id"]]
    assert sub.update(b["id"], domains=["manufacturing", "math"])["domains"] == ["manufacturing", "math"]
    refused(sub, lambda: sub.store("x", domains=["alchemy"]), BadInput, 65)
    refused(sub, lambda: sub.update(a["id"], domains=["alchemy"]), BadInput, 65)
    refused(sub, lambda: sub.list(domains=["alchemy"]), BadInput, 65)
    refused(sub, lambda: sub.list(statuses=["archived"]), UsageError, 64)


def test_configured_domains_extend_the_vocabulary(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    with home.config_path.open("a") as f:
        f.write('\n[knowledge]\ndomains = ["nutrition"]\n')
    with open_sub(home) as s:
        assert s.store("Protein timing matters less than total intake", domains=["nutrition"])["domains"] == [
            "nutrition"
        ]


def test_a_bad_knowledge_table_refuses_the_loop_not_the_home(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    with home.config_path.open("a") as f:
        f.write("\n[knowledge]\npromote_confidence = 7\n")
    with open_sub(home) as s:
        assert s.store("plain memories still work")["status"] == "active"
        s.capture("q", "Decision: we keep the whiffletree for the mirror.")
        with pytest.raises(BadInput) as info:
            s.extract(pending=True)
        assert "promote_confidence" in info.value.message


def test_the_domain_prefix_migration_is_recorded_not_rewritten(sub: Substrate) -> None:
    a = sub.store("[materials] Zerodur CTE gradient dominates WFE at fast focal ratios")
    b = sub.store("  [Optics]   Coma is not correctable by force modulation", domains=["mechanics"])
    c = sub.store("[misc] Not a domain of this home")
    d = sub.store("[materials]")  # nothing after the prefix: left alone
    plan = sub.migrate_domain_prefixes(dry_run=True)
    assert (plan["changed"], plan["skipped"], plan["run_id"]) == (2, 2, None)
    assert sub.get(a["id"])["domains"] == []  # a dry run changes nothing
    out = sub.migrate_domain_prefixes()
    assert out["changed"] == 2
    ga, gb = sub.get(a["id"]), sub.get(b["id"])
    assert (ga["content"], ga["domains"]) == (
        "Zerodur CTE gradient dominates WFE at fast focal ratios",
        ["materials"],
    )
    assert (gb["content"], gb["domains"]) == (
        "Coma is not correctable by force modulation",
        ["mechanics", "optics"],
    )
    assert sub.get(c["id"])["content"] == "[misc] Not a domain of this home"
    assert sub.get(d["id"])["content"] == "[materials]"
    entries = list(sub.log.iter_entries(0))
    # History is not rewritten: the original content is still in the store's event.
    (stored,) = [e for e in entries if e.type == "memory.stored" and e.data["id"] == a["id"]]
    assert sub.keys.upcast(stored.type, stored.tv, stored.data)["content"].startswith("[materials] ")
    types = [e.type for e in entries if e.seq > stored.seq]
    assert types[-4:] == ["migration.started", "memory.updated", "memory.updated", "migration.completed"]
    updates = [e for e in entries if e.type == "memory.updated"]
    assert {e.data["migration_run"] for e in updates} == {out["run_id"]}
    # Nothing left to migrate.
    assert sub.migrate_domain_prefixes()["changed"] == 0


def test_people_supersede_active_memories(sub: Substrate) -> None:
    old = sub.store("The quilting limit of the 16-inch tool is 200 N")
    new = sub.store("The quilting limit of the 16-inch tool is 234 N")
    gone = sub.supersede(old["id"], by_memory=new["id"], reason="measured again")
    assert gone["status"] == "superseded"
    (e,) = [e for e in sub.log.iter_entries(0) if e.type == "memory.superseded"]
    data = {k: x for k, x in e.data.items() if k != "touch_prev"}  # the back-chain: its own tests
    assert data == {"id": old["id"], "by": "memory", "reason": "measured again", "superseded_by": new["id"],
                    "policy": {}}  # fmt: skip
    assert [m["id"] for m in sub.recall("quilting limit")] == [new["id"]]
    refused(sub, lambda: sub.supersede(old["id"], reason="again"), Informational, 1)
    refused(sub, lambda: sub.supersede(new["id"], reason="x", by_memory=new["id"]), UsageError, 64)
    refused(sub, lambda: sub.supersede(new["id"], reason="x", by_memory="01NOPE"), NotFound, 2)
    refused(sub, lambda: sub.supersede(new["id"], reason=""), BadInput, 65)
    assert sub.supersede(new["id"], reason="obsolete")["status"] == "superseded"


def test_atoms_keep_their_parents_project_and_domains(sub: Substrate) -> None:
    from tests.substrate.atomise.test_service import POST_MORTEM

    parent = sub.store(POST_MORTEM, project="p04", domains=["software"])
    result = sub.atomise(parent["id"], curator="rules", max_atom_tokens=80)
    atoms = [sub.get(a) for a in result.atom_ids]
    assert atoms and {(a["project"], tuple(a["domains"])) for a in atoms} == {("p04", ("software",))}


def test_candidates_are_not_atomised(sub: Substrate) -> None:
    from tests.substrate.atomise.test_service import POST_MORTEM

    sub.capture("q", "Lesson learned: " + POST_MORTEM[:400])
    sub.extract(pending=True, extractor="rules")
    cand = sub.candidates()[0]
    refused(sub, lambda: sub.atomise(cand["id"], curator="rules", max_atom_tokens=50), UsageError, 64)
