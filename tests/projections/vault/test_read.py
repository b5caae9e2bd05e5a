"""read_vault: the inverse of render for our files, best effort for hand-written ones."""

from __future__ import annotations

import tempfile
from datetime import date
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from mnemolog.eventlog.errors import NotFound, UsageError
from mnemolog.projections.vault.read import read_vault
from mnemolog.projections.vault.render import NoteRecord, render_vault

from .strategies import records
from .test_render import rec, tree


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records())
def test_read_recovers_the_records_and_render_is_a_fixed_point(rs: list[NoteRecord]) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        render_vault(root / "one", "agent", rs)
        parsed = read_vault(root / "one", "agent")
        assert all(p.problems == () for p in parsed)
        back = [p.record for p in parsed]
        assert None not in back
        assert sorted(back, key=lambda r: r.memory_id) == sorted(rs, key=lambda r: r.memory_id)  # type: ignore[union-attr]
        render_vault(root / "two", "agent", [r for r in back if r is not None])
        assert tree(root / "one") == tree(root / "two")


def test_parsed_note_fields(tmp_path: Path) -> None:
    render_vault(tmp_path, "a", [rec("m", extra_frontmatter={"priority": 3})])
    [p] = read_vault(tmp_path, "a")
    assert p.rel == "a/memory/user_title_of_m.md"
    assert p.path == tmp_path / "a/memory/user_title_of_m.md"
    assert p.unit_type == "memory"
    assert p.body == "Body\n"
    assert p.frontmatter["priority"] == 3
    assert p.record is not None and p.record.extra_frontmatter == {"priority": 3}


def test_hand_written_files_are_read_best_effort(tmp_path: Path) -> None:
    memory = tmp_path / "a/memory"
    memory.mkdir(parents=True)
    (memory / "feedback_debt_order.md").write_text(
        "---\nschema_version: 1\nname: Debt order\ndescription: Avalanche first\ntype: feedback\n"
        "captured: 2026-05-06\nlast_seen: 2026-05-07\nsources: [observation]\nconfidence: low\n"
        "supersedes: feedback_old_order.md\npinned: false\npriority: high\n---\nPay the highest rate first.\n"
    )
    (memory / "feedback_old_order.md").write_text(
        "---\nname: Old order\ntype: feedback\nlast_seen: 2026-01-01\nconfidence: weird\n---\nold\n"
    )
    (memory / "user_broken_note.md").write_text("no frontmatter")
    (memory / "user_undated_note.md").write_text("---\nname: x\ntype: user\n---\n")
    (memory / "INDEX.md").write_text("# index\n")
    wiki = tmp_path / "a/wiki"
    wiki.mkdir()
    (wiki / "tax_strategy_2026.md").write_text(
        "---\nname: Tax\ntype: wiki_page\ncaptured: 2026-01-01\nlast_seen: 2026-01-01\n"
        "sources: [raw/tax.pdf]\nprovenance: distilled\nconfidence: high\nrelated: [x.md]\n---\nT\n"
    )
    parsed = {p.rel.rsplit("/", 1)[-1]: p for p in read_vault(tmp_path, "a")}
    assert set(parsed) == {
        "feedback_debt_order.md",
        "feedback_old_order.md",
        "user_broken_note.md",
        "user_undated_note.md",
        "tax_strategy_2026.md",
    }
    debt = parsed["feedback_debt_order.md"].record
    assert debt is not None
    assert debt.memory_id == "vault:a/memory/feedback_debt_order.md"
    assert (debt.kind, debt.confidence, debt.sources) == ("feedback", 0.3, ("observation",))
    assert debt.supersedes == "vault:a/memory/feedback_old_order.md"
    assert debt.extra_frontmatter == {"priority": "high"}
    old = parsed["feedback_old_order.md"]
    assert old.record is not None and old.record.captured == date(2026, 1, 1)
    assert old.record.confidence == 0.6
    assert any("confidence" in p for p in old.problems)
    assert parsed["user_broken_note.md"].record is None
    assert parsed["user_broken_note.md"].problems[0].startswith("frontmatter: expected '---'")
    assert parsed["user_undated_note.md"].record is None
    tax = parsed["tax_strategy_2026.md"]
    assert tax.unit_type == "wiki"
    assert tax.record is not None and tax.record.kind == "knowledge"
    assert tax.record.extra_frontmatter == {"related": ["x.md"]}


def test_missing_agent_and_bad_agent_name(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        read_vault(tmp_path, "ghost")
    with pytest.raises(UsageError):
        read_vault(tmp_path, "../etc")


def test_symlinks_leaving_the_vault_are_not_read(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    render_vault(tmp_path, "a", [rec("m")])
    secret = tmp_path_factory.mktemp("elsewhere") / "user_secret_note.md"
    secret.write_text(
        (tmp_path / "a/memory/user_title_of_m.md").read_text().replace("mnemolog_id: m", "mnemolog_id: s")
    )
    (tmp_path / "a/memory/user_secret_note.md").symlink_to(secret)
    parsed = {p.rel: p for p in read_vault(tmp_path, "a")}
    leak = parsed["a/memory/user_secret_note.md"]
    assert leak.record is None and leak.frontmatter == {}
    assert "outside the vault" in leak.problems[0]
    assert parsed["a/memory/user_title_of_m.md"].record == rec("m")


@pytest.mark.parametrize(
    "content",
    [b"---\nname: \xff\n---\n", b"---\nname: x", b"---\n---\n" + b"x" * (1 << 20), b"---\na: *x\n---\n"],
)
def test_malformed_truncated_oversized_hostile_files(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "a/memory").mkdir(parents=True)
    (tmp_path / "a/memory/user_bad_note.md").write_bytes(content)
    [p] = read_vault(tmp_path, "a")
    assert p.record is None and p.problems and p.problems[0].startswith("frontmatter: ")
