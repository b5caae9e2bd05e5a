"""The MigrationBackend contract (docs/vault.md, requirements 1-8) and its types.

A backend owns one store of migratable units (the filesystem vault, or the
event log); the runner in `runner` drives any backend through this protocol.
`MigrationEvent` is the audit record of every run and every manual rollback:
a frozen pydantic model, so the log backend can store it as an event payload
unchanged and the filesystem backend as one JSON line.

Exit codes of the errors (the README's table): a refusal of policy is 5
(no rollback available), a lock held by another run or an I/O failure 6, a
broken script or chain and a vault that fails validation 65, a target below
the current version 64, nothing to migrate 1, an unknown snapshot 2.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from pydantic import AwareDatetime, BaseModel, ConfigDict, PrivateAttr

from mnemolog.eventlog.errors import Informational, MnemologError, NotFound

UnitType = Literal["memory", "wiki"]
# Sentinel from_version of a run refused before its plan was built (requirement 8).
UNKNOWN_VERSION = -1


class MigrationError(MnemologError):
    """Root of migration errors, as the reference's AtomicAgentsError (exit 6 unless narrower)."""

    exit_code: ClassVar[int] = 6
    slug: ClassVar[str] = "migration_error"


class MigrationRollbackUnavailable(MigrationError):
    """A real run refused because the backend cannot roll back (requirement 5, exit 5)."""

    exit_code = 5
    slug = "migration_rollback_unavailable"


class MigrationLocked(MigrationError):
    """Another migration is already running on this store (exit 6)."""

    exit_code = 6
    slug = "migration_locked"


class MigrationScriptError(MigrationError):
    """A script that cannot be loaded, a broken chain, or a script breaking its contract (65)."""

    exit_code = 65
    slug = "migration_script_invalid"


class MigrationVersionNotBumped(MigrationScriptError):
    """requirement 7: a script claimed a unit and left its schema_version below to_version."""

    slug = "migration_version_not_bumped"


class MigrationValidationFailed(MigrationError):
    """Units failing the target schema after apply; the run is rolled back (65)."""

    exit_code = 65
    slug = "migration_validation_failed"


class MigrationTargetInvalid(MigrationError):
    """A target that is not a version or lies below the current one (forward-only, 64)."""

    exit_code = 64
    slug = "migration_target_invalid"


class NothingToMigrate(MigrationError, Informational):
    """The store is already at the target version (exit 1)."""

    exit_code = 1
    slug = "nothing_to_migrate"


class MigrationSnapshotNotFound(MigrationError, NotFound):
    """No snapshot by that reference in this store (exit 2)."""

    exit_code = 2
    slug = "migration_snapshot_not_found"


class MigrationAuditFailed(MigrationError):
    """The audit record could not be stored durably (requirement 8 broken, exit 6)."""

    exit_code = 6
    slug = "migration_audit_failed"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class MigrationCapabilities(_Frozen):
    """What a backend can guarantee; the runner gates real runs on the first (requirement 5)."""

    supports_transactional_rollback: bool
    single_host_only: bool = True


class MigrationSnapshotRef(_Frozen):
    """Opaque handle of a snapshot: pass it back to restore() unchanged."""

    backend_id: str
    snapshot_id: str


Outcome = Literal["completed", "rolled_back", "refused", "failed"]


class MigrationEvent(_Frozen):
    """The audit record of one run_migration() call or one manual rollback (requirement 8).

    `from_version` is -1 when the run was refused before its plan existed.
    `units_touched`/`units_skipped` count (script, unit) pairs. `error` is
    empty on success.
    """

    run_id: str
    action: Literal["migrate", "rollback"] = "migrate"
    from_version: int
    to_version: int
    dry_run: bool
    backend_id: str
    snapshot_ref: MigrationSnapshotRef | None
    units_touched: int
    units_skipped: int
    rolled_back: bool
    error: str
    started_at: AwareDatetime
    finished_at: AwareDatetime
    scripts: tuple[str, ...] = ()
    # The exception behind `error`, as raised (not part of the audit record): callers
    # decide from its class and exit code, never by parsing `error`.
    _failure: BaseException | None = PrivateAttr(default=None)

    @property
    def failure(self) -> BaseException | None:
        """The first exception of the run, when this process ran it (None when read back)."""
        return self._failure

    def __eq__(self, other: object) -> bool:
        # The record is its fields: an event read back from the audit log equals the one returned.
        if not isinstance(other, MigrationEvent):
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash(tuple(self.__dict__.values()))

    @property
    def outcome(self) -> Outcome:
        """completed, rolled_back, refused (nothing was attempted) or failed (left as is)."""
        if self.action == "rollback":
            return "rolled_back" if self.rolled_back else "failed"
        if not self.error:
            return "completed"
        if self.rolled_back:
            return "rolled_back"
        if self.snapshot_ref is None and self.units_touched == 0 and self.units_skipped == 0:
            return "refused"
        return "failed"

    @property
    def ok(self) -> bool:
        return not self.error

    def to_json_line(self) -> str:
        return self.model_dump_json() + "\n"


@runtime_checkable
class MigratableUnit(Protocol):
    """The handle a script receives for one note or wiki page (never a raw path)."""

    @property
    def unit_id(self) -> str: ...

    @property
    def unit_type(self) -> UnitType: ...

    @property
    def dry_run(self) -> bool: ...

    def read_frontmatter(self) -> dict[str, Any]:
        """A copy of the current frontmatter; mutating it persists nothing."""
        ...

    def write_frontmatter(self, meta: dict[str, Any]) -> None:
        """Replace the frontmatter atomically, keeping the body (requirement 3); no-op on dry runs."""
        ...


class MigrationScript(Protocol):
    """A loaded `vN_to_vM.py`: what the backend's apply_unit needs of it."""

    @property
    def name(self) -> str: ...

    @property
    def from_version(self) -> int: ...

    @property
    def to_version(self) -> int: ...

    def applies_to(self, unit: MigratableUnit) -> object: ...

    def migrate(self, unit: MigratableUnit) -> object: ...


# A validator returns the problems of one unit against a target version; [] is valid.
UnitValidator = Callable[[MigratableUnit, int], Sequence[str]]


@runtime_checkable
class MigrationBackend(Protocol):
    """What the runner needs of a store. Structural: implement, do not subclass."""

    @property
    def backend_id(self) -> str:
        """requirement 6: the same non-empty lowercase string for the instance's lifetime."""
        ...

    def capabilities(self) -> MigrationCapabilities: ...

    def read_schema_version(self) -> int:
        """requirement 1: min schema_version over all units, read-only; CURRENT when none has one."""
        ...

    def enumerate_units(self, dry_run: bool = False) -> Sequence[MigratableUnit]:
        """requirement 2: each physical unit once, unit_type set, INDEX files excluded."""
        ...

    def snapshot(self, target_version: int) -> MigrationSnapshotRef:
        """requirement 4: a recoverable checkpoint, taken before any apply_unit()."""
        ...

    def snapshot_location(self, ref: MigrationSnapshotRef) -> str:
        """Where an operator finds the snapshot (printed by the runner)."""
        ...

    def restore(self, ref: MigrationSnapshotRef) -> None:
        """requirement 4: return the store to the snapshot atomically; emits no audit itself."""
        ...

    def restore_and_audit(self, ref: MigrationSnapshotRef) -> MigrationEvent:
        """The operator's manual rollback: lock, restore, record the event (requirement 8)."""
        ...

    def apply_unit(self, unit: MigratableUnit, script: MigrationScript) -> dict[str, Any]:
        """Run one script on one unit; {} is a skip. requirement 7: verify the bump on real runs."""
        ...

    def validator(self) -> UnitValidator:
        """The target schema's validator, run on every unit after apply."""
        ...

    def record_event(self, event: MigrationEvent) -> None:
        """requirement 8: store the audit record durably (raise if it cannot)."""
        ...

    def list_snapshots(self) -> list[MigrationSnapshotRef]: ...

    def lock(self) -> None:
        """Take the store-wide exclusive migration lock or raise MigrationLocked at once."""
        ...

    def unlock(self) -> None: ...
