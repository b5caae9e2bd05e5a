"""render_vault: the layout, mappings, determinism, incremental writes, ownership."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from datetime import date
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from mnemolog.eventlog.errors import BadInput, UsageError
from mnemolog.projections.vault import frontmatter as fm
from mnemolog.projections.vault import naming, regions
from mnemolog.projections.vault.render import (
    INDEX_MAX_LINES,
    MANIFEST_NAME,
    NoteRecord,
    UnmanagedFileConflict,
    confidence_level,
    confidence_value,
    plan_vault,
    render_vault,
)
from mnemolog.projections.vault.validate import errors, validate_vault

from .strategies import records


def without_markers(text: str) -> str:
    """An INDEX as a reader sees it once the region markers (HTML comments) are dropped."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("<!-- mnemolog:"))


def rec(memory_id: str, **kw: object) -> NoteRecord:
    base: dict[str, object] = {
        "memory_id": memory_id,
        "kind": "user",
        "title": f"Title of {memory_id}",
        "description": "A hook",
        "content": "Body\n",
        "confidence": 0.9,
        "captured": date(2026, 1, 1),
        "last_seen": date(2026, 1, 2),
    }
    base.update(kw)
    return NoteRecord(**base)  # type: ignore[arg-type]


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("value", "level"),
    [(1.0, "high"), (0.75, "high"), (0.7499, "medium"), (0.45, "medium"), (0.4499, "low"), (0.0, "low")],
)
def test_confidence_thresholds(value: float, level: str) -> None:
    assert confidence_level(value) == level


@pytest.mark.parametrize("level", ["high", "medium", "low"])
def test_confidence_levels_round_trip(level: str) -> None:
    assert confidence_level(confidence_value(level)) == level


@pytest.mark.parametrize(
    ("kind", "sources", "directory", "vtype"),
    [
        ("user", (), "memory", "user"),
        ("feedback", (), "memory", "feedback"),
        ("project", (), "memory", "project"),
        ("decision", (), "memory", "decision"),
        ("reference", (), "memory", "reference"),
        ("observation", (), "memory", "reference"),
        ("knowledge", ("raw/tax.pdf",), "wiki", "wiki_page"),
        ("knowledge", ("raw/tax.pdf", "conversation_1"), "memory", "reference"),
        ("knowledge", (), "memory", "reference"),
    ],
)
def test_kind_mapping(
    tmp_path: Path, kind: str, sources: tuple[str, ...], directory: str, vtype: str
) -> None:
    render_vault(tmp_path, "a", [rec("m1", kind=kind, sources=sources, title="Risk tolerance")])
    [path] = [p for p in (tmp_path / "a" / directory).glob("*.md") if not p.name.startswith("INDEX")]
    meta = fm.read_document(path).meta
    assert meta["type"] == vtype
    assert meta["mnemolog_kind"] == kind
    assert meta["mnemolog_id"] == "m1"
    if vtype == "wiki_page":
        assert meta["provenance"] == "distilled"
        assert path.name == "risk_tolerance.md"
    else:
        assert path.name == f"{vtype}_risk_tolerance.md"
    assert validate_vault(tmp_path) == []


def test_atoms_are_reference_notes_that_keep_their_parent(tmp_path: Path) -> None:
    render_vault(tmp_path, "a", [rec("atom1", kind="observation", atom_of="parent9", title="Atom one")])
    meta = fm.read_document(tmp_path / "a/memory/reference_atom_one.md").meta
    assert meta["mnemolog_atom_of"] == "parent9"
    assert meta["sources"] == ["mnemolog:atom1"]


def test_layout_and_index_sections(tmp_path: Path) -> None:
    rs = [
        rec("f", kind="feedback", title="Debt priority order", pinned=True),
        rec("d1", kind="decision", title="Income target", superseded_by="d2", expires_at=date(2026, 6, 30)),
        rec(
            "d2",
            kind="decision",
            title="Income target",
            supersedes="d1",
            captured=date(2026, 3, 1),
            expires_at=date(2026, 9, 30),
        ),
        rec("u", kind="user", title="Risk tolerance"),
        rec("p", kind="project", title="Consulting launch", expires_at=date(2026, 4, 17)),
        rec("r", kind="reference", title="Bank portal", archived=True),
        rec(
            "x",
            kind="feedback",
            title="Say no early",
            extra_frontmatter={"promoted_to_persona": date(2026, 2, 2)},
        ),
        rec(
            "k",
            kind="knowledge",
            title="Tax strategy",
            sources=["raw/tax.pdf"],
            expires_at=date(2026, 12, 31),
        ),
    ]
    render_vault(tmp_path, "caldwell", rs)
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert files == [
        f"caldwell/{MANIFEST_NAME}",
        "caldwell/memory/INDEX.md",
        "caldwell/memory/decision_2026-q2_income_target.md",
        "caldwell/memory/decision_2026-q3_income_target.md",
        "caldwell/memory/feedback_debt_priority_order.md",
        "caldwell/memory/feedback_say_no_early.md",
        "caldwell/memory/project_2026_april_consulting_launch.md",
        "caldwell/memory/reference_bank_portal.md",
        "caldwell/memory/user_risk_tolerance.md",
        "caldwell/wiki/INDEX.md",
        "caldwell/wiki/tax_strategy_2026.md",
    ]
    index = (tmp_path / "caldwell/memory/INDEX.md").read_text()
    # Each section's lines are a managed region of its own, none of them hand-edited.
    assert [r.name for r in regions.parse(index)] == [
        "index.feedback",
        "index.decisions",
        "index.user",
        "index.projects",
        "index.reference",
        "index.promoted",
        "index.archive",
    ]
    assert regions.hand_edited(index) == []
    assert without_markers(index) == (
        "# caldwell — Memory Index\n\n"
        "## Critical Feedback\n"
        "- [`Debt priority order`](feedback_debt_priority_order.md) — A hook\n\n"
        "## Locked Decisions\n"
        "- [`Income target`](decision_2026-q3_income_target.md) — A hook\n\n"
        "## User Profile\n"
        "- [`Risk tolerance`](user_risk_tolerance.md) — A hook\n\n"
        "## Active Projects\n"
        "- [`Consulting launch`](project_2026_april_consulting_launch.md) — A hook\n\n"
        "## Reference\n\n"
        "## Recently Promoted to Persona\n"
        "- [`Say no early`](feedback_say_no_early.md) — promoted 2026-02-02 from feedback_say_no_early.md\n\n"
        "## Archive (superseded)\n"
        "- [`Income target`](decision_2026-q2_income_target.md) — superseded by "
        "decision_2026-q3_income_target.md, 2026-03-01\n"
        "- [`Bank portal`](reference_bank_portal.md) — archived 2026-01-02: A hook\n"
    )
    old = fm.read_document(tmp_path / "caldwell/memory/decision_2026-q2_income_target.md").meta
    new = fm.read_document(tmp_path / "caldwell/memory/decision_2026-q3_income_target.md").meta
    assert old["superseded_by"] == "decision_2026-q3_income_target.md"
    assert new["supersedes"] == "decision_2026-q2_income_target.md"
    assert validate_vault(tmp_path) == []


def test_long_titles_and_descriptions_fit_the_limits_and_are_kept(tmp_path: Path) -> None:
    r = rec("m", title="T" * 200, description="word " * 100, content="")
    render_vault(tmp_path, "a", [r])
    [path] = (tmp_path / "a/memory").glob("user_*.md")
    meta = fm.read_document(path).meta
    assert len(meta["name"]) == 80 and meta["name"].endswith("…")
    assert len(meta["description"]) <= 150
    assert meta["mnemolog_title"] == r.title
    assert meta["mnemolog_description"] == r.description
    assert validate_vault(tmp_path) == []


def test_empty_title_and_description_fall_back(tmp_path: Path) -> None:
    render_vault(tmp_path, "a", [rec("m", title="  ", description="", content="# Heading line\nrest")])
    meta = fm.read_document(tmp_path / "a/memory/user_untitled_note.md").meta
    assert meta["name"] == "Untitled user"
    assert meta["description"] == "Heading line"
    assert validate_vault(tmp_path) == []


def test_same_records_give_same_bytes(tmp_path: Path) -> None:
    rs = [rec(f"m{i}", title="Same topic here") for i in range(5)]
    render_vault(tmp_path / "one", "a", rs)
    render_vault(tmp_path / "two", "a", list(reversed(rs)))
    assert tree(tmp_path / "one") == tree(tmp_path / "two")
    names = sorted(p.name for p in (tmp_path / "one/a/memory").glob("user_*.md"))
    assert "user_same_topic_here.md" in names
    assert len(names) == 5


def test_rerender_touches_only_what_changed(tmp_path: Path) -> None:
    rs = [rec(f"m{i}", title=f"Topic number {i}") for i in range(10)]
    first = render_vault(tmp_path, "a", rs)
    assert first.unchanged == 0 and len(first.written) == 11 and first.removed == []
    again = render_vault(tmp_path, "a", rs)
    assert again.written == [] and again.unchanged == 11
    rs[3] = dataclasses.replace(rs[3], content="New body\n")
    changed = render_vault(tmp_path, "a", rs)
    assert changed.written == ["a/memory/user_topic_number_3.md"]
    rs[4] = dataclasses.replace(rs[4], description="New hook")
    assert render_vault(tmp_path, "a", rs).written == ["a/memory/INDEX.md", "a/memory/user_topic_number_4.md"]
    shrunk = render_vault(tmp_path, "a", rs[:9])
    assert shrunk.removed == ["a/memory/user_topic_number_9.md"]
    assert not (tmp_path / "a/memory/user_topic_number_9.md").exists()
    manifest = json.loads((tmp_path / "a" / MANIFEST_NAME).read_text())
    assert len(manifest["files"]) == 10
    assert validate_vault(tmp_path) == []


def test_hand_edits_to_owned_files_are_rewritten(tmp_path: Path) -> None:
    render_vault(tmp_path, "a", [rec("m")])
    path = tmp_path / "a/memory/user_title_of_m.md"
    original = path.read_bytes()
    path.write_text("edited")
    assert render_vault(tmp_path, "a", [rec("m")]).written == ["a/memory/user_title_of_m.md"]
    assert path.read_bytes() == original


def test_unmanaged_files_are_never_overwritten_or_removed(tmp_path: Path) -> None:
    mine = tmp_path / "a/memory/user_title_of_m.md"
    mine.parent.mkdir(parents=True)
    mine.write_text("hand-written")
    other = tmp_path / "a/memory/user_hand_written.md"
    other.write_text("keep me")
    with pytest.raises(UnmanagedFileConflict) as info:
        render_vault(tmp_path, "a", [rec("m")])
    assert info.value.exit_code == 64
    assert mine.read_text() == "hand-written"
    report = render_vault(tmp_path, "a", [rec("m")], overwrite_unmanaged=True)
    assert "a/memory/user_title_of_m.md" in report.written
    render_vault(tmp_path, "a", [])
    assert other.read_text() == "keep me"
    assert not mine.exists()


def test_identical_unmanaged_file_is_adopted(tmp_path: Path) -> None:
    data = plan_vault("a", [rec("m")])
    for rel, content in data.items():
        (tmp_path / "a" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "a" / rel).write_bytes(content)
    report = render_vault(tmp_path, "a", [rec("m")])
    assert report.written == [] and report.unchanged == len(data)
    render_vault(tmp_path, "a", [])
    assert not (tmp_path / "a/memory/user_title_of_m.md").exists()


@pytest.mark.parametrize(
    "manifest",
    [
        b"not json",
        b"[]",
        b'{"format": "other", "files": []}',
        b'{"format": "mnemolog-vault-manifest/1", "files": [1]}',
    ],
)
def test_corrupt_manifest_is_bad_input(tmp_path: Path, manifest: bytes) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / MANIFEST_NAME).write_bytes(manifest)
    with pytest.raises(BadInput, match="manifest"):
        render_vault(tmp_path, "a", [rec("m")])


def test_hostile_manifest_entries_are_ignored(tmp_path: Path) -> None:
    victim = tmp_path / "victim.md"
    victim.write_text("outside")
    (tmp_path / "a").mkdir()
    (tmp_path / "a/memory").mkdir()
    (tmp_path / "a/memory/.hidden.md").write_text("x")
    doc = {
        "format": "mnemolog-vault-manifest/1",
        "files": ["../victim.md", "/etc/passwd", "memory/../../victim.md", "memory/.hidden.md"],
    }
    (tmp_path / "a" / MANIFEST_NAME).write_text(json.dumps(doc))
    report = render_vault(tmp_path, "a", [rec("m")])
    assert report.removed == []
    assert victim.read_text() == "outside"
    assert (tmp_path / "a/memory/.hidden.md").exists()


def test_big_sections_move_to_paged_sub_indexes(tmp_path: Path) -> None:
    rs = [rec(f"m{i:04d}", kind="reference", title=f"Entry {i:04d} topic") for i in range(300)]
    rs += [rec("f1", kind="feedback", title="Only feedback")]
    render_vault(tmp_path, "a", rs)
    memory = tmp_path / "a/memory"
    indexes = sorted(p.name for p in memory.glob("INDEX*.md"))
    assert indexes == [
        "INDEX.md",
        "INDEX_feedback.md",
        "INDEX_reference.md",
        "INDEX_reference_001.md",
        "INDEX_reference_002.md",
        "INDEX_reference_003.md",
    ]
    for name in indexes:
        assert len((memory / name).read_text().splitlines()) <= INDEX_MAX_LINES
    top = (memory / "INDEX.md").read_text()
    assert "- [INDEX_reference.md](INDEX_reference.md) — 300 entries" in top
    assert "entries 281–300" in (memory / "INDEX_reference.md").read_text()
    assert validate_vault(tmp_path) == []


def test_very_big_section_gets_a_second_level(tmp_path: Path) -> None:
    files = plan_vault(
        "a", [rec(f"m{i:05d}", kind="reference", title=f"E {i:05d} x") for i in range(140 * 141)]
    )
    assert "memory/INDEX_reference_l2_001.md" in files
    assert all(len(v.splitlines()) <= INDEX_MAX_LINES for k, v in files.items() if "INDEX" in k)


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("memory_id", " ", "memory_id"),
        ("kind", "wiki", "kind must be one of"),
        ("confidence", 1.5, "in [0, 1]"),
        ("confidence", float("nan"), "number"),
        ("confidence", True, "number"),
        ("captured", "2026-01-01", "captured must be a date"),
        ("last_seen", __import__("datetime").datetime(2026, 1, 1), "last_seen must be a date"),
        ("tags", "a,b", "tags must be"),
        ("sources", [""], "sources must be"),
        ("supersedes", "", "supersedes"),
        ("extra_frontmatter", {"name": "x"}, "render owns it"),
        ("extra_frontmatter", {"mnemolog_id": "x"}, "render owns it"),
        ("extra_frontmatter", {"promoted_to_persona": "soon"}, "must be a date"),
    ],
)
def test_bad_records_are_refused(field: str, value: object, fragment: str) -> None:
    with pytest.raises(BadInput, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        NoteRecord(**{**vars(rec("m")), field: value})


def test_duplicate_ids_and_bad_agent_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="share memory_id"):
        plan_vault("a", [rec("m"), rec("m")])
    for agent in ["", "_migrations", ".hidden", "../x", "a/b", "x" * 200]:
        with pytest.raises(UsageError):
            render_vault(tmp_path, agent, [])


def test_unrenderable_extra_values_are_refused_before_writing(tmp_path: Path) -> None:
    with pytest.raises(BadInput):
        render_vault(tmp_path, "a", [rec("m", extra_frontmatter={"x": float("inf")})])
    assert not (tmp_path / "a").exists()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records())
def test_any_records_render_a_valid_deterministic_vault(rs: list[NoteRecord]) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        render_vault(root, "agent", rs)
        assert errors(validate_vault(root)) == []
        first = tree(root)
        assert render_vault(root, "agent", rs).written == []
        shutil.rmtree(root / "agent")
        render_vault(root, "agent", list(reversed(rs)))
        assert tree(root) == first
        for rel in first:
            name = rel.rsplit("/", 1)[-1]
            if rel.startswith("agent/memory/") and not name.startswith("INDEX"):
                assert naming.parse_note_filename(name) is not None


def test_unwritable_target_is_a_storage_error(tmp_path: Path) -> None:
    from mnemolog.eventlog.errors import StorageError

    (tmp_path / "a").mkdir()
    (tmp_path / "a/memory").write_text("a file where a directory belongs")
    with pytest.raises(StorageError, match="cannot write"):
        render_vault(tmp_path, "a", [rec("m")], overwrite_unmanaged=True)


def test_oversized_manifest_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemolog.projections.vault import render as render_module

    render_vault(tmp_path, "a", [rec("m")])
    monkeypatch.setattr(render_module, "MANIFEST_MAX_BYTES", 10)
    with pytest.raises(BadInput, match="exceeds 10 bytes"):
        render_vault(tmp_path, "a", [rec("m")])


def test_a_hand_line_in_index_survives_a_render_that_adds_an_entry(tmp_path: Path) -> None:
    rs = [rec("a", kind="feedback", title="First rule")]
    render_vault(tmp_path, "ag", rs)
    index = tmp_path / "ag/memory/INDEX.md"
    hand = "My own note: see also [the handbook](https://example.org/handbook)\n"
    index.write_text(index.read_text().replace("## Reference\n", "## Reference\n" + hand))
    report = render_vault(tmp_path, "ag", [*rs, rec("b", kind="feedback", title="Second rule")])
    text = index.read_text()
    assert "ag/memory/INDEX.md" in report.written
    assert report.kept_edits == [] and report.conflicts == []
    assert "## Reference\n" + hand in text
    assert "- [`Second rule`](feedback_second_rule.md)" in text
    assert "- [`First rule`](feedback_first_rule.md)" in text
    assert validate_vault(tmp_path) == []
    # With nothing new, the next render leaves the file as it is.
    again = render_vault(tmp_path, "ag", [*rs, rec("b", kind="feedback", title="Second rule")])
    assert again.written == [] and index.read_text() == text


def test_an_edit_inside_an_index_region_is_kept_and_reported(tmp_path: Path) -> None:
    rs = [rec("a", kind="feedback", title="First rule")]
    render_vault(tmp_path, "ag", rs)
    index = tmp_path / "ag/memory/INDEX.md"
    edited = index.read_text().replace("— A hook", "— A hook (checked by hand)")
    index.write_text(edited)
    report = render_vault(tmp_path, "ag", [*rs, rec("b", kind="feedback", title="Second rule")])
    assert report.kept_edits == ["ag/memory/INDEX.md: index.feedback"]
    text = index.read_text()
    assert "(checked by hand)" in text
    # The edited region is the person's now: the new entry is not forced into it.
    assert "feedback_second_rule.md" not in text
    found = validate_vault(tmp_path)
    assert any(p.message.startswith("region index.feedback was edited by hand") for p in found)


def test_broken_index_markers_leave_the_file_alone(tmp_path: Path) -> None:
    rs = [rec("a", kind="feedback", title="First rule")]
    render_vault(tmp_path, "ag", rs)
    index = tmp_path / "ag/memory/INDEX.md"
    broken = index.read_text().replace("<!-- mnemolog:end index.user -->\n", "")
    index.write_text(broken)
    report = render_vault(tmp_path, "ag", [*rs, rec("b", kind="feedback", title="Second rule")])
    assert len(report.conflicts) == 1 and report.conflicts[0].startswith("ag/memory/INDEX.md: line ")
    assert index.read_text() == broken
    assert any(p.field == "regions" and p.severity == "error" for p in validate_vault(tmp_path))


def test_an_index_without_regions_is_replaced(tmp_path: Path) -> None:
    # An INDEX.md rendered before the entry lists were regions is mnemolog's whole file.
    rs = [rec("a", kind="feedback", title="First rule")]
    render_vault(tmp_path, "ag", rs)
    index = tmp_path / "ag/memory/INDEX.md"
    index.write_text(without_markers(index.read_text()))
    render_vault(tmp_path, "ag", rs)
    assert index.read_bytes() == plan_vault("ag", rs)["memory/INDEX.md"]


def test_hand_lines_survive_the_switch_to_sub_indexes(tmp_path: Path) -> None:
    few = [rec("a", kind="feedback", title="First rule")]
    render_vault(tmp_path, "ag", few)
    index = tmp_path / "ag/memory/INDEX.md"
    index.write_text(index.read_text() + "\nHand-written footer\n")
    many = few + [rec(f"r{i:03d}", kind="observation", title=f"Observation {i}") for i in range(200)]
    report = render_vault(tmp_path, "ag", many)
    text = index.read_text()
    assert report.kept_edits == []
    assert text.endswith("\nHand-written footer\n")
    assert "- [INDEX_reference.md](INDEX_reference.md) — 200 entries" in text
    assert len(text.splitlines()) <= INDEX_MAX_LINES
    assert errors(validate_vault(tmp_path)) == []


def test_wiki_index_keeps_hand_lines_and_a_deleted_region_is_reported(tmp_path: Path) -> None:
    page = rec("w1", kind="knowledge", title="Tax strategy", sources=["raw/tax.pdf"])
    render_vault(tmp_path, "ag", [page, rec("a", kind="feedback", title="First rule")])
    wiki = tmp_path / "ag/wiki/INDEX.md"
    wiki.write_text("Pages I still have to write: pensions.\n\n" + wiki.read_text())
    memory = tmp_path / "ag/memory/INDEX.md"
    text = memory.read_text()
    start = text.index("<!-- mnemolog:begin index.user ")
    end = text.index("<!-- mnemolog:end index.user -->\n") + len("<!-- mnemolog:end index.user -->\n")
    memory.write_text(text[:start] + text[end:])
    more = [page, rec("w2", kind="knowledge", title="Pensions", sources=["raw/p.pdf"])]
    report = render_vault(tmp_path, "ag", [*more, rec("a", kind="feedback", title="First rule"), rec("u")])
    assert wiki.read_text().startswith("Pages I still have to write: pensions.\n\n# ag — Wiki Index\n")
    assert "[`Pensions`](pensions_note.md)" in wiki.read_text()
    # Deleted, markers and all: not put back (as persona files), and the note it would list
    # is then unreferenced, which validation says.
    assert report.missing_regions == ["ag/memory/INDEX.md: index.user"]
    assert "index.user" not in memory.read_text()
    unlisted = [p for p in errors(validate_vault(tmp_path)) if p.field == "index"]
    assert [p.file for p in unlisted] == ["ag/memory/user_title_of_u.md"]
