"""Where a pack's entries come from: the project's state, aliases, per-tier candidates, recall's policy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.substrate.api import Substrate
from tests.projections.kit import FakeClock, new_home, open_sub
from tests.support.fake_embedder import FakeEmbedder

QUERY = "thermal effects on polishing accuracy"


@pytest.fixture
def sub(tmp_path: Path) -> Iterator[Substrate]:
    s = open_sub(new_home(tmp_path / "home"), clock=FakeClock())
    s.register_project("p04-gigabit", aliases=["p04"])
    s.register_project("p06-polisher", aliases=["p06"])
    yield s
    s.close()


def tier(pack: dict[str, Any], name: str) -> list[str]:
    return next([e["id"] for e in t["entries"]] for t in pack["tiers"] if t["name"] == name)


def events(sub: Substrate, type_: str) -> list[dict[str, Any]]:
    return [sub.keys.upcast(e.type, e.tv, e.data) for e in sub.log.iter_entries() if e.type == type_]


# -- tier 1: trusted state ----------------------------------------------------------------


def test_tier_one_is_the_project_state_in_category_order_without_invalidated_entries(
    sub: Substrate,
) -> None:
    for category, key, value in [
        ("fact", "zeta", "no longer true"),
        ("config", "pad", "polyurethane"),
        ("decision", "vendor_path", "Twyman-Green preferred"),
        ("status", "phase", "polishing"),
        ("decision", "alpha", "first by key"),
    ]:
        sub.set_state("p06", category, key, value)
    sub.invalidate_state("p06-polisher", "fact", "zeta", reason="disproved")
    sub.set_state("p04", "status", "phase", "integration")  # another project's state stays out
    pack = sub.build_context(QUERY, project="p06")
    assert tier(pack, "state") == [
        "p06-polisher/status/phase",
        "p06-polisher/decision/alpha",
        "p06-polisher/decision/vendor_path",
        "p06-polisher/config/pad",
    ]
    assert pack["text"].startswith(
        "## Trusted project state (p06-polisher)\n"
        "- status/phase: polishing\n"
        "- decision/alpha: first by key\n"
        "- decision/vendor_path: Twyman-Green preferred\n"
        "- config/pad: polyurethane\n\n"
    )
    assert {"source": "state", "id": "p06-polisher/fact/zeta", "reason": "invalid"} in pack["excluded"]
    why = sub.context_why("p06-polisher/decision/vendor_path")
    assert [(w["pack_id"], w["tier"], w["included"]) for w in why] == [(pack["pack_id"], "state", True)]
    assert "integration" not in pack["text"] and "no longer true" not in pack["text"]
    # No project, no state.
    assert tier(sub.build_context(QUERY, record=False), "state") == []


def test_show_checks_the_state_a_pack_quotes_against_the_log_as_it_was(sub: Substrate) -> None:
    from mnemolog.eventlog.bundle import packview

    sub.set_state("p06", "decision", "vendor_path", "Twyman-Green preferred")
    sub.set_state("p06", "status", "phase", "polishing")
    pack = sub.build_context(QUERY, project="p06")
    shown = sub.show_context(pack["pack_id"])
    assert shown["text"] == pack["text"] and shown["sources_checked"] == 2
    # The state changes later; the pack still shows (and is checked against) what held then.
    sub.set_state("p06", "decision", "vendor_path", "4D technical lead")
    sub.invalidate_state("p06", "status", "phase")
    sub.rebuild()
    assert sub.show_context(pack["pack_id"])["text"].encode() == pack["text"].encode()
    later = sub.build_context(QUERY, project="p06")
    assert "- decision/vendor_path: 4D technical lead\n" in later["text"] and "phase" not in later["text"]
    # A signed pack that quotes a value the state never had is exposed.
    (ev, _) = events(sub, "context.built")
    bad = {k: v for k, v in ev.items() if k != "touch_prev"}
    bad["pack_id"] = "01FORGEDSTATE0000000000000"
    bad["tiers"] = [dict(t) for t in ev["tiers"]]
    entries = [dict(e) for e in bad["tiers"][0]["included"]]
    entries[0]["text"] = "Fizeau preferred"
    bad["tiers"][0] = {**bad["tiers"][0], "included": entries}
    bad["sha256"] = packview.pack_sha256(packview.render_recorded(bad))
    sub.writer.append("context.built", bad, 1)
    with pytest.raises(VerificationError) as exc:
        sub.show_context("01FORGEDSTATE0000000000000")
    assert exc.value.check == "context.source"


def test_a_bundle_re_renders_a_pack_with_its_state_tier(sub: Substrate, tmp_path: Path) -> None:
    from mnemolog.eventlog.bundle import verifier as bundle
    from mnemolog.substrate.forensics import service as forensics

    sub.set_state("p06", "decision", "vendor_path", "Twyman-Green preferred")
    mid = sub.store("Thermal drift limits polishing accuracy", kind="project", project="p06")["id"]
    pack = sub.build_context(QUERY, project="p06")
    assert tier(pack, "state") and tier(pack, "project") == [mid]
    path = tmp_path / "b.tar"
    path.write_bytes(forensics.export_bundle(sub, mid).data)
    report = bundle.verify_bundle(path, policy=TRUST_GENESIS)
    assert [(p["pack_id"], p["sha256"]) for p in report.packs] == [(pack["pack_id"], pack["sha256"])]


# -- aliases --------------------------------------------------------------------------------


def test_an_alias_in_any_case_scopes_the_pack_as_the_name_does(sub: Substrate, tmp_path: Path) -> None:
    sub.clock = lambda: 1_800_000_000_000_000
    mid = sub.store("Polishing accuracy drifts with pad temperature", kind="project", project="p06")["id"]
    d = tmp_path / "docs"
    d.mkdir()
    (d / "polisher.md").write_text("# Thermal\nPolishing accuracy drifts with tool temperature.\n")
    sub.ingest([d], project="P06")
    (doc,) = events(sub, "document.ingested")
    assert doc["project"] == "p06-polisher"
    by_name = sub.build_context(QUERY, project="p06-polisher", record=False)
    for given in ("p06", "P06", " p06 "):
        pack = sub.build_context(QUERY, project=given, record=False)
        assert pack == by_name
    assert pack["project"] == "p06-polisher" and tier(pack, "project") == [mid]
    assert all(x["reason"] != "other_project" for x in pack["excluded"])
    assert "## Project memories (p06-polisher)\n" in pack["text"]
    # The project's chunk carries its boost: 1.5x its relevance.
    (chunk,) = next(t["entries"] for t in pack["tiers"] if t["name"] == "chunks")
    assert chunk["score"] == 1.5


# -- candidates per tier --------------------------------------------------------------------


def test_other_projects_cannot_crowd_out_the_project_memories(sub: Substrate) -> None:
    for i in range(30):
        sub.store(f"Thermal effects on polishing accuracy, p04 run {i}: thermal polishing", project="p04")
    mine = sub.store("Calibration of polishing on the p06 bench", kind="project", project="p06")["id"]
    pack = sub.build_context(QUERY, project="p06", budget=20_000)
    assert tier(pack, "project") == [mine]
    assert "p04 run" not in pack["text"]
    # Recall over every project would rank it 31st, after the candidates a pack fetches.
    ranked = [m["id"] for m in sub.recall(QUERY, limit=31)]
    assert ranked.index(mine) == 30 and pack["config"]["candidates"] == 20


def test_domain_knowledge_enters_by_an_evoked_domain_without_a_word_of_the_query(sub: Substrate) -> None:
    cte = sub.store(
        "Zerodur CTE gradient dominates WFE contribution at fast focal ratios (F/1.2 = ~3nm)",
        kind="knowledge",
        domains=["materials"],
    )["id"]
    cost = sub.store("Quarterly procurement is cheaper in bulk", kind="knowledge", domains=["finance"])["id"]
    lexical = [sub.store(f"Thermal effects note {i}", kind="knowledge")["id"] for i in range(25)]
    assert cte not in [m["id"] for m in sub.recall(QUERY, limit=50)]  # no word of the query
    pack = sub.build_context(QUERY, project="p06", budget=20_000)
    domain = tier(pack, "domain")
    assert cte in domain and cost not in domain
    assert "- [materials] Zerodur CTE gradient" in pack["text"]
    assert set(lexical) & set(domain)  # the words still count


def test_a_pack_ranks_memories_as_recall_does(tmp_path: Path) -> None:
    fake = FakeEmbedder()
    with open_sub(new_home(tmp_path / "h"), embedder=fake, clock=FakeClock()) as sub:
        sub.register_project("p06-polisher", aliases=["p06"])
        for text in (
            "Calibration loop adjusts Preston kp from surface measurements",
            "Pad wear grows after long runs",
            "Thermal drift limits polishing accuracy",
            "Tool temperature is logged every minute",
        ):
            sub.store(text, kind="project", project="p06")
        sub.embed_pending()
        report = sub.recall_report(QUERY, project="p06", limit=20)
        pack = sub.build_context(QUERY, project="p06", budget=20_000, record=False)
        assert report["mode"] == pack["config"]["recall_mode"] == "hybrid"
        assert pack["recall_fallback"] is None
        # One ranking: the memories recall returns lead the project's tier in recall's order;
        # the project's other memories follow (its own project is in scope whatever the question).
        hits = [m["id"] for m in report["results"]]
        assert hits and tier(pack, "project")[: len(hits)] == hits
        assert len(tier(pack, "project")) == 4
        fake.unreachable = True
        down = sub.build_context("another question", project="p06", record=False)
        again = sub.recall_report("another question", project="p06")
        assert down["config"]["recall_mode"] == again["mode"] == "bm25"
        assert down["recall_fallback"] == again["fallback"] and "could not be embedded" in again["fallback"]
