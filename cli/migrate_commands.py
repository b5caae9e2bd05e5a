"""`mnemolog migrate`: schema migrations of the store (`--backend log`) or a vault (`--vault DIR`)."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from mnemolog.cli.app import Ctx, json_option
from mnemolog.eventlog.errors import MnemologError, UsageError
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.migrations.filesystem import FilesystemMigrationBackend
from mnemolog.substrate.migrations.log_backend import CURRENT_SCHEMA_VERSION, LogMigrationBackend
from mnemolog.substrate.migrations.protocol import MigrationBackend, MigrationEvent, MigrationSnapshotRef
from mnemolog.substrate.migrations.runner import run_migration

_TARGET = re.compile(r"^v?(\d{1,6})$")
_EXIT_BY_ERROR = {
    "MigrationValidationFailed": 65,
    "MigrationVersionNotBumped": 65,
    "MigrationScriptError": 65,
    "KeyboardInterrupt": 130,
}


class MigrationFailed(MnemologError):
    """A run that was rolled back or left failed (the audit record says why)."""

    slug = "migration_failed"

    def __init__(self, event: MigrationEvent) -> None:
        name = event.error.split(":", 1)[0].strip()
        super().__init__(
            f"migration {event.from_version} -> {event.to_version} {event.outcome}: {event.error}",
            run_id=event.run_id,
            outcome=event.outcome,
            rolled_back=event.rolled_back,
        )
        self.exit_code = _EXIT_BY_ERROR.get(name, 6)  # type: ignore[misc]


def event_json(e: MigrationEvent) -> dict[str, Any]:
    return {**e.model_dump(mode="json"), "outcome": e.outcome}


@contextmanager
def backend_for(ctx: Ctx, vault: Path | None, current: int | None) -> Iterator[tuple[MigrationBackend, Path]]:
    """The backend and its default scripts directory."""
    version = current or CURRENT_SCHEMA_VERSION
    if vault is not None:
        yield FilesystemMigrationBackend(vault, current_schema_version=version), vault / "_migrations"
        return
    sub = Substrate.open(ctx.home, long_lived=False, worker=False)
    try:
        yield LogMigrationBackend(sub, current_schema_version=version), sub.home.root / "migrations"
    finally:
        sub.close()


@click.command()
@click.option("--to", "target", default=None, help="Target schema version, e.g. v2.")
@click.option("--dry-run", is_flag=True, help="Run the scripts without writing anything.")
@click.option("--backend", type=click.Choice(["log"]), default=None, help="The store itself (default).")
@click.option(
    "--vault", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
    help="A vault (agents root) instead of the store.",
)  # fmt: skip
@click.option(
    "--scripts",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the vN_to_vM.py scripts are (default: <vault>/_migrations or <home>/migrations).",
)
@click.option(
    "--current-schema-version",
    type=click.IntRange(min=1),
    default=None,
    help="The schema version the validators accept (default 1, the version this code writes).",
)
@click.option("--status", is_flag=True, help="Print the schema version, unit count and snapshots.")
@click.option("--rollback", "rollback_ref", default=None, help="Restore a snapshot (and audit it).")
@click.option("--list-snapshots", is_flag=True, help="List the snapshots, newest first.")
@json_option
@click.pass_obj
def migrate(
    ctx: Ctx,
    target: str | None,
    dry_run: bool,
    backend: str | None,
    vault: Path | None,
    scripts: Path | None,
    current_schema_version: int | None,
    status: bool,
    rollback_ref: str | None,
    list_snapshots: bool,
) -> None:
    """Run, inspect or roll back schema migrations (the seed's MigrationBackend contract, MUST 1-8)."""
    modes = [bool(target), status, rollback_ref is not None, list_snapshots]
    if sum(modes) != 1:
        raise UsageError("give exactly one of --to vN, --status, --rollback REF, --list-snapshots")
    if backend and vault:
        raise UsageError("--backend log and --vault DIR are alternatives")
    with backend_for(ctx, vault, current_schema_version) as (b, default_scripts):
        if status:
            if isinstance(b, LogMigrationBackend):
                info = b.status()
            else:
                assert isinstance(b, FilesystemMigrationBackend)
                info = b.vault_status()
            ctx.emit(
                {"status": info},
                lambda: "\n".join(f"{k:<24} {v}" for k, v in info.items()),
            )
            return
        if list_snapshots:
            refs = [r.snapshot_id for r in b.list_snapshots()]
            ctx.emit({"snapshots": refs}, "\n".join(refs) or "(no snapshots)")
            return
        if rollback_ref is not None:
            ref = MigrationSnapshotRef(backend_id=b.backend_id, snapshot_id=rollback_ref)
            ev = b.restore_and_audit(ref)
            ctx.emit(
                {"event": event_json(ev)},
                f"rolled back to {rollback_ref}: schema v{ev.from_version} -> v{ev.to_version}",
            )
            return
        m = _TARGET.match(target or "")
        if m is None:
            raise UsageError(f"--to {target!r}: expected a version such as v2")
        out = sys.stderr if ctx.json else sys.stdout
        ev = run_migration(b, int(m.group(1)), scripts or default_scripts, dry_run=dry_run, out=out)
    if not ev.ok:
        raise MigrationFailed(ev)
    ctx.emit(
        {"event": event_json(ev)},
        f"{'dry run: ' if ev.dry_run else ''}migrated v{ev.from_version} -> v{ev.to_version}: "
        f"{ev.units_touched} unit(s) touched, {ev.units_skipped} skipped",
    )


COMMANDS = [migrate]
