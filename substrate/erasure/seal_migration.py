"""`migrate seal`: move a home written before sealing to a new home whose log holds no content in clear.

Entries written before sealed content existed (a sealing type at an older
tv) carry what a memory says in clear, inside signed and hashed bytes: they
cannot be redacted in place without breaking every signature, checkpoint
and proof after them. This moves the whole home instead, and records that it
did:

1. the old home is held still: its serving lease and its log's writer lock
   are taken for the whole run, a checkpoint covering every entry is signed,
   and the old log is verified under the home's own trust anchor (a log that
   does not verify is refused and nothing is written);
2. a new home is built beside the target (`.<name>.sealing`), with a new log
   id and a new signing key named for it; its genesis entry records where it
   came from (`migrated_from`: the old log's id, its last checkpoint as the
   old key signed it, and a hand-off signature of the old key over the old
   checkpoint and the new log's id and key);
3. every entry of the old log is carried over *at the same seq*, so every
   back-chain pointer, request seq, snapshot size and heads commitment stays
   true, with the same ts (the old log's timeline: a memory keeps its
   created_at, recall its recency): content of a sealing type is sealed
   under a fresh data key of its subject's (a plaintext entry is upcast to
   the current sealing version first; a box that still opens is sealed again;
   a box whose key was destroyed is carried as it is), and the content of
   subjects the old log erased is sealed under a key that is never stored,
   so it cannot be opened in the new log either. The old log's `key.rotated`
   entries leave a `log.not_carried` in their place (the new log has its own
   key history), entries that predate back-chains get their pointers, and a
   checkpoint is signed at every size a log-backed schema migration took as
   its snapshot, so `migrate rollback` still finds it;
4. the new log is verified, its projection folded and compared with the old
   home's (memories, links, interactions, candidates, projects, state,
   documents, packs): any difference refuses the migration;
5. the finished home is renamed to the target in one step.

Nothing in the old home is changed (beyond the checkpoint it signs and the
locks it takes): once the new home is in use, the old one is removed as a
whole. A run that stops half way leaves only `.<name>.sealing`, which the
next run refuses to build over (remove it: the old home is intact).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from mnemolog.eventlog.errors import (
    Informational,
    MnemologError,
    StorageError,
    UsageError,
    VerificationError,
)
from mnemolog.eventlog.format import sealing
from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.store.fsio import atomic_write, fsync_dir
from mnemolog.eventlog.store.lock import FileLock
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.writer import Durability, system_clock
from mnemolog.eventlog.verify import provenance
from mnemolog.eventlog.verify.provenance import HANDOFF_CONTEXT, MIGRATED_FROM, handoff_message
from mnemolog.eventlog.verify.trust import ROTATION_TYPE, origin_for
from mnemolog.eventlog.verify.verifier import verify_log
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.substrate.erasure.datakeys import DataKeys
from mnemolog.substrate.home import Home, default_config_text, init_home, parse_config

__all__ = [
    "HANDOFF_CONTEXT",
    "MIGRATED_FROM",
    "HomeBusy",
    "MigrationIncomplete",
    "SealMigrationFailed",
    "TargetExists",
    "check_provenance",
    "handoff_message",
    "seal_home",
    "staging_path",
]

BATCH: Final = 256
NOT_CARRIED_REASON: Final = "the old log's key history: the new log has its own"
#: Projection tables whose rows a migration must leave exactly as they were (seqs and ts included).
COMPARED: Final = (
    "memories",
    "links",
    "interactions",
    "candidates",
    "projects",
    "project_aliases",
    "project_state",
    "policies",
    "tokens",
    "ctx_documents",
    "ctx_chunks",
    "ctx_packs",
    "ctx_pack_members",
)


class TargetExists(UsageError):
    """The target of `migrate seal` exists and is not an empty directory (exit 64)."""

    slug = "target_exists"


class MigrationIncomplete(StorageError):
    """A run that stopped half way left its unfinished home; nothing is built over it (exit 6)."""

    slug = "migration_incomplete"


class HomeBusy(StorageError):
    """The old home was written to while it was being moved (exit 6)."""

    slug = "home_busy"


class SealMigrationFailed(StorageError):
    """The new home would not hold what the old one does: nothing was moved (exit 6)."""

    slug = "seal_migration_failed"


def staging_path(target: Path) -> Path:
    """Where the new home is built before it is renamed to `target`."""
    return target.parent / f".{target.name}.sealing"


def check_provenance(log: Log) -> dict[str, Any] | None:
    """A migrated log's `migrated_from`, checked (eventlog.verify.provenance); None if not migrated."""
    return provenance.check_provenance(log.genesis)


# -- the run ------------------------------------------------------------------------------


@dataclass
class _Plan:
    """What a pass over the old log found before anything is written."""

    erased: set[str] = field(default_factory=set)  # subjects an erasure named
    snapshots: set[int] = field(default_factory=set)  # sizes log-backed migrations took
    plaintext: int = 0  # entries carrying content in clear
    sealed: int = 0  # entries already sealed


class _TsClock:
    """The writer's clock during the carry: each entry gets the ts of the entry it carries.

    The writer asks its clock once per entry, in order (and never lets ts go
    back); the carry checks every receipt against what it asked for.
    """

    def __init__(self) -> None:
        self.queue: deque[int] = deque()
        self.last = 0

    def __call__(self) -> int:
        if self.queue:
            self.last = self.queue.popleft()
        return self.last


def _plan(log: Log, size: int) -> _Plan:
    p = _Plan()
    for e in log.iter_entries(0, size):
        if e.type == v.MEMORY_ERASED:
            for f in ("subjects", "ids", "interactions", "documents"):
                xs = e.data.get(f)
                if isinstance(xs, list):
                    p.erased |= {x for x in xs if isinstance(x, str) and x}
        elif e.type == v.MIGRATION_STARTED:
            n = v.read_int(e.data.get("snapshot_size"))
            if n is not None and 1 < n <= size:
                p.snapshots.add(n)
        if e.type in v.SEALED:
            if v.seals(e.type, e.tv):
                p.sealed += 1
            elif any(f in e.data for f in v.SEALED[e.type].fields):
                p.plaintext += 1
    return p


def _check_target(old: Home, target: Path) -> None:
    old_r, tgt = old.root.resolve(), target.resolve()
    if tgt == old_r or tgt.is_relative_to(old_r) or old_r.is_relative_to(tgt):
        raise UsageError(
            f"the target {target} must lie outside the home {old.root} (and not contain it): "
            "the old home is removed as a whole once the new one is in use",
            field="to",
        )
    if not target.parent.is_dir():
        raise UsageError(f"the target's parent {target.parent} is not a directory", field="to")
    staging = staging_path(target)
    if staging.exists() or staging.is_symlink():
        raise MigrationIncomplete(
            f"{staging} holds a migration that did not finish; the home {old.root} is untouched: "
            f"remove {staging} and run `migrate seal` again",
            file=str(staging),
        )
    if target.is_symlink() or (target.exists() and (not target.is_dir() or any(target.iterdir()))):
        raise TargetExists(
            f"{target} exists and is not an empty directory; give a new path for the sealed home",
            file=str(target),
        )


def _carried_config(old_text: str, key_name: str, log_id: bytes) -> tuple[str, list[str]]:
    """The old config.toml with the new key name and log id (and no high-water copy of the old log's)."""
    notes: list[str] = []
    out: list[str] = []
    table = ""
    seen_id = False
    for line in old_text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("[") and not stripped.startswith("[["):
            if table == "log" and not seen_id:
                out.append(f'id = "{log_id.hex()}"\n')
                seen_id = True
            table = stripped.strip("[]").split("]")[0].strip()
            out.append(line)
            if table == "log":
                # The id comes first in the table, where `init` writes it.
                out.append(f'id = "{log_id.hex()}"\n')
                seen_id = True
            continue
        key = stripped.split("=", 1)[0].strip() if "=" in stripped and not stripped.startswith("#") else ""
        if table == "key" and key == "name":
            out.append(f'name = "{key_name}"\n')
        elif table == "log" and key == "id":
            continue
        elif table == "trust" and key == "high_water_copy":
            out.append(f"# {stripped}  (the old log's; `migrate seal` left it out)\n")
            notes.append(
                "[trust] high_water_copy named the old log's copy and was commented out: "
                "give the new home a copy of its own"
            )
        else:
            out.append(line)
    if not seen_id:
        out.append(f'\n[log]\nid = "{log_id.hex()}"\n')
    text = "".join(out)
    try:
        cfg = parse_config(text)
        ok = cfg.log.log_id == log_id and cfg.key_name == key_name and cfg.trust.high_water_copy is None
    except MnemologError:
        ok = False
    if not ok:
        notes.append("config.toml could not be carried over as it was: the new home has the default one")
        return default_config_text(key_name, log_id), notes
    return text, notes


def _copy_cache(old: Home, new: Home) -> bool:
    """The old home's embedding cache (text hashes -> vectors, no text) into the new projection directory."""
    from mnemolog.projections.embedding.cache import CACHE_FILE

    src = old.projections_path() / CACHE_FILE
    if not src.is_file():
        return False
    dst_dir = new.projections_path()
    dst_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as a, sqlite3.connect(dst_dir / CACHE_FILE) as b:
        a.backup(b)
    a.close()
    b.close()
    return True


def _rows(sub: Any) -> dict[str, list[tuple[Any, ...]]]:
    out: dict[str, list[tuple[Any, ...]]] = {}
    with sub.session() as s:
        for t in COMPARED:
            out[t] = sorted(s.conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
    return out


def _differences(a: dict[str, list[tuple[Any, ...]]], b: dict[str, list[tuple[Any, ...]]]) -> list[str]:
    diffs = []
    for t in COMPARED:
        if a[t] != b[t]:
            only_a = [r for r in a[t] if r not in b[t]][:1]
            only_b = [r for r in b[t] if r not in a[t]][:1]
            diffs.append(
                f"{t}: {len(a[t])} rows before, {len(b[t])} after; e.g. {only_a!r:.200} vs {only_b!r:.200}"
            )
    return diffs


def seal_home(
    home: Home,
    target: Path,
    *,
    force: bool = False,
    clock: Callable[[], int] = system_clock,
    _after_batch: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Move `home` to a new, sealed home at `target` (see the module docstring); the report.

    Refused (nothing written but the checkpoint): a target that exists and is
    not empty, a left-over unfinished run, a home whose log does not verify,
    a home written to during the run, and (unless `force`) a home whose log
    holds no content in clear.
    """
    from mnemolog.substrate.api import Substrate
    from mnemolog.substrate.tenancy.tenants import Lease

    home.require()
    target = Path(os.path.abspath(target))
    _check_target(home, target)
    lease = Lease(home, f"migrate seal (pid {os.getpid()})")
    lease.take()
    try:
        with home.open_writer(periodic_checkpoints=False, checkpoint_on_close=False) as w:
            old_cp, old_note = w.checkpoint()
            old_key = w.key
        lock = FileLock(home.log_dir / ".lock", home.config.log.lock_timeout_s, "log writer lock")
        with lock:
            log = Log(home.log_dir)
            try:
                if log.refresh() != old_cp.size:
                    raise HomeBusy(
                        f"{home.root} was written to while its log was being checkpointed; stop its "
                        "writers and run `migrate seal` again",
                    )
                try:
                    verify_log(home.log_dir, policy=home.trust_anchor(), high_water=home.high_water_marks())
                except VerificationError as exc:
                    raise VerificationError(
                        f"the log of {home.root} does not verify, so it is not migrated (nothing was "
                        f"written): {exc.message}",
                        **exc.details,
                    ) from exc
                plan = _plan(log, old_cp.size)
                if plan.plaintext == 0 and not force:
                    raise Informational(
                        f"the log of {home.root} holds no content in clear: nothing to migrate "
                        "(--force moves it to a new log and new data keys all the same)"
                    )
                staging = staging_path(target)
                try:
                    report = _build(home, log, staging, old_cp, old_note, old_key, plan, clock, _after_batch)
                    if log.refresh() != old_cp.size:
                        raise HomeBusy(f"{home.root} was written to during the migration; run it again")
                    with Substrate.open(home, long_lived=False, worker=False) as old_sub:
                        before = _rows(old_sub)
                    with Substrate.open(staging, long_lived=False, worker=False) as new_sub:
                        after = _rows(new_sub)
                    diffs = _differences(before, after)
                    if diffs:
                        raise SealMigrationFailed(
                            "the new home would not hold what the old one does; nothing was moved: "
                            + "; ".join(diffs),
                        )
                    report["memories"] = len(after["memories"])
                    _fsync_tree(staging)
                    if target.exists():
                        target.rmdir()  # empty (checked): the rename takes its place
                    os.rename(staging, target)
                    fsync_dir(target.parent)
                except BaseException:
                    # Ours alone: the old home is untouched, so nothing is lost with it.
                    shutil.rmtree(staging, ignore_errors=True)
                    raise
            finally:
                log.close()
    finally:
        lease.release()
    report["home"] = str(target)
    return report


def _build(
    old: Home,
    log: Log,
    staging: Path,
    old_cp: Any,
    old_note: bytes,
    old_key: SigningKey,
    plan: _Plan,
    clock: Callable[[], int],
    after_batch: Callable[[int], None] | None,
) -> dict[str, Any]:
    genesis = log.genesis
    new_id = os.urandom(16)
    new_key = SigningKey.generate(origin_for(new_id))
    old_id = log.log_id
    provenance = {
        "log_id": old_id,
        "checkpoint": old_note,
        "vkey": old_key.verifier.vkey(),
        "handoff": old_key.sign(
            handoff_message(old_id, old_cp.size, old_cp.root, new_id, new_key.public_key)
        ),
        "migrated_at": clock(),
    }
    staging.mkdir(mode=0o700)
    init_home(
        staging,
        clock=lambda: genesis.ts,
        log_id=new_id,
        key=new_key,
        genesis_extra={MIGRATED_FROM: provenance},
    )
    new = Home(staging)
    text, notes = _carried_config(old.config_path.read_text(encoding="utf-8"), new_key.name, new_id)
    atomic_write(new.config_path, text.encode(), mode=0o600)
    old_keys = DataKeys(old.root)
    new_keys = DataKeys(staging)
    throwaway: dict[str, tuple[str, bytes]] = {}
    ts_clock = _TsClock()
    counts = {"carried": 0, "sealed_from_clear": 0, "resealed": 0, "not_carried": 0}
    heads: dict[str, int] = {}
    new_roots: dict[int, bytes] = {}
    # (type, payload, tv, ts, content in clear)
    pending: list[tuple[str, dict[str, Any], int, int, bool]] = []

    def key_for_erased(s: str) -> tuple[str, bytes]:
        # Forgotten in the old log: sealed under a key that no store ever holds.
        if s not in throwaway:
            throwaway[s] = (sealing.new_key_id(), sealing.new_key())
        return throwaway[s]

    with new.open_writer(
        durability=Durability("fsync"), clock=ts_clock, periodic_checkpoints=False, checkpoint_on_close=True
    ) as w:

        def flush() -> None:
            if not pending:
                return
            subjects = {s for t, d, tv, _, _ in pending if v.seals(t, tv) for s in sealing.subjects_of(t, d)}
            fresh = new_keys.ensure(sorted(subjects - plan.erased))

            def key_for(s: str) -> tuple[str, bytes]:
                return fresh[s] if s in fresh else key_for_erased(s)

            items = []
            for t, data, tv, ts, clear in pending:
                if clear:
                    d = sealing.seal_payload(t, data, key_for)
                elif v.seals(t, tv):
                    d = sealing.reseal_payload(t, data, old_keys.get, key_for)
                else:
                    d = data
                subs = d.get("subjects") if t == v.MEMORY_ERASED else None
                if isinstance(subs, list) and isinstance(d.get("keys"), list):
                    # The erasure names the keys its subjects' entries are sealed under now too.
                    named = {throwaway[x][0] for x in subs if isinstance(x, str) and x in throwaway}
                    d = {**d, "keys": sorted({*d["keys"], *named})}
                items.append((t, d, tv))
                ts_clock.queue.append(ts)
            receipts = w.append_many(items, first_seq=w.size)
            for r, (_, _, _, ts, _) in zip(receipts, pending, strict=True):
                if r.ts != ts:
                    raise SealMigrationFailed(f"entry {r.seq} was written with ts {r.ts}, not {ts}")
            pending.clear()
            if after_batch is not None:
                after_batch(w.size)

        for e in log.iter_entries(1, old_cp.size):
            t, tv, d, clear = e.type, e.tv, dict(e.data), False
            if t == ROTATION_TYPE:
                t, tv, clear = v.LOG_NOT_CARRIED, 1, False
                d = {
                    "type": e.type,
                    "tv": e.tv,
                    "reason": "the old log's key history: the new log has its own",
                }
                counts["not_carried"] += 1
            else:
                counts["carried"] += 1
                if t in v.SEALED and not v.seals(t, tv):
                    # Written before sealing: its content in clear, brought to the sealing version.
                    d, tv, clear = v.upcast(t, tv, d), v.upcast_chain_end(t), True
                    counts["sealed_from_clear"] += 1
                elif v.seals(t, tv):
                    counts["resealed"] += 1
                if t == v.MIGRATION_STARTED:
                    n = v.read_int(d.get("snapshot_size"))
                    if n is not None and n in new_roots:
                        d = {**d, "snapshot_root": new_roots[n].hex()}
            touched = v.touched_ids(t, v.upcast(t, tv, d))
            if touched and v.chained(t, tv) and v.TOUCH_PREV not in d:
                # Written before back-chains: the pointers the entry would have had.
                d = {**d, v.TOUCH_PREV: {m: heads.get(m, v.FIRST_TOUCH) for m in touched}}
            for m in touched:
                heads[m] = e.seq
            pending.append((t, d, tv, e.ts, clear))
            if len(pending) >= BATCH or e.seq + 1 in plan.snapshots:
                flush()
            if e.seq + 1 in plan.snapshots:
                snap, _ = w.checkpoint()
                new_roots[snap.size] = snap.root
        flush()
        cp, _ = w.checkpoint()
    counts["erased_subjects"] = len(throwaway)
    verify_log(staging / "log", policy=new.trust_anchor(), high_water=new.high_water_marks())
    _copy_cache(old, new)
    carried_dirs = []
    for name in ("migrations",):
        src = old.root / name
        if src.is_dir() and not src.is_symlink():
            shutil.copytree(src, staging / name, symlinks=True)
            carried_dirs.append(name)
    known = {"config.toml", "keys", "log", "state", "projections", "datakeys", *carried_dirs}
    left = sorted(p.name for p in old.root.iterdir() if p.name not in known and not p.name.startswith("."))
    return {
        "from": {
            "home": str(old.root),
            "log_id": old_id.hex(),
            "size": old_cp.size,
            "root": old_cp.root.hex(),
        },
        "log_id": new_id.hex(),
        "vkey": new_key.verifier.vkey(),
        "size": cp.size,
        "plaintext_entries": plan.plaintext,
        **counts,
        "snapshots_checkpointed": sorted(plan.snapshots),
        "not_copied": left,
        "notes": notes,
    }


def _fsync_tree(root: Path) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            if os.path.islink(p):
                continue
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))
