"""The atomise engine: a long memory becomes 2..10 atoms, every step a signed event.

For one atomisation the log receives, in order: one `memory.stored` per atom
(kind observation, `atom_of` = the parent, namespace and tags inherited, a
`source_span` when the atom's text appears verbatim in the parent), each
followed by its signed `derives_from` `link.created`, then one
`atomisation.completed` (curator, model, prompt sha256, token counts, atom
ids, and the model's raw output, so replay never calls a model), then the
parent's archive as its own `memory.archived` (by = "atomisation"). Hooks and
governance run for every atom and every edge; a refusal mid-batch names the
refused atom and leaves the atoms before it in place (each was a valid write).

The curator runs outside the projection lock (an LLM call takes seconds);
the state it was asked about is re-checked before anything is written.

Three ways in: `atomise()` (CLI, MCP, API), synchronous policies (inside the
store call), and deferred policies (`atomisation.requested`, drained by a
worker; pending work is derived from the log, so a crash loses none and a
request completes exactly once).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import duckdb

from mnemolog.curators.base import Curator, CuratorFailed, SourceTooSmall, TierLocked
from mnemolog.curators.config import HOST_ENV, MODEL_ENV, LlmConfig, make_curator, resolve_llm
from mnemolog.curators.tokens import DEFAULT_ATOM_TOKENS, check_max_atom_tokens, count_tokens
from mnemolog.eventlog.errors import Informational, LockTimeout, MnemologError, NotFound, UsageError
from mnemolog.eventlog.lock import FileLock
from mnemolog.eventlog.log import Log
from mnemolog.projections import recall as q
from mnemolog.substrate.events import (
    AtomisationCompleted,
    AtomisationFailed,
    AtomisationRequested,
    LinkCreated,
    MemoryArchived,
    MemoryStored,
    Payload,
)
from mnemolog.substrate.governance import ResolvedPolicy
from mnemolog.substrate.hooks import GovernanceRefused

if TYPE_CHECKING:
    from mnemolog.substrate.api import Substrate

MAX_DEPTH = 3
CURATORS = ("ollama", "rules")


class DepthExceeded(MnemologError):
    exit_code = 7
    slug = "depth_exceeded"


class AlreadyAtomised(Informational):
    slug = "already_atomised"


def iso(us: int | None) -> str | None:
    if us is None:
        return None
    return dt.datetime.fromtimestamp(us / 1e6, dt.UTC).isoformat().replace("+00:00", "Z")


@dataclass
class AtomiseResult:
    """The envelope of the seed: {source_id, atom_ids, atom_count, archived_at}."""

    source_id: str
    atom_ids: list[str]
    archived_at: str | None
    already_atomised: bool = False
    skipped: str | None = None  # "source_too_small" when there was nothing to split
    curator: str | None = None
    model: str | None = None
    warnings: list[str] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    completion_seq: int | None = None

    @property
    def exit_code(self) -> int:
        return 1 if (self.already_atomised or self.skipped) else 0

    def envelope(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source_id": self.source_id,
            "atom_ids": self.atom_ids,
            "atom_count": len(self.atom_ids),
            "archived_at": self.archived_at,
        }
        if self.already_atomised:
            out["already_atomised"] = True
        if self.skipped:
            out["skipped"] = self.skipped
        if self.curator:
            out["curator"] = self.curator
            out["model"] = self.model
        if self.warnings:
            out["warnings"] = self.warnings
        if self.dropped:
            out["dropped"] = self.dropped
        if self.completion_seq is not None:
            out["completion_seq"] = self.completion_seq
        return out


def find_span(parent: str, atom: str) -> list[int] | None:
    i = parent.find(atom)
    return [i, i + len(atom)] if i >= 0 else None


class Atomiser:
    def __init__(self, sub: Substrate, curator_options: Mapping[str, Any] | None = None) -> None:
        self.sub = sub
        self.curator_options = dict(curator_options or {})
        self._worker_lock = FileLock(sub.home.projections_dir / ".worker.lock", 0.0, "worker lock")
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()

    # -- configuration -------------------------------------------------------

    def llm(self) -> LlmConfig | None:
        cfg = self.sub.home.config.llm
        return resolve_llm(os.environ.get(HOST_ENV) or cfg.host, os.environ.get(MODEL_ENV) or cfg.model)

    def curator(self, name: str) -> Curator:
        if name not in CURATORS:
            raise UsageError(f"unknown curator {name!r} (ollama or rules)", field="curator")
        return make_curator(name, self.llm(), **self.curator_options)

    # -- the engine ------------------------------------------------------------

    def depth(self, conn: duckdb.DuckDBPyConnection, memory_id: str) -> int:
        d, cur, seen = 0, memory_id, set()
        while True:
            row = conn.execute("SELECT atom_of FROM memories WHERE id = ?", [cur]).fetchone()
            if row is None or row[0] is None or row[0] in seen:
                return d
            seen.add(cur)
            cur = row[0]
            d += 1

    def existing_atoms(self, conn: duckdb.DuckDBPyConnection, memory_id: str) -> list[str]:
        """The atoms of the latest completed atomisation of `memory_id`."""
        row = conn.execute(
            "SELECT detail FROM atomisations WHERE source_id = ? AND status = 'completed' "
            "ORDER BY seq DESC LIMIT 1",
            [memory_id],
        ).fetchone()
        if row is None:
            return []
        return list(json.loads(row[0]).get("atom_ids", []))

    def atomise(
        self,
        memory_id: str,
        *,
        force: bool = False,
        max_atom_tokens: int | None = None,
        curator: str | None = None,
        mode: str = "manual",
        max_retries: int | None = None,
        request_seq: int | None = None,
    ) -> AtomiseResult:
        """Atomise one memory now. Raises the seed's errors (exit codes 2, 3, 4, 5, 7)."""
        if curator is not None:
            # Tier gating comes before any read, as the seed requires.
            self.curator(curator)
        if max_atom_tokens is not None:
            check_max_atom_tokens(max_atom_tokens)
        sub = self.sub
        with sub.session() as conn:
            parent = q.get(conn, memory_id)
            if parent is None:
                raise NotFound(f"no memory with id {memory_id!r}", id=memory_id)
            policy = sub.policy_for(conn, parent["namespace"])
            name = curator or str(policy["curator"])
            cur = self.curator(name)
            budget = max_atom_tokens or int(policy["auto_atomise_max_atom_tokens"] or DEFAULT_ATOM_TOKENS)
            retries = max_retries if max_retries is not None else policy.retries_for(mode)
            depth = self.depth(conn, memory_id)
            if depth + 1 > MAX_DEPTH:
                raise DepthExceeded(
                    f"memory {memory_id} is at atomisation depth {depth}; its atoms would be at "
                    f"depth {depth + 1}, beyond the cap of {MAX_DEPTH}",
                    id=memory_id,
                    depth=depth,
                    max_depth=MAX_DEPTH,
                )
            if (parent["atomised_into"] or 0) > 0 and not force:
                return AtomiseResult(
                    memory_id,
                    self.existing_atoms(conn, memory_id),
                    iso(parent["atomisation_archived_at"]),
                    already_atomised=True,
                )
            content = parent["content"]
            if count_tokens(content) <= budget:
                raise SourceTooSmall(
                    f"memory {memory_id} has {count_tokens(content)} tokens, which fit in one atom "
                    f"of {budget}: nothing to atomise",
                    id=memory_id,
                )
            snapshot = (parent["last_event_seq"], parent["atomised_into"])
        # The curator runs without the projection lock.
        try:
            result = cur.curate(content, max_atom_tokens=budget, max_retries=retries)
        except CuratorFailed as exc:
            self._failed(memory_id, name, exc.reason, exc.message, exc.attempts, request_seq, exc.responses)
            raise
        except SourceTooSmall:
            raise
        with sub.session() as conn:
            parent = q.get(conn, memory_id)
            if parent is None:  # pragma: no cover - memories are never deleted
                raise NotFound(f"no memory with id {memory_id!r}", id=memory_id)
            changed = (parent["last_event_seq"], parent["atomised_into"]) != snapshot
            if changed and not force and (parent["atomised_into"] or 0) > 0:
                # Someone else atomised it while the curator ran.
                return AtomiseResult(
                    memory_id,
                    self.existing_atoms(conn, memory_id),
                    iso(parent["atomisation_archived_at"]),
                    already_atomised=True,
                )
            previous = self.existing_atoms(conn, memory_id) if force else []
            return self._write(conn, parent, result, budget, name, force, previous, request_seq)

    def _write(
        self,
        conn: duckdb.DuckDBPyConnection,
        parent: dict[str, Any],
        result: Any,
        budget: int,
        curator: str,
        force: bool,
        previous: list[str],
        request_seq: int | None,
    ) -> AtomiseResult:
        sub = self.sub
        pid = parent["id"]
        atom_ids: list[str] = []
        n = len(result.atoms)
        for i, atom in enumerate(result.atoms):
            payload = sub.build_stored(
                atom.text,
                namespace=parent["namespace"],
                kind="observation",
                title=atom.title,
                tags=parent["tags"],
                atom_of=pid,
                source_span=find_span(parent["content"], atom.text),
                metadata={
                    "atom_index": i,
                    "atom_count": n,
                    "atom_tokens": atom.tokens,
                    **({"over_budget": True} if atom.over_budget else {}),
                    **({"section": atom.context} if atom.context else {}),
                },
            )
            try:
                sub.write_memory(conn, payload, atom_index=i)
                atom_ids.append(payload.id)
                sub.write_link(
                    conn, LinkCreated(src=payload.id, dst=pid, relation="derives_from"), atom_index=i
                )
            except GovernanceRefused as exc:
                sub._append(
                    conn,
                    "atomisation.failed",
                    AtomisationFailed(
                        source_id=pid,
                        curator=curator,
                        reason="governance_refused",
                        message=exc.message,
                        attempts=result.attempts,
                        refused_atom_index=i,
                        atom_ids=atom_ids,
                        request_seq=request_seq,
                    ),
                )
                exc.details["refused_atom_index"] = i
                exc.details["atom_ids"] = list(atom_ids)
                exc.details["source_id"] = pid
                raise
        completed = AtomisationCompleted(
            source_id=pid,
            atom_ids=atom_ids,
            curator=curator,
            model=result.model,
            prompt_sha256=result.prompt_sha256,
            input_tokens=result.input_tokens,
            output_tokens=result.output_tokens,
            atom_tokens=[a.tokens for a in result.atoms],
            max_atom_tokens=budget,
            attempts=result.attempts,
            dropped=[{"index": d.index, "tokens": d.tokens, "reason": d.reason} for d in result.dropped],
            warnings=list(result.warnings),
            responses=list(result.responses),
            forced=force,
            previous_atom_ids=previous,
            request_seq=request_seq,
        )
        r = sub._append(conn, "atomisation.completed", completed)
        for old in previous:
            # Re-atomised: the old atoms stay in the log and the store, out of default recall.
            sub._append(
                conn,
                "memory.archived",
                MemoryArchived(id=old, by="reatomisation", reason=f"superseded by atomisation {r.seq}"),
            )
        sub._append(conn, "memory.archived", MemoryArchived(id=pid, by="atomisation", atomised_into=n))
        after = q.get(conn, pid)
        return AtomiseResult(
            pid,
            atom_ids,
            iso(after["atomisation_archived_at"] if after else None),
            curator=curator,
            model=result.model,
            warnings=list(result.warnings),
            dropped=completed.dropped,
            completion_seq=r.seq,
        )

    def _failed(
        self,
        memory_id: str,
        curator: str,
        reason: str,
        message: str,
        attempts: int,
        request_seq: int | None,
        responses: tuple[str, ...] = (),
    ) -> None:
        with self.sub.session() as conn:
            self.sub._append(
                conn,
                "atomisation.failed",
                AtomisationFailed(
                    source_id=memory_id,
                    curator=curator,
                    reason=reason,
                    message=message[:2000],
                    attempts=attempts,
                    request_seq=request_seq,
                ),
            )

    # -- policies at store time ------------------------------------------------

    def plan(
        self, policy: ResolvedPolicy, payload: MemoryStored
    ) -> tuple[str, str | None, list[tuple[str, Payload]]]:
        """What the namespace's policy asks of a store: (mode, action, events to add).

        action: None (off, or an atom), "below" (under the threshold),
        "requested" (deferred: the request goes in the store's own batch), or
        "synchronous" (the caller runs the curator once the store is in).
        """
        mode = str(policy["auto_atomise_mode"])
        if mode == "off" or payload.atom_of:
            return mode, None, []
        if count_tokens(payload.content) < int(policy["auto_atomise_threshold_cl100k"]):
            return mode, "below", []
        if mode == "deferred":
            request = AtomisationRequested(
                source_id=payload.id,
                curator=str(policy["curator"]),
                max_atom_tokens=int(policy["auto_atomise_max_atom_tokens"]),
                max_retries=policy.retries_for("deferred"),
            )
            return mode, "requested", [("atomisation.requested", request)]
        return mode, "synchronous", []

    def wake(self) -> None:
        self._wake.set()

    def synchronous(self, mem: dict[str, Any]) -> dict[str, Any]:
        """Run the curator inside the store call; return the store response fields."""
        try:
            res = self.atomise(mem["id"], mode="synchronous")
        except SourceTooSmall:
            return {"atomise_mode": "synchronous", "atomise_outcome": "skipped_already_atomic"}
        except (CuratorFailed, TierLocked, GovernanceRefused, DepthExceeded) as exc:
            if isinstance(exc, TierLocked):
                self._failed(mem["id"], "ollama", "tier_locked", exc.message, 0, None)
            return {
                "atomise_mode": "synchronous",
                "atomise_outcome": "failed",
                "atomise_error": exc.to_json(),
            }
        if res.already_atomised:
            return {"atomise_mode": "synchronous", "atomise_outcome": "skipped_already_atomic"}
        return {
            "atomise_mode": "synchronous",
            "atomise_outcome": "atomised",
            "atomisation": res.envelope(),
        }

    # -- deferred work ---------------------------------------------------------

    def pending(self, conn: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
        """Requests with no completion or failure after them, oldest first (from the log)."""
        rows = conn.execute(
            """SELECT r.seq, r.source_id, r.detail FROM atomisations r
               WHERE r.status = 'requested' AND NOT EXISTS (
                   SELECT 1 FROM atomisations d
                   WHERE d.status IN ('completed', 'failed')
                     AND (d.request_seq = r.seq OR (d.source_id = r.source_id AND d.seq > r.seq)))
               ORDER BY r.seq"""
        ).fetchall()
        return [{"seq": r[0], "source_id": r[1], **json.loads(r[2])} for r in rows]

    def counts(self, conn: duckdb.DuckDBPyConnection) -> dict[str, int]:
        rows = dict(conn.execute("SELECT status, count(*) FROM atomisations GROUP BY status").fetchall())
        return {
            "requested": int(rows.get("requested", 0)),
            "completed": int(rows.get("completed", 0)),
            "failed": int(rows.get("failed", 0)),
            "pending": len(self.pending(conn)),
        }

    def drain(self, *, limit: int | None = None, block: bool = True) -> list[dict[str, Any]]:
        """Process pending requests (one worker per home at a time); report each outcome."""
        try:
            self._worker_lock.acquire(timeout=30.0 if block else 0.0)
        except LockTimeout:
            return []
        try:
            return self._drain(limit)
        finally:
            self._worker_lock.release()

    def _drain(self, limit: int | None) -> list[dict[str, Any]]:
        done: list[dict[str, Any]] = []
        while limit is None or len(done) < limit:
            with self.sub.session() as conn:
                todo = self.pending(conn)
                if not todo:
                    return done
                req = todo[0]
                self._discard_partial(conn, req)
            done.append(self._run_request(req))
        return done

    def _discard_partial(self, conn: duckdb.DuckDBPyConnection, req: dict[str, Any]) -> None:
        """Atoms a killed worker wrote for this request are archived before it is redone."""
        rows = conn.execute(
            "SELECT id FROM memories WHERE atom_of = ? AND stored_seq > ? AND archived_at IS NULL "
            "AND id NOT IN (SELECT unnest(?::VARCHAR[]))",
            [req["source_id"], req["seq"], self.existing_atoms(conn, req["source_id"])],
        ).fetchall()
        for (aid,) in rows:
            self.sub._append(
                conn,
                "memory.archived",
                MemoryArchived(
                    id=aid, by="reatomisation", reason=f"incomplete atomisation of request {req['seq']}"
                ),
            )

    def _run_request(self, req: dict[str, Any]) -> dict[str, Any]:
        sid = req["source_id"]
        try:
            res = self.atomise(
                sid,
                curator=req.get("curator"),
                max_atom_tokens=req.get("max_atom_tokens"),
                max_retries=req.get("max_retries"),
                mode="deferred",
                request_seq=req["seq"],
            )
            outcome = "already_atomised" if res.already_atomised else "atomised"
            if res.already_atomised:
                self._record_skip(sid, req, "already_atomised", "the memory was atomised already")
            return {"request_seq": req["seq"], "outcome": outcome, **res.envelope()}
        except SourceTooSmall as exc:
            self._record_skip(sid, req, "too_small", exc.message)
            return {"request_seq": req["seq"], "source_id": sid, "outcome": "skipped_too_small"}
        except CuratorFailed as exc:
            return {"request_seq": req["seq"], "source_id": sid, "outcome": "failed", "error": exc.to_json()}
        except MnemologError as exc:
            self._record_skip(sid, req, exc.slug, exc.message)
            return {"request_seq": req["seq"], "source_id": sid, "outcome": "failed", "error": exc.to_json()}

    def _record_skip(self, sid: str, req: dict[str, Any], reason: str, message: str) -> None:
        # The request must not stay pending forever: close it with a failure record.
        with self.sub.session() as conn:
            if any(p["seq"] == req["seq"] for p in self.pending(conn)):
                self.sub._append(
                    conn,
                    "atomisation.failed",
                    AtomisationFailed(
                        source_id=sid,
                        curator=str(req.get("curator", "")),
                        reason=reason,
                        message=message[:2000],
                        request_seq=req["seq"],
                    ),
                )

    # -- the worker thread of long-lived processes ------------------------------

    def start_worker(self, interval: float = 2.0) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._loop, args=(interval,), daemon=True, name="mnemolog-atomise-worker"
        )
        self._thread.start()

    def _loop(self, interval: float) -> None:
        # Its own reader: polling the log's size must not race the session's reader.
        watch = Log(self.sub.home.log_dir)
        seen = -1
        try:
            while not self._stop.is_set():
                size = watch.refresh()
                if size != seen or self._wake.is_set():
                    self._wake.clear()
                    with suppress(MnemologError):
                        self.drain(block=False)
                    seen = watch.refresh()
                self._wake.wait(interval)
        finally:
            watch.close()

    def stop_worker(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None


def run_worker(sub: Substrate, *, once: bool, interval: float, out: Callable[[dict[str, Any]], None]) -> int:
    """`mnemolog worker run`: drain pending requests, then (unless once) keep watching."""
    total = 0
    while True:
        for r in sub.atomiser.drain():
            out(r)
            total += 1
        if once:
            return total
        time.sleep(interval)
        sub.log.refresh()
