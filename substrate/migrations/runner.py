"""The backend-neutral migration runner: run_migration() and the audited manual rollback.

run_migration() follows this order exactly (the requirements are docs/vault.md's):

1. pre-plan checks (requirement 5 fail-close on a backend without rollback, for real
   runs only; the scripts load; the chain from the current version exists).
   A refusal here is audited with from_version = -1;
2. plan from a read-only probe (read_schema_version, requirement 1);
3. the store-wide lock; a busy lock is refused (MigrationLocked) and audited
   with the resolved from_version;
4. the authoritative enumeration, under the lock (requirement 2);
5. real runs: snapshot (requirement 4), its ref printed to `out` at once, before any
   write;
6. apply every script to every unit through backend.apply_unit, which checks
   the bump (requirement 7); a dry run tallies skips on the raw return value;
7. real runs: the backend's validator on every unit, not only those touched;
8. on a validation failure or any exception during 6-7: restore the snapshot;
9. release the lock (a failure there is logged and cannot suppress 10);
10. record one MigrationEvent on every exit path (requirement 8).

Refusals (steps 1-5) raise after they are audited. A run that reached step 6
returns its event, whose `error`/`outcome` say whether it completed or was
rolled back; an interrupt (KeyboardInterrupt) is rolled back, audited, then
re-raised. A failure to store the audit record raises MigrationAuditFailed.
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from mnemolog.eventlog.errors import MnemologError
from mnemolog.substrate.migrations.protocol import (
    UNKNOWN_VERSION,
    MigrationAuditFailed,
    MigrationBackend,
    MigrationError,
    MigrationEvent,
    MigrationRollbackUnavailable,
    MigrationSnapshotRef,
    MigrationValidationFailed,
)
from mnemolog.substrate.migrations.scripts import build_chain, load_scripts

log = logging.getLogger("mnemolog.migrations")
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The current time, timezone-aware (UTC): the runner's default clock."""
    return datetime.now(UTC)


@dataclass
class _Run:
    from_version: int = UNKNOWN_VERSION
    scripts: tuple[str, ...] = ()
    snapshot: MigrationSnapshotRef | None = None
    touched: int = 0
    skipped: int = 0
    rolled_back: bool = False
    errors: list[str] = field(default_factory=list)
    failure: BaseException | None = None

    def failed(self, exc: BaseException, description: str | None = None) -> None:
        self.errors.append(description or _describe(exc))
        if self.failure is None:
            self.failure = exc


class MigrationFailed(MigrationError):
    """A run that was rolled back or left failed; its exit code is that of what made it fail."""

    slug = "migration_failed"

    def __init__(self, event: MigrationEvent) -> None:
        cause = event.failure
        super().__init__(
            f"migration {event.from_version} -> {event.to_version} {event.outcome}: {event.error}",
            run_id=event.run_id,
            outcome=event.outcome,
            rolled_back=event.rolled_back,
            cause=cause.slug if isinstance(cause, MnemologError) else type(cause).__name__ if cause else None,
        )
        # The class of the failure decides, as everywhere else (a bad script is 65).
        self.exit_code = cause.exit_code if isinstance(cause, MnemologError) else MigrationError.exit_code  # type: ignore[misc]


def check_run(event: MigrationEvent) -> MigrationEvent:
    """The event of a run that completed; MigrationFailed for one that did not."""
    if not event.ok:
        raise MigrationFailed(event)
    return event


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _record(
    backend: MigrationBackend, event: MigrationEvent, pending: BaseException | None
) -> BaseException | None:
    """Store the event; return the exception the caller should raise, if any."""
    try:
        backend.record_event(event)
    except Exception as exc:
        log.error("could not record migration audit event %s: %s", event.run_id, exc)
        if pending is None:
            failure = MigrationAuditFailed(
                f"the migration ran but its audit record could not be stored: {exc}",
                run_id=event.run_id,
            )
            failure.__cause__ = exc
            return failure
    return pending


def _release(backend: MigrationBackend, run_id: str) -> None:
    try:
        backend.unlock()
    except Exception as exc:
        log.warning("migration lock release failed (run %s): %s", run_id, exc)


def run_migration(
    backend: MigrationBackend,
    target_version: int,
    scripts_dir: Path,
    *,
    dry_run: bool,
    out: TextIO | None = None,
    clock: Clock = utc_now,
    on_snapshot: Callable[[MigrationSnapshotRef, str], None] | None = None,
) -> MigrationEvent:
    """Migrate `backend` to `target_version` with the scripts in `scripts_dir`.

    ``on_snapshot`` is called with the snapshot's ref and location as soon as
    it exists, before any unit is written (the command line's `--json` puts it
    on stdout there, as the text lines go to `out`).
    """
    stream = out if out is not None else sys.stdout
    run_id = uuid.uuid4().hex
    started = clock()
    run = _Run()
    pending: BaseException | None = None
    try:
        _migrate(backend, target_version, scripts_dir, dry_run, stream, run, run_id, on_snapshot)
    except BaseException as exc:
        if not run.errors:
            run.failed(exc)
        pending = exc
    event = MigrationEvent(
        run_id=run_id,
        from_version=run.from_version,
        to_version=target_version if type(target_version) is int else UNKNOWN_VERSION,
        dry_run=dry_run,
        backend_id=backend.backend_id,
        snapshot_ref=run.snapshot,
        units_touched=run.touched,
        units_skipped=run.skipped,
        rolled_back=run.rolled_back,
        error="; ".join(run.errors),
        started_at=started,
        finished_at=clock(),
        scripts=run.scripts,
    )
    event._failure = run.failure
    pending = _record(backend, event, pending)
    if pending is not None:
        raise pending
    return event


def _migrate(
    backend: MigrationBackend,
    target: int,
    scripts_dir: Path,
    dry_run: bool,
    out: TextIO,
    run: _Run,
    run_id: str,
    on_snapshot: Callable[[MigrationSnapshotRef, str], None] | None = None,
) -> None:
    if not dry_run and not backend.capabilities().supports_transactional_rollback:
        raise MigrationRollbackUnavailable(
            f"backend {backend.backend_id!r} cannot roll back "
            "(supports_transactional_rollback is false); refusing a real migration. "
            "A dry run is allowed.",
            backend_id=backend.backend_id,
        )
    scripts = load_scripts(scripts_dir)
    current = backend.read_schema_version()
    chain = build_chain(scripts, current, target, scripts_dir)
    run.from_version = current
    run.scripts = tuple(s.name for s in chain)

    backend.lock()
    try:
        units = backend.enumerate_units(dry_run=dry_run)
        if not dry_run:
            run.snapshot = backend.snapshot(target)
            print(f"Snapshot created: {backend.snapshot_location(run.snapshot)}", file=out)
            print(
                f"Snapshot ref: backend_id={run.snapshot.backend_id} snapshot_id={run.snapshot.snapshot_id}",
                file=out,
            )
            where = "--vault <agents root> " if run.snapshot.backend_id == "filesystem" else ""
            print(
                "If this migration is interrupted, run: "
                f"mnemolog migrate rollback {where}{run.snapshot.snapshot_id}",
                file=out,
                flush=True,
            )
            if on_snapshot is not None:
                on_snapshot(run.snapshot, backend.snapshot_location(run.snapshot))
        try:
            for script in chain:
                for unit in units:
                    if backend.apply_unit(unit, script):
                        run.touched += 1
                    else:
                        run.skipped += 1
            if not dry_run:
                check = backend.validator()
                failures = [f"{unit.unit_id}: {problem}" for unit in units for problem in check(unit, target)]
                if failures:
                    shown = "; ".join(failures[:5])
                    raise MigrationValidationFailed(
                        f"post-migration validation failed ({len(failures)} problem(s)): {shown}",
                        problems=failures[:100],
                    )
        except BaseException as exc:
            run.failed(exc)
            if run.snapshot is not None:
                try:
                    backend.restore(run.snapshot)
                    run.rolled_back = True
                except Exception as restore_exc:
                    run.errors.append(
                        f"rollback from {run.snapshot.snapshot_id} FAILED ({_describe(restore_exc)}); "
                        "the store may be half-migrated: restore that snapshot by hand"
                    )
            if not isinstance(exc, Exception):
                raise
    finally:
        _release(backend, run_id)


def audited_restore(
    backend: MigrationBackend, ref: MigrationSnapshotRef, *, clock: Clock = utc_now
) -> MigrationEvent:
    """A manual rollback: lock, restore, unlock, and one audit event whatever happened.

    The body of every backend's restore_and_audit(). A failed rollback is
    recorded (rolled_back false, the error) and then raised.
    """
    run_id = uuid.uuid4().hex
    started = clock()
    pending: BaseException | None = None
    errors: list[str] = []
    rolled_back = False
    failure: BaseException | None = None
    try:
        before = backend.read_schema_version()
    except Exception as exc:
        log.warning("could not read the schema version before rollback: %s", exc)
        before = UNKNOWN_VERSION
    try:
        backend.lock()
        try:
            backend.restore(ref)
            rolled_back = True
        finally:
            _release(backend, run_id)
    except BaseException as exc:
        errors.append(f"manual rollback failed: {_describe(exc)}")
        pending = exc
        failure = exc
    after = before
    if rolled_back:
        try:
            after = backend.read_schema_version()
        except Exception as exc:
            log.warning("rollback done but the schema version cannot be read: %s", exc)
            after = UNKNOWN_VERSION
    event = MigrationEvent(
        run_id=run_id,
        action="rollback",
        from_version=before,
        to_version=after,
        dry_run=False,
        backend_id=backend.backend_id,
        snapshot_ref=ref,
        units_touched=0,
        units_skipped=0,
        rolled_back=rolled_back,
        error="; ".join(errors),
        started_at=started,
        finished_at=clock(),
    )
    event._failure = failure
    pending = _record(backend, event, pending)
    if pending is not None:
        raise pending
    return event
