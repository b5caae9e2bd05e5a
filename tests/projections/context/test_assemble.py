"""Pack assembly: tiers in trust order, shares and flow-down, trimming, exclusions, determinism."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemolog.curators.tokens import count_tokens
from mnemolog.eventlog.bundle import packview
from mnemolog.eventlog.bundle.packview import TIERS
from mnemolog.projections.context.assemble import (
    ChunkRow,
    MemoryRow,
    Pack,
    StateRow,
    assemble,
    evoked_domains,
)
from mnemolog.projections.context.config import PackConfig

NOW = 1_750_000_000_000_000
P04, P06 = "p04-gigabit", "p06-polisher"
QUERY = "thermal effects on polishing accuracy"


def ids(pack: Pack, tier: str) -> list[str]:
    return [e.id for t in pack.tiers if t.name == tier for e in t.entries]


def trimmed(pack: Pack, tier: str) -> dict[str, str]:
    return {x.id: x.reason for t in pack.tiers if t.name == tier for x in t.trimmed}


def excluded(pack: Pack) -> dict[str, str]:
    return {x.id: x.reason for x in pack.excluded}


def tier(pack: Pack, name: str):  # type: ignore[no-untyped-def]
    return next(t for t in pack.tiers if t.name == name)


def build(
    query: str = QUERY, project: str | None = P06, cfg: PackConfig | None = None, **rows: object
) -> Pack:
    return assemble(query, project, now=NOW, config=cfg or PackConfig(), **rows)  # type: ignore[arg-type]


# -- the worked example -------------------------------------------------------


def seed_rows() -> dict[str, object]:
    return {
        "state": [
            StateRow(
                P06,
                "decision",
                "vendor_path",
                "Twyman-Green preferred, 4D technical lead but cost-challenged",
            ),
            StateRow(P04, "status", "phase", "M1 support design frozen"),
        ],
        "memories": [
            MemoryRow("01USER", "user", "Antoine Letarte, mechanical/optical engineer at Atomaste"),
            MemoryRow(
                "01P04PROJ",
                "project",
                "CTE gradient analysis drove the M1 support pad layout — 2nd largest WFE contributor",
                project=P04,
                score=4.0,
            ),
            MemoryRow(
                "01P04KNOW",
                "knowledge",
                "Zerodur CTE gradient dominates WFE contribution at fast focal ratios (F/1.2 = ~3nm)",
                domains=("materials",),
                score=0.0,
            ),
            MemoryRow(
                "01P06PROJ",
                "project",
                "Calibration loop adjusts Preston kp from surface measurements",
                project=P06,
                score=1.5,
            ),
        ],
        "chunks": [
            ChunkRow(
                "doc/0/3",
                "Polishing accuracy drifts with tool temperature.",
                "polisher.md",
                ("Thermal",),
                score=2.0,
            )
        ],
    }


def test_p04_knowledge_reaches_a_p06_pack_and_p04_project_memories_do_not() -> None:
    pack = build(**seed_rows())
    assert ids(pack, "domain") == ["01P04KNOW"]
    assert ids(pack, "project") == ["01P06PROJ"]
    assert ids(pack, "state") == [f"{P06}/decision/vendor_path"]
    assert excluded(pack)["01P04PROJ"] == "other_project"
    assert excluded(pack)[f"{P04}/status/phase"] == "other_project"
    assert "## Domain knowledge\n- [materials] Zerodur CTE gradient" in pack.text
    assert "M1 support pad" not in pack.text and "frozen" not in pack.text


def test_domain_tags_count_and_a_query_evoking_no_domain_leaves_the_memory_out() -> None:
    assert {"materials", "physics", "manufacturing", "metrology"} <= evoked_domains(
        QUERY, dict(PackConfig().domain_terms)
    )
    pack = build("vendor invoices", **seed_rows())
    assert ids(pack, "domain") == []
    assert excluded(pack)["01P04KNOW"] == "not_relevant"


def test_evoked_domains_outrank_an_equal_text_score() -> None:
    mems = [
        MemoryRow("01A", "knowledge", "a note", domains=("software",), score=1.0),
        MemoryRow("01B", "knowledge", "b note", domains=("materials",), score=1.0),
    ]
    pack = build(memories=mems)
    assert ids(pack, "domain") == ["01B", "01A"]
    e = tier(pack, "domain").entries
    assert (e[0].score, e[1].score) == (1.5, 1.0)


# -- tiers, order, rendering --------------------------------------------------


def test_tiers_render_in_trust_order_with_their_headers() -> None:
    pack = build(**seed_rows())
    heads = [line for line in pack.text.splitlines() if line.startswith("## ")]
    assert heads == [
        f"## Trusted project state ({P06})",
        "## Identity and preferences",
        f"## Project memories ({P06})",
        "## Domain knowledge",
        "## Retrieved chunks",
    ]
    assert pack.text == packview.render_recorded(pack.record())
    assert pack.sha256 == packview.pack_sha256(pack.text)
    assert [t["tier"] for t in pack.to_json()["tiers"]] == [1, 2, 3, 4, 5]


def test_without_a_project_there_is_no_state_and_no_project_tier() -> None:
    pack = build(project=None, **seed_rows())
    assert ids(pack, "state") == [] and ids(pack, "project") == []
    assert excluded(pack)["01P06PROJ"] == "other_project"
    assert ids(pack, "domain") == ["01P04KNOW"]
    assert "## Trusted project state" not in pack.text


def test_state_categories_order_and_invalid_entries_stay_out() -> None:
    state = [
        StateRow(P06, "config", "k", "v1"),
        StateRow(P06, "status", "b", "v2"),
        StateRow(P06, "status", "a", "v3"),
        StateRow(P06, "zeta", "x", "v4"),
        StateRow(P06, "decision", "old", "v5", active=False),
    ]
    pack = build(state=state)
    assert ids(pack, "state") == [f"{P06}/status/a", f"{P06}/status/b", f"{P06}/config/k", f"{P06}/zeta/x"]
    assert excluded(pack)[f"{P06}/decision/old"] == "invalid"


def test_multiline_content_stays_one_list_item() -> None:
    pack = build(memories=[MemoryRow("01U", "user", "line one\r\nline two\n## not a header\n")])
    assert "- [user] line one\n  line two\n  ## not a header\n" in pack.text
    assert [line for line in pack.text.splitlines() if line.startswith("## ")] == [
        "## Identity and preferences"
    ]


# -- exclusions -------------------------------------------------------------


def test_inactive_archived_expired_and_foreign_memories_never_enter() -> None:
    mems = [
        MemoryRow("01SUP", "knowledge", "thermal a", status="superseded", score=1),
        MemoryRow("01INV", "knowledge", "thermal b", status="invalid", score=1),
        MemoryRow("01CAN", "knowledge", "thermal c", status="candidate", score=1),
        MemoryRow("01ARC", "knowledge", "thermal d", archived=True, score=1),
        MemoryRow("01EXP", "knowledge", "thermal e", expires_at=NOW - 1, score=1),
        MemoryRow("01NOW", "knowledge", "thermal f", expires_at=NOW, score=1),
        MemoryRow("01FUT", "knowledge", "thermal g", expires_at=NOW + 1, score=1),
        MemoryRow("01OTH", "project", "thermal h", project=P04, score=1),
        MemoryRow("01PIN", "project", "pinned elsewhere", project=P04, pinned=True),
        MemoryRow("01ZERO", "project", "no match", project=P06, score=0),
    ]
    pack = build(memories=mems)
    assert excluded(pack) == {
        "01SUP": "superseded",
        "01INV": "invalid",
        "01CAN": "candidate",
        "01ARC": "archived",
        "01EXP": "expired",
        "01NOW": "expired",
        "01OTH": "other_project",
        "01PIN": "other_project",
        "01ZERO": "not_relevant",
    }
    assert ids(pack, "domain") == ["01FUT"]


# -- pinned notes -----------------------------------------------------------


def test_pinned_notes_lead_the_identity_tier_even_beyond_its_share() -> None:
    long = "never deploy on Fridays " * 10  # far beyond 5% of 3,000 characters
    mems = [
        MemoryRow("01PREF", "feedback", "prefers SI units", score=2.0),
        MemoryRow("01PINP", "decision", long, project=P06, pinned=True),
        MemoryRow("01PING", "knowledge", "hard scope: optics only", pinned=True),
    ]
    cfg = PackConfig(shares={"state": 0.0, "identity": 0.05, "project": 0.25, "domain": 0.1, "chunks": 0.6})
    pack = build(memories=mems, cfg=cfg)
    t = tier(pack, "identity")
    assert ids(pack, "identity") == ["01PING", "01PINP"]
    assert all(e.required for e in t.entries) and t.allocated == 150
    assert t.used > t.allocated  # required notes overrun the share
    assert trimmed(pack, "identity") == {"01PREF": "tier_share"}


# -- shares and flow-down -----------------------------------------------------


def test_shares_cap_each_tier_and_smaller_entries_after_a_big_one_still_fit() -> None:
    mems = [
        MemoryRow("01BIG", "project", "x" * 700, project=P06, score=3.0),
        MemoryRow("01MID", "project", "y" * 300, project=P06, score=2.0),
        MemoryRow("01SML", "project", "z" * 100, project=P06, score=1.0),
    ]
    cfg = PackConfig(shares={"state": 0.0, "identity": 0.0, "project": 0.25, "domain": 0.0, "chunks": 0.0})
    pack = build(cfg=cfg, memories=mems)
    t = tier(pack, "project")
    assert (t.share, t.allocated) == (750, 750)
    assert ids(pack, "project") == ["01BIG"]
    assert trimmed(pack, "project") == {"01MID": "tier_share", "01SML": "tier_share"}
    cfg = PackConfig(shares={"state": 0.0, "identity": 0.0, "project": 0.16, "domain": 0.0, "chunks": 0.0})
    pack = build(cfg=cfg, memories=mems)
    assert ids(pack, "project") == ["01MID", "01SML"]
    assert trimmed(pack, "project") == {"01BIG": "tier_share"}
    assert len(pack.text) <= 480


def test_unused_share_flows_down_in_order_and_never_up() -> None:
    chunks = [ChunkRow(f"c/{i:02d}", "c" * 150, "doc.md", score=10 - i / 10) for i in range(20)]
    pack = build(project=None, chunks=chunks)
    shares = {t.name: t.share for t in pack.tiers}
    assert shares == {"state": 600, "identity": 150, "project": 750, "domain": 300, "chunks": 1200}
    # Nothing above the chunks: every share flows down to them.
    assert [t.allocated for t in pack.tiers] == [600, 750, 1500, 1800, 3000]
    assert tier(pack, "chunks").used <= 3000 and len(ids(pack, "chunks")) == 18
    # A full tier 1 leaves nothing to flow; the chunks keep their own share only.
    state = [StateRow(P06, "fact", f"k{i}", "s" * 80) for i in range(6)]
    pack = build(state=state, chunks=chunks)
    t1 = tier(pack, "state")
    assert t1.used > 500
    assert tier(pack, "identity").allocated == 150 + (600 - t1.used)
    assert len(pack.text) <= 3000


def test_shares_add_up_to_the_budget_for_any_budget() -> None:
    for budget in (1, 7, 99, 1001, 2999, 3000, 12345):
        pack = build(cfg=PackConfig(budget=budget))
        assert sum(t.share for t in pack.tiers) == budget


# -- trimming -------------------------------------------------------------


def trim_rows() -> dict[str, object]:
    return {
        "state": [StateRow(P06, "fact", "big", "s" * 1900)],
        "memories": [
            MemoryRow("01PIN", "user", "pinned note", pinned=True),
            MemoryRow("01PRJ", "project", "project memory", project=P06, score=1.0),
            MemoryRow("01DOM", "knowledge", "domain memory", score=1.0),
        ],
        "chunks": [ChunkRow("d/0/0", "chunk text", "doc.md", score=1.0)],
    }


TRIM_SHARES = {"state": 0.05, "identity": 0.05, "project": 0.3, "domain": 0.3, "chunks": 0.3}


def test_each_trim_step_at_shrinking_budgets() -> None:
    full = build(cfg=PackConfig(budget=10_000, shares=TRIM_SHARES), **trim_rows())
    cost = {t.name: t.used for t in full.tiers}
    assert all(cost.values())
    total = sum(cost.values())
    expected_gone: list[str] = []
    budget = total
    for step in ("chunks", "domain", "project", "identity", "state"):
        pack = build(cfg=PackConfig(budget=budget, shares=TRIM_SHARES), **trim_rows())
        present = [t.name for t in pack.tiers if t.entries]
        assert present == [t for t in TIERS if t not in expected_gone], (budget, present)
        assert len(pack.text) <= budget
        # One unit less and the next tier in the trim order goes, as over_budget.
        pack = build(cfg=PackConfig(budget=budget - 1, shares=TRIM_SHARES), **trim_rows())
        expected_gone.append(step)
        assert [t.name for t in pack.tiers if t.entries] == [t for t in TIERS if t not in expected_gone]
        assert set(trimmed(pack, step).values()) == {"over_budget"}
        budget -= cost[step]
    assert build(cfg=PackConfig(budget=1, shares=TRIM_SHARES), **trim_rows()).text == ""


def test_the_trim_order_is_configuration() -> None:
    cfg = PackConfig(budget=10_000, shares=TRIM_SHARES)
    full = build(cfg=cfg, **trim_rows())
    total = sum(t.used for t in full.tiers)
    order = ("project", "chunks", "domain", "identity", "state")
    pack = build(cfg=replace(cfg, budget=total - 1, trim_order=order), **trim_rows())
    assert ids(pack, "project") == [] and ids(pack, "chunks") == ["d/0/0"]
    assert trimmed(pack, "project") == {"01PRJ": "over_budget"}


def test_token_budgets_are_measured_on_the_whole_text() -> None:
    rows = seed_rows()
    rows["chunks"] = [ChunkRow(f"c/{i}", "thermal drift " * 30, "d.md", score=1 + i) for i in range(10)]
    for budget in (40, 120, 300, 750):
        pack = build(cfg=PackConfig(budget=budget, unit="tokens"), measure=count_tokens, **rows)  # type: ignore[arg-type]
        assert count_tokens(pack.text) == pack.cost <= budget
        assert all(
            e.cost == count_tokens(packview.entry_line(e.source, e.label, e.text)) for e in pack.entries()
        )


# -- chunks -------------------------------------------------------------------


def test_chunks_are_project_boosted_not_filtered() -> None:
    chunks = [
        ChunkRow("a/0/0", "other project text", "a.md", project=P04, score=2.0),
        ChunkRow("b/0/0", "this project text", "b.md", ("H1", "H2"), project=P06, score=1.5),
        ChunkRow("c/0/0", "zero", "c.md", score=0.0),
    ]
    pack = build(chunks=chunks)
    assert ids(pack, "chunks") == ["b/0/0", "a/0/0"]
    assert "- [b.md › H1 › H2] this project text\n" in pack.text
    assert excluded(pack)["c/0/0"] == "not_relevant"
    pack = build(chunks=chunks, cfg=PackConfig(project_boost=0.0))
    assert ids(pack, "chunks") == ["a/0/0", "b/0/0"]


def test_ties_break_by_id() -> None:
    mems = [MemoryRow(f"01{c}", "project", f"m {c}", project=P06, score=1.0) for c in "DBCA"]
    assert ids(build(memories=mems), "project") == ["01A", "01B", "01C", "01D"]


# -- determinism and invariants --------------------------------------------------

_ids = st.sampled_from([f"01{c}{d}" for c in "ABCDEFG" for d in "0123"])
_text = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=300)
_score = st.floats(min_value=0, max_value=20, allow_nan=False)
_project = st.sampled_from(["", P04, P06])
memory_rows = st.builds(
    MemoryRow,
    id=_ids,
    kind=st.sampled_from(["user", "feedback", "project", "knowledge", "decision"]),
    content=_text,
    project=_project,
    domains=st.lists(st.sampled_from(["materials", "optics", "finance", "custom"]), max_size=2).map(tuple),
    status=st.sampled_from(["active", "active", "active", "superseded", "candidate"]),
    archived=st.booleans(),
    pinned=st.booleans(),
    expires_at=st.one_of(st.none(), st.integers(NOW - 10, NOW + 10)),
    score=_score,
)
state_rows = st.builds(
    StateRow,
    project=_project.filter(bool),
    category=st.sampled_from(["status", "decision", "fact", "other"]),
    key=st.sampled_from(["a", "b", "c"]),
    value=_text,
    active=st.booleans(),
)
chunk_rows = st.builds(
    ChunkRow,
    id=st.sampled_from([f"d/{i}/{j}" for i in range(3) for j in range(4)]),
    text=_text,
    document=st.sampled_from(["a.md", "b/c.md"]),
    heading_path=st.lists(st.text(min_size=1, max_size=10), max_size=3).map(tuple),
    project=_project,
    score=_score,
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(state_rows, max_size=8),
    st.lists(memory_rows, max_size=25),
    st.lists(chunk_rows, max_size=12),
    st.sampled_from([None, P04, P06]),
    st.integers(1, 4000),
    st.randoms(use_true_random=False),
)
def test_same_inputs_same_bytes_and_every_candidate_accounted_for(
    state: list[StateRow],
    memories: list[MemoryRow],
    chunks: list[ChunkRow],
    project: str | None,
    budget: int,
    rnd: random.Random,
) -> None:
    cfg = PackConfig(budget=budget)
    a = assemble(QUERY, project, now=NOW, config=cfg, state=state, memories=memories, chunks=chunks)
    state2, memories2, chunks2 = list(state), list(memories), list(chunks)
    for xs in (state2, memories2, chunks2):
        rnd.shuffle(xs)  # type: ignore[arg-type]
    b = assemble(QUERY, project, now=NOW, config=cfg, state=state2, memories=memories2, chunks=chunks2)
    assert a.text.encode() == b.text.encode()
    assert a.to_json() == b.to_json() and a.record() == b.record()
    assert len(a.text) <= budget and a.cost == len(a.text)
    assert packview.check_recorded(a.record()) == a.text
    # Each distinct candidate is included, trimmed or excluded: exactly one of them.
    seen: list[str] = [e.id for e in a.entries()]
    seen += [x.id for t in a.tiers for x in t.trimmed]
    seen += [x.id for x in a.excluded]
    distinct = {s.id or f"{s.project}/{s.category}/{s.key}" for s in state}
    distinct |= {m.id for m in memories} | {c.id for c in chunks}
    assert sorted(seen) == sorted(distinct)
    # Trimming follows the order: a tier that lost an entry to over_budget leaves every
    # tier before it in the trim order empty.
    by_name = {t.name: t for t in a.tiers}
    order = list(cfg.trim_order)
    for i, name in enumerate(order):
        if any(x.reason == "over_budget" for x in by_name[name].trimmed):
            assert all(not by_name[o].entries for o in order[:i])
    for m in memories:
        if m.id in {e.id for e in a.entries()}:
            row = max((r for r in memories if r.id == m.id), key=lambda r: (r.score, repr(r)))
            assert row.status == "active" and not row.archived
            assert row.expires_at is None or row.expires_at > NOW
            assert row.project in ("", project)


def test_config_is_validated() -> None:
    from mnemolog.eventlog.errors import UsageError

    with pytest.raises(UsageError):
        PackConfig(shares={"state": 0.5, "identity": 0.5, "project": 0.5, "domain": 0, "chunks": 0})
    with pytest.raises(UsageError):
        PackConfig(trim_order=("chunks", "chunks", "project", "identity", "state"))
    with pytest.raises(UsageError):
        PackConfig(budget=0)
    with pytest.raises(UsageError):
        PackConfig(budget=100_001, unit="tokens")
    with pytest.raises(UsageError):
        PackConfig(unit="words")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        PackConfig.from_mapping({"budgett": 3})
    cfg = PackConfig.from_mapping(
        {
            "budget": 500,
            "shares": {"chunks": 0.3},
            "domain_terms": {"materials": ["Invar"], "botany": ["leaf"]},
        }
    )
    assert cfg.budget == 500 and cfg.shares["chunks"] == 0.3 and cfg.shares["state"] == 0.2
    assert "invar" in cfg.domain_terms["materials"] and cfg.domain_terms["botany"] == ("leaf",)
    assert cfg.with_request(budget=50, unit="tokens").unit == "tokens"


def test_the_pack_docs_context_md_shows_is_what_assembly_renders() -> None:
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "context.md").read_text()
    section = doc[doc.index("## 3. The pack's bytes") :]
    shown = re.search(r"```\n(## Trusted project state.*?)```", section, re.S)
    assert shown is not None
    pack = assemble(
        QUERY,
        P06,
        now=NOW,
        config=PackConfig(),
        state=[
            StateRow(
                P06,
                "decision",
                "vendor_path",
                "Twyman-Green preferred, 4D technical lead but cost-challenged",
            )
        ],
        memories=[
            MemoryRow("u", "user", "Antoine Letarte, mechanical/optical engineer at Atomaste"),
            MemoryRow(
                "c", "project", "Calibration loop adjusts Preston kp from surface measurements", P06, hit=True
            ),
            MemoryRow(
                "z",
                "knowledge",
                "Zerodur CTE gradient dominates WFE contribution at fast focal ratios (F/1.2 = ~3nm)",
                domains=("materials",),
            ),
            MemoryRow("p", "project", "CTE gradient analysis drove the M1 support pad", P04, score=2.0),
        ],
        chunks=[
            ChunkRow(
                "d/1/0",
                "Polishing accuracy drifts with tool temperature.",
                "polisher.md",
                ("Thermal", "Drift"),
                P06,
                score=3.0,
            )
        ],
    )
    assert pack.text == shown.group(1)
    assert excluded(pack) == {"p": "other_project"}


def test_a_recall_hit_is_relevant_at_score_zero_and_a_mere_candidate_is_not() -> None:
    rows = [
        MemoryRow("a", "project", "found by meaning, least similar", P06, hit=True),
        MemoryRow("b", "project", "fetched, never matched", P06),
        MemoryRow("c", "project", "the best match", P06, score=1.0, hit=True),
        MemoryRow("g", "knowledge", "a global hit of no evoked domain", hit=True),
    ]
    pack = assemble(QUERY, P06, now=NOW, config=PackConfig(), memories=rows)
    assert ids(pack, "project") == ["c", "a"] and ids(pack, "domain") == ["g"]
    assert excluded(pack) == {"b": "not_relevant"}


def test_personal_domains_enter_only_a_personal_pack_without_project_data() -> None:
    mems = [
        MemoryRow("01H", "knowledge", "thermal note", domains=("Health",), score=1.0),
        MemoryRow("01G", "knowledge", "thermal glass", domains=("materials",), score=1.0),
    ]
    chunks = [
        ChunkRow("d/1/0", "thermal mine", "mine.md", score=1.0),
        ChunkRow("e/1/0", "thermal work", "work.md", project="p06", score=1.0),
    ]
    plain = build(memories=mems, chunks=chunks)
    assert ids(plain, "domain") == ["01G"] and excluded(plain)["01H"] == "personal"
    assert sorted(ids(plain, "chunks")) == ["d/1/0", "e/1/0"]
    mine = assemble(QUERY, None, now=NOW, config=PackConfig(personal=True), memories=mems, chunks=chunks)
    assert sorted(ids(mine, "domain")) == ["01G", "01H"]
    assert ids(mine, "chunks") == ["d/1/0"] and excluded(mine)["e/1/0"] == "other_project"
