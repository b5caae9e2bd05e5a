"""The filesystem migration backend: a directory of agents (`<root>/<agent>/{memory,wiki}`).

- Units (requirement 2): every `*.md` under `<root>/<agent>/memory/` and `wiki/`
  (recursively, skipping `.`/`_` directories), except INDEX.md and
  INDEX_{slice}.md; each physical file once (deduplicated by resolved path,
  which is the unit_id); symlinks resolving outside the root are skipped.
- Version (requirement 1): the minimum integer schema_version over the units; an
  empty vault, or one where no unit has one, reports `current_schema_version`
  and logs a diagnostic (also kept in `diagnostics`).
- Writes (requirement 3): `write_frontmatter` re-serializes through the vault's
  canonical frontmatter format, keeping the body, with atomic_write.
- Snapshot (requirement 4): `<root>/_migrations/snapshots/<UTC %Y-%m-%dT%H%M%S>_pre_v{N}_migration.tar.gz`
  (a `_2`, `_3`... suffix if that name exists), written to a temp name,
  fsynced and renamed. It holds every regular file and directory of the
  root except `_migrations/`, top-level dot entries (`.git`...) and caches
  (`__pycache__`, `.pytest_cache`, `.mypy_cache`, `.ruff_cache`, `_cache`,
  `.*.tmp`); symlinks inside the root go into a JSON sidecar member, never
  as link members; a symlink leaving the root or a special file refuses the
  snapshot.
- Restore: extraction by hand into a staging directory beside the root
  (regular files and directories only, no absolute names, no `..`), symlinks
  recreated only when they stay inside; `_migrations/` and the top-level dot
  entries are carried over as hard links (so the held lock file, the audit
  log and the snapshots are the same inodes); then one atomic
  renameat2(RENAME_EXCHANGE) swaps staging and root (two renames where the
  kernel lacks it), and the old tree is deleted.
- Lock: fcntl.flock(LOCK_EX | LOCK_NB) on `<root>/_migrations/.lock`; busy
  raises MigrationLocked. The kernel drops it when the process dies.
- Audit (requirement 8): one JSON line per MigrationEvent appended to
  `<root>/_migrations/migration.jsonl` (O_APPEND, fsync), never snapshotted,
  never restored over.
- backend_id (requirement 6): "filesystem".
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import stat
import tarfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC
from io import BytesIO
from pathlib import Path, PurePosixPath
from typing import IO, Any, Final

from mnemolog.eventlog.errors import BadInput, MnemologError
from mnemolog.eventlog.store.fsio import atomic_write, fsync_dir, open_regular
from mnemolog.projections.vault import naming, schema
from mnemolog.projections.vault.frontmatter import (
    Document,
    FrontmatterError,
    read_document,
    serialize_bytes,
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
from mnemolog.substrate.migrations.runner import Clock, audited_restore, utc_now
from mnemolog.substrate.migrations.scripts import apply_script

log = logging.getLogger("mnemolog.migrations")

BACKEND_ID: Final = "filesystem"
MIGRATIONS_DIR: Final = "_migrations"
SNAPSHOTS_DIR: Final = "snapshots"
AUDIT_LOG: Final = "migration.jsonl"
LOCK_FILE: Final = ".lock"
SIDECAR: Final = ".mnemolog-snapshot.json"
SIDECAR_FORMAT: Final = "mnemolog-snapshot/1"
CACHE_DIRS: Final = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", "_cache"})
_SNAPSHOT_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{6}_pre_v\d+_migration(?:_\d+)?\.tar\.gz")

# A checker returns the problems of one unit's frontmatter for a unit type, a
# filename and the target version; the default is the vault schema of
# `current_schema_version`, which rejects any other version (the version
# cliff of docs/vault.md, Migrations: a target the code has not adopted validates and rolls back).
UnitChecker = Callable[[dict[str, Any], UnitType, str, int], Sequence[str]]


class FilesystemUnit:
    """A note or wiki page on disk, as a script sees it."""

    __slots__ = ("_dry_run", "_type", "path")

    def __init__(self, path: Path, unit_type: UnitType, dry_run: bool) -> None:
        self.path = path
        self._type: UnitType = unit_type
        self._dry_run = dry_run

    @property
    def unit_id(self) -> str:
        return str(self.path)

    @property
    def unit_type(self) -> UnitType:
        return self._type

    @property
    def dry_run(self) -> bool:
        return self._dry_run

    def read_frontmatter(self) -> dict[str, Any]:
        # A fresh parse per call: the dict is the caller's copy.
        return read_document(self.path).meta

    def write_frontmatter(self, meta: dict[str, Any]) -> None:
        if self._dry_run:
            return
        if not isinstance(meta, dict):
            raise MigrationError(
                f"{self.unit_id}: write_frontmatter expects a dict, got {type(meta).__name__}"
            )
        body = read_document(self.path).body
        atomic_write(self.path, serialize_bytes(Document(dict(meta), body)))

    def __repr__(self) -> str:
        return f"FilesystemUnit({self.unit_id!r}, {self._type!r}, dry_run={self._dry_run})"


def default_checker(current_schema_version: int) -> UnitChecker:
    """The vault's own per-note and per-page rules at `current_schema_version`, as a unit checker."""

    def check(meta: dict[str, Any], unit_type: UnitType, filename: str, target: int) -> list[str]:
        findings = (
            schema.check_wiki(meta, filename, expected_version=current_schema_version)
            if unit_type == "wiki"
            else schema.check_note(meta, filename, expected_version=current_schema_version)
        )
        return [f"{f}: {m}" for f, m, severity in findings if severity == "error"]

    return check


# -- swapping two directories atomically ---------------------------------------

_RENAME_EXCHANGE: Final = 2
_AT_FDCWD: Final = -100


def _renameat2() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _renameat2()


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step; False when the kernel cannot."""
    if _RENAMEAT2 is None:
        return False
    rc = _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a))


# -- the backend ------------------------------------------------------------------


class FilesystemMigrationBackend:
    """MigrationBackend over `<agents_root>/<agent>/{memory,wiki}/` (see the module docstring)."""

    def __init__(
        self,
        agents_root: Path,
        *,
        current_schema_version: int = schema.CURRENT_SCHEMA_VERSION,
        checker: UnitChecker | None = None,
        clock: Clock = utc_now,
        also_record: Callable[[MigrationEvent], None] | None = None,
    ) -> None:
        """`also_record` receives every audit event after migration.jsonl has it (a home's signed log)."""
        self.root = Path(agents_root).absolute()
        self._also_record = also_record
        self.current_schema_version = current_schema_version
        self._checker = checker or default_checker(current_schema_version)
        self._clock = clock
        self._lock_fd: int | None = None
        self.diagnostics: list[str] = []

    # paths

    @property
    def migrations_dir(self) -> Path:
        return self.root / MIGRATIONS_DIR

    @property
    def snapshots_dir(self) -> Path:
        return self.migrations_dir / SNAPSHOTS_DIR

    @property
    def audit_path(self) -> Path:
        return self.migrations_dir / AUDIT_LOG

    @property
    def lock_path(self) -> Path:
        return self.migrations_dir / LOCK_FILE

    # identity

    @property
    def backend_id(self) -> str:
        return BACKEND_ID

    def capabilities(self) -> MigrationCapabilities:
        return MigrationCapabilities(supports_transactional_rollback=True, single_host_only=True)

    # units

    def _unit_paths(self) -> list[tuple[Path, UnitType]]:
        if not self.root.is_dir():
            return []
        resolved_root = self.root.resolve()
        seen: set[Path] = set()
        out: list[tuple[Path, UnitType]] = []
        for agent in sorted(os.scandir(self.root), key=lambda e: e.name):
            if agent.name.startswith(("_", ".")) or not agent.is_dir():
                continue
            for sub in ("memory", "wiki"):
                unit_type: UnitType = "wiki" if sub == "wiki" else "memory"
                top = Path(agent.path) / sub
                if not top.is_dir():
                    continue
                for dirpath, dirnames, filenames in os.walk(top):
                    dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")))
                    for name in sorted(filenames):
                        if not name.endswith(".md") or name.startswith(".") or naming.is_index_filename(name):
                            continue
                        resolved = (Path(dirpath) / name).resolve()
                        if not resolved.is_relative_to(resolved_root):
                            log.warning("skipping %s: it resolves outside the vault", resolved)
                            continue
                        if resolved in seen or not resolved.is_file():
                            continue
                        seen.add(resolved)
                        out.append((resolved, unit_type))
        return out

    def enumerate_units(self, dry_run: bool = False) -> list[MigratableUnit]:
        return [FilesystemUnit(p, t, dry_run) for p, t in self._unit_paths()]

    def read_schema_version(self) -> int:
        paths = self._unit_paths()
        self.diagnostics = []
        if not paths:
            return self.current_schema_version
        versions: list[int] = []
        for path, _ in paths:
            try:
                v = read_document(path).meta.get("schema_version")
            except FrontmatterError as exc:
                self.diagnostics.append(f"{path}: unreadable: {exc.reason}")
                continue
            if isinstance(v, int) and not isinstance(v, bool):
                versions.append(v)
            else:
                self.diagnostics.append(f"{path}: schema_version is {v!r}, not an integer")
        if not versions:
            log.warning(
                "none of the %d units under %s has an integer schema_version (%s); reporting "
                "v%d, but inspect the vault: nothing can be migrated safely",
                len(paths),
                self.root,
                "; ".join(self.diagnostics[:3]),
                self.current_schema_version,
            )
            return self.current_schema_version
        if self.diagnostics:
            log.warning(
                "%d unit(s) under %s have no integer schema_version (%s)",
                len(self.diagnostics),
                self.root,
                "; ".join(self.diagnostics[:3]),
            )
        return min(versions)

    def apply_unit(self, unit: MigratableUnit, script: MigrationScript) -> dict[str, Any]:
        if not isinstance(unit, FilesystemUnit):
            raise MigrationError(f"unit {unit!r} does not belong to the filesystem backend")
        return apply_script(unit, script)

    def validator(self) -> UnitValidator:
        def validate(unit: MigratableUnit, target: int) -> list[str]:
            try:
                meta = unit.read_frontmatter()
            except FrontmatterError as exc:
                return [f"unreadable: {exc.reason}"]
            problems = []
            found = meta.get("schema_version")
            if isinstance(found, bool) or found != target:
                problems.append(f"schema_version: expected {target}, found {found!r}")
            filename = PurePosixPath(unit.unit_id).name
            problems += self._checker(meta, unit.unit_type, filename, target)
            return problems

        return validate

    # lock

    def lock(self) -> None:
        if self._lock_fd is not None:
            raise MigrationLocked(f"this backend already holds the migration lock of {self.root}")
        try:
            self.migrations_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise MigrationError(f"cannot open the migration lock {self.lock_path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise MigrationLocked(
                f"Another migration is already running on {self.root} (the lock {self.lock_path} is held)",
                file=str(self.lock_path),
            ) from None
        self._lock_fd = fd

    def unlock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    # audit

    def record_event(self, event: MigrationEvent) -> None:
        line = event.to_json_line().encode("utf-8")
        try:
            self.migrations_dir.mkdir(parents=True, exist_ok=True)
            created = not self.audit_path.exists()
            fd = os.open(self.audit_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:
                fsync_dir(self.migrations_dir)
        except OSError as exc:
            raise MigrationAuditFailed(f"cannot append to {self.audit_path}: {exc}") from exc
        if self._also_record is not None:
            self._also_record(event)

    def audit_events(self) -> list[MigrationEvent]:
        """Every recorded event, oldest first."""
        if not self.audit_path.exists():
            return []
        events = []
        with open_regular(self.audit_path) as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    events.append(MigrationEvent.model_validate_json(line))
                except ValueError as exc:
                    raise BadInput(
                        f"{self.audit_path}:{number}: not a MigrationEvent: {exc}",
                        file=str(self.audit_path),
                        line=number,
                    ) from None
        return events

    # snapshots

    def list_snapshots(self) -> list[MigrationSnapshotRef]:
        """Newest first (the names sort by their UTC timestamp)."""
        if not self.snapshots_dir.is_dir():
            return []
        names = [n for n in os.listdir(self.snapshots_dir) if _SNAPSHOT_RE.fullmatch(n)]
        names.sort(key=_snapshot_order, reverse=True)
        return [MigrationSnapshotRef(backend_id=BACKEND_ID, snapshot_id=n) for n in names]

    def snapshot_location(self, ref: MigrationSnapshotRef) -> str:
        return str(self.snapshots_dir / ref.snapshot_id)

    def _snapshot_name(self, target_version: int) -> str:
        stamp = self._clock().astimezone(UTC).strftime("%Y-%m-%dT%H%M%S")
        base = f"{stamp}_pre_v{target_version}_migration"
        name, n = f"{base}.tar.gz", 1
        while (self.snapshots_dir / name).exists():
            n += 1
            name = f"{base}_{n}.tar.gz"
        return name

    def _snapshot_members(self) -> Iterator[tuple[str, os.stat_result]]:
        """(archive name, lstat) of every entry a snapshot holds, parents before children."""
        for entry in sorted(os.scandir(self.root), key=lambda e: e.name):
            if entry.name == MIGRATIONS_DIR or entry.name.startswith("."):
                continue
            yield from self._walk_member(Path(entry.path), entry.name)

    def _walk_member(self, path: Path, arcname: str) -> Iterator[tuple[str, os.stat_result]]:
        st = os.lstat(path)
        yield arcname, st
        if stat.S_ISDIR(st.st_mode):
            for entry in sorted(os.scandir(path), key=lambda e: e.name):
                if entry.name in CACHE_DIRS or (entry.name.startswith(".") and entry.name.endswith(".tmp")):
                    continue
                yield from self._walk_member(Path(entry.path), f"{arcname}/{entry.name}")

    def snapshot(self, target_version: int) -> MigrationSnapshotRef:
        self.snapshots_dir.mkdir(parents=True, exist_ok=True)
        name = self._snapshot_name(target_version)
        final = self.snapshots_dir / name
        tmp = self.snapshots_dir / f".{name}.{uuid.uuid4().hex[:8]}.tmp"
        resolved_root = self.root.resolve()
        links: dict[str, str] = {}
        try:
            with open(tmp, "xb") as raw:
                with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
                    for arcname, st in self._snapshot_members():
                        path = self.root / arcname
                        if stat.S_ISLNK(st.st_mode):
                            target = os.readlink(path)
                            if os.path.isabs(target) or not (path.parent / target).resolve().is_relative_to(
                                resolved_root
                            ):
                                raise MigrationError(
                                    f"cannot snapshot {path}: a symlink to {target!r}, outside the vault"
                                )
                            links[arcname] = target
                            continue
                        info = tarfile.TarInfo(arcname)
                        info.mode = stat.S_IMODE(st.st_mode)
                        info.mtime = int(st.st_mtime)
                        if stat.S_ISDIR(st.st_mode):
                            info.type = tarfile.DIRTYPE
                            tar.addfile(info)
                        elif stat.S_ISREG(st.st_mode):
                            info.size = st.st_size
                            with open_regular(path) as fh:
                                tar.addfile(info, fh)
                        else:
                            raise MigrationError(f"cannot snapshot {path}: not a file, directory or symlink")
                    sidecar = json.dumps(
                        {"format": SIDECAR_FORMAT, "target_version": target_version, "symlinks": links},
                        sort_keys=True,
                    ).encode("utf-8")
                    info = tarfile.TarInfo(SIDECAR)
                    info.size = len(sidecar)
                    info.mode = 0o644
                    tar.addfile(info, BytesIO(sidecar))
                raw.flush()
                os.fsync(raw.fileno())
            os.rename(tmp, final)
            fsync_dir(self.snapshots_dir)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if isinstance(exc, MnemologError) or not isinstance(exc, Exception):
                raise
            raise MigrationError(f"cannot create the snapshot {final}: {exc}") from exc
        return MigrationSnapshotRef(backend_id=BACKEND_ID, snapshot_id=name)

    def scrub_snapshots(self, subjects: Iterable[str]) -> list[str]:
        """Rewrite every snapshot without what it held of erased subjects; the snapshots changed.

        A snapshot is a copy of the vault from before a migration: a `forget`
        that re-renders the vault must reach it too (issue 22). In each
        snapshot, a note whose `mnemolog_id` is an erased memory is dropped,
        and every other text file loses each line that names an erased
        subject (memory, interaction, candidate or document id) or a dropped
        note's file name: INDEX lines, journal lines and run-log lines. A
        changed snapshot is written under a temporary name, synced and
        renamed over the old one (its name, the rollback reference, stays),
        under the vault's migration lock. What a person wrote about erased
        content in their own words, without its id, cannot be recognised.
        """
        gone = sorted({s for s in subjects if s})
        if not gone or not self.snapshots_dir.is_dir():
            return []
        changed = []
        self.lock()
        try:
            for ref in self.list_snapshots():
                path = self.snapshots_dir / ref.snapshot_id
                if _scrub_snapshot(path, gone):
                    changed.append(ref.snapshot_id)
        finally:
            self.unlock()
        return changed

    def _snapshot_path(self, ref: MigrationSnapshotRef) -> Path:
        if ref.backend_id != BACKEND_ID:
            raise MigrationError(
                f"snapshot {ref.snapshot_id!r} belongs to backend {ref.backend_id!r}, not {BACKEND_ID!r}"
            )
        if not _SNAPSHOT_RE.fullmatch(ref.snapshot_id):
            raise MigrationSnapshotNotFound(
                f"expected a snapshot name like 2026-08-12T143000_pre_v2_migration.tar.gz, "
                f"found {ref.snapshot_id!r}"
            )
        path = self.snapshots_dir / ref.snapshot_id
        if not path.is_file():
            raise MigrationSnapshotNotFound(f"no snapshot {ref.snapshot_id} in {self.snapshots_dir}")
        return path

    def restore(self, ref: MigrationSnapshotRef) -> None:
        source = self._snapshot_path(ref)
        staging = self.root.parent / f".{self.root.name}.restore-{uuid.uuid4().hex[:12]}"
        try:
            staging.mkdir(mode=stat.S_IMODE(os.stat(self.root).st_mode))
            _extract(source, staging)
            for entry in sorted(os.scandir(self.root), key=lambda e: e.name):
                if entry.name == MIGRATIONS_DIR or entry.name.startswith("."):
                    _carry(Path(entry.path), staging / entry.name)
            _fsync_tree(staging)
            if not exchange(staging, self.root):
                aside = self.root.parent / f".{self.root.name}.aside-{uuid.uuid4().hex[:12]}"
                os.rename(self.root, aside)
                try:
                    os.rename(staging, self.root)
                except BaseException:
                    os.rename(aside, self.root)
                    raise
                staging = aside
            fsync_dir(self.root.parent)
        except MnemologError:
            raise
        except Exception as exc:
            raise MigrationError(f"cannot restore {ref.snapshot_id}: {exc}") from exc
        finally:
            # Before the swap `staging` is the half-built copy; after it, the old tree.
            # Failing to delete either must not turn a finished restore into an error.
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
                if staging.exists():
                    log.warning("could not remove %s after restore; delete it by hand", staging)

    def restore_and_audit(self, ref: MigrationSnapshotRef) -> MigrationEvent:
        return audited_restore(self, ref, clock=self._clock)

    def vault_status(self) -> dict[str, Any]:
        """What `--status` prints: version, unit count, snapshots."""
        return {
            "agents_root": str(self.root),
            "schema_version": self.read_schema_version(),
            "current_schema_version": self.current_schema_version,
            "units": len(self._unit_paths()),
            "snapshots": [r.snapshot_id for r in self.list_snapshots()],
            "diagnostics": list(self.diagnostics),
        }


def _snapshot_order(name: str) -> tuple[str, int]:
    """(timestamp, same-second counter), so `_10` sorts after `_9`."""
    m = re.fullmatch(r"(.{17})_pre_v\d+_migration(?:_(\d+))?\.tar\.gz", name)
    return (m[1], int(m[2] or 1)) if m else (name, 0)


# -- restore helpers ------------------------------------------------------------


def _safe_member_name(name: str) -> PurePosixPath:
    p = PurePosixPath(name)
    if (
        not name
        or "\x00" in name
        or "\\" in name
        or p.is_absolute()
        or any(part in ("..", "") for part in name.split("/"))
    ):
        raise MigrationError(f"unsafe snapshot member name {name!r}")
    return p


def _copy_stream(src: IO[bytes], dest: Path, mode: int) -> None:
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        while chunk := src.read(1 << 20):
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
        os.fchmod(fd, mode & 0o777)
        os.fsync(fd)
    finally:
        os.close(fd)


def _extract(source: Path, staging: Path) -> None:
    """Regular files and directories of a snapshot into `staging`, then its symlinks."""
    links: dict[str, str] = {}
    with open_regular(source) as packed, tarfile.open(fileobj=packed, mode="r:gz") as tar:
        for member in tar:
            if member.name == SIDECAR and member.isfile():
                fh = tar.extractfile(member)
                doc = json.loads(fh.read(16 << 20)) if fh is not None else {}
                if not isinstance(doc, dict) or doc.get("format") != SIDECAR_FORMAT:
                    raise MigrationError(f"{source}: unexpected sidecar {SIDECAR}")
                raw_links = doc.get("symlinks", {})
                if not isinstance(raw_links, dict):
                    raise MigrationError(f"{source}: bad symlink list in {SIDECAR}")
                links = {str(k): str(v) for k, v in raw_links.items()}
                continue
            rel = _safe_member_name(member.name)
            dest = staging.joinpath(*rel.parts)
            if member.isdir():
                dest.mkdir(parents=True, exist_ok=True)
                os.chmod(dest, (member.mode & 0o777) | 0o700)
            elif member.isfile():
                dest.parent.mkdir(parents=True, exist_ok=True)
                fh = tar.extractfile(member)
                if fh is None:
                    raise MigrationError(f"{source}: member {member.name!r} has no data")
                _copy_stream(fh, dest, member.mode)
                os.utime(dest, (member.mtime, member.mtime))
            else:
                raise MigrationError(
                    f"{source}: member {member.name!r} is a link or device; refusing to restore"
                )
    resolved_staging = staging.resolve()
    for name, target in sorted(links.items()):
        rel = _safe_member_name(name)
        dest = staging.joinpath(*rel.parts)
        if os.path.isabs(target) or not (dest.parent / target).resolve().is_relative_to(resolved_staging):
            raise MigrationError(f"{source}: symlink {name!r} -> {target!r} leaves the vault")
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, dest)


def _carry(src: Path, dest: Path) -> None:
    """Recreate `src` at `dest` with hard links, so open files (the lock) stay the same inodes."""
    st = os.lstat(src)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(src), dest)
    elif stat.S_ISDIR(st.st_mode):
        dest.mkdir(mode=stat.S_IMODE(st.st_mode))
        for entry in sorted(os.scandir(src), key=lambda e: e.name):
            _carry(Path(entry.path), dest / entry.name)
    elif stat.S_ISREG(st.st_mode):
        try:
            os.link(src, dest, follow_symlinks=False)
        except OSError:
            shutil.copy2(src, dest, follow_symlinks=False)
    else:
        log.warning("not carrying %s across the restore: not a file, directory or symlink", src)


def _fsync_tree(top: Path) -> None:
    for dirpath, _, _ in os.walk(top):
        with contextlib.suppress(OSError):
            fsync_dir(Path(dirpath))


# -- scrubbing snapshots (forget) --------------------------------------------------


def _note_id(text: str) -> str | None:
    for line in text.splitlines()[:200]:
        if line.startswith("mnemolog_id:"):
            return line.split(":", 1)[1].strip().strip("'\"")
    return None


def _scrub_snapshot(path: Path, gone: Sequence[str]) -> bool:
    """Rewrite one snapshot without the erased subjects (see `scrub_snapshots`); whether it changed."""
    ids = set(gone)
    members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    with tarfile.open(path, mode="r:gz") as tar:
        for info in tar:
            data = None
            if info.isreg():
                f = tar.extractfile(info)
                data = f.read() if f is not None else b""
            members.append((info, data))
    texts: dict[str, str] = {}
    dropped: set[str] = set()
    for info, data in members:
        if data is None:
            continue
        try:
            texts[info.name] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if info.name.endswith(".md") and _note_id(texts[info.name]) in ids:
            dropped.add(info.name)
    names = {PurePosixPath(n).name for n in dropped}
    needles = [*gone, *sorted(names)]
    out: list[tuple[tarfile.TarInfo, bytes | None]] = []
    changed = bool(dropped)
    for info, data in members:
        if info.name in dropped:
            continue
        text = texts.get(info.name)
        if text is None or not any(n in text for n in needles):
            out.append((info, data))
            continue
        lines = text.splitlines(keepends=True)
        scrubbed = "".join(line for line in lines if not any(n in line for n in needles)).encode("utf-8")
        fresh = copy.copy(info)
        fresh.size = len(scrubbed)
        out.append((fresh, scrubbed))
        changed = True
    if not changed:
        return False
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "xb") as raw:
            with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
                for info, data in out:
                    tar.addfile(info, BytesIO(data) if data is not None else None)
            raw.flush()
            os.fsync(raw.fileno())
        os.rename(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True
