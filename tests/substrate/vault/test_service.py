"""The vault as a projection of the store: render, import, and the fixed point between them."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.errors import BadInput
from mnemolog.projections.memory import queries
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import init_home
from mnemolog.substrate.vault import service as v
from tests.projections.kit import log_digest
from tests.substrate.atomise.test_service import POST_MORTEM
from tests.support.cli import Cli

WORDS = ["deploy", "pool", "database", "alert", "budget", "ledger", "runbook", "latency", "cache", "quota"]
KINDS = ["observation", "user", "feedback", "project", "decision", "reference", "knowledge"]

memory_st = st.fixed_dictionaries(
    {
        "words": st.lists(st.sampled_from(WORDS), min_size=3, max_size=12),
        "kind": st.sampled_from(KINDS),
        "title": st.one_of(st.none(), st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)),
        "tags": st.lists(st.sampled_from(["ops", "db", "team", "q3"]), max_size=3, unique=True),
        "confidence": st.one_of(st.none(), st.sampled_from([0.3, 0.6, 0.9, 0.42, 1.0])),
        "namespace": st.sampled_from(["default", "ops", "ops/db", "team"]),
        "archived": st.booleans(),
        "source": st.one_of(st.none(), st.just("conversation_7")),
        "project": st.sampled_from(["", "p04-gigabit"]),
        "domains": st.lists(st.sampled_from(["materials", "optics"]), max_size=2, unique=True),
        # When it happened: none, a midnight, or a time to the µs.
        "occurred_at": st.sampled_from([None, 1_683_504_000_000_000, 1_683_556_200_123_456]),
    }
)


RELATIONS = ["related_to", "supersedes", "contradicts", "derived_from", "derives_from", "reflects_on"]
LINK_META = [{}, {"why": "same incident"}, {"weight": 0.5, "on": "2026-01-02", "tags": ["a", "b"]}]
link_st = st.tuples(
    st.integers(0, 7), st.integers(0, 7), st.sampled_from(RELATIONS), st.sampled_from(range(len(LINK_META)))
)


def populate(
    sub: Substrate,
    mems: list[dict[str, Any]],
    supersede: list[tuple[int, int]],
    atomise: bool,
    links: Sequence[tuple[int, int, str, int]] = (),
) -> None:
    ids = []
    for i, m in enumerate(mems):
        stored = sub.store(
            " ".join(m["words"]) + f" (note {i}).",
            kind=m["kind"],
            title=m["title"],
            tags=m["tags"],
            confidence=m["confidence"],
            project=m.get("project", ""),
            domains=m.get("domains", ()),
            namespace=m["namespace"],
            source=m["source"],
            occurred_at=m.get("occurred_at"),
        )
        ids.append(stored["id"])
    for a, b in supersede:
        if a < len(ids) and b < len(ids) and a != b:
            sub.link(ids[a], ids[b], "supersedes")
    for a, b, relation, meta in links:
        if a < len(ids) and b < len(ids) and a != b:
            sub.link(ids[a], ids[b], relation, LINK_META[meta])
    for i, m in enumerate(mems):
        if m["archived"]:
            sub.archive(ids[i])
    if atomise:
        p = sub.store(POST_MORTEM, title="Checkout outage", namespace="ops")
        res = sub.atomise(p["id"], curator="rules", max_atom_tokens=80)
        if ids and res.atom_ids:  # an atom's own edges travel too
            sub.link(res.atom_ids[0], ids[0], "related_to", {"why": "atom"})


def edges(sub: Substrate) -> set[tuple[str, str, str, str]]:
    """Every edge as (src, relation, dst, metadata): duplicates of an edge count once."""
    with sub.session() as s:
        by_src = queries.links_by_source(s.conn)
    first: dict[tuple[str, str, str], str] = {}
    for src, out in by_src.items():
        for relation, dst, meta in out:
            first.setdefault((src, relation, dst), json.dumps(meta, sort_keys=True))
    return {(a, r, b, m) for (a, r, b), m in first.items()}


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mems=st.lists(memory_st, min_size=1, max_size=8),
    supersede=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=3),
    atomise=st.booleans(),
    links=st.lists(link_st, max_size=8),
)
def test_render_import_render_is_a_fixed_point(
    mems: list[dict[str, Any]], supersede: list[tuple[int, int]], atomise: bool, links: list[Any]
) -> None:
    work = Path(tempfile.mkdtemp())
    try:
        init_home(work / "a")
        init_home(work / "b")
        with Substrate.open(work / "a", long_lived=False) as a:
            populate(a, mems, supersede, atomise, links)
            v.render(a, work / "v1", "agent")
            before = edges(a)
        assert not [p for p in v.validate(work / "v1") if p.severity == "error"]
        with Substrate.open(work / "b", long_lived=False) as b:
            v.import_vault(b, work / "v1")
            v.render(b, work / "v2", "agent")
            size = b.log.refresh()
            again = v.import_vault(b, work / "v1")  # unchanged files: nothing written
            assert b.log.refresh() == size
            assert not again.stored and not again.updated and again.unchanged == again.files
            assert edges(b) == before  # every edge, its relation and its metadata
        assert tree(work / "v1") == tree(work / "v2")
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def sub(tmp_path: Path) -> Any:
    init_home(tmp_path / "home")
    s = Substrate.open(tmp_path / "home", long_lived=False)
    yield s
    s.close()


HAND_WRITTEN = """---
schema_version: 1
name: Debt priority order
description: How the operator orders debts for payoff
type: feedback
captured: 2026-05-01
last_seen: 2026-06-01
sources:
  - conversation_2026-05-01
confidence: high
tags: [money]
priority: high
review_by: 2026-09-30
---
Pay the highest-interest debt first, then the smallest balance.
"""

INDEX = """# agent — Memory Index

## Critical Feedback
- `Debt priority order` — How the operator orders debts for payoff
"""


def hand_vault(root: Path) -> Path:
    d = root / "agent" / "memory"
    d.mkdir(parents=True)
    (d / "feedback_debt_priority_order.md").write_text(HAND_WRITTEN)
    (d / "INDEX.md").write_text(INDEX)
    return root


def test_import_keeps_unknown_fields_and_updates_changed_files(sub: Substrate, tmp_path: Path) -> None:
    root = hand_vault(tmp_path / "vault")
    assert not [p for p in v.validate(root) if p.severity == "error"]
    rep = v.import_vault(sub, root)
    assert len(rep.stored) == 1
    m = sub.get(rep.stored[0])
    assert m["kind"] == "feedback" and m["title"] == "Debt priority order"
    assert m["source"] == "vault:agent/memory/feedback_debt_priority_order.md"
    assert m["metadata"]["vault"]["extra"] == {"priority": "high", "review_by": {"$date": "2026-09-30"}}
    v.render(sub, tmp_path / "out", "agent")
    rendered = next((tmp_path / "out" / "agent" / "memory").glob("feedback_*.md")).read_text()
    assert "priority: high" in rendered and "review_by: 2026-09-30" in rendered
    # change the file: one memory.updated, nothing else
    f = root / "agent" / "memory" / "feedback_debt_priority_order.md"
    f.write_text(HAND_WRITTEN.replace("smallest balance", "smallest balance after that"))
    size = sub.log.refresh()
    rep2 = v.import_vault(sub, root)
    assert rep2.updated == rep.stored and not rep2.stored
    assert [e.type for e in sub.log.iter_entries(size)] == ["memory.updated"]
    assert "after that" in sub.get(rep.stored[0])["content"]


def test_import_refuses_an_invalid_vault_and_writes_nothing(sub: Substrate, tmp_path: Path) -> None:
    root = hand_vault(tmp_path / "vault")
    (root / "agent" / "memory" / "feedback_debt_priority_order.md").write_text(
        HAND_WRITTEN.replace("captured: 2026-05-01", "captured: 2026-02-30")
    )
    size = sub.log.refresh()
    with pytest.raises(BadInput) as ei:
        v.import_vault(sub, root)
    assert ei.value.exit_code == 65 and "2026-02-30" in ei.value.message
    assert sub.log.refresh() == size


def test_vault_cli(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli.json(home, "init")[0] == 0
    assert cli.json(home, "store", "Prefer pg_repack over ALTER TABLE.", "--kind", "decision")[0] == 0
    code, out = cli.json(home, "vault", "render", str(tmp_path / "v"), "--agent", "ops")
    # The note, INDEX.md and the five persona files.
    assert code == 0 and len(out["written"]) == 7 and "ops/IDENTITY.md" in out["written"]
    code, out = cli.json(home, "vault", "render", str(tmp_path / "v"), "--agent", "ops")
    assert code == 0 and out["written"] == [] and out["unchanged"] == 7
    code, out = cli.json(home, "vault", "validate", str(tmp_path / "v"))
    assert code == 0
    bad = hand_vault(tmp_path / "bad")
    (bad / "agent" / "memory" / "feedback_debt_priority_order.md").write_text(
        HAND_WRITTEN.replace("type: feedback", "type: opinion").replace(
            "confidence: high", "confidence: sure"
        )
    )
    code, out = cli.json(home, "vault", "validate", str(bad))
    assert code == 65 and out["error"] == "vault_invalid"
    problems = out["details"]["problems"]
    assert any(": type: " in p for p in problems) and any(": confidence: " in p for p in problems)
    code, out = cli.json(tmp_path / "home2", "init")
    code, out = cli.json(tmp_path / "home2", "vault", "import", str(tmp_path / "v"))
    assert code == 0 and len(out["stored"]) == 1
    code, out = cli.json(tmp_path / "home2", "vault", "import", str(tmp_path / "v"))
    assert code == 0 and out["stored"] == [] and out["unchanged"] == 1


def test_two_memories_superseding_one_keep_the_latest_as_superseded_by(tmp_path: Path) -> None:
    # Found by the property: 4 and 7 both supersede 6, and 2 supersedes 7.
    mems = [
        {"words": ["deploy", "cache", "pool"], "kind": k, "title": None, "tags": [], "confidence": None,
         "namespace": "ops", "archived": False, "source": None}
        for k in [*KINDS, "decision"]
    ]  # fmt: skip
    init_home(tmp_path / "a")
    init_home(tmp_path / "b")
    with Substrate.open(tmp_path / "a", long_lived=False) as a:
        populate(a, mems, [(4, 6), (2, 7), (7, 6)], atomise=False)
        v.render(a, tmp_path / "v1", "agent")
    with Substrate.open(tmp_path / "b", long_lived=False) as b:
        v.import_vault(b, tmp_path / "v1")
        v.render(b, tmp_path / "v2", "agent")
        size = b.log.refresh()
        v.import_vault(b, tmp_path / "v1")
        assert b.log.refresh() == size
    assert tree(tmp_path / "v1") == tree(tmp_path / "v2")


def test_every_edge_survives_the_round_trip(tmp_path: Path) -> None:
    """Each relation, two supersedes from one memory, a duplicate edge, links into an atomised chain."""
    init_home(tmp_path / "a")
    init_home(tmp_path / "b")
    with Substrate.open(tmp_path / "a", long_lived=False) as a:
        ids = [a.store(f"memory number {i} about the checkout pool")["id"] for i in range(5)]
        for i, relation in enumerate(RELATIONS):
            a.link(ids[i % 5], ids[(i + 1) % 5], relation, {"n": i})
        a.link(ids[0], ids[3], "supersedes")
        a.link(ids[0], ids[4], "supersedes")  # the pointer's winner
        a.link(ids[2], ids[3], "related_to", {"on": "2026-01-02"})
        a.link(ids[2], ids[3], "related_to", {"on": "2026-01-02"})  # the same edge again
        p = a.store(POST_MORTEM, title="Checkout outage", namespace="ops")
        atoms = a.atomise(p["id"], curator="rules", max_atom_tokens=80).atom_ids
        a.link(atoms[0], ids[1], "derived_from")
        a.link(ids[1], atoms[-1], "reflects_on")
        v.render(a, tmp_path / "v", "agent")
        want = edges(a)
    with Substrate.open(tmp_path / "b", long_lived=False) as b:
        report = v.import_vault(b, tmp_path / "v")
        assert not report.warnings
        assert edges(b) == want
        assert b.stats()["links"] == len(want)


def test_a_link_out_of_the_rendered_namespace_is_skipped_with_a_warning(tmp_path: Path) -> None:
    init_home(tmp_path / "a")
    init_home(tmp_path / "b")
    with Substrate.open(tmp_path / "a", long_lived=False) as a:
        x = a.store("kept in ops", namespace="ops")["id"]
        y = a.store("left out in team", namespace="team")["id"]
        a.link(x, y, "related_to")
        v.render(a, tmp_path / "v", "agent", namespace="ops")
    with Substrate.open(tmp_path / "b", long_lived=False) as b:
        report = v.import_vault(b, tmp_path / "v")
        assert report.stored == [x] and b.stats()["links"] == 0
        assert any("related_to link to" in w and y in w for w in report.warnings)


def test_malformed_links_in_a_note_are_problems(tmp_path: Path) -> None:
    from mnemolog.projections.vault.read import read_vault

    d = tmp_path / "agent" / "memory"
    d.mkdir(parents=True)
    note = HAND_WRITTEN.replace(
        "tags: [money]\n", "tags: [money]\nmnemolog_links:\n  - {relation: likes, to: X}\n  - 5\n"
    )
    (d / "feedback_debt_priority_order.md").write_text(note)
    (d / "INDEX.md").write_text(INDEX)
    (parsed,) = read_vault(tmp_path, "agent")
    assert parsed.record is not None and parsed.record.links == ()
    assert [p for p in parsed.problems if p.startswith("mnemolog_links[")] == [
        p for p in parsed.problems if "mnemolog_links" in p
    ] and len([p for p in parsed.problems if "mnemolog_links" in p]) == 2


def test_promoted_knowledge_is_rendered_with_its_project_and_domains(sub: Substrate, tmp_path: Path) -> None:
    sub.capture(
        "What did we learn?",
        "## Decisions\n- We keep the 18-point whiffletree for the M1 mirror.\n\n"
        "Lesson learned: Zerodur CTE gradient dominates WFE at fast focal ratios (3 nm at F/1.2).",
        project="p04-gigabit",
    )
    sub.extract(pending=True, extractor="rules")
    tri = sub.triage(pending=True, triager="rules")
    (waiting,) = [r for r in tri["results"] if r["action"] == "wait"]
    old = sub.store("An old fact that no longer holds", confidence=0.2)
    # A person's own stores are exempt from decay by default; a person retires this one.
    sub.supersede(old["id"], reason="no longer holds")
    v.render(sub, tmp_path / "vault", "agent")
    files = tree(tmp_path / "vault")
    notes = {k: x.decode() for k, x in files.items() if "/memory/" in k and not k.endswith("INDEX.md")}
    decision = next(x for x in notes.values() if "18-point whiffletree" in x)
    assert "mnemolog_project: p04-gigabit" in decision
    assert not any("Zerodur" in x for x in notes.values())  # still a candidate: not knowledge yet
    sub.promote(waiting["id"])
    v.render(sub, tmp_path / "vault", "agent")
    notes = {k: x.read_text() for k, x in ((str(p), p) for p in (tmp_path / "vault").rglob("*.md"))}
    knowledge = next(x for x in notes.values() if "Zerodur" in x and "mnemolog_id" in x)
    assert "mnemolog_domains:" in knowledge and "materials" in knowledge
    archived = next(x for x in notes.values() if "An old fact" in x and "mnemolog_id" in x)
    assert old["id"] in archived and "archived: true" in archived
    assert not [p for p in v.validate(tmp_path / "vault") if p.severity == "error"]


def test_a_note_carries_when_its_memory_happened(sub: Substrate, tmp_path: Path) -> None:
    m = sub.store("The kiln was relined.", kind="project", occurred_at="2023-05-08T14:30Z")
    v.render(sub, tmp_path / "v", "agent")
    (note,) = (tmp_path / "v" / "agent" / "memory").glob("project_*.md")
    assert 'mnemolog_occurred_at: "2023-05-08T14:30:00Z"' in note.read_text()
    # Put right in the note, the import updates the memory's date (and its date words).
    note.write_text(note.read_text().replace("2023-05-08T14:30:00Z", "2024-02-10T00:00:00Z"))
    report = v.import_vault(sub, tmp_path / "v")
    assert report.updated == [m["id"]]
    assert sub.get(m["id"])["occurred_at"] == 1_707_523_200_000_000
    assert [r["id"] for r in sub.recall("February 2024", mode="bm25")] == [m["id"]]
    # A note without the field leaves the date as it is; a date that is no time is a problem.
    note.write_text(note.read_text().replace('mnemolog_occurred_at: "2024-02-10T00:00:00Z"\n', ""))
    assert not v.import_vault(sub, tmp_path / "v").updated
    assert sub.get(m["id"])["occurred_at"] == 1_707_523_200_000_000
    note.write_text(note.read_text().replace("---\n", "---\nmnemolog_occurred_at: soon\n", 1))
    before = log_digest(sub.home)
    with pytest.raises(BadInput) as info:
        v.import_vault(sub, tmp_path / "v")
    assert info.value.exit_code == 65 and "mnemolog_occurred_at" in info.value.message
    assert log_digest(sub.home) == before
