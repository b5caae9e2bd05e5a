"""Forgetting: erase content by destroying its data keys, record it, and leave no readable copy in the home.

`forget` selects (projections.erasure: the memories, interactions and
documents, with atoms, candidates, packs and vectors that derive from
them), then, unless it is a dry run:

1. appends signed `memory.erased` events naming what goes (never the
   content; a bulk erasure is several events of at most
   MAX_ERASED_PER_EVENT memories), which the fold applies by deleting every
   row that held it;
2. destroys the data keys of every erased subject, so the sealed entries
   in the log, its exports, tiles and witnesses' copies can never be opened
   again (a pack seals each entry it quoted under that entry's subject's
   key: the packs that quoted it re-render it as a marked gap);
3. scrubs the home's derived files: the embedding cache loses the erased
   texts' vectors (secure delete, vacuum, WAL truncated), and the DuckDB
   projection is rebuilt into a new file, since deleted rows can survive in
   a database file's free pages; vaults named with `vaults` are re-rendered
   and their migration snapshots rewritten without what was erased.

The event is durable before any key is destroyed: a crash between the two
leaves keys that `finish_erasures` (run by every forget) destroys.
"""

from __future__ import annotations

import datetime as dt
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mnemolog.eventlog.errors import NotFound, UsageError
from mnemolog.eventlog.format import sealing
from mnemolog.projections import erasure as eq
from mnemolog.substrate.events.erasure import MAX_ERASED_PER_EVENT, MemoryErased
from mnemolog.substrate.memory import asof

if TYPE_CHECKING:
    from mnemolog.substrate.api import Substrate

__all__ = [
    "RetentionWorker",
    "expired_ids",
    "finish_erasures",
    "parse_before",
    "receipt_paths",
    "write_receipts",
]


def parse_before(value: str | None) -> int | None:
    """`--before TIME` (ISO 8601 UTC) as µs since the epoch; None when not given."""
    if value is None:
        return None
    when = asof.parse(value)
    if not isinstance(when, dt.datetime):
        raise UsageError(
            f"--before takes a UTC time such as 2026-12-01T00:00:00Z, not {value!r}", field="before"
        )
    return int(when.timestamp() * 1_000_000)


def _keys_of(sub: Substrate, seqs: list[int], subjects: set[str]) -> dict[str, list[str]]:
    """subject -> the ids of the data keys its content is sealed under, read from the entries."""
    out: dict[str, list[str]] = {}
    if not seqs:
        return out
    wanted = set(seqs)
    lo, hi = min(seqs), max(seqs) + 1
    # Many entries close together (a bulk erasure) read faster in one sequential pass.
    entries = (
        (e for e in sub.log.iter_entries(lo, hi) if e.seq in wanted)
        if len(seqs) * 4 >= hi - lo
        else (sub.log.entry(seq) for seq in seqs)
    )
    for e in entries:
        for subject in sealing.subjects_of(e.type, e.data):
            if subject in subjects:
                for kid in sealing.key_ids(e.type, e.data, {subject}):
                    if kid not in out.setdefault(subject, []):
                        out[subject].append(kid)
    return out


def _events(
    sel: eq.Selection,
    keys: dict[str, list[str]],
    reason: str | None,
    requested_by: str | None,
    selector: dict[str, Any],
) -> list[MemoryErased]:
    mems = sel.memories or []
    parts = [mems[i : i + MAX_ERASED_PER_EVENT] for i in range(0, len(mems), MAX_ERASED_PER_EVENT)] or [[]]
    out = []
    for n, part in enumerate(parts):
        first = n == 0
        subjects = sorted(set(part) | (set(sel.interactions) | set(sel.documents) if first else set()))
        out.append(
            MemoryErased(
                ids=part,
                interactions=sel.interactions if first else [],
                documents=sel.documents if first else [],
                subjects=subjects,
                keys=sorted({k for s in subjects for k in keys.get(s, [])}),
                reason=reason,
                requested_by=requested_by,
                selector=selector,
            )
        )
    return out


def expired_ids(sub: Substrate) -> list[str]:
    """The memories older than their namespace's effective `retention_days`."""
    now = sub.clock()
    out: list[str] = []
    with sub.session() as s:
        for ns, oldest in sorted(eq.namespace_ages(s.conn).items()):
            days = s.policy(ns)["retention_days"]
            if not isinstance(days, int) or days <= 0:
                continue
            cutoff = now - days * 86_400_000_000
            if oldest < cutoff:
                out += eq.older_than(s.conn, ns, cutoff)
    return out


def receipt_paths(out: Path, n: int) -> list[Path]:
    """Where the receipts of an erasure of `n` events go: `out`, then `out.2`, `out.3`, ..."""
    return [out] + [out.with_name(f"{out.name}.{i}") for i in range(2, n + 1)]


def write_receipts(sub: Substrate, seqs: list[int], out: Path) -> list[str]:
    """One receipt (eventlog.receipt: a one-entry log export, no keys) per memory.erased seq."""
    from mnemolog.substrate.forensics import service as forensics

    paths = receipt_paths(out, len(seqs))
    for seq, path in zip(seqs, paths, strict=True):
        forensics.export_log(sub.home, seq, seq, path, with_keys=False)
    return [str(p) for p in paths]


def finish_erasures(sub: Substrate, key_ids: list[str]) -> list[str]:
    """Destroy the keys an erasure in the log named but a crash left behind; returns them."""
    return sub.keys.destroy(key_ids) if key_ids else []


def _scrub(sub: Substrate, sel: eq.Selection) -> list[str]:
    """Leave no copy of the erased content in the home's derived files; what was scrubbed."""
    done = []
    if sel.shas:
        sub.projections.cache.erase(sel.shas)
        done.append("embedding_cache")
    # As-of projections fold the log with the keys that were: drop them with the rest.
    sub._asof.close()
    asof_dir = sub.home.projections_path() / asof.ASOF_DIR
    if asof_dir.is_dir():
        shutil.rmtree(asof_dir, ignore_errors=True)
    # Deleted rows can survive in DuckDB's free pages: a new file holding a copy of the live
    # rows replaces the old one (a copy, not a refold of the log: the erasure's rows are
    # already gone, and a refold of a large home cost many times the erasure itself).
    with sub._lock:
        sub.projections.rewrite()
    tmp = sub.home.projections_path() / "duckdb.tmp"
    if tmp.is_dir():
        shutil.rmtree(tmp, ignore_errors=True)
    done.append("projection")
    return done


class RetentionWorker:
    """Runs `forget --expired` in a long-lived process: soon after it starts, then every `interval_s`.

    Each run is recorded like any erasure (reason "retention", requested by
    "retention"); a run that finds nothing expired writes nothing. A failure
    is kept in `last_error` and the next run tries again.
    """

    def __init__(self, sub: Substrate, interval_s: float = 3600.0, first_after_s: float = 5.0) -> None:
        self.sub = sub
        self.interval_s = interval_s
        self.first_after_s = first_after_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs = 0
        self.last_error: str | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True, name="retention")
        self._thread.start()

    def _loop(self) -> None:
        wait = self.first_after_s
        while not self._stop.wait(wait):
            wait = self.interval_s
            try:
                self.sub.erasure.forget(expired=True, requested_by="retention")
                self.last_error = None
            except Exception as exc:  # a worker must outlive one failed run; the error is kept
                self.last_error = str(exc)
            self.runs += 1

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)


class Erasure:
    """Forgetting over an open home (`Substrate.erasure`)."""

    def __init__(self, sub: Substrate) -> None:
        self.sub = sub

    def forget(
        self,
        memory_ids: Sequence[str] | None = None,
        *,
        namespace: str | None = None,
        project: str | None = None,
        document: str | None = None,
        interaction: str | None = None,
        before: str | None = None,
        reason: str | None = None,
        requested_by: str | None = None,
        dry_run: bool = False,
        vaults: Sequence[str | Path] = (),
        receipt: str | Path | None = None,
        expired: bool = False,
    ) -> dict[str, Any]:
        """Forget content: by memory ids, or every memory a selector picks (all given selectors hold).

        Writes signed `memory.erased` events (ids, reason, who asked; never the
        content), destroys the data keys of everything erased and what derives
        from it (atoms, candidates and their interaction, a document's chunks,
        the packs that quoted it), deletes their rows, vectors and embedding
        cache entries, and rebuilds the projection into a new file.
        `dry_run` lists all of that and changes nothing; `vaults` are re-rendered
        after it (their notes, journal and run-log lines of it go); `receipt` is
        where the erasure receipt goes (eventlog.receipt); `expired` erases what
        the namespaces' `retention_days` policies let expire. See substrate.erasure.
        """
        ids = list(memory_ids) if memory_ids else None
        requested_by = requested_by or "api"
        vault_roots = [Path(p) for p in vaults]
        receipt_path = Path(receipt) if receipt is not None else None
        if expired:
            if any(x is not None for x in (ids, namespace, project, document, interaction, before)):
                raise UsageError(
                    "--expired selects by the namespaces' retention policies: give no other selector"
                )
            ids = expired_ids(self.sub)
            if not ids:
                return {
                    "dry_run": dry_run,
                    "selector": {"expired": True},
                    **eq.Selection().to_json(),
                    "erased": 0,
                    "seqs": [],
                }
            reason = reason or "retention"
            requested_by = requested_by or "retention"
            selector_override: dict[str, Any] | None = {"expired": True}
        else:
            selector_override = None
        selector = {
            k: x
            for k, x in {
                "ids": ids,
                "namespace": namespace,
                "project": project,
                "document": document,
                "interaction": interaction,
                "before": before,
            }.items()
            if x is not None
        }
        if selector_override is not None:
            selector = selector_override
        if not selector:
            raise UsageError(
                "forget needs a memory id or a selector (namespace, project, document, interaction, before)"
            )
        before_us = parse_before(before)
        with self.sub.session() as s:
            finish_erasures(self.sub, eq.erased_keys(s.conn))
            sel = eq.select(
                s.conn,
                ids=list(ids) if ids is not None else None,
                namespace=namespace,
                project=project,
                document=document,
                interaction=interaction,
                before_us=before_us,
            )
            if ids:
                missing = sorted(set(ids) - set(sel.memories))
                if missing:
                    gone = eq.erased(s.conn, missing)
                    what = (
                        f"memory {missing[0]} was erased at seq {gone[missing[0]][0]}"
                        if missing[0] in gone
                        else f"no memory with id {missing[0]!r}"
                    )
                    raise NotFound(what, id=missing[0])
            report: dict[str, Any] = {"dry_run": dry_run, "selector": selector, **sel.to_json()}
            if dry_run or sel.empty():
                report["erased"] = 0
                report["seqs"] = []
                return report
            keys = _keys_of(self.sub, eq.sealing_seqs(s.conn, sel), set(sel.subjects))
            receipts = s.append_many(_events(sel, keys, reason, requested_by, selector))
        self.sub.keys.forget_subjects(sel.subjects)
        destroyed = self.sub.keys.destroy({k for ks in keys.values() for k in ks})
        report["erased"] = len(sel.memories)
        report["seqs"] = [r.seq for r in receipts]
        report["keys_destroyed"] = len(destroyed)
        report["scrubbed"] = _scrub(self.sub, sel)
        if receipt_path is not None:
            report["receipts"] = write_receipts(self.sub, report["seqs"], receipt_path)
        for root in vault_roots:
            # A re-render removes the notes of memories that are gone, and the journal and run-log
            # lines of the interactions and calls that went with them.
            from mnemolog.substrate.vault import service as vault

            vault.render(self.sub, root)
            report.setdefault("scrubbed", []).append(f"vault:{root}")
            # The vault's migration snapshots are copies of it from before a migration: they lose
            # the erased notes and every line naming what was erased.
            from mnemolog.substrate.migrations.filesystem import FilesystemMigrationBackend

            subjects = [*sel.memories, *sel.interactions, *sel.documents]
            for name in FilesystemMigrationBackend(Path(root)).scrub_snapshots(subjects):
                report["scrubbed"].append(f"snapshot:{Path(root) / '_migrations' / 'snapshots' / name}")
        return report
