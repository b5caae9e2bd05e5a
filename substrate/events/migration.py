"""Migration events: a log-backed run started, was rolled back, completed or was refused."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mnemolog.eventlog.vocabulary import events as v
from mnemolog.substrate.events.base import Chained, Payload

__all__ = [
    "MigrationCompleted",
    "MigrationRecorded",
    "MigrationRefused",
    "MigrationRolledBack",
    "MigrationStarted",
]


class MigrationStarted(Payload):
    """A log-backed migration began: the snapshot is the checkpoint of `snapshot_size`."""

    TYPE = v.MIGRATION_STARTED
    TV = 1

    run_id: str
    snapshot_size: int
    snapshot_root: str
    target_version: int
    backend_id: str


class MigrationRolledBack(Chained):
    """Restore to the checkpoint of `snapshot_size`: projections undo the tagged updates after it."""

    TYPE = v.MIGRATION_ROLLED_BACK
    TV = 2

    run_id: str
    snapshot_size: int
    backend_id: str
    memory_ids: list[str] = Field(default_factory=list)  # what it puts back (the memories it touches)


class MigrationRecorded(Payload):
    """The MigrationEvent audit record (docs/vault.md, requirement 8), as `migration.completed` or
    `migration.refused`."""

    run_id: str
    action: Literal["migrate", "rollback"]
    from_version: int
    to_version: int
    dry_run: bool
    backend_id: str
    snapshot_ref: dict[str, str] | None = None
    units_touched: int
    units_skipped: int
    rolled_back: bool
    error: str
    started_at: str
    finished_at: str
    scripts: list[str] = Field(default_factory=list)
    outcome: str


class MigrationCompleted(MigrationRecorded):
    """`migration.completed` tv 1: a run that got past planning (its outcome inside)."""

    TYPE = v.MIGRATION_COMPLETED
    TV = 1


class MigrationRefused(MigrationRecorded):
    """`migration.refused` tv 1: a refused run or a rollback that did not happen."""

    TYPE = v.MIGRATION_REFUSED
    TV = 1
