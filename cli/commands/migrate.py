"""`mnemolog migrate run|status|rollback|snapshots|seal`: migrations of the store or a vault.

`migrate seal --to DIR` moves a home written before sealed content to a new
home whose log holds no content in clear (substrate.seal_migration).

The store itself is the default (`--backend log`); `--vault DIR` migrates a
vault instead, and when a home exists its runs are also signed into the
home's log. The flags of the single command this replaced (`--to`,
`--status`, `--rollback REF`, `--list-snapshots`) still work as aliases of
the subcommands.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from mnemolog.cli.app import Ctx, json_option
from mnemolog.eventlog.errors import UsageError
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.migrations.filesystem import FilesystemMigrationBackend
from mnemolog.substrate.migrations.log_backend import (
    CURRENT_SCHEMA_VERSION,
    LogMigrationBackend,
    record_in_log,
)
from mnemolog.substrate.migrations.protocol import MigrationBackend, MigrationEvent, MigrationSnapshotRef
from mnemolog.substrate.migrations.runner import check_run, run_migration

_TARGET = re.compile(r"^v?(\d{1,6})$")
_MODES = "a subcommand (run, status, rollback, snapshots)"


@dataclass
class Where:
    """Which store to migrate: the home's log (default) or a vault."""

    backend: str | None = None
    vault: Path | None = None
    scripts: Path | None = None
    current_schema_version: int | None = None

    def merged(self, other: Where) -> Where:
        """These options, with the ones `other` gives (a subcommand's) taking precedence."""
        return Where(
            other.backend or self.backend,
            other.vault or self.vault,
            other.scripts or self.scripts,
            other.current_schema_version or self.current_schema_version,
        )


def event_json(e: MigrationEvent) -> dict[str, Any]:
    return {**e.model_dump(mode="json"), "outcome": e.outcome}


@contextmanager
def backend_for(ctx: Ctx, where: Where) -> Iterator[tuple[MigrationBackend, Path]]:
    """The backend and its default scripts directory."""
    if where.backend and where.vault:
        raise UsageError("--backend log and --vault DIR are alternatives")
    version = where.current_schema_version or CURRENT_SCHEMA_VERSION
    home = ctx.home
    if where.vault is not None:
        if not home.exists():
            yield (
                FilesystemMigrationBackend(where.vault, current_schema_version=version),
                where.vault / "_migrations",
            )
            return
        # Run from a home: every audit record goes into its signed log as well.
        with Substrate.open(home, long_lived=False, worker=False) as sub:
            signed: Callable[[MigrationEvent], None] = lambda ev: record_in_log(sub, ev)  # noqa: E731
            yield (
                FilesystemMigrationBackend(where.vault, current_schema_version=version, also_record=signed),
                where.vault / "_migrations",
            )
        return
    with Substrate.open(home, long_lived=False, worker=False) as sub:
        yield LogMigrationBackend(sub, current_schema_version=version), sub.home.root / "migrations"


def where_options(f: Any) -> Any:
    """--backend, --vault, --scripts, --current-schema-version (on the group and each subcommand)."""
    f = click.option(
        "--current-schema-version",
        type=click.IntRange(min=1),
        default=None,
        help="The schema version the validators accept (default 1, the version this code writes).",
    )(f)
    f = click.option(
        "--scripts",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Where the vN_to_vM.py scripts are (default: <vault>/_migrations or <home>/migrations).",
    )(f)
    f = click.option(
        "--vault",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=None,
        help="A vault (agents root) instead of the store.",
    )(f)
    return click.option(
        "--backend", type=click.Choice(["log"]), default=None, help="The store itself (default)."
    )(f)


def _opts(opts: dict[str, Any]) -> Where:
    return Where(opts["backend"], opts["vault"], opts["scripts"], opts["current_schema_version"])


def _ctx(cctx: click.Context) -> Ctx:
    ctx = cctx.find_object(Ctx)
    assert ctx is not None
    return ctx


# -- what each subcommand does -------------------------------------------------------


def do_run(ctx: Ctx, where: Where, target: str, dry_run: bool) -> None:
    m = _TARGET.match(target or "")
    if m is None:
        raise UsageError(f"--to {target!r}: expected a version such as v2")
    out = sys.stderr if ctx.json else sys.stdout

    def snapshot_line(ref: MigrationSnapshotRef, location: str) -> None:
        # docs/vault.md, requirement 4: the ref reaches stdout the moment it exists, so a run killed
        # mid-way still left what rolls it back. With --json that is one JSON line of its
        # own before the result's (the result stays the last line, as everywhere).
        line = {"ok": True, "snapshot": {**ref.model_dump(mode="json"), "location": location}}
        click.echo(json.dumps(line, sort_keys=True))
        sys.stdout.flush()

    with backend_for(ctx, where) as (b, default_scripts):
        ev = check_run(
            run_migration(
                b,
                int(m.group(1)),
                where.scripts or default_scripts,
                dry_run=dry_run,
                out=out,
                on_snapshot=snapshot_line if ctx.json else None,
            )
        )
    ctx.emit(
        {"event": event_json(ev)},
        f"{'dry run: ' if ev.dry_run else ''}migrated v{ev.from_version} -> v{ev.to_version}: "
        f"{ev.units_touched} unit(s) touched, {ev.units_skipped} skipped",
    )


def do_status(ctx: Ctx, where: Where) -> None:
    with backend_for(ctx, where) as (b, _):
        if isinstance(b, LogMigrationBackend):
            info = b.status()
        else:
            assert isinstance(b, FilesystemMigrationBackend)
            info = b.vault_status()
    ctx.emit({"status": info}, lambda: "\n".join(f"{k:<24} {v}" for k, v in info.items()))


def do_rollback(ctx: Ctx, where: Where, ref: str) -> None:
    with backend_for(ctx, where) as (b, _):
        ev = b.restore_and_audit(MigrationSnapshotRef(backend_id=b.backend_id, snapshot_id=ref))
    ctx.emit(
        {"event": event_json(ev)},
        f"rolled back to {ref}: schema v{ev.from_version} -> v{ev.to_version}",
    )


def do_snapshots(ctx: Ctx, where: Where) -> None:
    with backend_for(ctx, where) as (b, _):
        refs = [r.snapshot_id for r in b.list_snapshots()]
    ctx.emit({"snapshots": refs}, "\n".join(refs) or "(no snapshots)")


# -- the group and its subcommands ------------------------------------------------------


@click.group(invoke_without_command=True)
@click.option("--to", "target", default=None, help="Alias of `migrate run --to vN`.")
@click.option("--dry-run", is_flag=True, help="With --to: run the scripts without writing anything.")
@click.option("--status", is_flag=True, help="Alias of `migrate status`.")
@click.option("--rollback", "rollback_ref", default=None, help="Alias of `migrate rollback REF`.")
@click.option("--list-snapshots", is_flag=True, help="Alias of `migrate snapshots`.")
@where_options
@json_option
@click.pass_context
def migrate(
    cctx: click.Context,
    /,
    target: str | None,
    dry_run: bool,
    status: bool,
    rollback_ref: str | None,
    list_snapshots: bool,
    **opts: Any,
) -> None:
    """Run, inspect or roll back schema migrations of the store (default) or a vault (--vault DIR)."""
    where = _opts(opts)
    modes = [bool(target), status, rollback_ref is not None, list_snapshots]
    if cctx.invoked_subcommand is not None:
        if any(modes):
            raise UsageError(f"give either {_MODES} or one of the old flags, not both")
        cctx.meta["mnemolog.migrate.where"] = where
        return
    if sum(modes) != 1:
        raise UsageError(
            f"give {_MODES}, or exactly one of --to vN, --status, --rollback REF, --list-snapshots"
        )
    ctx = _ctx(cctx)
    if status:
        do_status(ctx, where)
    elif list_snapshots:
        do_snapshots(ctx, where)
    elif rollback_ref is not None:
        do_rollback(ctx, where, rollback_ref)
    else:
        do_run(ctx, where, target or "", dry_run)


def _inherited(cctx: click.Context, opts: dict[str, Any]) -> Where:
    # Options given before the subcommand (`migrate --vault DIR run ...`) apply too.
    parent = cctx.meta.get("mnemolog.migrate.where", Where())
    assert isinstance(parent, Where)
    return parent.merged(_opts(opts))


@migrate.command("run")
@click.option("--to", "target", required=True, help="Target schema version, e.g. v2.")
@click.option("--dry-run", is_flag=True, help="Run the scripts without writing anything.")
@where_options
@json_option
@click.pass_context
def migrate_run(cctx: click.Context, /, target: str, dry_run: bool, **opts: Any) -> None:
    """Migrate to schema version --to (snapshot first; a failed run is rolled back)."""
    do_run(_ctx(cctx), _inherited(cctx, opts), target, dry_run)


@migrate.command("status")
@where_options
@json_option
@click.pass_context
def migrate_status(cctx: click.Context, /, **opts: Any) -> None:
    """The schema version, the unit count and the snapshots."""
    do_status(_ctx(cctx), _inherited(cctx, opts))


@migrate.command("rollback")
@click.argument("ref")
@where_options
@json_option
@click.pass_context
def migrate_rollback(cctx: click.Context, /, ref: str, **opts: Any) -> None:
    """Restore snapshot REF (and record the rollback)."""
    do_rollback(_ctx(cctx), _inherited(cctx, opts), ref)


@migrate.command("snapshots")
@where_options
@json_option
@click.pass_context
def migrate_snapshots(cctx: click.Context, /, **opts: Any) -> None:
    """The snapshots a rollback can restore, newest first."""
    do_snapshots(_ctx(cctx), _inherited(cctx, opts))


@migrate.command("seal")
@click.option(
    "--to",
    "target",
    required=True,
    type=click.Path(path_type=Path),
    help="Where the new, sealed home goes (a path that does not exist, or an empty directory).",
)
@click.option("--force", is_flag=True, help="Move a home whose log holds no content in clear all the same.")
@json_option
@click.pass_context
def migrate_seal(cctx: click.Context, /, target: Path, force: bool) -> None:
    """Move this home to a new home at --to whose log holds no content in clear (the old one is kept)."""
    from mnemolog.substrate.erasure.seal_migration import seal_home

    ctx = _ctx(cctx)
    out = seal_home(ctx.home.require(), target, force=force)
    ctx.emit(
        out,
        lambda: "\n".join(
            [
                f"sealed home at {out['home']}: log {out['log_id']}, {out['size']} entries "
                f"({out['sealed_from_clear']} sealed from clear, {out['resealed']} resealed, "
                f"{out['not_carried']} not carried), {out['memories']} memories",
                f"migrated from log {out['from']['log_id']} at size {out['from']['size']}; "
                f"once the new home is in use, remove {out['from']['home']} as a whole",
                *[f"note: {n}" for n in out["notes"]],
                *[f"not copied: {x}" for x in out["not_copied"]],
            ]
        ),
    )


COMMANDS = [migrate]
