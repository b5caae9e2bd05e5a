"""`LogMigrationBackend`: schema migrations over mnemolog's own store, every step an event.

Units are memories (knowledge grounded in raw/ sources is a "wiki" unit, the
rest "memory"); a unit's frontmatter is the vault view of the memory (the
fields `mnemolog vault render` writes), and `write_frontmatter` turns the
change into a `memory.updated` event tagged with the run. The snapshot is a
signed checkpoint: its tree size is the reference, and `migration.started`
follows it in the log. Restore is a `migration.rolled_back` event naming
that size; the projections honour it by putting back what every tagged
update at or after it replaced. So the log keeps the whole history — the
migration's writes and their reversal — while the projected state returns
exactly to the snapshot. Every run, refusal and rollback is recorded as a
`migration.*` event (requirement 8): `migration.completed` for a run that got past
planning (its outcome inside), `migration.refused` for a refusal.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from typing import TYPE_CHECKING, Any, Final

from mnemolog.eventlog.errors import LockTimeout, MnemologError, StorageError
from mnemolog.eventlog.store.lock import FileLock
from mnemolog.eventlog.vocabulary.knowledge import STATUSES
from mnemolog.projections.memory import queries
from mnemolog.projections.memory.model import Memory
from mnemolog.projections.recall import query as q
from mnemolog.projections.vault import schema as vault_schema
from mnemolog.projections.vault.render import (
    CONFIDENCE_VALUES,
    NoteRecord,
    confidence_level,
    vault_type,
)
from mnemolog.substrate.events import (
    MemoryUpdated,
    MigrationCompleted,
    MigrationRefused,
    MigrationRolledBack,
    MigrationStarted,
)
from mnemolog.substrate.migrations.protocol import (
    MigratableUnit,
    MigrationAuditFailed,
    MigrationCapabilities,
    MigrationError,
    MigrationEvent,
    MigrationLocked,
    MigrationScript,
    MigrationSnapshotNotFound,
    MigrationSnapshotRef,
    UnitType,
    UnitValidator,
)
from mnemolog.substrate.migrations.runner import audited_restore
from mnemolog.substrate.migrations.scripts import apply_script
from mnemolog.substrate.session import Sessions
from mnemolog.substrate.vault.service import VAULT_KEY, encode_value, memory_to_record, midnight, supersession

if TYPE_CHECKING:
    from mnemolog.substrate.api import Substrate

BACKEND_ID: Final = "log"
CURRENT_SCHEMA_VERSION: Final = 1
_REF_RE = re.compile(r"^(\d{1,19})$")
# The fields the unit view computes; everything else in a frontmatter is kept as it is.
KNOWN_KEYS: Final = (*vault_schema.NOTE_REQUIRED, "pinned", "expires_at", "tags")


def _as_date(v: Any) -> dt.date | None:
    if isinstance(v, dt.datetime):
        return v.date()
    if isinstance(v, dt.date):
        return v
    if isinstance(v, str):
        try:
            return dt.date.fromisoformat(v)
        except ValueError:
            return None
    return None


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip(" \t#>-*"):
            return " ".join(line.strip(" \t#>-*").split())
    return ""


def record_in_log(sessions: Sessions, event: MigrationEvent) -> None:
    """The audit record as a signed `migration.completed` or `migration.refused` event.

    Every migration run is recorded so, whichever backend ran it: the log
    backend's own runs, and a vault's runs started from a home.
    """
    refused = event.outcome == "refused" or (event.action == "rollback" and not event.rolled_back)
    record = MigrationRefused if refused else MigrationCompleted
    data = event.model_dump(mode="json")
    data["outcome"] = event.outcome
    try:
        with sessions.session() as s:
            s.append(record.model_validate(data))
    except (StorageError, OSError) as exc:
        raise MigrationAuditFailed(f"cannot record the migration event in the log: {exc}") from exc


def unit_frontmatter(record: NoteRecord, vault: dict[str, Any]) -> dict[str, Any]:
    """A memory's vault frontmatter (without the renderer's file-placement fields)."""
    meta: dict[str, Any] = {
        "schema_version": vault.get("schema_version", CURRENT_SCHEMA_VERSION),
        "name": record.title,
        # As the vault shows it: an empty description is the first line of the content.
        "description": record.description or _first_line(record.content)[:150],
        "type": vault_type(record),
        "captured": _as_date(vault.get("captured")) or record.captured,
        "last_seen": record.last_seen,
        "sources": list(record.sources) or ["observation"],
        "confidence": confidence_level(record.confidence),
        "pinned": record.pinned,
        "expires_at": record.expires_at,
        "tags": list(record.tags),
    }
    meta.update(record.extra_frontmatter)
    return meta


class LogUnit:
    """One memory as a migration script sees it."""

    __slots__ = ("_backend", "_dry_run", "_id", "_type")

    def __init__(self, backend: LogMigrationBackend, memory_id: str, unit_type: UnitType, dry_run: bool):
        self._backend = backend
        self._id = memory_id
        self._type: UnitType = unit_type
        self._dry_run = dry_run

    @property
    def unit_id(self) -> str:
        return self._id

    @property
    def unit_type(self) -> UnitType:
        return self._type

    @property
    def dry_run(self) -> bool:
        return self._dry_run

    def read_frontmatter(self) -> dict[str, Any]:
        return self._backend.frontmatter(self._id)

    def write_frontmatter(self, meta: dict[str, Any]) -> None:
        if self._dry_run:
            return
        if not isinstance(meta, dict):
            raise MigrationError(f"{self._id}: write_frontmatter expects a dict, got {type(meta).__name__}")
        self._backend.write(self._id, dict(meta))

    def __repr__(self) -> str:
        return f"LogUnit({self._id!r}, {self._type!r}, dry_run={self._dry_run})"


class LogMigrationBackend:
    """MigrationBackend over the home's own memories, every write and restore a signed event."""

    def __init__(self, sub: Substrate, *, current_schema_version: int = CURRENT_SCHEMA_VERSION) -> None:
        self.sub = sub
        self.current_schema_version = current_schema_version
        self._lock = FileLock(sub.home.projections_dir / ".migration.lock", 0.0, "migration lock")
        self._run: str | None = None
        self.diagnostics: list[str] = []

    # -- identity ------------------------------------------------------------

    @property
    def backend_id(self) -> str:
        return BACKEND_ID

    def capabilities(self) -> MigrationCapabilities:
        return MigrationCapabilities(supports_transactional_rollback=True, single_host_only=True)

    # -- units -----------------------------------------------------------------

    def _records(self) -> list[tuple[Memory, NoteRecord]]:
        with self.sub.session() as s:
            every = q.Filters(include_archived=True, statuses=STATUSES)
            rows = q.list_memories(s.conn, every, limit=10**9)
            sup, by = supersession(s)
        rows.sort(key=lambda m: m["stored_seq"])
        return [(m, memory_to_record(m, sup, by, False)) for m in rows]

    def frontmatter(self, memory_id: str) -> dict[str, Any]:
        with self.sub.session() as s:
            m = s.get(memory_id)
            sup, by = supersession(s)
        if m is None:
            raise MigrationError(f"unit {memory_id} no longer exists")
        vault = dict((m.get("metadata") or {}).get(VAULT_KEY) or {})
        return unit_frontmatter(memory_to_record(m, sup, by, False), vault)

    def enumerate_units(self, dry_run: bool = False) -> list[MigratableUnit]:
        out: list[MigratableUnit] = []
        for m, r in self._records():
            unit_type: UnitType = "wiki" if vault_type(r) == vault_schema.WIKI_TYPE else "memory"
            out.append(LogUnit(self, m["id"], unit_type, dry_run))
        return out

    def read_schema_version(self) -> int:
        self.diagnostics = []
        versions: list[int] = []
        records = self._records()
        for m, _ in records:
            v = ((m.get("metadata") or {}).get(VAULT_KEY) or {}).get("schema_version", CURRENT_SCHEMA_VERSION)
            if isinstance(v, int) and not isinstance(v, bool):
                versions.append(v)
            else:
                self.diagnostics.append(f"{m['id']}: schema_version is {v!r}, not an integer")
        if not versions:
            return self.current_schema_version
        return min(versions)

    def write(self, memory_id: str, meta: dict[str, Any]) -> None:
        """One unit's new frontmatter as a memory.updated event of the current run."""
        sub = self.sub
        with sub.session() as s:
            m = s.get(memory_id)
            sup, by = supersession(s)
            if m is None:
                raise MigrationError(f"unit {memory_id} no longer exists")
            record = memory_to_record(m, sup, by, False)
            vault = dict((m.get("metadata") or {}).get(VAULT_KEY) or {})
            current = unit_frontmatter(record, vault)
            changes: dict[str, Any] = {}
            new_vault = dict(vault)
            if meta.get("name") != current["name"] and isinstance(meta.get("name"), str):
                changes["title"] = meta["name"]
            if meta.get("type") != current["type"]:
                t = meta.get("type")
                changes["kind"] = "knowledge" if t == vault_schema.WIKI_TYPE else t
            if (
                meta.get("confidence") != current["confidence"]
                and meta.get("confidence") in CONFIDENCE_VALUES
            ):
                changes["confidence"] = CONFIDENCE_VALUES[meta["confidence"]]
            seen = _as_date(meta.get("last_seen"))
            if seen is not None and seen != current["last_seen"]:
                changes["last_seen"] = midnight(seen)
            if isinstance(meta.get("tags"), list) and meta["tags"] != current["tags"]:
                changes["tags"] = [str(t) for t in meta["tags"]]
            for key in ("description", "sources", "pinned", "schema_version"):
                if key in meta:
                    new_vault[key] = encode_value(meta[key])
                else:
                    new_vault.pop(key, None)
            for key in ("captured", "expires_at"):
                d = _as_date(meta.get(key))
                if d is not None and d != current[key]:
                    new_vault[key] = d.isoformat()
                elif meta.get(key) is None and key == "expires_at":
                    new_vault.pop(key, None)
            extra = {k: v for k, v in meta.items() if k not in KNOWN_KEYS}
            if extra:
                new_vault["extra"] = encode_value(extra)
            else:
                new_vault.pop("extra", None)
            if new_vault != vault:
                changes["metadata"] = {VAULT_KEY: new_vault}
            if not changes:
                return
            try:
                payload = MemoryUpdated.model_validate(
                    {"id": memory_id, "migration_run": self._run or "manual", **changes}
                )
            except MnemologError as exc:
                raise MigrationError(
                    f"{memory_id}: the new frontmatter cannot be stored: {exc.message}"
                ) from exc
            s.append(payload)

    def apply_unit(self, unit: MigratableUnit, script: MigrationScript) -> dict[str, Any]:
        if not isinstance(unit, LogUnit):
            raise MigrationError(f"unit {unit!r} does not belong to the log backend")
        return apply_script(unit, script)

    def validator(self) -> UnitValidator:
        def validate(unit: MigratableUnit, target: int) -> list[str]:
            meta = unit.read_frontmatter()
            problems = []
            found = meta.get("schema_version")
            if isinstance(found, bool) or found != target:
                problems.append(f"schema_version: expected {target}, found {found!r}")
            # The vault's per-note rules; the file name is the one the type implies.
            name = f"{meta.get('type')}_unit_{unit.unit_id.lower()}.md"
            findings = (
                vault_schema.check_wiki(meta, name, expected_version=self.current_schema_version)
                if unit.unit_type == "wiki"
                else vault_schema.check_note(meta, name, expected_version=self.current_schema_version)
            )
            problems += [
                f"{f}: {m}" for f, m, severity in findings if severity == "error" and f != "filename"
            ]
            return problems

        return validate

    # -- snapshots -------------------------------------------------------------

    def snapshot(self, target_version: int) -> MigrationSnapshotRef:
        """A signed checkpoint of the log as it is; `migration.started` follows it."""
        cp, _ = self.sub.writer.checkpoint()
        self._run = uuid.uuid4().hex
        with self.sub.session() as s:
            s.append(
                MigrationStarted(
                    run_id=self._run,
                    snapshot_size=cp.size,
                    snapshot_root=cp.root.hex(),
                    target_version=target_version,
                    backend_id=BACKEND_ID,
                ),
            )
        return MigrationSnapshotRef(backend_id=BACKEND_ID, snapshot_id=str(cp.size))

    def snapshot_location(self, ref: MigrationSnapshotRef) -> str:
        return f"{self.sub.home.log_dir}/checkpoints/{int(ref.snapshot_id):020d}"

    def _snapshot_size(self, ref: MigrationSnapshotRef) -> int:
        m = _REF_RE.match(ref.snapshot_id)
        if ref.backend_id != BACKEND_ID or m is None:
            raise MigrationSnapshotNotFound(f"{ref.snapshot_id!r} is not a log snapshot reference")
        size = int(m.group(1))
        if size not in self.sub.log.checkpoint_sizes():
            raise MigrationSnapshotNotFound(f"no checkpoint of size {size} in this log", snapshot=size)
        return size

    def list_snapshots(self) -> list[MigrationSnapshotRef]:
        """Checkpoints a migration started from, newest first."""
        with self.sub.session() as s:
            sizes = queries.migration_snapshot_sizes(s.conn)
        return [MigrationSnapshotRef(backend_id=BACKEND_ID, snapshot_id=str(n)) for n in sizes]

    def restore(self, ref: MigrationSnapshotRef) -> None:
        size = self._snapshot_size(ref)
        with self.sub.session() as s:
            ids = queries.migration_undo_ids(s.conn, size)
            s.append(
                MigrationRolledBack(
                    run_id=self._run or "", snapshot_size=size, backend_id=BACKEND_ID, memory_ids=ids
                ),
            )

    def restore_and_audit(self, ref: MigrationSnapshotRef) -> MigrationEvent:
        return audited_restore(self, ref)

    # -- audit -------------------------------------------------------------------

    def record_event(self, event: MigrationEvent) -> None:
        record_in_log(self.sub, event)

    def audit_events(self) -> list[MigrationEvent]:
        """Every recorded audit event, oldest first (from the log)."""
        out = []
        for e in self.sub.log.iter_entries(0):
            if e.type in ("migration.completed", "migration.refused"):
                d = {k: v for k, v in e.data.items() if k != "outcome"}
                d.setdefault("snapshot_ref", None)  # payloads leave out None fields
                out.append(MigrationEvent.model_validate_json(json.dumps(d)))
        return out

    # -- lock ----------------------------------------------------------------------

    def lock(self) -> None:
        try:
            self._lock.acquire(timeout=0.0)
        except LockTimeout:
            raise MigrationLocked(
                f"Another migration is already running on {self.sub.home.root}",
                file=str(self._lock.path),
            ) from None

    def unlock(self) -> None:
        if self._lock.held:
            self._lock.release()
        self._run = None

    def status(self) -> dict[str, Any]:
        return {
            "backend": BACKEND_ID,
            "home": str(self.sub.home.root),
            "schema_version": self.read_schema_version(),
            "current_schema_version": self.current_schema_version,
            "units": len(self._records()),
            "snapshots": [r.snapshot_id for r in self.list_snapshots()],
            "diagnostics": list(self.diagnostics),
        }
