"""The MigrationBackend contract (requirements 1-8 of docs/vault.md) as one suite, run against every backend.

A backend takes part through a Harness: it seeds units into a fresh store,
makes backend instances over it, reads the store's state and audit events, and
can write the Python that builds the same backend in a child process (for the
SIGKILL test). Register a factory with `register_harness(name, factory)` in a
`harness_<name>.py` module beside this one; conftest.py imports those modules
and parametrizes the suite over them.
"""

from __future__ import annotations

import io
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path
from typing import Any, Protocol

import pytest

from mnemolog.substrate.migrations.protocol import (
    MigratableUnit,
    MigrationAuditFailed,
    MigrationBackend,
    MigrationCapabilities,
    MigrationEvent,
    MigrationLocked,
    MigrationRollbackUnavailable,
    MigrationScript,
    MigrationScriptError,
    MigrationSnapshotNotFound,
    MigrationSnapshotRef,
    MigrationTargetInvalid,
    NothingToMigrate,
    UnitType,
    UnitValidator,
)
from mnemolog.substrate.migrations.runner import run_migration

UnitSpec = tuple[str, UnitType, dict[str, Any]]


class Harness(Protocol):
    name: str
    scripts_dir: Path

    def backend(self, current_schema_version: int = 1) -> MigrationBackend:
        """A new backend instance over the store whose validator accepts that version only."""
        ...

    def seed(self, units: Sequence[UnitSpec]) -> None: ...

    def corrupt(self, name: str) -> None:
        """Make one unit unreadable (its frontmatter cannot be parsed)."""
        ...

    def add_alias(self, name: str) -> None:
        """A second route (symlink, join row) to the same physical unit."""
        ...

    def add_index(self) -> None:
        """The non-unit INDEX sidecar(s) the store keeps beside its units."""
        ...

    def state(self) -> dict[str, Any]:
        """Everything a restore must bring back, comparable with ==."""
        ...

    def meta(self, name: str) -> dict[str, Any]: ...

    def label(self, name: str) -> str:
        """How messages name the unit seeded as `name` (its unit_id, or part of it)."""
        ...

    def events(self) -> list[MigrationEvent]: ...

    def child_backend_code(self) -> str:
        """Python source that binds `backend` to a backend over this store (current v2)."""
        ...


HarnessFactory = Callable[[Path], Harness]
HARNESSES: dict[str, HarnessFactory] = {}


def register_harness(name: str, factory: HarnessFactory) -> None:
    HARNESSES[name] = factory


def note_meta(kind: str, name: str, version: int = 1) -> dict[str, Any]:
    return {
        "schema_version": version,
        "name": name,
        "description": f"hook of {name}",
        "type": kind,
        "captured": date(2026, 5, 6),
        "last_seen": date(2026, 5, 7),
        "sources": ["observation"],
        "confidence": "high",
        "custom_field": {"kept": True},
    }


def wiki_meta(name: str, version: int = 1) -> dict[str, Any]:
    meta = note_meta("wiki_page", name, version)
    meta.update(sources=["raw/doc.pdf"], provenance="distilled", related=[])
    return meta


def standard_units(version: int = 1) -> list[UnitSpec]:
    return [
        ("user_risk_tolerance.md", "memory", note_meta("user", "Risk tolerance", version)),
        ("feedback_debt_order.md", "memory", note_meta("feedback", "Debt order", version)),
        ("tax_strategy.md", "wiki", wiki_meta("Tax strategy", version)),
    ]


BUMP = """
FROM_VERSION = 1
TO_VERSION = 2

def applies_to(unit):
    return unit.read_frontmatter().get("schema_version") == 1

def migrate(unit):
    meta = unit.read_frontmatter()
    meta["schema_version"] = 2
    meta["migrated"] = True
    unit.write_frontmatter(meta)
    return {"changes": ["schema_version 1 -> 2"]}
"""

# touches feedback, skips user by a falsy return (claiming it!), skips wiki in applies_to.
PICKY = """
FROM_VERSION = 1
TO_VERSION = 2

def applies_to(unit):
    return unit.unit_type == "memory"

def migrate(unit):
    meta = unit.read_frontmatter()
    if meta["type"] == "user":
        return {}
    meta["schema_version"] = 2
    unit.write_frontmatter(meta)
    return {"changes": ["bumped"]}
"""

SKIPS_WIKI = BUMP.replace(
    'return unit.read_frontmatter().get("schema_version") == 1',
    'return unit.unit_type == "memory"',
)

RAISES_ON_SECOND = BUMP.replace(
    "def migrate(unit):\n",
    "CALLS = []\n\ndef migrate(unit):\n"
    "    CALLS.append(unit.unit_id)\n"
    "    if len(CALLS) == 2:\n"
    "        raise RuntimeError('disk on fire')\n",
)

SLEEPS_ON_SECOND = BUMP.replace(
    "def migrate(unit):\n",
    "import time\nCALLS = []\n\ndef migrate(unit):\n"
    "    CALLS.append(unit.unit_id)\n"
    "    if len(CALLS) == 2:\n"
    "        print('APPLIED', CALLS[0], flush=True)\n"
    "        time.sleep(120)\n",
)

INTERRUPTS = BUMP.replace('    return {"changes"', '    raise KeyboardInterrupt\n    return {"changes"')


class Delegating:
    """A backend that forwards everything to another; tests override single methods."""

    def __init__(self, inner: MigrationBackend) -> None:
        self.inner = inner

    @property
    def backend_id(self) -> str:
        return self.inner.backend_id

    def capabilities(self) -> MigrationCapabilities:
        return self.inner.capabilities()

    def read_schema_version(self) -> int:
        return self.inner.read_schema_version()

    def enumerate_units(self, dry_run: bool = False) -> Sequence[MigratableUnit]:
        return self.inner.enumerate_units(dry_run=dry_run)

    def snapshot(self, target_version: int) -> MigrationSnapshotRef:
        return self.inner.snapshot(target_version)

    def snapshot_location(self, ref: MigrationSnapshotRef) -> str:
        return self.inner.snapshot_location(ref)

    def restore(self, ref: MigrationSnapshotRef) -> None:
        self.inner.restore(ref)

    def restore_and_audit(self, ref: MigrationSnapshotRef) -> MigrationEvent:
        return self.inner.restore_and_audit(ref)

    def apply_unit(self, unit: MigratableUnit, script: MigrationScript) -> dict[str, Any]:
        return self.inner.apply_unit(unit, script)

    def validator(self) -> UnitValidator:
        return self.inner.validator()

    def record_event(self, event: MigrationEvent) -> None:
        self.inner.record_event(event)

    def list_snapshots(self) -> list[MigrationSnapshotRef]:
        return self.inner.list_snapshots()

    def lock(self) -> None:
        self.inner.lock()

    def unlock(self) -> None:
        self.inner.unlock()


class NoRollback(Delegating):
    def capabilities(self) -> MigrationCapabilities:
        return MigrationCapabilities(supports_transactional_rollback=False)


class BadUnlock(Delegating):
    def unlock(self) -> None:
        self.inner.unlock()
        raise OSError("unlock exploded")


class NoAudit(Delegating):
    def record_event(self, event: MigrationEvent) -> None:
        raise OSError("audit store is read-only")


class WatchingOut(io.StringIO):
    """Records the store's state at the first write to stdout."""

    def __init__(self, harness: Harness) -> None:
        super().__init__()
        self.harness = harness
        self.state_at_first_write: dict[str, Any] | None = None

    def write(self, s: str) -> int:
        if self.state_at_first_write is None:
            self.state_at_first_write = self.harness.state()
        return super().write(s)


def script(h: Harness, source: str, name: str = "v1_to_v2.py") -> None:
    h.scripts_dir.mkdir(parents=True, exist_ok=True)
    (h.scripts_dir / name).write_text(textwrap.dedent(source))


_REF_RE = re.compile(r"Snapshot ref: backend_id=(\S+) snapshot_id=(\S+)")


def printed_ref(text: str) -> MigrationSnapshotRef:
    m = _REF_RE.search(text)
    assert m, f"no snapshot ref printed in {text!r}"
    return MigrationSnapshotRef(backend_id=m[1], snapshot_id=m[2])


class MigrationBackendContract:
    """requirements 1-8. Every test gets a fresh store through the `harness` fixture."""

    def test_must6_backend_id_is_stable_lowercase(self, harness: Harness) -> None:
        b = harness.backend()
        ids = {b.backend_id for _ in range(3)} | {harness.backend().backend_id}
        assert len(ids) == 1
        (only,) = ids
        assert only and only == only.lower() and only.strip() == only

    def test_must1_version_is_the_minimum_over_all_units(self, harness: Harness) -> None:
        assert harness.backend().read_schema_version() == 1  # empty store: current
        units = standard_units(version=3)
        units[1] = (units[1][0], units[1][1], {**units[1][2], "schema_version": 2})
        harness.seed(units)
        assert harness.backend(current_schema_version=3).read_schema_version() == 2

    def test_must1_all_corrupt_store_reports_current(self, harness: Harness) -> None:
        harness.seed(standard_units())
        for name, _, _ in standard_units():
            harness.corrupt(name)
        before = harness.state()
        assert harness.backend(current_schema_version=4).read_schema_version() == 4
        assert harness.state() == before  # read-only

    def test_must2_each_unit_once_typed_without_index(self, harness: Harness) -> None:
        harness.seed(standard_units())
        harness.add_alias("user_risk_tolerance.md")
        harness.add_index()
        units = harness.backend().enumerate_units()
        assert len(units) == 3
        assert len({u.unit_id for u in units}) == 3
        assert sorted(u.unit_type for u in units) == ["memory", "memory", "wiki"]
        assert all(not u.dry_run for u in units)
        assert all(u.dry_run for u in harness.backend().enumerate_units(dry_run=True))

    def test_unit_handle_reads_copies_and_dry_run_writes_nothing(self, harness: Harness) -> None:
        harness.seed(standard_units())
        before = harness.state()
        [unit, *_] = harness.backend().enumerate_units(dry_run=True)
        meta = unit.read_frontmatter()
        meta["schema_version"] = 99
        assert unit.read_frontmatter()["schema_version"] == 1
        unit.write_frontmatter(meta)
        assert harness.state() == before

    def test_must3_write_keeps_body_and_unknown_fields(self, harness: Harness) -> None:
        harness.seed(standard_units())
        [unit] = [u for u in harness.backend().enumerate_units() if u.unit_type == "wiki"]
        meta = unit.read_frontmatter()
        meta["schema_version"] = 2
        unit.write_frontmatter(meta)
        assert unit.read_frontmatter() == meta
        assert harness.meta("tax_strategy.md")["custom_field"] == {"kept": True}

    def test_dry_run_tallies_on_raw_return_and_writes_nothing(self, harness: Harness) -> None:
        harness.seed(standard_units())
        script(harness, PICKY)
        before = harness.state()
        out = io.StringIO()
        event = run_migration(harness.backend(2), 2, harness.scripts_dir, dry_run=True, out=out)
        assert (event.units_touched, event.units_skipped) == (1, 2)
        assert event.dry_run and event.ok and event.outcome == "completed"
        assert event.snapshot_ref is None and out.getvalue() == ""
        assert (event.from_version, event.to_version, event.scripts) == (1, 2, ("v1_to_v2.py",))
        assert harness.state() == before
        assert harness.events() == [event]

    def test_real_run_snapshots_prints_before_writing_and_completes(self, harness: Harness) -> None:
        harness.seed(standard_units())
        script(harness, BUMP)
        before = harness.state()
        out = WatchingOut(harness)
        backend = harness.backend(current_schema_version=2)
        event = run_migration(backend, 2, harness.scripts_dir, dry_run=False, out=out)
        assert event.outcome == "completed", event.error
        assert (event.units_touched, event.units_skipped, event.rolled_back) == (3, 0, False)
        assert out.state_at_first_write == before
        assert printed_ref(out.getvalue()) == event.snapshot_ref
        assert event.snapshot_ref in backend.list_snapshots()
        assert all(harness.meta(n)["schema_version"] == 2 for n, _, _ in standard_units())
        assert backend.read_schema_version() == 2
        assert harness.events() == [event]
        # The snapshot is a real checkpoint: restoring it brings v1 back.
        assert event.snapshot_ref is not None
        backend.restore(event.snapshot_ref)
        assert harness.state() == before

    def test_target_the_code_has_not_adopted_validates_and_rolls_back(self, harness: Harness) -> None:
        harness.seed(standard_units())
        script(harness, BUMP)
        before = harness.state()
        event = run_migration(
            harness.backend(current_schema_version=1),
            2,
            harness.scripts_dir,
            dry_run=False,
            out=io.StringIO(),
        )
        assert event.outcome == "rolled_back"
        assert "validation failed" in event.error
        assert harness.state() == before

    def test_must7_claimed_unit_not_bumped_rolls_back_and_is_audited(self, harness: Harness) -> None:
        harness.seed(standard_units())
        script(harness, PICKY)
        before = harness.state()
        event = run_migration(harness.backend(2), 2, harness.scripts_dir, dry_run=False, out=io.StringIO())
        assert event.rolled_back and event.outcome == "rolled_back"
        assert "MigrationVersionNotBumped" in event.error
        assert "v1_to_v2.py" in event.error and harness.label("user_risk_tolerance.md") in event.error
        assert harness.state() == before
        assert harness.events() == [event]

    def test_validation_of_every_unit_catches_a_skipped_one(self, harness: Harness) -> None:
        harness.seed(standard_units())
        script(harness, SKIPS_WIKI)
        before = harness.state()
        event = run_migration(harness.backend(2), 2, harness.scripts_dir, dry_run=False, out=io.StringIO())
        assert event.outcome == "rolled_back"
        assert "MigrationValidationFailed" in event.error and harness.label("tax_strategy.md") in event.error
        assert event.units_touched == 2 and event.units_skipped == 1
        assert harness.state() == before

    def test_exception_mid_apply_rolls_back(self, harness: Harness) -> None:
        harness.seed(standard_units())
        script(harness, RAISES_ON_SECOND)
        before = harness.state()
        event = run_migration(harness.backend(2), 2, harness.scripts_dir, dry_run=False, out=io.StringIO())
        assert event.outcome == "rolled_back"
        assert "disk on fire" in event.error
        assert harness.state() == before

    def test_interrupt_mid_apply_rolls_back_is_audited_and_reraised(self, harness: Harness) -> None:
        harness.seed(standard_units())
        script(harness, INTERRUPTS)
        before = harness.state()
        with pytest.raises(KeyboardInterrupt):
            run_migration(harness.backend(2), 2, harness.scripts_dir, dry_run=False, out=io.StringIO())
        assert harness.state() == before
        [event] = harness.events()
        assert event.rolled_back and "KeyboardInterrupt" in event.error

    def test_must5_no_rollback_backend_refuses_real_runs_only(self, harness: Harness) -> None:
        harness.seed(standard_units())
        script(harness, BUMP)
        before = harness.state()
        backend = NoRollback(harness.backend(2))
        with pytest.raises(MigrationRollbackUnavailable) as info:
            run_migration(backend, 2, harness.scripts_dir, dry_run=False, out=io.StringIO())
        assert info.value.exit_code == 5
        assert harness.state() == before
        dry = run_migration(backend, 2, harness.scripts_dir, dry_run=True, out=io.StringIO())
        assert dry.ok and dry.units_touched == 3
        refused, done = harness.events()
        assert (refused.from_version, refused.to_version, refused.outcome) == (-1, 2, "refused")
        assert "MigrationRollbackUnavailable" in refused.error
        assert done == dry

    @pytest.mark.parametrize(
        ("scripts", "target", "error", "exit_code"),
        [
            ({}, 2, MigrationScriptError, 65),
            (
                {"v2_to_v3.py": BUMP.replace("= 1\nTO", "= 2\nTO").replace("= 2\n\ndef", "= 3\n\ndef")},
                3,
                MigrationScriptError,
                65,
            ),
            ({"v1_to_v2.py": "this is not python ("}, 2, MigrationScriptError, 65),
            ({"v1_to_v3.py": BUMP}, 3, MigrationScriptError, 65),
            ({"v1_to_v2.py": BUMP}, 0, MigrationTargetInvalid, 64),
            ({"v1_to_v2.py": BUMP}, 1, NothingToMigrate, 1),
        ],
    )
    def test_pre_plan_refusals_are_audited_with_sentinel(
        self, harness: Harness, scripts: dict[str, str], target: int, error: type[Exception], exit_code: int
    ) -> None:
        harness.seed(standard_units())
        for name, source in scripts.items():
            script(harness, source, name)
        before = harness.state()
        with pytest.raises(error) as info:
            run_migration(harness.backend(3), target, harness.scripts_dir, dry_run=False, out=io.StringIO())
        assert getattr(info.value, "exit_code", None) == exit_code
        [event] = harness.events()
        assert (event.from_version, event.to_version) == (-1, target)
        assert type(info.value).__name__ in event.error and event.outcome == "refused"
        assert harness.state() == before

    def test_concurrent_second_migration_is_locked_out_and_audited(self, harness: Harness) -> None:
        harness.seed(standard_units())
        script(harness, BUMP)
        before = harness.state()
        first = harness.backend(2)
        first.lock()
        try:
            with pytest.raises(MigrationLocked, match="Another migration is already running"):
                run_migration(harness.backend(2), 2, harness.scripts_dir, dry_run=False, out=io.StringIO())
        finally:
            first.unlock()
        [event] = harness.events()
        assert event.from_version == 1 and event.outcome == "refused"
        assert "MigrationLocked" in event.error
        assert harness.state() == before
        # Released: the next run goes through.
        assert run_migration(harness.backend(2), 2, harness.scripts_dir, dry_run=False, out=io.StringIO()).ok

    def test_audit_survives_a_failing_unlock(self, harness: Harness) -> None:
        harness.seed(standard_units())
        script(harness, BUMP)
        backend = BadUnlock(harness.backend(2))
        event = run_migration(backend, 2, harness.scripts_dir, dry_run=True, out=io.StringIO())
        assert event.ok
        assert harness.events() == [event]

    def test_failure_to_store_the_audit_record_is_loud(self, harness: Harness) -> None:
        harness.seed(standard_units())
        script(harness, BUMP)
        with pytest.raises(MigrationAuditFailed):
            run_migration(
                NoAudit(harness.backend(2)), 2, harness.scripts_dir, dry_run=True, out=io.StringIO()
            )

    def test_manual_rollback_is_audited_both_ways(self, harness: Harness) -> None:
        harness.seed(standard_units())
        script(harness, BUMP)
        before = harness.state()
        backend = harness.backend(2)
        run = run_migration(backend, 2, harness.scripts_dir, dry_run=False, out=io.StringIO())
        assert run.ok and run.snapshot_ref is not None
        event = backend.restore_and_audit(run.snapshot_ref)
        assert (event.action, event.rolled_back, event.from_version, event.to_version) == (
            "rollback",
            True,
            2,
            1,
        )
        assert harness.state() == before
        bogus = MigrationSnapshotRef(
            backend_id=backend.backend_id, snapshot_id="2000-01-01T000000_pre_v9_migration.tar.gz"
        )
        with pytest.raises(MigrationSnapshotNotFound):
            backend.restore_and_audit(bogus)
        failed = harness.events()[-1]
        assert (failed.action, failed.rolled_back, failed.outcome) == ("rollback", False, "failed")
        assert "manual rollback failed" in failed.error
        assert [e.run_id for e in harness.events()] == [run.run_id, event.run_id, failed.run_id]

    def test_migration_killed_mid_apply_is_restored_from_the_printed_snapshot(self, harness: Harness) -> None:
        harness.seed(standard_units())
        script(harness, SLEEPS_ON_SECOND)
        before = harness.state()
        code = harness.child_backend_code() + textwrap.dedent(
            """
            import sys
            from pathlib import Path
            from mnemolog.substrate.migrations.runner import run_migration
            run_migration(backend, 2, Path(sys.argv[1]), dry_run=False)
            """
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(harness.scripts_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        raw = b""
        deadline = time.monotonic() + 60
        try:
            # Unbuffered reads: a buffered readline would sit on lines already received.
            while b"APPLIED" not in raw:
                assert time.monotonic() < deadline, f"child never applied: {raw!r}"
                ready, _, _ = select.select([fd], [], [], 1.0)
                if ready:
                    chunk = os.read(fd, 4096)
                    assert chunk, f"child exited early: {raw!r}"
                    raw += chunk
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=30)
        printed = raw.decode()
        assert proc.returncode == -signal.SIGKILL
        assert printed.index("Snapshot created") < printed.index("APPLIED")
        assert harness.state() != before  # half-migrated
        ref = printed_ref(printed)
        event = harness.backend(2).restore_and_audit(ref)
        assert event.rolled_back and event.snapshot_ref == ref
        assert harness.state() == before
        # The dead run's lock went with it.
        script(harness, BUMP)
        assert run_migration(harness.backend(2), 2, harness.scripts_dir, dry_run=False, out=io.StringIO()).ok
