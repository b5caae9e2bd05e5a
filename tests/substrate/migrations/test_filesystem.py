"""What the filesystem backend does beyond the contract: snapshot files, safe restore, lock, audit."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import tarfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mnemolog.substrate.migrations import filesystem as fsmod
from mnemolog.substrate.migrations.filesystem import FilesystemMigrationBackend
from mnemolog.substrate.migrations.protocol import (
    MigrationError,
    MigrationLocked,
    MigrationSnapshotNotFound,
    MigrationSnapshotRef,
)
from mnemolog.substrate.migrations.runner import run_migration

from .contract import BUMP, script, standard_units
from .harness_filesystem import FilesystemHarness


@pytest.fixture
def h(tmp_path: Path) -> FilesystemHarness:
    harness = FilesystemHarness(tmp_path)
    harness.seed(standard_units())
    return harness


def fixed_clock() -> datetime:
    return datetime(2026, 8, 12, 14, 30, 0, tzinfo=UTC)


def test_snapshot_name_location_and_contents(h: FilesystemHarness) -> None:
    root = h.root
    (root / "README.md").write_text("vault readme")
    (root / ".git").mkdir()
    (root / ".git/HEAD").write_text("ref")
    (root / "caldwell/memory/__pycache__").mkdir()
    (root / "caldwell/memory/__pycache__/x.pyc").write_bytes(b"x")
    (root / "caldwell/memory/.user_risk_tolerance.md.123.tmp").write_text("partial")
    (root / "caldwell/.mnemolog-vault.json").write_text("{}")
    script(h, BUMP)
    b = FilesystemMigrationBackend(root, clock=fixed_clock)
    ref = b.snapshot(2)
    assert ref == MigrationSnapshotRef(
        backend_id="filesystem", snapshot_id="2026-08-12T143000_pre_v2_migration.tar.gz"
    )
    assert b.snapshot_location(ref) == str(root / "_migrations/snapshots" / ref.snapshot_id)
    with tarfile.open(b.snapshot_location(ref)) as tar:
        names = sorted(tar.getnames())
    assert names == [
        fsmod.SIDECAR,
        "README.md",
        "caldwell",
        "caldwell/.mnemolog-vault.json",
        "caldwell/memory",
        "caldwell/memory/feedback_debt_order.md",
        "caldwell/memory/user_risk_tolerance.md",
        "caldwell/wiki",
        "caldwell/wiki/tax_strategy.md",
    ]
    second = b.snapshot(2)
    assert second.snapshot_id == "2026-08-12T143000_pre_v2_migration_2.tar.gz"
    assert b.list_snapshots() == [second, ref]
    assert not list((root / "_migrations/snapshots").glob(".*"))


def test_restore_keeps_migrations_dir_and_dot_entries_live(h: FilesystemHarness) -> None:
    root = h.root
    (root / ".git").mkdir()
    (root / ".git/HEAD").write_text("old")
    script(h, BUMP)
    b = h.backend()
    ref = b.snapshot(2)
    (root / ".git/HEAD").write_text("new commit")
    (root / "_migrations/v1_to_v2.py").write_text(BUMP + "\n# fixed after the snapshot\n")
    b.record_event(run_migration(h.backend(2), 2, h.scripts_dir, dry_run=True, out=io.StringIO()))
    (root / "caldwell/memory/user_risk_tolerance.md").write_text("mangled")
    (root / "caldwell/memory/user_new_note.md").write_text("new")
    inode = os.stat(root / "_migrations/migration.jsonl").st_ino
    b.restore(ref)
    assert (root / ".git/HEAD").read_text() == "new commit"
    assert "fixed after the snapshot" in (root / "_migrations/v1_to_v2.py").read_text()
    assert os.stat(root / "_migrations/migration.jsonl").st_ino == inode
    assert len(b.audit_events()) == 2
    assert not (root / "caldwell/memory/user_new_note.md").exists()
    assert h.meta("user_risk_tolerance.md")["schema_version"] == 1
    assert [p.name for p in root.parent.iterdir() if p.name.startswith(".")] == []


def test_restore_without_renameat2_swaps_by_two_renames(
    h: FilesystemHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = h.backend()
    ref = b.snapshot(2)
    before = h.state()
    (h.root / "caldwell/wiki/tax_strategy.md").write_text("mangled")
    monkeypatch.setattr(fsmod, "exchange", lambda a, b: False)
    b.restore(ref)
    assert h.state() == before
    assert [p.name for p in h.root.parent.iterdir()] == ["agents"]


def test_symlinks_inside_are_kept_outside_refused(
    h: FilesystemHarness, tmp_path_factory: pytest.TempPathFactory
) -> None:
    memory = h.root / "caldwell/memory"
    os.symlink("user_risk_tolerance.md", memory / "user_alias_note.md")
    b = h.backend()
    ref = b.snapshot(2)
    (memory / "user_alias_note.md").unlink()
    b.restore(ref)
    assert os.readlink(memory / "user_alias_note.md") == "user_risk_tolerance.md"
    outside = tmp_path_factory.mktemp("outside")
    os.symlink(outside, memory / "escape")
    with pytest.raises(MigrationError, match="outside the vault"):
        b.snapshot(2)
    assert len(b.list_snapshots()) == 1


def test_special_files_refuse_the_snapshot(h: FilesystemHarness) -> None:
    os.mkfifo(h.root / "caldwell/memory/pipe")
    with pytest.raises(MigrationError, match="not a file, directory or symlink"):
        h.backend().snapshot(2)


def hostile(path: Path, build: str) -> None:
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("caldwell/memory/x.md")
        info.size = 1
        data = io.BytesIO(b"x")
        if build == "absolute":
            info.name = "/etc/evil.md"
        elif build == "dotdot":
            info.name = "caldwell/../../evil.md"
        elif build == "symlink":
            info.type, info.linkname, info.size = tarfile.SYMTYPE, "/etc/passwd", 0
        elif build == "hardlink":
            info.type, info.linkname, info.size = tarfile.LNKTYPE, "caldwell/memory/y.md", 0
        elif build == "device":
            info.type, info.size = tarfile.CHRTYPE, 0
        elif build == "sidecar":
            doc = json.dumps(
                {
                    "format": fsmod.SIDECAR_FORMAT,
                    "symlinks": {"caldwell/memory/l.md": "../../../../etc/passwd"},
                }
            ).encode()
            info = tarfile.TarInfo(fsmod.SIDECAR)
            info.size, data = len(doc), io.BytesIO(doc)
        elif build == "backslash":
            info.name = "caldwell\\..\\..\\evil.md"
        tar.addfile(info, data)


@pytest.mark.parametrize(
    "build", ["absolute", "dotdot", "symlink", "hardlink", "device", "sidecar", "backslash"]
)
def test_hostile_snapshots_are_refused_and_leave_the_vault_alone(h: FilesystemHarness, build: str) -> None:
    name = "2026-08-12T143000_pre_v2_migration.tar.gz"
    snapshots = h.root / "_migrations/snapshots"
    snapshots.mkdir(parents=True)
    hostile(snapshots / name, build)
    before = h.state()
    with pytest.raises(MigrationError):
        h.backend().restore(MigrationSnapshotRef(backend_id="filesystem", snapshot_id=name))
    assert h.state() == before
    assert sorted(p.name for p in h.root.parent.iterdir()) == ["agents"]
    assert not (h.root.parent.parent / "evil.md").exists()


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_snapshots_are_refused(h: FilesystemHarness, damage: str) -> None:
    b = h.backend()
    ref = b.snapshot(2)
    path = Path(b.snapshot_location(ref))
    data = path.read_bytes()
    path.write_bytes(
        {"truncate": data[: len(data) // 2], "garbage": b"\x1f\x8bnot gzip", "empty": b""}[damage]
    )
    before = h.state()
    with pytest.raises(MigrationError):
        b.restore(ref)
    assert h.state() == before


@pytest.mark.parametrize(
    "snapshot_id",
    ["../../etc/passwd", "x.tar.gz", "2026-08-12T143000_pre_v2_migration.tar.gz/../../x", ""],
)
def test_unknown_or_hostile_snapshot_ids(h: FilesystemHarness, snapshot_id: str) -> None:
    with pytest.raises(MigrationSnapshotNotFound) as info:
        h.backend().restore(MigrationSnapshotRef(backend_id="filesystem", snapshot_id=snapshot_id))
    assert info.value.exit_code == 2


def test_snapshot_of_another_backend_is_refused(h: FilesystemHarness) -> None:
    with pytest.raises(MigrationError, match="belongs to backend 'log'"):
        h.backend().restore(MigrationSnapshotRef(backend_id="log", snapshot_id="x"))


def test_lock_is_per_vault_and_crosses_processes(h: FilesystemHarness) -> None:
    b = h.backend()
    b.lock()
    with pytest.raises(MigrationLocked):
        b.lock()
    b.unlock()
    b.unlock()  # idempotent
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time\n"
            f"f = open({str(h.root / '_migrations/.lock')!r}, 'a')\n"
            "fcntl.flock(f, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(MigrationLocked) as info:
            h.backend().lock()
        assert info.value.exit_code == 6
    finally:
        holder.kill()
        holder.wait()
    h.backend().lock()


def test_audit_log_is_append_only_json_lines(h: FilesystemHarness) -> None:
    script(h, BUMP)
    first = run_migration(h.backend(2), 2, h.scripts_dir, dry_run=True, out=io.StringIO())
    second = run_migration(h.backend(2), 2, h.scripts_dir, dry_run=False, out=io.StringIO())
    lines = (h.root / "_migrations/migration.jsonl").read_text().splitlines()
    assert len(lines) == 2
    docs = [json.loads(line) for line in lines]
    assert [d["run_id"] for d in docs] == [first.run_id, second.run_id]
    assert set(docs[1]) == {
        "run_id",
        "action",
        "from_version",
        "to_version",
        "dry_run",
        "backend_id",
        "snapshot_ref",
        "units_touched",
        "units_skipped",
        "rolled_back",
        "error",
        "started_at",
        "finished_at",
        "scripts",
    }
    assert docs[1]["snapshot_ref"]["snapshot_id"].endswith("_pre_v2_migration.tar.gz")


def test_units_skip_indexes_dotfiles_and_outside_links(
    h: FilesystemHarness, tmp_path_factory: pytest.TempPathFactory
) -> None:
    memory = h.root / "caldwell/memory"
    (memory / "INDEX_user_001.md").write_text("# x\n")
    (memory / ".hidden.md").write_text("x")
    (memory / "notes.txt").write_text("x")
    (memory / "sub").mkdir()
    (memory / "sub/user_nested_note.md").write_text((memory / "user_risk_tolerance.md").read_text())
    (memory / ".versions").mkdir()
    (memory / ".versions/user_old.md").write_text("x")
    outside = tmp_path_factory.mktemp("o") / "user_outside.md"
    outside.write_text("x")
    os.symlink(outside, memory / "user_outside.md")
    (h.root / "_migrations/memory").mkdir(parents=True)
    (h.root / "_migrations/memory/user_x.md").write_text("x")
    ids = sorted(
        Path(u.unit_id).relative_to(h.root.resolve()).as_posix() for u in h.backend().enumerate_units()
    )
    assert ids == [
        "caldwell/memory/feedback_debt_order.md",
        "caldwell/memory/sub/user_nested_note.md",
        "caldwell/memory/user_risk_tolerance.md",
        "caldwell/wiki/tax_strategy.md",
    ]


def test_corrupt_vault_version_diagnostic(h: FilesystemHarness, caplog: pytest.LogCaptureFixture) -> None:
    for name, _, _ in standard_units():
        h.corrupt(name)
    b = h.backend()
    with caplog.at_level(logging.WARNING, logger="mnemolog.migrations"):
        assert b.read_schema_version() == 1
    assert "none of the 3 units" in caplog.text
    assert len(b.diagnostics) == 3
    assert b.vault_status()["units"] == 3


def test_must3_a_failed_write_leaves_the_unit_intact(
    h: FilesystemHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = h.root / "caldwell/memory/user_risk_tolerance.md"
    original = path.read_bytes()
    [unit] = [u for u in h.backend().enumerate_units() if u.unit_id.endswith("user_risk_tolerance.md")]

    def boom(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    meta = unit.read_frontmatter()
    meta["schema_version"] = 2
    with pytest.raises(OSError, match="disk full"):
        unit.write_frontmatter(meta)
    assert path.read_bytes() == original
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []


def test_write_frontmatter_refuses_unwritable_values(h: FilesystemHarness) -> None:
    [unit, *_] = h.backend().enumerate_units()
    with pytest.raises(MigrationError):
        unit.write_frontmatter(["not", "a", "dict"])  # type: ignore[arg-type]
    meta = unit.read_frontmatter()
    meta["when"] = datetime.now(UTC)
    with pytest.raises(Exception, match="datetime"):
        unit.write_frontmatter(meta)


def test_a_non_integer_target_is_refused_and_audited(h: FilesystemHarness) -> None:
    from mnemolog.substrate.migrations.protocol import MigrationTargetInvalid

    script(h, BUMP)
    with pytest.raises(MigrationTargetInvalid):
        run_migration(h.backend(), True, h.scripts_dir, dry_run=True, out=io.StringIO())  # type: ignore[arg-type]
    [event] = h.events()
    assert (event.from_version, event.to_version) == (-1, -1)


def test_malformed_audit_line_names_the_line(h: FilesystemHarness) -> None:
    script(h, BUMP)
    run_migration(h.backend(2), 2, h.scripts_dir, dry_run=True, out=io.StringIO())
    with open(h.root / "_migrations/migration.jsonl", "a") as fh:
        fh.write('{"run_id": "truncated"\n')
    from mnemolog.eventlog.errors import BadInput

    with pytest.raises(BadInput, match=r"migration.jsonl:2"):
        h.backend().audit_events()
