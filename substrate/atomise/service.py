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

import os
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from mnemolog.curators.atomise.choice import make_curator
from mnemolog.curators.base import Curator, CuratorFailed, SourceTooSmall, TierLocked
from mnemolog.curators.config import HOST_ENV, MODEL_ENV, LlmConfig, resolve_llm
from mnemolog.curators.tokens import DEFAULT_ATOM_TOKENS, check_max_atom_tokens, count_tokens
from mnemolog.eventlog.errors import Informational, LockTimeout, MnemologError, NotFound, UsageError
from mnemolog.eventlog.store.lock import FileLock
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.vocabulary.events import iso_time
from mnemolog.projections.memory import queries
from mnemolog.projections.memory.model import Memory
from mnemolog.substrate.events import (
    AtomisationCompleted,
    AtomisationFailed,
    AtomisationRequested,
    LinkCreated,
    MemoryArchived,
    MemoryStored,
    Payload,
)
from mnemolog.substrate.home import Home
from mnemolog.substrate.hooks import GovernanceRefused
from mnemolog.substrate.memory.governance import ResolvedPolicy
from mnemolog.substrate.session import Session, Sessions

__all__ = [
    "CURATORS",
    "MAX_DEPTH",
    "AlreadyAtomised",
    "AtomiseResult",
    "Atomiser",
    "DepthExceeded",
    "find_span",
    "run_worker",
]

MAX_DEPTH = 3
CURATORS = ("ollama", "rules")


class DepthExceeded(MnemologError):
    """Atoms of this memory would be deeper than MAX_DEPTH atomisations (exit 7)."""

    exit_code = 7
    slug = "depth_exceeded"


class AlreadyAtomised(Informational):
    """The memory has atoms already and no re-atomisation was asked for (exit 1)."""

    slug = "already_atomised"


def iso(us: int | None) -> str | None:
    """An ISO-8601 UTC time of a µs timestamp (None stays None)."""
    return None if us is None else iso_time(us)


@dataclass
class AtomiseResult:
    """The result envelope (docs/curators.md): {source_id, atom_ids, atom_count, archived_at}."""

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
    #: An interrupted atomisation was finished (its completion was in the log) rather than redone.
    resumed: bool = False
    #: Atoms an interrupted run had written that this one reused; orphans it archived.
    reused: list[str] = field(default_factory=list)
    archived_orphans: list[str] = field(default_factory=list)

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
        if self.resumed:
            out["resumed"] = True
        if self.reused:
            out["reused_atom_ids"] = self.reused
        if self.archived_orphans:
            out["archived_orphan_ids"] = self.archived_orphans
        return out


def _same_atom(m: Memory, atom: Any, index: int, count: int) -> bool:
    meta = m["metadata"] or {}
    return (
        m["content"] == atom.text
        and m["title"] == atom.title
        and meta.get("atom_index") == index
        and meta.get("atom_count") == count
    )


def find_span(parent: str, atom: str) -> list[int] | None:
    """[start, end) of `atom` in `parent` when it appears there verbatim, else None."""
    i = parent.find(atom)
    return [i, i + len(atom)] if i >= 0 else None


class Atomiser:
    """Atomisations of one home: on demand, at store time by policy, and deferred by a worker."""

    def __init__(
        self,
        home: Home,
        sessions: Sessions,
        curator_options: Mapping[str, Any] | None = None,
        require_writer: Callable[[], None] | None = None,
    ) -> None:
        self.home = home
        self.sessions = sessions
        # Opens the log writer: a manual atomisation must be able to sign before a curator runs.
        self.require_writer = require_writer or (lambda: None)
        self.curator_options = dict(curator_options or {})
        self._worker_lock = FileLock(home.projections_dir / ".worker.lock", 0.0, "worker lock")
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()

    # -- configuration -------------------------------------------------------

    def llm(self) -> LlmConfig | None:
        cfg = self.home.config.llm
        return resolve_llm(os.environ.get(HOST_ENV) or cfg.host, os.environ.get(MODEL_ENV) or cfg.model)

    def curator(self, name: str) -> Curator:
        if name not in CURATORS:
            raise UsageError(f"unknown curator {name!r} (ollama or rules)", field="curator")
        return make_curator(name, self.llm(), **self.curator_options)

    # -- the engine ------------------------------------------------------------

    def depth(self, s: Session, memory_id: str) -> int:
        """How many atomisations deep a memory is (0 for one that is no atom)."""
        d, cur, seen = 0, memory_id, set()
        while True:
            parent = queries.atom_parent(s.conn, cur)
            if parent is None or parent in seen:
                return d
            seen.add(cur)
            cur = parent
            d += 1

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
        """Atomise one memory now. Raises the errors of docs/curators.md (exit 2, 3, 4, 5, 7).

        `mode` and `request_seq` are the worker's and the store's (a deferred or synchronous run).
        """
        self.require_writer()
        if curator is not None:
            # Tier gating comes before any read (docs/curators.md, errors and exit codes).
            self.curator(curator)
        if max_atom_tokens is not None:
            check_max_atom_tokens(max_atom_tokens)
        with self.sessions.session() as s:
            parent = s.get(memory_id)
            if parent is None:
                raise NotFound(f"no memory with id {memory_id!r}", id=memory_id)
            if parent["status"] != "active":
                # A candidate's atoms would be active before anyone accepted the candidate.
                raise UsageError(
                    f"only active memories are atomised; memory {memory_id} is {parent['status']}",
                    id=memory_id,
                    status=parent["status"],
                )
            policy = s.policy(parent["namespace"])
            name = curator or str(policy["curator"])
            cur = self.curator(name)
            budget = max_atom_tokens or int(policy["auto_atomise_max_atom_tokens"] or DEFAULT_ATOM_TOKENS)
            retries = max_retries if max_retries is not None else policy.retries_for(mode)
            depth = self.depth(s, memory_id)
            if depth + 1 > MAX_DEPTH:
                raise DepthExceeded(
                    f"memory {memory_id} is at atomisation depth {depth}; its atoms would be at "
                    f"depth {depth + 1}, beyond the cap of {MAX_DEPTH}",
                    id=memory_id,
                    depth=depth,
                    max_depth=MAX_DEPTH,
                )
            finished = self._finish(s, memory_id)
            if finished is not None and not force:
                return finished
            parent = s.require(memory_id)
            if (parent["atomised_into"] or 0) > 0 and not force:
                return AtomiseResult(
                    memory_id,
                    queries.latest_atoms(s.conn, memory_id),
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
        with self.sessions.session() as s:
            parent = s.get(memory_id)
            if parent is None:  # pragma: no cover - memories are never deleted
                raise NotFound(f"no memory with id {memory_id!r}", id=memory_id)
            changed = (parent["last_event_seq"], parent["atomised_into"]) != snapshot
            if changed and not force and (parent["atomised_into"] or 0) > 0:
                # Someone else atomised it while the curator ran.
                return AtomiseResult(
                    memory_id,
                    queries.latest_atoms(s.conn, memory_id),
                    iso(parent["atomisation_archived_at"]),
                    already_atomised=True,
                )
            previous = queries.latest_atoms(s.conn, memory_id) if force else []
            res = self._write(s, parent, result, budget, name, force, previous, request_seq)
            res.warnings += s.warnings
            return res

    def _finish(self, s: Session, memory_id: str) -> AtomiseResult | None:
        """Finish an atomisation whose completion is in the log but whose archives are not.

        The completion names the atoms and the atoms it supersedes: what is
        left to write is the archive of each superseded atom not yet archived,
        then the parent's. None when there is nothing to finish.
        """
        todo = queries.unarchived_completions(s.conn, memory_id)
        if not todo:
            return None
        done = todo[0]
        for old in done.get("previous_atom_ids", []):
            m = s.get(old)
            if m is not None and m["archived_at"] is None:
                s.append(
                    MemoryArchived(
                        id=old, by="reatomisation", reason=f"superseded by atomisation {done['seq']}"
                    )
                )
        atom_ids = list(done.get("atom_ids", []))
        s.append(MemoryArchived(id=memory_id, by="atomisation", atomised_into=len(atom_ids)))
        after = s.require(memory_id)
        return AtomiseResult(
            memory_id,
            atom_ids,
            iso(after["atomisation_archived_at"]),
            curator=done.get("curator"),
            model=done.get("model"),
            completion_seq=int(done["seq"]),
            resumed=True,
        )

    def finish_pending(self) -> list[dict[str, Any]]:
        """Finish every atomisation left completed but not archived (what a killed writer left)."""
        out: list[dict[str, Any]] = []
        with self.sessions.session() as s:
            for done in queries.unarchived_completions(s.conn):
                res = self._finish(s, done["source_id"])
                if res is not None:
                    out.append({"outcome": "finished", **res.envelope()})
        return out

    def _write(
        self,
        s: Session,
        parent: Memory,
        result: Any,
        budget: int,
        curator: str,
        force: bool,
        previous: list[str],
        request_seq: int | None,
    ) -> AtomiseResult:
        pid = parent["id"]
        atom_ids: list[str] = []
        n = len(result.atoms)
        # What an interrupted run of this atomisation already wrote: an atom with the
        # same place, count, text and title is reused (a deterministic curator gives
        # the same atoms again); every other one is archived, once, with the reason.
        leftovers = queries.unfinished_atoms(s.conn, pid)
        reused: list[str] = []
        orphans: list[str] = []
        for i, atom in enumerate(result.atoms):
            match = next((m for m in leftovers if _same_atom(m, atom, i, n)), None)
            if match is not None:
                leftovers.remove(match)
                atom_ids.append(match["id"])
                reused.append(match["id"])
                edges = s.links(match["id"])["outgoing"]
                if not any(e["dst"] == pid and e["relation"] == "derives_from" for e in edges):
                    s.write_link(LinkCreated(src=match["id"], dst=pid, relation="derives_from"), atom_index=i)
                continue
            payload = MemoryStored.new(
                atom.text,
                namespace=parent["namespace"],
                kind="observation",
                title=atom.title,
                tags=parent["tags"],
                atom_of=pid,
                # An atom is knowledge of the same project and domains as its parent.
                project=parent["project"],
                domains=parent["domains"],
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
                if i == len(reused) and leftovers:
                    # Orphans go before the first new atom: a run killed from here on
                    # never finds the same orphan twice.
                    orphans += self._archive_orphans(s, pid, leftovers)
                    leftovers = []
                s.write_memory(payload, atom_index=i)
                atom_ids.append(payload.id)
                s.write_link(LinkCreated(src=payload.id, dst=pid, relation="derives_from"), atom_index=i)
            except GovernanceRefused as exc:
                s.append(
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
        if leftovers:
            orphans += self._archive_orphans(s, pid, leftovers)
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
        r = s.append(completed)
        for old in previous:
            # Re-atomised: the old atoms stay in the log and the store, out of default recall.
            s.append(MemoryArchived(id=old, by="reatomisation", reason=f"superseded by atomisation {r.seq}"))
        s.append(MemoryArchived(id=pid, by="atomisation", atomised_into=n))
        after = s.get(pid)
        return AtomiseResult(
            pid,
            atom_ids,
            iso(after["atomisation_archived_at"] if after else None),
            curator=curator,
            model=result.model,
            warnings=list(result.warnings),
            dropped=completed.dropped,
            completion_seq=r.seq,
            reused=reused,
            archived_orphans=orphans,
        )

    @staticmethod
    def _archive_orphans(s: Session, pid: str, orphans: list[Memory]) -> list[str]:
        for m in orphans:
            s.append(
                MemoryArchived(
                    id=m["id"],
                    by="reatomisation",
                    reason=f"orphan of an interrupted atomisation of {pid}, not among its atoms",
                )
            )
        return [m["id"] for m in orphans]

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
        with self.sessions.session() as s:
            s.append(
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

    def plan(self, policy: ResolvedPolicy, payload: MemoryStored) -> tuple[str, str | None, list[Payload]]:
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
            return mode, "requested", [request]
        return mode, "synchronous", []

    def wake(self) -> None:
        self._wake.set()

    def synchronous(self, memory_id: str) -> dict[str, Any]:
        """Run the curator inside the store call; return the store response fields."""
        try:
            res = self.atomise(memory_id, mode="synchronous")
        except SourceTooSmall:
            return {"atomise_mode": "synchronous", "atomise_outcome": "skipped_already_atomic"}
        except (CuratorFailed, TierLocked, GovernanceRefused, DepthExceeded) as exc:
            if isinstance(exc, TierLocked):
                self._failed(memory_id, "ollama", "tier_locked", exc.message, 0, None)
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

    def counts(self, s: Session) -> dict[str, int]:
        """Atomisation records by status, and the requests still pending."""
        pending = len(queries.pending_atomisations(s.conn)) + len(queries.unarchived_completions(s.conn))
        return {**queries.atomisation_counts(s.conn), "pending": pending}

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
        # First what a killed writer left half done: completions without their archives.
        done: list[dict[str, Any]] = self.finish_pending()
        while limit is None or len(done) < limit:
            with self.sessions.session() as s:
                todo = queries.pending_atomisations(s.conn)
                if not todo:
                    return done
                req = todo[0]
            # Atoms a killed run wrote for this request are reused or archived by atomise().
            done.append(self._run_request(req))
        return done

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
        with self.sessions.session() as s:
            if any(p["seq"] == req["seq"] for p in queries.pending_atomisations(s.conn)):
                s.append(
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
        watch = Log(self.home.log_dir)
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


def run_worker(
    atomiser: Atomiser, *, once: bool, interval: float, out: Callable[[dict[str, Any]], None]
) -> int:
    """`mnemolog worker run`: drain pending requests, then (unless once) keep watching.

    Each drain opens sessions, which catch up with the log, so new requests are seen.
    """
    total = 0
    while True:
        for r in atomiser.drain():
            out(r)
            total += 1
        if once:
            return total
        time.sleep(interval)
