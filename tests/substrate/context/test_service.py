"""Documents and context packs through the API: ingest rules, recorded packs, show, why, attacks."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemolog.eventlog.errors import BadInput, NotFound, UsageError, VerificationError
from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.eventlog.verify.verifier import verify_log
from mnemolog.projections.context import store
from mnemolog.substrate.api import Substrate
from tests.projections.kit import FakeClock, log_digest, new_home, open_sub, snapshot

QUERY = "thermal effects on polishing accuracy"


@pytest.fixture
def sub(tmp_path: Path) -> Iterator[Substrate]:
    s = open_sub(new_home(tmp_path / "home"), clock=FakeClock())
    yield s
    s.close()


def docs(root: Path) -> Path:
    d = root / "docs"
    (d / "sub").mkdir(parents=True)
    (d / "polisher.md").write_text(
        "# Polisher\n\n## Thermal\nPolishing accuracy drifts with tool temperature.\n\n"
        "## Vendors\nTwyman-Green.\n"
    )
    (d / "sub" / "notes.txt").write_text("plain notes on thermal drift\n")
    (d / "skip.pdf").write_bytes(b"%PDF-1.4")
    return d


def events(sub: Substrate, type_: str) -> list[dict[str, Any]]:
    return [sub.keys.upcast(e.type, e.tv, e.data) for e in sub.log.iter_entries() if e.type == type_]


# -- ingest -------------------------------------------------------------------


def test_ingest_writes_documents_with_their_chunks_and_nothing_when_unchanged(
    sub: Substrate, tmp_path: Path
) -> None:
    d = docs(tmp_path)
    r = sub.ingest([d], project="p06")
    assert sorted(Path(x["path"]).name for x in r["ingested"]) == ["notes.txt", "polisher.md"]
    assert r["chunks"] == 3 and r["refused"] == [] and r["unchanged"] == 0
    (ev,) = [e for e in events(sub, "document.ingested") if e["name"] == "polisher.md"]
    assert ev["project"] == "p06" and ev["version"] == 1 and ev["markdown"] is True
    assert [c["heading_path"] for c in ev["chunks"]] == [["Polisher", "Thermal"], ["Polisher", "Vendors"]]
    assert ev["chunks"][0]["text"] == "Polishing accuracy drifts with tool temperature."
    assert len(ev["sha256"]) == 64 and ev["size"] == (d / "polisher.md").stat().st_size
    before = log_digest(sub.home)
    again = sub.ingest([d], project="p06")
    assert again["ingested"] == [] and again["unchanged"] == 2
    assert log_digest(sub.home) == before


def test_ingest_names_a_project_as_every_door_does(sub: Substrate, tmp_path: Path) -> None:
    """An alias in any case is the registered name; a bad name is refused by the one rule of names."""
    sub.register_project("p06-polisher", aliases=["p06"])
    sub.ingest([docs(tmp_path)], project="  P06 ")
    assert {e["project"] for e in events(sub, "document.ingested")} == {"p06-polisher"}
    before = log_digest(sub.home)
    more = docs(tmp_path / "more")
    for bad in ("-leading", "spa ce", "x" * 65):
        with pytest.raises(BadInput, match="a project name is 1-64 characters"):
            sub.ingest([more], project=bad)
    assert log_digest(sub.home) == before


def test_a_changed_file_is_a_new_version_and_a_gone_one_is_removed(sub: Substrate, tmp_path: Path) -> None:
    d = docs(tmp_path)
    sub.ingest([d])
    (d / "polisher.md").write_text("# Polisher\n\n## Thermal\nNow about coolant flow instead.\n")
    (d / "sub" / "notes.txt").unlink()
    r = sub.ingest([d])
    assert [(Path(x["path"]).name, x["version"]) for x in r["ingested"]] == [("polisher.md", 2)]
    assert [Path(x["path"]).name for x in r["removed"]] == ["notes.txt"]
    with sub.projections.session() as conn:
        hits = store.chunk_candidates(conn, "temperature drift", None, 10)
        assert hits == []
        assert [h.text for h in store.chunk_candidates(conn, "coolant", None, 10)] == [
            "Now about coolant flow instead."
        ]
    # A glob that does not take a file never removes it.
    r = sub.ingest([d], globs=["*.txt"])
    assert r["removed"] == [] and r["ingested"] == []
    removed = events(sub, "document.removed")
    assert [Path(e["path"]).name for e in removed] == ["notes.txt"]


def test_ingest_rebuilds_to_the_same_tables(sub: Substrate, tmp_path: Path) -> None:
    d = docs(tmp_path)
    sub.ingest([d], project="p06")
    (d / "polisher.md").write_text("# New\ntext\n")
    sub.ingest([d], project="p06")
    sub.build_context(QUERY, project="p06")
    before = snapshot(sub)
    sub.rebuild()
    assert snapshot(sub) == before


def test_hostile_files_are_refused_and_the_rest_ingested(sub: Substrate, tmp_path: Path) -> None:
    d = docs(tmp_path)
    os.mkfifo(d / "pipe.md")
    with open(d / "huge.md", "wb") as fh:
        fh.truncate(8 << 30)  # sparse, never read
    (d / "latin.txt").write_bytes("Résumé".encode("cp1252"))
    (d / "binary.md").write_bytes(bytes(range(256)) * 4)
    (d / "liar.md").write_bytes(b"\xef\xbb\xbfok \xff bad")
    r = sub.ingest([d, "/dev/zero"])
    refused = {Path(x["path"]).name: x["reason"] for x in r["refused"]}
    assert refused == {
        "pipe.md": "not_regular",
        "huge.md": "too_large",
        "binary.md": "document_encoding",
        "liar.md": "document_encoding",
        "zero": "not_regular",
    }
    assert sorted(Path(x["path"]).name for x in r["ingested"]) == ["latin.txt", "notes.txt", "polisher.md"]
    (latin,) = [e for e in events(sub, "document.ingested") if e["name"] == "latin.txt"]
    assert latin["encoding"] == "cp1252" and latin["chunks"][0]["text"] == "Résumé"
    verify_log(sub.home.log_dir, policy=TRUST_GENESIS)  # nothing half-written


def test_an_entry_too_large_for_the_log_is_refused(sub: Substrate, tmp_path: Path) -> None:
    # Under the file size limit, but 170,000 one-character sections make an event over 4 MiB.
    dense = tmp_path / "dense.md"
    dense.write_text("# h\nx\n" * 170_000)
    assert dense.stat().st_size < 1 << 20
    r = sub.ingest([dense])
    assert [x["reason"] for x in r["refused"]] == ["too_large"]
    assert "entry limit" in r["refused"][0]["message"]
    assert events(sub, "document.ingested") == []


def test_ingest_settings_are_checked(tmp_path: Path) -> None:
    home = new_home(tmp_path / "h")
    home.config_path.write_text(home.config_path.read_text() + "\n[ingest]\nmax_file_bytes = 8000000\n")
    s = open_sub(tmp_path / "h")
    try:
        with pytest.raises(BadInput, match="max_file_bytes"):
            s.ingest([tmp_path])
    finally:
        s.close()


def test_ingest_refuses_bad_arguments(sub: Substrate, tmp_path: Path) -> None:
    with pytest.raises(BadInput):
        sub.ingest([tmp_path / "missing"])
    with pytest.raises(UsageError):
        sub.ingest([])
    with pytest.raises(BadInput):
        sub.ingest([tmp_path], project="no spaces allowed")


# -- packs ----------------------------------------------------------------------


def seeded(sub: Substrate, tmp_path: Path) -> dict[str, str]:
    ids = {
        "user": sub.store("Antoine, mechanical/optical engineer", kind="user")["id"],
        "know": sub.store("Zerodur CTE gradient dominates thermal WFE at F/1.2", kind="knowledge")["id"],
        "old": sub.store("Polishing pads wear out thermally after an hour", kind="knowledge")["id"],
        "new": sub.store("Polishing pads wear out after two hours of thermal load", kind="knowledge")["id"],
        "hidden": sub.store("Thermal polishing notes, archived", kind="knowledge")["id"],
        "expired": sub.store(
            "Thermal polishing target for Q1",
            kind="knowledge",
            metadata={"vault": {"expires_at": "2020-03-31"}},
        )["id"],
        "pinned": sub.store("Hard scope: optics only", kind="decision", metadata={"vault": {"pinned": True}})[
            "id"
        ],
    }
    sub.link(ids["new"], ids["old"], relation="supersedes")
    sub.archive(ids["hidden"])
    sub.ingest([docs(tmp_path)], project="p06")
    return ids


def test_a_pack_is_recorded_and_show_renders_it_byte_for_byte_after_rebuild(
    sub: Substrate, tmp_path: Path
) -> None:
    ids = seeded(sub, tmp_path)
    pack = sub.build_context(QUERY, project="p06")
    by_tier = {t["name"]: [e["id"] for e in t["entries"]] for t in pack["tiers"]}
    assert by_tier["identity"] == [ids["pinned"], ids["user"]]
    assert set(by_tier["domain"]) == {ids["know"], ids["new"]}
    for gone in ("old", "hidden", "expired"):
        assert ids[gone] not in pack["text"] and ids[gone] not in str(by_tier)
    assert by_tier["chunks"][0].endswith("/1/0")
    (ev,) = events(sub, "context.built")
    assert ev["pack_id"] == pack["pack_id"] and ev["sha256"] == pack["sha256"]
    assert ev["memory_ids"] == [ids["pinned"], ids["user"], *by_tier["domain"]]
    shown = sub.show_context(pack["pack_id"])
    assert shown["text"] == pack["text"] and shown["verified"] and shown["sources_checked"] == 7
    # Later edits do not change what the pack was.
    sub.update(ids["know"], content="Rewritten later")
    sub.rebuild()
    assert sub.show_context(pack["pack_id"])["text"].encode() == pack["text"].encode()
    why = sub.context_why(ids["know"])
    assert [(w["pack_id"], w["tier"], w["included"]) for w in why] == [(pack["pack_id"], "domain", True)]


def test_no_record_writes_nothing_and_the_same_clock_gives_the_same_bytes(
    sub: Substrate, tmp_path: Path
) -> None:
    seeded(sub, tmp_path)
    before = log_digest(sub.home)
    sub.clock = lambda: 1_800_000_000_000_000
    a = sub.build_context(QUERY, project="p06", record=False)
    b = sub.build_context(QUERY, project="p06", record=False)
    assert a["pack_id"] is None and log_digest(sub.home) == before
    assert a["text"].encode() == b["text"].encode() and a == b
    sub.rebuild()
    assert sub.build_context(QUERY, project="p06", record=False) == a


def test_budgets_units_and_bad_requests(sub: Substrate, tmp_path: Path) -> None:
    seeded(sub, tmp_path)
    small = sub.build_context(QUERY, budget=120, record=False)
    assert len(small["text"]) <= 120
    trimmed = [x for t in small["tiers"] for x in t["trimmed"]]
    assert trimmed and {x["reason"] for x in trimmed} <= {"tier_share", "over_budget"}
    tok = sub.build_context(QUERY, budget=60, unit="tokens", record=False)
    from mnemolog.curators.tokens import count_tokens

    assert count_tokens(tok["text"]) <= 60 and tok["unit"] == "tokens"
    for bad in ({"budget": 0}, {"unit": "words"}, {"budget": 10**9}):
        with pytest.raises(UsageError):
            sub.build_context(QUERY, **bad)  # type: ignore[arg-type]
    for q in ("", "   ", "a\x00b", "x" * 9000, "lone \ud800 surrogate"):
        with pytest.raises(BadInput):
            sub.build_context(q)
    with pytest.raises(NotFound):
        sub.show_context("01NOSUCHPACK0000000000000")


def test_configuration_sets_budget_and_shares(sub: Substrate, tmp_path: Path) -> None:
    seeded(sub, tmp_path)
    cfg = sub.home.config_path
    order = '["domain", "chunks", "project", "identity", "state"]'
    cfg.write_text(cfg.read_text() + f"\n[context]\nbudget = 500\ntrim_order = {order}\n")
    s2 = open_sub(sub.home.root)
    try:
        p = s2.build_context(QUERY, record=False)
        assert p["budget"] == 500 and p["config"]["trim_order"][0] == "domain"
    finally:
        s2.close()
    cfg.write_text(cfg.read_text() + "\n[ingest]\nnonsense = 1\n")
    s3 = open_sub(sub.home.root)
    try:
        with pytest.raises(BadInput):
            s3.ingest([tmp_path])
    finally:
        s3.close()


# -- attacks on recorded packs ------------------------------------------------------


def forge(sub: Substrate, data: dict[str, Any]) -> None:
    """Append a signed context.built the API would never write (a compromised writer)."""
    sub.writer.append("context.built", data, 1)


def test_show_refuses_a_pack_whose_hash_does_not_match_its_entries(sub: Substrate, tmp_path: Path) -> None:
    seeded(sub, tmp_path)
    pack = sub.build_context(QUERY, project="p06")
    (ev,) = events(sub, "context.built")
    bad = {**ev, "pack_id": "01FORGEDHASH00000000000000"}
    bad["tiers"] = [dict(t) for t in ev["tiers"]]
    bad["tiers"][1] = {**bad["tiers"][1], "included": []}  # an entry silently dropped
    forge(sub, bad)
    with pytest.raises(VerificationError) as exc:
        sub.show_context("01FORGEDHASH00000000000000")
    assert exc.value.check == "context.sha256" and exc.value.exit_code == 8
    assert sub.show_context(pack["pack_id"])["verified"]


def test_show_refuses_a_pack_that_misquotes_a_memory(sub: Substrate, tmp_path: Path) -> None:
    from mnemolog.eventlog.bundle import packview

    seeded(sub, tmp_path)
    sub.build_context(QUERY, project="p06")
    (ev,) = events(sub, "context.built")
    bad = {**ev, "pack_id": "01FORGEDTEXT00000000000000"}
    bad["tiers"] = [dict(t) for t in ev["tiers"]]
    entries = [dict(e) for e in bad["tiers"][3]["included"]]
    entries[0]["text"] = "A claim the memory never made"
    bad["tiers"][3] = {**bad["tiers"][3], "included": entries}
    bad["sha256"] = packview.pack_sha256(packview.render_recorded(bad))  # consistent hash, false quote
    forge(sub, bad)
    with pytest.raises(VerificationError) as exc:
        sub.show_context("01FORGEDTEXT00000000000000")
    assert exc.value.check == "context.source"


# -- bundles ---------------------------------------------------------------------------


def test_the_entries_about_a_memory_re_render_its_packs_and_expose_a_misquote(
    sub: Substrate, tmp_path: Path
) -> None:
    from dataclasses import replace

    from mnemolog.eventlog.bundle import packview
    from mnemolog.eventlog.vocabulary.events import touched_ids

    ids = seeded(sub, tmp_path)
    pack = sub.build_context(QUERY, project="p06")
    sub.update(ids["know"], content="Zerodur CTE gradient dominates thermal WFE (revised)")
    later = sub.build_context(QUERY, project="p06")
    # What a bundle of the memory holds: every entry that touches it (its packs included).
    about = [e for e in sub.log.iter_entries() if ids["know"] in touched_ids(e.type, e.data)]
    assert [e.type for e in about].count("context.built") == 2
    report = packview.verify_packs(about, {ids["know"]}, sub.keys.get)
    assert [(r["pack_id"], r["memories_checked"]) for r in report] == [
        (pack["pack_id"], [ids["know"]]),
        (later["pack_id"], [ids["know"]]),
    ]
    # The same slice with the update removed: the second pack now misquotes the memory.
    without_update = [e for e in about if e.type != "memory.updated"]
    with pytest.raises(VerificationError) as exc:
        packview.verify_packs(without_update, {ids["know"]}, sub.keys.get)
    assert exc.value.check == "context.source"
    # A pack whose entries were altered no longer matches the hash it signed.
    built = next(e for e in about if e.type == "context.built")
    opened = sub.keys.upcast(built.type, built.tv, built.data)
    data = {**opened, "query": opened["query"], "tiers": list(opened["tiers"])}
    data["tiers"][4] = {**data["tiers"][4], "included": []}
    forged = [replace(built, data=data) if e is built else e for e in about]
    with pytest.raises(VerificationError) as exc:
        packview.verify_packs(forged, {ids["know"]}, sub.keys.get)
    assert exc.value.check == "context.sha256"


def test_a_forensic_bundle_of_a_memory_carries_its_packs_and_re_renders_them(
    sub: Substrate, tmp_path: Path
) -> None:
    from mnemolog.eventlog.bundle import verifier as bundle
    from mnemolog.substrate.forensics import service as forensics

    ids = seeded(sub, tmp_path)
    pack = sub.build_context(QUERY, project="p06")
    path = tmp_path / "b.tar"
    path.write_bytes(forensics.export_bundle(sub, ids["know"]).data)
    report = bundle.verify_bundle(path, policy=TRUST_GENESIS)
    assert "context_packs" in report.checks
    assert [(p["pack_id"], p["sha256"], p["memories_checked"]) for p in report.packs] == [
        (pack["pack_id"], pack["sha256"], [ids["know"]])
    ]
    assert f"pack        {pack['pack_id']}" in report.text()


@pytest.mark.parametrize("attack", ["hash", "quote"])
def test_the_bundle_verifier_refuses_a_signed_pack_that_lies(
    sub: Substrate, tmp_path: Path, attack: str
) -> None:
    """A key holder signs a pack whose hash does not match its entries, or that misquotes the memory."""
    from mnemolog.eventlog.bundle import packview
    from mnemolog.eventlog.bundle import verifier as bundle
    from mnemolog.eventlog.errors import VerificationError
    from mnemolog.substrate.forensics import service as forensics

    ids = seeded(sub, tmp_path)
    sub.build_context(QUERY, project="p06")
    (ev,) = events(sub, "context.built")
    bad = {k: v for k, v in ev.items() if k != "touch_prev"}
    bad["pack_id"] = "01FORGED000000000000000000"
    bad["tiers"] = [dict(t) for t in ev["tiers"]]
    entries = [dict(e) for e in bad["tiers"][3]["included"]]
    know = next(i for i, e in enumerate(entries) if e["id"] == ids["know"])
    entries[know]["text"] = "A claim the memory never made"
    bad["tiers"][3] = {**bad["tiers"][3], "included": entries}
    if attack == "quote":
        bad["sha256"] = packview.pack_sha256(packview.render_recorded(bad))
    with sub.session() as s:
        from mnemolog.substrate.events.context import ContextBuilt

        s.append(ContextBuilt(**bad))  # signed by the home's own key, back-chain and all
    path = tmp_path / "b.tar"
    path.write_bytes(forensics.export_bundle(sub, ids["know"]).data)
    with pytest.raises(VerificationError) as exc:
        bundle.verify_bundle(path, policy=TRUST_GENESIS)
    assert exc.value.check == ("context.sha256" if attack == "hash" else "context.source")


def test_always_wanted_memories_follow_every_write(sub: Substrate, tmp_path: Path) -> None:
    ids = seeded(sub, tmp_path)

    def identity() -> list[str]:
        p = sub.build_context(QUERY, record=False)
        return [e["id"] for t in p["tiers"] if t["name"] == "identity" for e in t["entries"]]

    assert identity() == [ids["pinned"], ids["user"]]
    sub.build_context(QUERY)  # a recorded pack is not a memory change: the cache stays valid
    new = sub.store("Second hard rule", kind="decision", metadata={"vault": {"pinned": True}})["id"]
    assert set(identity()) == {ids["pinned"], new, ids["user"]}
    sub.archive(ids["pinned"])
    assert ids["pinned"] not in identity()
    sub.update(new, metadata={"vault": {"pinned": False}})
    assert identity() == [ids["user"]]


def test_a_pack_that_quoted_a_forgotten_memory_re_renders_it_as_a_marked_gap(
    sub: Substrate, tmp_path: Path
) -> None:
    from mnemolog.eventlog.bundle import packview
    from mnemolog.eventlog.bundle import verifier as bundle
    from mnemolog.substrate.forensics import service as forensics

    ids = seeded(sub, tmp_path)
    pack = sub.build_context(QUERY, project="p06")
    before = sub.show_context(pack["pack_id"])
    assert before["verified"] and before["gaps"] == [] and "Zerodur CTE gradient" in before["text"]
    sub.forget([ids["know"]], reason="asked")
    after = sub.show_context(pack["pack_id"])
    assert after["verified"] is False
    assert after["gaps"] == [{"tier": "domain", "source": "memory", "id": ids["know"]}]
    assert "Zerodur CTE gradient" not in after["text"]
    assert f"- [{packview.GAP_LABEL}] memory {ids['know']} was erased" in after["text"]
    assert "Antoine, mechanical/optical engineer" in after["text"]  # the rest of the pack stays
    # A bundle of another memory of that pack verifies, and reports the gap.
    path = tmp_path / "b.tar"
    path.write_bytes(forensics.export_bundle(sub, ids["user"]).data)
    report = bundle.verify_bundle(path, policy=TRUST_GENESIS)
    (p,) = [p for p in report.packs if p["pack_id"] == pack["pack_id"]]
    assert p["gaps"] == after["gaps"] and p["sha256_checked"] is False
