"""validate_vault: every rule of docs/vault.md, every problem reported, deterministic order."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mnemolog.eventlog.errors import NotFound
from mnemolog.projections.vault.frontmatter import MAX_FILE_BYTES
from mnemolog.projections.vault.validate import (
    Problem,
    ValidationFailed,
    check_vault,
    errors,
    validate_vault,
)

GOOD = """---
schema_version: 1
name: {name}
description: One-line hook
type: {type}
captured: 2026-05-06
last_seen: 2026-05-07
sources:
- observation
confidence: high
---
Body.
"""

WIKI = """---
schema_version: 1
name: Debt payoff methods
description: Avalanche versus snowball
type: wiki_page
captured: 2026-05-06
last_seen: 2026-05-07
sources:
- raw/2026-04-22_cpa_meeting.md
provenance: distilled
confidence: medium
related:
- feedback_debt_priority_order.md
---
Body.
"""


def write(root: Path, rel: str, text: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    write(
        tmp_path,
        "caldwell/memory/feedback_debt_priority_order.md",
        GOOD.format(name="Debt priority order", type="feedback"),
    )
    write(tmp_path, "caldwell/memory/user_risk_tolerance.md", GOOD.format(name="Risk tolerance", type="user"))
    write(
        tmp_path,
        "caldwell/memory/INDEX.md",
        "# Caldwell — Memory Index\n\n## Critical Feedback\n"
        "- [`Debt priority order`](feedback_debt_priority_order.md) — hook\n\n"
        "## User Profile\n- `Risk tolerance` — hand-written entry, matched by title\n",
    )
    write(tmp_path, "caldwell/wiki/debt_payoff_methods.md", WIKI)
    write(tmp_path, "caldwell/wiki/INDEX.md", "# Wiki\n")
    write(tmp_path, "_migrations/README.md", "not an agent\n")
    write(tmp_path, "caldwell/.mnemolog-vault.json", "{}")
    return tmp_path


def test_a_valid_vault_has_no_problems(vault: Path) -> None:
    assert validate_vault(vault) == []
    assert check_vault(vault) == []


def test_missing_root_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        validate_vault(tmp_path / "nope")


def note(vault: Path, name: str, text: str) -> str:
    write(vault, f"caldwell/memory/{name}", text)
    index = vault / "caldwell/memory/INDEX.md"
    index.write_text(index.read_text() + f"- [`x`]({name}) — added\n")
    return f"caldwell/memory/{name}"


@pytest.mark.parametrize(
    ("text", "field", "fragment"),
    [
        (GOOD.replace("schema_version: 1\n", ""), "schema_version", "required field is missing"),
        (GOOD.replace("schema_version: 1", "schema_version: '1'"), "schema_version", "expected an integer"),
        (GOOD.replace("schema_version: 1", "schema_version: true"), "schema_version", "expected an integer"),
        (GOOD.replace("schema_version: 1", "schema_version: 2"), "schema_version", "expected 1, found 2"),
        (GOOD.replace("name: {name}\n", ""), "name", "required field is missing"),
        (GOOD.replace("{name}", "''"), "name", "non-empty"),
        (GOOD.replace("{name}", "x" * 81), "name", "at most 80"),
        (GOOD.replace("One-line hook", "y" * 201), "description", "at most 200"),
        (GOOD.replace("description: One-line hook", "description: [a]"), "description", "expected a string"),
        (GOOD.replace("{type}", "feedbacks"), "type", "expected one of user, feedback"),
        (GOOD.replace("{type}", "wiki_page"), "type", "expected one of"),
        (GOOD.replace("confidence: high", "confidence: certain"), "confidence", "expected one of high"),
        (GOOD.replace("confidence: high\n", ""), "confidence", "required field is missing"),
        (GOOD.replace("2026-05-06", "2026-02-30"), "captured", "real calendar date"),
        (GOOD.replace("2026-05-06", "2026-5-6"), "captured", "YYYY-MM-DD"),
        (GOOD.replace("2026-05-06", "'yesterday'"), "captured", "YYYY-MM-DD"),
        (GOOD.replace("last_seen: 2026-05-07\n", ""), "last_seen", "required field is missing"),
        (GOOD.replace("sources:\n- observation", "sources: []"), "sources", "non-empty list"),
        (GOOD.replace("sources:\n- observation", "sources: observation"), "sources", "list of strings"),
        (GOOD.replace("- observation", "- 3"), "sources[0]", "non-empty string"),
        (GOOD + "", "", ""),
    ],
)
def test_field_rules(vault: Path, text: str, field: str, fragment: str) -> None:
    rel = note(vault, "feedback_added_note.md", text.replace("{name}", "Added").replace("{type}", "feedback"))
    problems = validate_vault(vault)
    if not field:
        assert problems == []
        return
    assert any(p.file == rel and p.field == field and fragment in p.message for p in problems), problems


@pytest.mark.parametrize(
    ("extra", "field", "fragment"),
    [
        ("pinned: maybe\n", "pinned", "true or false"),
        ("expires_at: 2026-13-01\n", "expires_at", "real calendar date"),
        ("expires_at: 2026-02-29\n", "expires_at", "real calendar date"),
        ("tags: a\n", "tags", "list of strings"),
        ("supersedes: 7\n", "supersedes", "filename or null"),
        ("supersedes: feedback_gone.md\n", "supersedes", "does not exist"),
        ("superseded_by: ../other/x.md\n", "superseded_by", "bare filename"),
        ("supersedes: feedback_added_note.md\n", "supersedes", "itself"),
    ],
)
def test_optional_field_rules(vault: Path, extra: str, field: str, fragment: str) -> None:
    text = GOOD.format(name="Added", type="feedback").replace(
        "confidence: high\n", f"confidence: high\n{extra}"
    )
    rel = note(vault, "feedback_added_note.md", text)
    problems = validate_vault(vault)
    assert any(p.file == rel and p.field == field and fragment in p.message for p in problems), problems


def test_valid_optional_fields_and_pointers(vault: Path) -> None:
    old = GOOD.format(name="Old", type="decision").replace(
        "confidence: high\n", "confidence: high\nsuperseded_by: decision_2026-q3_income_target.md\n"
    )
    new = GOOD.format(name="New", type="decision").replace(
        "confidence: high\n",
        "confidence: high\npinned: true\nexpires_at: 2026-09-30\nsupersedes: decision_income_target.md\n"
        "superseded_by: null\ntags: [a, b]\ncustom_field: {x: 1}\n",
    )
    note(vault, "decision_income_target.md", old)
    note(vault, "decision_2026-q3_income_target.md", new)
    assert validate_vault(vault) == []


def test_asymmetric_supersedes_is_a_warning(vault: Path) -> None:
    old = GOOD.format(name="Old", type="decision").replace(
        "confidence: high\n", "confidence: high\nsuperseded_by: user_risk_tolerance.md\n"
    )
    new = GOOD.format(name="New", type="decision").replace(
        "confidence: high\n", "confidence: high\nsupersedes: decision_old_choice.md\n"
    )
    note(vault, "decision_old_choice.md", old)
    note(vault, "decision_new_choice.md", new)
    problems = validate_vault(vault)
    assert problems and not errors(problems)
    assert all(p.severity == "warning" for p in problems)
    assert check_vault(vault) == problems


def test_filename_rules(vault: Path) -> None:
    bad = note(vault, "Feedback-Bad.md", GOOD.format(name="Bad", type="feedback"))
    wrong_prefix = note(vault, "user_wrong_prefix.md", GOOD.format(name="Wrong", type="feedback"))
    problems = validate_vault(vault)
    assert Problem(bad, "filename", problems[0].message) in problems
    assert any(p.file == wrong_prefix and "disagrees with type" in p.message for p in problems)


def test_every_note_must_be_referenced_from_the_index(vault: Path) -> None:
    write(vault, "caldwell/memory/user_unlisted_note.md", GOOD.format(name="Unlisted", type="user"))
    problems = validate_vault(vault)
    assert problems == [
        Problem(
            "caldwell/memory/user_unlisted_note.md",
            "index",
            "not referenced from INDEX.md or a sub-index it links",
        )
    ]
    assert str(problems[0]) == (
        "caldwell/memory/user_unlisted_note.md: index: not referenced from INDEX.md or a sub-index it links"
    )


def test_sub_indexes_count_only_when_linked(vault: Path) -> None:
    write(vault, "caldwell/memory/user_listed_deeper.md", GOOD.format(name="Deeper", type="user"))
    write(vault, "caldwell/memory/INDEX_user.md", "- [`Deeper`](user_listed_deeper.md)\n")
    problems = validate_vault(vault)
    assert {(p.file, p.field, p.severity) for p in problems} == {
        ("caldwell/memory/user_listed_deeper.md", "index", "error"),
        ("caldwell/memory/INDEX_user.md", "file", "warning"),
    }
    index = vault / "caldwell/memory/INDEX.md"
    index.write_text(index.read_text() + "- [INDEX_user.md](INDEX_user.md)\n")
    assert validate_vault(vault) == []


def test_dangling_index_links_and_missing_index(vault: Path) -> None:
    index = vault / "caldwell/memory/INDEX.md"
    index.write_text(index.read_text() + "- [`Gone`](feedback_gone_note.md)\n")
    assert [(p.file, p.field) for p in validate_vault(vault)] == [("caldwell/memory/INDEX.md", "links")]
    index.unlink()
    problems = validate_vault(vault)
    assert ("caldwell/memory/INDEX.md", "file") in [(p.file, p.field) for p in problems]


def test_wiki_rules(vault: Path) -> None:
    bad = (
        WIKI.replace("type: wiki_page", "type: reference")
        .replace("provenance: distilled", "provenance: copied")
        .replace("raw/2026-04-22_cpa_meeting.md", "conversation_42")
        .replace("- feedback_debt_priority_order.md", "- missing_page.md\n- ../../../etc/passwd")
    )
    write(vault, "caldwell/wiki/Bad-Name.md", bad)
    problems = [p for p in validate_vault(vault) if p.file == "caldwell/wiki/Bad-Name.md"]
    assert {p.field for p in problems} == {
        "type",
        "provenance",
        "sources[0]",
        "related[0]",
        "related[1]",
        "filename",
    }


def test_wiki_requires_provenance_and_allows_cross_layer_related(vault: Path) -> None:
    write(vault, "caldwell/wiki/tax_strategy_2026.md", WIKI.replace("provenance: distilled\n", ""))
    problems = validate_vault(vault)
    assert [(p.file, p.field) for p in problems] == [("caldwell/wiki/tax_strategy_2026.md", "provenance")]


def test_all_problems_are_reported_sorted(vault: Path) -> None:
    write(vault, "caldwell/memory/user_b_note.md", "no frontmatter\n")
    write(vault, "caldwell/memory/user_a_note.md", GOOD.replace("{name}", "").replace("{type}", "nope"))
    write(vault, "zed/memory/user_c_note.md", GOOD.format(name="C", type="user"))
    problems = validate_vault(vault)
    assert problems == sorted(problems)
    files = {p.file for p in problems}
    assert {
        "caldwell/memory/user_a_note.md",
        "caldwell/memory/user_b_note.md",
        "zed/memory/INDEX.md",
    } <= files
    assert len([p for p in problems if p.file == "caldwell/memory/user_a_note.md"]) >= 3
    with pytest.raises(ValidationFailed) as info:
        check_vault(vault)
    assert info.value.exit_code == 65
    assert info.value.problems == problems
    assert "caldwell/memory/user_a_note.md" in info.value.message


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"---\nname: \xff\n---\n", "expected UTF-8"),
        (b"---\nname: x\n", "no closing"),
        (b"---\na: &x 1\nb: *x\n---\n", "anchors are not allowed"),
        (b"---\n- 1\n---\n", "expected a mapping"),
        (b"---\n---\n" + b"x" * (MAX_FILE_BYTES + 1), "limit is"),
        (b"", "expected '---' on line 1"),
    ],
)
def test_malformed_files_become_problems(vault: Path, content: bytes, fragment: str) -> None:
    rel = note(vault, "user_broken_note.md", "")
    write(vault, rel, content)
    problems = [p for p in validate_vault(vault) if p.file == rel]
    assert [p.field for p in problems] == ["frontmatter"]
    assert fragment in problems[0].message


def test_hostile_files(vault: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    outside = tmp_path_factory.mktemp("outside") / "secret.md"
    outside.write_text(GOOD.format(name="Secret", type="user"))
    os.symlink(outside, vault / "caldwell/memory/user_escape_link.md")
    os.mkfifo(vault / "caldwell/memory/user_fifo_note.md")
    write(vault, "caldwell/memory/INDEX_big.md", b"\xff\xfe")
    index = vault / "caldwell/memory/INDEX.md"
    index.write_text(index.read_text() + "- [big](INDEX_big.md)\n")
    problems = validate_vault(vault)

    def messages(rel: str) -> str:
        return " | ".join(p.message for p in problems if p.file == f"caldwell/memory/{rel}")

    assert "outside the vault" in messages("user_escape_link.md")
    assert "regular file" in messages("user_fifo_note.md")
    assert "expected UTF-8" in messages("INDEX_big.md")


def test_symlink_inside_the_vault_is_followed(vault: Path) -> None:
    os.symlink("user_risk_tolerance.md", vault / "caldwell/memory/user_alias_note.md")
    index = vault / "caldwell/memory/INDEX.md"
    index.write_text(index.read_text() + "- [`alias`](user_alias_note.md)\n")
    assert validate_vault(vault) == []


def test_oversized_index_is_a_problem(vault: Path) -> None:
    index = vault / "caldwell/memory/INDEX.md"
    index.write_bytes(index.read_bytes() + b"x" * MAX_FILE_BYTES)
    problems = validate_vault(vault)
    assert any(p.file == "caldwell/memory/INDEX.md" and "exceeds" in p.message for p in problems)
