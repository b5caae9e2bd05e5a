"""`Substrate`: the Python API agents use. Commands become events; reads are projections.

Every write runs inside a projection session (the projection lock, with the
tables caught up to the log), checks its preconditions against that state,
appends its event, and folds it before returning, so a stored memory is
recallable the moment `store` returns. The projection lock is taken before
the log's writer lock, never the other way round, so processes cannot
deadlock, and two writers of the same home see each other's effects.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Final, NotRequired, TypedDict, cast

import duckdb
from pydantic import ValidationError

from mnemolog.curators.embedding.embedder import Embedder
from mnemolog.eventlog.bundle import memview
from mnemolog.eventlog.errors import (
    BadInput,
    Informational,
    MnemologError,
    NotFound,
    StorageError,
    UsageError,
    VerificationError,
)
from mnemolog.eventlog.store import fsio
from mnemolog.eventlog.store.writer import Clock, Durability, LogWriter, TornTail, system_clock
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.eventlog.vocabulary.events import MUTABLE_FIELDS
from mnemolog.eventlog.vocabulary.knowledge import DEFAULT_STATUS, check_statuses
from mnemolog.projections.engine import Projections, Rollback, RollbackRefused
from mnemolog.projections.knowledge import queries as kq
from mnemolog.projections.memory import queries
from mnemolog.projections.memory.model import MEMORY_FIELDS, Edge, Memory
from mnemolog.projections.recall import hybrid
from mnemolog.projections.recall import query as q
from mnemolog.projections.recall.query import Filters
from mnemolog.substrate.atomise.service import Atomiser, AtomiseResult
from mnemolog.substrate.context import service as ctx
from mnemolog.substrate.context.config import pack_config
from mnemolog.substrate.embedding.service import Embedding, EmbeddingStatus, parse_fusion
from mnemolog.substrate.erasure.datakeys import DataKeys
from mnemolog.substrate.events import (
    LinkCreated,
    LinkRemoved,
    MemoryArchived,
    MemoryRestored,
    MemoryStored,
    MemoryUpdated,
    Payload,
    Policy,
    PolicySet,
)
from mnemolog.substrate.events.embedding import EmbedderConfigured
from mnemolog.substrate.events.knowledge import MemoryReinstated
from mnemolog.substrate.events.limits import (
    MAX_CONTENT_BYTES,
    check_kind,
    check_limit,
    check_namespace,
    check_tags,
)
from mnemolog.substrate.events.log import RollbackAccepted
from mnemolog.substrate.home import Home
from mnemolog.substrate.hooks import Hook, HookChain
from mnemolog.substrate.ids import looks_like_id
from mnemolog.substrate.knowledge.service import Knowledge
from mnemolog.substrate.memory import asof, governance
from mnemolog.substrate.memory.governance import ResolvedPolicy
from mnemolog.substrate.memory.importer import (
    BATCH,
    ImportFailed,
    ImportReport,
    check_records,
    import_jsonl,
    write_checked,
)
from mnemolog.substrate.recall import hits as recall_hits
from mnemolog.substrate.recall import policy as recall_policy
from mnemolog.substrate.session import ProjectionBehind, Session
from mnemolog.substrate.tenancy import scope
from mnemolog.substrate.witness import service as witnessing

__all__ = ["MAX_CONTENT_BYTES", "Edge", "Memory", "RecallReport", "Substrate"]

#: At most this many entries appended since the token table was read are scanned for token events.
TOKEN_SCAN = 256

Ranker = Callable[[duckdb.DuckDBPyConnection, str, Filters, int], list[tuple[Memory, float]]]


class RecallReport(TypedDict):
    """A recall's results and how they were ranked.

    `mode` is the mode used; `fallback` says why it is not the one asked for
    (the default mode is hybrid when the home embeds, and falls back to bm25
    when the query cannot be embedded now).
    """

    mode: str
    requested: str | None
    fallback: str | None
    results: list[Memory]
    as_of: NotRequired[dict[str, Any]]  # {"seq": N, "ts": ISO time}: the log prefix answered from


class _At:
    """The sessions of a substrate at one point of its log (None: now), for the recall policy."""

    def __init__(self, sub: Substrate, at: asof.AsOf | None) -> None:
        self.sub = sub
        self.at = at

    def session(self) -> contextlib.AbstractContextManager[Session]:
        return self.sub._reading(self.at)


class Substrate:
    """An open home: the agent-facing API. Thread-safe; one per process is plenty.

    Writes return the memory (or edge) as a read would show it, with
    `warnings` when a post hook failed after the write; reads have no side
    effects. Every method raises a MnemologError subclass carrying its exit
    code on refusal, and writes nothing then.
    """

    def __init__(
        self,
        home: Home,
        *,
        long_lived: bool = True,
        clock: Clock = system_clock,
        durability: Durability | None = None,
        hooks: Mapping[str, Sequence[Hook]] | None = None,
        progress: bool | None = None,
        curator_options: Mapping[str, Any] | None = None,
        worker: bool = True,
        embedder: Embedder | None = None,
        idle_release_ms: int | None = None,
    ) -> None:
        self.home = home.require()
        home.check_layout()
        self.clock = clock
        self._durability = durability
        self._progress = progress
        # The writer (and with it the private key and the writer lock) is opened by the
        # first write: reads need neither, so a home without its key, or one this
        # process may not write to, can still be read and audited.
        self._writer: LogWriter | None = None
        self.log = home.open_log()
        self.keys = DataKeys(home.root, home.config.log.lock_timeout_s)
        self.projections = Projections(
            home.projections_path(),
            self.log,
            self.keys.upcast,
            hold=long_lived,
            idle_release_ms=(
                home.config.projection_idle_release_ms if idle_release_ms is None else idle_release_ms
            ),
            progress=progress,
        )
        self.hooks = HookChain(home.config.hooks, hooks)
        self._lock = threading.RLock()
        self._closed = False
        #: Problems closing met that lose nothing (a closing checkpoint that could not be written).
        self.close_warnings: list[str] = []
        self.atomiser = Atomiser(self.home, self, curator_options)
        self.knowledge = Knowledge(
            self.home, self, clock=clock, checkpoint=self._checkpoint_now, options=curator_options
        )
        self.embedding = Embedding(self.home, self.projections.cache, embedder=embedder)
        self._asof = asof.AsOfProjections(self.home, self.keys.upcast, self.projections.cache)
        self.fusion = parse_fusion(self.home.config.raw.get("recall"))
        #: Namespaces declared shared (`[sharing]`), and the refusals of scoped tokens so far.
        self.sharing = scope.sharing(self.home.config.raw, str(self.home.config_path))
        self.refusals = scope.Refusals(self.home.state_dir / "refusals.jsonl")
        self._token_rows: tuple[int, dict[tuple[str, str], dict[str, Any]]] | None = None
        self._retention: Any = None
        if long_lived and worker:
            from mnemolog.substrate.erasure.service import RetentionWorker

            table = home.config.raw.get("retention")
            every = table.get("interval_s") if isinstance(table, dict) else None
            interval = 3600.0
            if isinstance(every, int | float) and not isinstance(every, bool) and every > 0:
                interval = float(every)
            self._retention = RetentionWorker(self, interval)
            self._retention.start()
            self.atomiser.start_worker()
            self.knowledge.start_daily()
            self.knowledge.start_nightly()
            self.embedding.start_worker(self)
        # A long-lived process sends its checkpoints to the home's witnesses from a thread.
        self._witnesses = (
            witnessing.start_watcher(self.home.root, self.home.log_dir, self.home.keys_dir)
            if long_lived
            else None
        )

    @classmethod
    def open(
        cls,
        home: str | Path | Home | None = None,
        *,
        long_lived: bool = True,
        clock: Clock = system_clock,
        durability: Durability | None = None,
        hooks: Mapping[str, Sequence[Hook]] | None = None,
        progress: bool | None = None,
        curator_options: Mapping[str, Any] | None = None,
        worker: bool = True,
        embedder: Embedder | None = None,
        idle_release_ms: int | None = None,
    ) -> Substrate:
        """Open a home (a path, a Home, or None for the default home).

        `embedder` replaces the embedder of its kind that the home would build
        (tests, benchmarks); the home's recorded choice still decides which kind.
        `idle_release_ms` replaces the home's `[projections] idle_release_ms` (a server of
        many tenants keeps each open tenant's projection longer).
        """
        h = home if isinstance(home, Home) else Home.resolve(home)
        return cls(
            h,
            long_lived=long_lived,
            clock=clock,
            durability=durability,
            hooks=hooks,
            progress=progress,
            curator_options=curator_options,
            worker=worker,
            embedder=embedder,
            idle_release_ms=idle_release_ms,
        )

    def close(self) -> None:
        """Stop the worker and release the projection, the writer and the log (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._retention is not None:
            self._retention.stop()
        self.atomiser.stop_worker()
        self.knowledge.stop_daily()
        self.embedding.stop_worker()
        self._asof.close()
        self.projections.close()
        try:
            with self._lock:
                if self._writer is not None:
                    try:
                        self._writer.close()
                    except (StorageError, OSError) as exc:
                        # The closing checkpoint is a convenience: every acknowledged entry is
                        # durable already, and the next writer signs a checkpoint. It must not
                        # turn writes that succeeded into a failed command.
                        reason = exc.message if isinstance(exc, StorageError) else str(exc)
                        self.close_warnings.append(
                            f"closing the log writer failed ({reason}); nothing written is lost"
                        )
        finally:
            # A writer that refuses to close (it saw its log cut: exit 8) still lets the log
            # and the witness sender go; the refusal is what the caller hears.
            self.log.close()
            if self._witnesses is not None:
                self._witnesses.close()  # after the closing checkpoint, so it is sent too

    def __enter__(self) -> Substrate:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            self.close()
            return
        # Already failing: the first failure is the one to report, not one closing adds
        # (a checkpoint that cannot be written to the same full disk, say).
        with contextlib.suppress(Exception):
            self.close()

    def _checkpoint_now(self) -> tuple[int, bytes]:
        cp, _raw = self.writer.checkpoint()
        return cp.size, cp.root

    # -- sessions ------------------------------------------------------------

    @property
    def writer(self) -> LogWriter:
        """The home's log writer, opened on first use (SignerError, exit 6, without the key)."""
        with self._lock:
            if self._writer is None:
                if self._closed:
                    raise StorageError("the substrate is closed")
                self._writer = self.home.open_writer(
                    durability=self._durability, clock=self.clock, progress=self._progress
                )
            return self._writer

    @property
    def recovered(self) -> list[TornTail]:
        """Torn tails the writer cut when it opened (none before the first write)."""
        return list(self._writer.recovered) if self._writer is not None else []

    def require_writer(self) -> None:
        """Open the writer now: a command that must sign fails here, before anything runs."""
        _ = self.writer

    @contextmanager
    def _reading(self, at: asof.AsOf | None) -> Iterator[Session]:
        """A session on the live tables, or on the fold of the log up to `at` (read-only)."""
        if at is None:
            with self.session() as s:
                yield s
            return

        def refuse() -> LogWriter:
            raise UsageError("an as-of read cannot write")

        with self._asof.session(at) as (conn, proj):
            yield Session(conn, refuse, proj, self.hooks)

    def _as_of(self, value: int | str | None) -> asof.AsOf | None:
        return None if value is None else asof.resolve(self._asof.log, asof.parse(value))

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A unit of work: the projection lock held, tables caught up with the log."""
        with self._lock:
            self.keys.refresh()
            with self.projections.session() as conn:
                yield Session(
                    conn, lambda: self.writer, self.projections, self.hooks, self.embedding, self.keys
                )

    # -- writes --------------------------------------------------------------

    def store(
        self,
        content: str,
        *,
        namespace: str = "default",
        kind: str = "observation",
        title: str | None = None,
        tags: Sequence[str] = (),
        confidence: float | None = None,
        source: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        created_at: int | None = None,
        last_seen: int | None = None,
        atom_of: str | None = None,
        source_span: Sequence[int] | None = None,
        memory_id: str | None = None,
        project: str = "",
        domains: Sequence[str] = (),
    ) -> Memory:
        """Store a memory; returns it as recall would show it.

        ``project`` is canonicalised (a registered name or alias becomes the
        registered name; "" means every project); ``domains`` must be domains
        of the home's vocabulary.

        Under an auto-atomise policy the response also carries `atomise_mode` and
        `atomise_outcome`: "requested" (deferred: a worker will atomise it),
        "atomised" / "skipped_below_threshold" / "skipped_already_atomic" /
        "failed" (synchronous: the curator ran before this returned).

        `memory_id` makes the store idempotent: an id is stored at most once. A
        retry with the same id and the same memory returns the stored one with
        `already_stored: true` (nothing is written); different content under an
        id already stored is refused (BadInput, exit 65). Once the entry is
        durable the store succeeds: a projection that cannot fold it is a
        warning (the memory is then read from the log).
        """
        if memory_id is not None and (not isinstance(memory_id, str) or not looks_like_id(memory_id)):
            raise BadInput(
                f"a memory id is a ULID (26 characters of Crockford base32), found {memory_id!r}",
                field="id",
                found=repr(memory_id)[:80],
            )
        payload = MemoryStored.new(
            content,
            namespace=namespace,
            kind=kind,
            title=title,
            tags=tags,
            confidence=confidence,
            source=source,
            metadata=metadata,
            created_at=created_at,
            last_seen=last_seen,
            atom_of=atom_of,
            source_span=source_span,
            memory_id=memory_id,
            project=project,
            domains=self.knowledge.domains(domains),
        )
        self.require_writer()  # after the checks: bad input is refused before any file is touched
        planned: list[tuple[str, str | None]] = []

        def follow(policy: ResolvedPolicy) -> Sequence[Payload]:
            mode, action, extra = self.atomiser.plan(policy, payload)
            planned.append((mode, action))
            if action == "synchronous":
                # Its atoms are embedded, not the source (decompose, then embed).
                s.skip_embedding[payload.id] = "skipped_synchronous_atomise"
            return extra

        try:
            with self.session() as s:
                if payload.project:
                    payload = payload.model_copy(
                        update={"project": self.knowledge.canonical_project(s, payload.project)}
                    )
                existing = s.get(payload.id) if memory_id is not None else None
                if existing is not None:
                    return self._already_stored(existing, payload)
                if payload.atom_of is not None and s.get(payload.atom_of) is None:
                    # An atom's back-pointer is a foreign key (seed 000): a dangling one would
                    # be signed into the log for good, and its derives_from edge could never exist.
                    raise NotFound(
                        f"atom_of names no stored memory: {payload.atom_of} does not exist",
                        field="atom_of",
                        expected="the id of a stored memory",
                        found=payload.atom_of,
                    )
                mem = s.with_warnings(s.write_memory(payload, follow=follow))
                embedded = s.embedded.get(payload.id, "off")
                if embedded != "off":  # only where embeddings are in play, like the atomise_* keys
                    mem["embedding"] = embedded
        except ProjectionBehind as exc:
            return self._from_log(payload, exc)
        mode, action = planned[0]
        if action == "requested":
            self.atomiser.wake()
        if action is None:
            return mem
        if action == "below":
            mem["atomise_mode"], mem["atomise_outcome"] = mode, "skipped_below_threshold"
            return mem
        if action == "requested":
            mem["atomise_mode"], mem["atomise_outcome"] = mode, "requested"
            return mem
        # Synchronous: the curator runs outside the projection lock, before we return.
        extra = self.atomiser.synchronous(mem["id"])
        out = self.get(mem["id"])
        out.update(extra)  # type: ignore[typeddict-item]
        if "embedding" in mem:
            out["embedding"] = mem["embedding"]
            if extra.get("atomise_outcome") != "atomised":
                # Not atomised after all: the source is a memory like any other and gets its vector.
                out["embedding"] = self.embedding.embed_memory(self, mem["id"])
        if "warnings" in mem:
            out["warnings"] = mem["warnings"]
        return out

    #: What makes two stores of one id the same memory: the fields a client chooses, which are
    #: the payload's but for the id itself, the writer's back-chain, the status the command sets,
    #: times the store may fill in, and an atom's span (its parent decides it).
    SAME_STORE: Final = tuple(
        f
        for f in MemoryStored.model_fields
        if f not in {"id", "touch_prev", "status", "created_at", "last_seen", "source_span"}
    )

    def _already_stored(self, existing: Memory, payload: MemoryStored) -> Memory:
        """A retried store: the stored memory if the retry asks for the same one, else BadInput."""
        original = self.log.entry(existing["stored_seq"])
        first = self.keys.upcast(original.type, original.tv, original.data)
        asked = payload.to_data()
        differ = [f for f in self.SAME_STORE if first.get(f) != asked.get(f)]
        if differ:
            raise BadInput(
                f"memory {payload.id} is already stored with a different {', '.join(differ)}; an id "
                "stores at most one memory (choose a new id, or `update` the memory)",
                field=differ[0],
                id=payload.id,
                differ=differ,
            )
        existing["already_stored"] = True
        return existing

    def _from_log(self, payload: MemoryStored, exc: ProjectionBehind) -> Memory:
        """A durable store whose projection failed: the memory as the log has it, with a warning."""
        self.log.refresh()
        entries = [self.log.entry(r.seq) for r in exc.receipts]
        view = memview.fold_views(entries, [payload.id], keys=self.keys.get)[payload.id]
        # The bundle view knows the log's memory fields; the knowledge loop's are the
        # stored payload's own (a memory just stored was never promoted or referenced).
        view.update(
            project=payload.project,
            domains=list(payload.domains),
            status=payload.status,
            promoted_at=None,
            reference_count=0,
            last_referenced_at=None,
        )
        mem = cast(Memory, {k: view.get(k) for k in MEMORY_FIELDS})
        mem["warnings"] = [exc.message]
        return mem

    def atomise(
        self,
        memory_id: str,
        *,
        force: bool = False,
        max_atom_tokens: int | None = None,
        curator: str | None = None,
        max_retries: int | None = None,
    ) -> AtomiseResult:
        """Atomise a memory now (see substrate.atomise); raises the errors of docs/curators.md."""
        self.require_writer()
        return self.atomiser.atomise(
            memory_id, force=force, max_atom_tokens=max_atom_tokens, curator=curator, max_retries=max_retries
        )

    def drain_atomisations(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Run pending deferred atomisations now (what the worker does)."""
        return self.atomiser.drain(limit=limit)

    def update(
        self,
        memory_id: str,
        *,
        title: str | None = None,
        content: str | None = None,
        kind: str | None = None,
        namespace: str | None = None,
        tags: Sequence[str] | None = None,
        confidence: float | None = None,
        source: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        last_seen: int | None = None,
        project: str | None = None,
        domains: Sequence[str] | None = None,
    ) -> Memory:
        """Change fields of a memory (a `memory.updated`): given fields replace, metadata keys merge.

        The fields are the `memory.updated` model's (MUTABLE_FIELDS); None means
        "leave as it is", and the model holds every limit a store has.
        """
        given = dict(
            zip(
                MUTABLE_FIELDS,
                (
                    title,
                    content,
                    kind,
                    namespace,
                    tags,
                    confidence,
                    source,
                    metadata,
                    last_seen,
                    project,
                    self.knowledge.domains(domains) if domains is not None else None,
                ),
                strict=True,
            )
        )
        fields = {k: v for k, v in given.items() if v is not None}
        if not fields:
            raise UsageError("nothing to update: give at least one field")
        payload = MemoryUpdated.model_validate({"id": memory_id, **fields})
        self.require_writer()
        with self.session() as s:
            if payload.project:
                payload = payload.model_copy(
                    update={"project": self.knowledge.canonical_project(s, payload.project)}
                )
            before = s.require(memory_id)
            policy = s.policy(payload.namespace or before["namespace"])
            s.check_write(policy, before["namespace"])
            s.append(payload)
            out = s.with_warnings(s.require(memory_id))
            if s.embedded.get(memory_id, "off") != "off":
                out["embedding"] = s.embedded[memory_id]
            return out

    def link(
        self,
        src: str,
        dst: str,
        relation: str = "related_to",
        metadata: Mapping[str, Any] | None = None,
    ) -> Edge:
        """Draw an edge src -> dst (both must exist, and differ).

        An edge src -> dst of this relation that exists already is returned as it
        is, with `already_linked: true` (nothing is written; the CLI exits 1).
        """
        payload = LinkCreated.model_validate(
            {"src": src, "dst": dst, "relation": relation, "metadata": metadata}
        )
        self.require_writer()
        with self.session() as s:
            s.require(payload.src)
            for edge in s.links(payload.src)["outgoing"]:
                if edge["dst"] == payload.dst and edge["relation"] == payload.relation:
                    edge["already_linked"] = True
                    return edge
            return s.with_warnings(s.write_link(payload))

    def unlink(
        self, src: str, dst: str, relation: str = "related_to", reason: str | None = None
    ) -> dict[str, Any]:
        """Take back the edge src -> dst of this relation: a signed `link.removed` (NotFound if none)."""
        payload = LinkRemoved.model_validate({"src": src, "dst": dst, "relation": relation, "reason": reason})
        self.require_writer()
        with self.session() as s:
            m = s.require(payload.src)
            gone = [
                e
                for e in s.links(payload.src)["outgoing"]
                if e["dst"] == payload.dst and e["relation"] == payload.relation
            ]
            if not gone:
                raise NotFound(
                    f"no {payload.relation} link from {payload.src} to {payload.dst}",
                    src=payload.src,
                    dst=payload.dst,
                    relation=payload.relation,
                )
            s.check_write(s.policy(m["namespace"]), m["namespace"])
            r = s.append(payload)
            return {"removed": gone, "seq": r.seq, "src": payload.src, "dst": payload.dst,
                    "relation": payload.relation}  # fmt: skip

    def archive(self, memory_id: str, reason: str | None = None) -> Memory:
        """Hide a memory from recall (it stays in the log); archiving twice writes nothing."""
        payload = MemoryArchived(id=memory_id, reason=reason) if isinstance(memory_id, str) else None
        with self.session() as s:
            m = s.require(memory_id)
            if m["archived_at"] is not None or payload is None:
                return m
            s.append(payload)
            return s.require(memory_id)

    def restore(self, memory_id: str, reason: str | None = None) -> Memory:
        """Undo an archive (the operator's or atomisation's) and a supersession (decay's above all).

        A superseded memory becomes active again by a signed `memory.reinstated`
        (the supersession stays in the log); an archived one visible again by
        `memory.restored`; both in one batch when both apply. A visible,
        active memory is returned as it is.
        """
        payload = MemoryRestored(id=memory_id, reason=reason) if isinstance(memory_id, str) else None
        reinstate = MemoryReinstated(id=memory_id, reason=reason) if isinstance(memory_id, str) else None
        with self.session() as s:
            m = s.require(memory_id)
            events: list[Payload] = []
            if m["status"] == "superseded" and reinstate is not None:
                events.append(reinstate)
            archived = m["archived_at"] is not None or m["atomisation_archived_at"] is not None
            if archived and payload is not None:
                events.append(payload)
            if not events:
                return m
            s.append_many(events)
            return s.require(memory_id)

    def set_policy(
        self,
        namespace: str,
        unset: Sequence[str] = (),
        *,
        write: str | None = None,
        auto_atomise_mode: str | None = None,
        auto_atomise_threshold_cl100k: int | None = None,
        auto_atomise_max_atom_tokens: int | None = None,
        auto_atomise_max_retries: int | None = None,
        curator: str | None = None,
        retention_days: int | None = None,
    ) -> dict[str, Any]:
        """Set fields of a namespace's own policy (and drop `unset` ones: they inherit again)."""
        check_namespace(namespace, allow_root=True)
        try:
            policy = Policy.model_validate(
                {
                    "write": write,
                    "auto_atomise_mode": auto_atomise_mode,
                    "auto_atomise_threshold_cl100k": auto_atomise_threshold_cl100k,
                    "auto_atomise_max_atom_tokens": auto_atomise_max_atom_tokens,
                    "auto_atomise_max_retries": auto_atomise_max_retries,
                    "curator": curator,
                    "retention_days": retention_days,
                }
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(x) for x in first.get("loc", ()))
            raise BadInput(f"policy: {loc}: {first.get('msg')}", field=loc) from exc
        unknown = [f for f in unset if f not in Policy.model_fields]
        if unknown:
            raise UsageError(f"unknown policy field(s) {unknown}", field="unset")
        changes = policy.model_dump(exclude_none=True)
        if not changes and not unset:
            raise UsageError("nothing to change: give a field to set or to unset")
        payload = PolicySet(namespace=namespace, changes=changes, unset=list(unset))
        self.require_writer()
        with self.session() as s:
            after = {**(s.own_policy(namespace) or {}), **changes}
            for name in unset:
                after.pop(name, None)
            self._check_atomisable(s, namespace, after)
            s.append(payload)
            return s.policy(namespace).to_json()

    @staticmethod
    def _check_atomisable(s: Session, namespace: str, after: dict[str, Any] | None) -> None:
        """Refuse a policy change that leaves this namespace or one below it unable to atomise."""
        own: dict[str, Any] = queries.all_own_policies(s.conn)
        if after is None:
            own.pop(namespace, None)
        else:
            own[namespace] = after
        below = [n for n in own if namespace in governance.ancestors(n)]
        governance.check_atomisable(own, [namespace, *below])

    def clear_policy(self, namespace: str) -> dict[str, Any]:
        """Drop a namespace's own policy: every field inherits again."""
        check_namespace(namespace, allow_root=True)
        with self.session() as s:
            if s.own_policy(namespace) is None:
                raise NotFound(f"namespace {namespace!r} has no policy of its own")
            self._check_atomisable(s, namespace, None)
            s.append(PolicySet(namespace=namespace, clear=True))
            return s.policy(namespace).to_json()

    def get_policy(self, namespace: str) -> dict[str, Any]:
        """The effective policy, where each field comes from, and the namespace's own policy."""
        check_namespace(namespace, allow_root=True)
        with self.session() as s:
            out = s.policy(namespace).to_json()
            out["own"] = s.own_policy(namespace)
            return out

    # -- the knowledge loop (see substrate.knowledge) ------------------------------------------

    def register_project(
        self, name: str, *, aliases: Sequence[str] = (), description: str = ""
    ) -> dict[str, Any]:
        """Register a project name (with aliases); rows holding any of them resolve to it."""
        return self.knowledge.register_project(name, aliases=aliases, description=description)

    def alias_project(self, name: str, alias: str) -> dict[str, Any]:
        """Make ``alias`` another name of project ``name`` (old rows resolve too)."""
        return self.knowledge.alias_project(name, alias)

    def projects(self) -> list[dict[str, Any]]:
        """Registered projects with their aliases and counts."""
        return self.knowledge.projects()

    def set_state(
        self, project: str, category: str, key: str, value: str, *, source: str | None = None
    ) -> dict[str, Any]:
        """Trusted project state: upsert (project, category, key) = value."""
        return self.knowledge.set_state(project, category, key, value, source=source)

    def get_state(
        self, project: str, *, category: str | None = None, history: bool = False
    ) -> list[dict[str, Any]]:
        """A project's current state entries (every version with ``history``)."""
        return self.knowledge.get_state(project, category=category, history=history)

    def invalidate_state(
        self, project: str, category: str, key: str, *, reason: str | None = None
    ) -> dict[str, Any]:
        """The entry no longer holds; its history stays."""
        return self.knowledge.invalidate_state(project, category, key, reason=reason)

    def capture(
        self,
        prompt: str,
        response: str = "",
        *,
        project: str = "",
        client: str | None = None,
        session: str | None = None,
        context_id: str | None = None,
        namespace: str = "default",
        reinforce: bool = False,
    ) -> dict[str, Any]:
        """Record an interaction (and, with ``reinforce``, reinforce the memories it echoes)."""
        return self.knowledge.capture(
            prompt,
            response,
            project=project,
            client=client,
            session=session,
            context_id=context_id,
            namespace=namespace,
            reinforce=reinforce,
        )

    def interactions(
        self,
        *,
        project: str | None = None,
        session: str | None = None,
        since: int | None = None,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        """Captured interactions, newest first."""
        return self.knowledge.interactions(project=project, session=session, since=since, limit=limit)

    def interaction(self, interaction_id: str) -> dict[str, Any]:
        """One captured interaction with the candidates extracted from it."""
        return self.knowledge.interaction(interaction_id)

    def extract(
        self,
        *,
        interaction_ids: Sequence[str] = (),
        pending: bool = False,
        extractor: str | None = None,
        limit: int = 100,
        max_retries: int | None = None,
    ) -> dict[str, Any]:
        """Turn interactions into candidate memories (rules or ollama extractor)."""
        return self.knowledge.extract(
            interaction_ids=interaction_ids,
            pending=pending,
            extractor=extractor,
            limit=limit,
            max_retries=max_retries,
        )

    def triage(
        self,
        *,
        candidate_ids: Sequence[str] = (),
        pending: bool = False,
        triager: str | None = None,
        dry_run: bool = False,
        limit: int = 100,
        max_retries: int | None = None,
    ) -> dict[str, Any]:
        """Give candidates verdicts; auto-promote, auto-reject, or leave them for a person."""
        return self.knowledge.triage(
            candidate_ids=candidate_ids,
            pending=pending,
            triager=triager,
            dry_run=dry_run,
            limit=limit,
            max_retries=max_retries,
        )

    def candidates(
        self,
        *,
        queues: Sequence[str] = ("pending", "needs_human"),
        project: str | None = None,
        limit: int = 50,
    ) -> list[Memory]:
        """Candidates by queue (pending, needs_human, promoted, rejected), oldest first."""
        found = self.knowledge.candidates(queues=queues, project=project, limit=limit)
        sc = scope.current()
        return found if sc is None or not sc.bound else [m for m in found if sc.sees(m)]

    def promote(
        self,
        memory_id: str,
        *,
        project: str | None = None,
        domains: Sequence[str] | None = None,
        reason: str | None = None,
    ) -> Memory:
        """A person promotes a candidate to an active memory."""
        return self.knowledge.promote(memory_id, project=project, domains=domains, reason=reason)

    def reject(self, memory_id: str, *, reason: str) -> Memory:
        """A person rejects a candidate (it becomes invalid)."""
        return self.knowledge.reject(memory_id, reason=reason)

    def supersede(self, memory_id: str, *, reason: str, by_memory: str | None = None) -> Memory:
        """Retire an active memory (``by_memory``: the memory that replaces it)."""
        return self.knowledge.supersede(memory_id, reason=reason, by_memory=by_memory)

    def decay(
        self,
        *,
        now: int | None = None,
        dry_run: bool = False,
        announce: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> dict[str, Any]:
        """Supersede the memories decay has taken below the floor at ``now`` (µs; default: the clock).

        ``announce`` is given what is to be retired before anything is written.
        """
        return self.knowledge.decay(now=now, dry_run=dry_run, announce=announce)

    def migrate_domain_prefixes(self, *, dry_run: bool = False) -> dict[str, Any]:
        """Move "[domain]" prefixes of old content into the domains field (a recorded migration)."""
        return self.knowledge.migrate_domain_prefixes(dry_run=dry_run)

    # -- reads -----------------------------------------------------------------

    def get(self, memory_id: str) -> Memory:
        """One memory with its links (NotFound, exit 2, for an unknown id)."""
        with self.session() as s:
            m = s.require(memory_id)
            links = s.links(memory_id)
            sc = scope.current()
            if sc is not None and sc.bound:
                # An edge to a memory outside the scope would name it: only edges within it.
                f = self._bound(Filters(include_archived=True, statuses=()), sc)
                ends = [e["dst"] for e in links["outgoing"]] + [e["src"] for e in links["incoming"]]
                ok = q.allowed_ids(s.conn, ends, f)
                links = {
                    "outgoing": [e for e in links["outgoing"] if e["dst"] in ok],
                    "incoming": [e for e in links["incoming"] if e["src"] in ok],
                }
            m["links"] = links
            return m

    def _filters(
        self,
        namespace: str | None,
        descendants: bool,
        kinds: Sequence[str],
        tags: Sequence[str],
        include_archived: bool,
        statuses: Sequence[str] = (DEFAULT_STATUS,),
        project: str | None = None,
        domains: Sequence[str] = (),
        include_expired: bool = False,
    ) -> Filters:
        if namespace is not None:
            check_namespace(namespace)
        for k in kinds:
            check_kind(k)
        return self._bound(
            Filters(
                namespace,
                descendants,
                tuple(kinds),
                tuple(check_tags(tags)),
                include_archived,
                statuses=check_statuses(statuses),
                project=project,
                domains=tuple(self.knowledge.domains(domains)),
                # Expired memories are hidden as context packs hide them, unless asked for; a
                # memory a `supersedes` link points at too, unless superseded ones are asked for.
                expired_at=None if include_expired else self.clock(),
                hide_superseded="superseded" not in statuses,
            ),
            scope.current(),
        )

    @staticmethod
    def _bound(f: Filters, sc: scope.Scope | None) -> Filters:
        """The filters confined to a token's scope (substrate.scope), if one is applied."""
        if sc is None or not sc.bound:
            return f
        return replace(f, within=sc.within(), projects_within=sc.projects_within())

    @staticmethod
    def _at(f: Filters, at: asof.AsOf | None) -> Filters:
        # As of a point, a memory's expiry is judged at that point's time, not now.
        if at is None or f.expired_at is None:
            return f
        return replace(f, expired_at=at.ts)

    def _scoped(self, s: Session, f: Filters) -> Filters:
        """The filters with their project canonicalised (the registry is read in the session)."""
        if f.project is None:
            return f
        return replace(f, project=self.knowledge.canonical_project(s, f.project))

    def recall(
        self,
        query: str,
        *,
        limit: int = 10,
        namespace: str | None = None,
        descendants: bool = True,
        kinds: Sequence[str] = (),
        tags: Sequence[str] = (),
        include_archived: bool = False,
        statuses: Sequence[str] = (DEFAULT_STATUS,),
        project: str | None = None,
        domains: Sequence[str] = (),
        mode: hybrid.Mode | None = None,
        explain: bool = False,
        include_expired: bool = False,
        min_score: float | None = None,
        as_of: int | str | None = None,
    ) -> list[Memory]:
        """Rank memories for a natural-language query (any term may match). Writes nothing to the log;
        the ids it answers with are noted in the local recall-hit ledger, which decay reads.

        `mode`: "bm25" (title, tags and content), "vector" (cosine of the
        embeddings), "hybrid" (both, fused), or None: hybrid when the home
        embeds, else bm25. `explain` adds each result's ranks and scores under
        `explain`. See `recall_report` for the mode used.

        Only active memories unless ``statuses`` says otherwise; ``project``
        ("" = memories of no project) and ``domains`` (all of them) narrow it.
        ``as_of`` (a seq or an ISO 8601 UTC time) answers from the log as it stood then.
        """
        return self.recall_report(
            query,
            limit=limit,
            namespace=namespace,
            descendants=descendants,
            kinds=kinds,
            tags=tags,
            include_archived=include_archived,
            statuses=statuses,
            project=project,
            domains=domains,
            mode=mode,
            explain=explain,
            include_expired=include_expired,
            min_score=min_score,
            as_of=as_of,
        )["results"]

    def recall_report(
        self,
        query: str,
        *,
        limit: int = 10,
        namespace: str | None = None,
        descendants: bool = True,
        kinds: Sequence[str] = (),
        tags: Sequence[str] = (),
        include_archived: bool = False,
        statuses: Sequence[str] = (DEFAULT_STATUS,),
        project: str | None = None,
        domains: Sequence[str] = (),
        mode: hybrid.Mode | None = None,
        explain: bool = False,
        include_expired: bool = False,
        min_score: float | None = None,
        as_of: int | str | None = None,
    ) -> RecallReport:
        """`recall`, with the mode used and why it differs from the one asked for (if it does).

        With `as_of` the report says which seq it answered at (`as_of`: seq and ts).
        """
        f = self._filters(
            namespace, descendants, kinds, tags, include_archived, statuses, project, domains, include_expired
        )
        if min_score is not None and (
            isinstance(min_score, bool) or not isinstance(min_score, int | float) or not min_score >= 0
        ):
            raise UsageError("min_score must be a number >= 0", field="min_score", found=repr(min_score)[:40])
        if not isinstance(query, str) or not query.strip():
            raise BadInput("the query is empty", field="query")
        recall_policy.check_mode(mode)
        n = check_limit(limit)
        at = self._as_of(as_of)
        f = self._at(f, at)

        def ranked(s: Session, plan: recall_policy.Plan) -> RecallReport:
            if at is not None:
                plan = recall_policy.prefix_vectors(s.conn, plan)
            plan, found = recall_policy.rank(
                s, plan, query, self._scoped(s, f), n, self.fusion, min_score=min_score
            )
            results: list[Memory] = []
            for m, r in found:
                m["score"] = r.score
                if explain:
                    m["explain"] = {"mode": plan.mode, **r.explain()}
                    if r.neighbour_doc is not None:
                        row = s.conn.execute(
                            "SELECT id FROM memories WHERE stored_seq = ?", [r.neighbour_doc]
                        ).fetchone()
                        m["explain"]["neighbour_id"] = row[0] if row else None
                    if plan.mode == "hybrid":
                        m["explain"]["fusion"] = self.fusion.method
                results.append(m)
            return {
                "mode": plan.mode,
                "requested": plan.requested,
                "fallback": plan.fallback,
                "results": results,
            }

        # One session when the plan needs no model call (bm25, or a query whose vector is
        # kept); otherwise the query is embedded between two, outside the projection lock.
        with self._reading(at) as s:
            ready = recall_policy.plan_in(s, self.embedding, query, mode)
            if ready is not None:
                report = ranked(s, ready)
        if ready is None:
            plan = recall_policy.plan(_At(self, at), self.embedding, query, mode)
            with self._reading(at) as s:
                report = ranked(s, plan)
        results = report["results"]
        if at is not None:
            report["as_of"] = at.to_json()
        else:  # decay counts a hit as a reference; a look into the past references nothing now
            recall_hits.note(self.home.state_dir, (m["id"] for m in results), self.clock())
        return report

    def search(
        self,
        query: str,
        *,
        limit: int = 10,
        namespace: str | None = None,
        descendants: bool = True,
        kinds: Sequence[str] = (),
        tags: Sequence[str] = (),
        include_archived: bool = False,
        statuses: Sequence[str] = (DEFAULT_STATUS,),
        project: str | None = None,
        domains: Sequence[str] = (),
        include_expired: bool = False,
        as_of: int | str | None = None,
    ) -> list[Memory]:
        """Exact keywords, all required, ranked by BM25.

        Only active memories unless ``statuses`` says otherwise; ``project``
        ("" = memories of no project) and ``domains`` (all of them) narrow it.
        ``as_of`` (a seq or an ISO 8601 UTC time) answers from the log as it stood then.
        """
        f = self._filters(
            namespace, descendants, kinds, tags, include_archived, statuses, project, domains, include_expired
        )
        return self._ranked(q.search, query, f, limit, as_of)

    def _ranked(
        self, ranker: Ranker, query: str, f: Filters, limit: int, as_of: int | str | None = None
    ) -> list[Memory]:
        if not isinstance(query, str) or not query.strip():
            raise BadInput("the query is empty", field="query")
        at = self._as_of(as_of)
        f = self._at(f, at)
        with self._reading(at) as s:
            out = []
            for m, score in ranker(s.conn, query, self._scoped(s, f), check_limit(limit)):
                m["score"] = score
                out.append(m)
            return out

    def list(
        self,
        *,
        limit: int = 50,
        offset: int = 0,
        namespace: str | None = None,
        descendants: bool = True,
        kinds: Sequence[str] = (),
        tags: Sequence[str] = (),
        include_archived: bool = False,
        statuses: Sequence[str] = (DEFAULT_STATUS,),
        project: str | None = None,
        domains: Sequence[str] = (),
        include_expired: bool = False,
        as_of: int | str | None = None,
    ) -> list[Memory]:
        """Memories newest first (by when stored); active ones unless ``statuses`` says otherwise.

        Expired memories (`metadata.vault.expires_at` passed) are left out unless `include_expired`.
        ``as_of`` (a seq or an ISO 8601 UTC time) lists them as the log stood then.
        """
        f = self._filters(
            namespace, descendants, kinds, tags, include_archived, statuses, project, domains, include_expired
        )
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < 2**63:
            raise UsageError(
                "offset must be an integer in [0, 2**63)", field="offset", found=repr(offset)[:40]
            )
        at = self._as_of(as_of)
        f = self._at(f, at)
        with self._reading(at) as s:
            return q.list_memories(s.conn, self._scoped(s, f), check_limit(limit), offset)

    def stats(self) -> dict[str, Any]:
        """Counts of memories, links, policies, events, the index and atomisations."""
        sc = scope.current()
        if sc is not None and sc.bound:
            # A bound token learns about its own memories only: no home-wide counts.
            with self.session() as s:
                f = self._bound(Filters(include_archived=True, statuses=()), sc)
                return q.scoped_stats(s.conn, f)
        with self.session() as s:
            out = q.stats(s.conn)
            out["atomisation"] = self.atomiser.counts(s)
            out["knowledge"] = kq.knowledge_counts(s.conn)
            # This process's scheduled runs (a long-lived one runs them; see [knowledge.schedule]).
            out["knowledge"]["scheduled"] = {
                "runs": len(self.knowledge.scheduled_runs),
                "failures": len(self.knowledge.scheduled_failures),
                "last_failure": next(reversed(self.knowledge.scheduled_failures), None),
            }
            out["log"] = {"size": self.log.size, "log_id": self.log.log_id.hex()}
            return out

    def import_jsonl(
        self,
        path: str | Path,
        *,
        skip_existing: bool = False,
        progress: bool | None = None,
        batch: int = BATCH,
    ) -> ImportReport:
        """Store every memory of a JSON Lines file (substrate.importer): all checked, then written in batches.

        Raises ImportFailed (exit 65, or 5 for governance) listing the bad
        lines by number; nothing is written then.
        """
        report, warnings = import_jsonl(
            Path(path),
            self,
            self.embedding,
            self.hooks,
            self.atomiser.plan,
            skip_existing=skip_existing,
            batch=batch,
            progress=progress,
            normalise=self._imported_knowledge,
        )
        if report["atomisation_requested"]:
            self.atomiser.wake()
        if warnings:
            report["warnings"] = warnings
        return report

    def _imported_knowledge(self, s: Session) -> Callable[[MemoryStored], MemoryStored]:
        """Imported lines' project and domains, as `store` makes them (see importer.Normalise);
        the project registry is read once for the whole check."""
        registry = self.knowledge.registry(s)

        def made(p: MemoryStored) -> MemoryStored:
            project = self.knowledge.canonical_project(s, p.project, registry) if p.project else ""
            return p.model_copy(update={"project": project, "domains": self.knowledge.domains(p.domains)})

        return made

    def import_from(
        self,
        fmt: str,
        path: str | Path,
        *,
        trust: bool = False,
        dry_run: bool = False,
        progress: bool | None = None,
        batch: int = BATCH,
    ) -> dict[str, Any]:
        """Store the items of another tool's export (substrate.importers) through the JSON Lines path.

        Candidates unless `trust` (then active). Ids derive from each item's
        source pointer and stored ids are skipped, so a re-import adds
        nothing. `dry_run` checks everything and returns the mapping
        (`mapping`: one entry per item, `exists` for those stored already)
        without writing. ImportFailed (65, or 5 for governance) names each
        bad item by its number and source; nothing is written then.
        """
        path = Path(path)
        from mnemolog.substrate.importers import read_source, relation_links

        records = read_source(fmt, path)
        status = "active" if trust else "candidate"
        checked = check_records(
            records, self, self.hooks, skip_existing=True, status=status, normalise=self._imported_knowledge
        )
        if checked.bad_count:
            for b in checked.bad:
                src = records[b["line"] - 1].get("source")
                b["message"] = f"item {b['line']} ({src}): {b['message']}"
            raise ImportFailed(path, checked.bad, checked.bad_count)
        # basic-memory relations between notes of this import become links (related_to, the
        # note's relation type in the link's metadata); link() skips an edge drawn already.
        links = relation_links(records) if fmt == "basic-memory" else []
        if dry_run:
            new = {p.id for _n, p in checked.payloads}
            return {
                "format": fmt,
                "file": str(path),
                "status": status,
                "dry_run": True,
                "items": len(records),
                "new": len(new),
                "skipped_existing": checked.skipped,
                "mapping": [
                    {
                        "id": r["id"],
                        "namespace": r["namespace"],
                        "kind": r.get("kind", "observation"),
                        "title": r.get("title"),
                        "source": r.get("source"),
                        "created_at": r.get("created_at"),
                        "tags": r.get("tags", []),
                        "content": r["content"][:200],
                        "exists": r["id"] not in new,
                    }
                    for r in records
                ],
                "links": [{"src": src, "dst": dst, "type": kind} for src, dst, kind in links],
            }
        report, warnings = write_checked(
            path,
            checked,
            self,
            self.embedding,
            self.hooks,
            self.atomiser.plan,
            batch=batch,
            progress=progress,
        )
        if report["atomisation_requested"]:
            self.atomiser.wake()
        drawn = 0
        for src, dst, kind in links:
            edge = self.link(src, dst, "related_to", {"type": kind, "from": "basic-memory"})
            drawn += "already_linked" not in edge
        out: dict[str, Any] = {"format": fmt, "status": status, "dry_run": False, **report, "links": drawn}
        out["items"] = out.pop("lines")
        if warnings:
            out["warnings"] = warnings
        return out

    def export_memories(self, fmt: str, out: str | Path, *, namespace: str | None = None) -> dict[str, Any]:
        """Write the active memories (of `namespace` and below) as `jsonl` or a `basic-memory` folder.

        jsonl: one file in exactly the format `import` reads, replaced
        atomically (an existing OUT must be a regular file). basic-memory: a
        folder of notes, built beside OUT and renamed into place, so OUT
        appears whole or not at all (an existing OUT must be an empty folder).
        """
        from mnemolog.substrate.importers.export import EXPORT_FORMATS, basic_memory_notes, jsonl_bytes

        if fmt not in EXPORT_FORMATS:
            raise UsageError(f"unknown export format {fmt!r}; one of {', '.join(EXPORT_FORMATS)}", field="to")
        out = Path(out)
        f = self._filters(namespace, True, (), (), False, (DEFAULT_STATUS,), None, ())
        memories: list[Memory] = []
        with self.session() as s:
            # One session: the pages are of one state of the home.
            while page := q.list_memories(s.conn, f, 1000, len(memories)):
                memories += page
        memories.reverse()  # oldest first, the order they were stored in
        try:
            if fmt == "jsonl":
                if out.is_dir():
                    raise UsageError(f"{out} is a directory; a jsonl export writes one file", file=str(out))
                fsio.atomic_write(out, jsonl_bytes(memories))
                files = 1
            else:
                files = _write_folder(out, basic_memory_notes(memories))
        except fsio.NotReplaceable as exc:
            raise UsageError(f"{out} {exc.strerror}", file=str(out)) from exc
        except OSError as exc:
            raise UsageError(f"cannot write {out}: {exc.strerror}", file=str(out)) from exc
        return {
            "format": fmt,
            "out": str(out),
            "namespace": namespace,
            "memories": len(memories),
            "files": files,
        }

    # -- embeddings ----------------------------------------------------------------

    # -- tokens and scopes ------------------------------------------------------------

    def issue_token(
        self,
        level: str,
        *,
        namespaces: Sequence[str] = (),
        projects: Sequence[str] = (),
        expires: str | None = None,
        rate_per_minute: int | None = None,
        label: str | None = None,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """A new scoped token (a signed `token.issued`): the token is in the answer, and nowhere else.

        `expires` is a duration (`30d`) or an ISO 8601 UTC time; `tenant` is
        the name this home has under a tenant root (it is part of the token).
        """
        from mnemolog.substrate.events.tokens import TokenIssued

        if level not in scope.LEVELS:
            raise UsageError(
                f"scope must be one of {', '.join(scope.LEVELS)}; found {level!r}", field="scope"
            )
        token, token_id, digest = scope.mint(tenant)
        payload = TokenIssued(
            token_id=token_id,
            sha256=digest,
            level=level,
            namespaces=list(namespaces),
            projects=list(projects),
            expires_at=scope.parse_expiry(expires, self.clock()),
            rate_per_minute=rate_per_minute,
            label=label,
        )
        with self.session() as s:
            r = s.append(payload)
        out = {k: v for k, v in payload.to_data().items() if k != "sha256"}
        return {"token": token, **out, "tenant": tenant, "seq": r.seq}

    def revoke_token(self, token_id: str, *, reason: str | None = None) -> dict[str, Any]:
        """Accept the token no more (a signed `token.revoked`); NotFound for an unknown id."""
        from mnemolog.projections import tokens as tq
        from mnemolog.substrate.events.tokens import TokenRevoked

        payload = TokenRevoked(token_id=token_id, reason=reason)
        with self.session() as s:
            known = {t["token_id"]: t for t in tq.list_tokens(s.conn)}
            if token_id not in known:
                raise NotFound(f"no token with id {token_id!r}", id=token_id)
            if known[token_id]["revoked_seq"] is not None:
                raise Informational(
                    f"token {token_id} was revoked already (seq {known[token_id]['revoked_seq']})",
                    id=token_id,
                )
            r = s.append(payload)
        return {"token_id": token_id, "revoked": True, "seq": r.seq}

    def tokens(self) -> builtins.list[dict[str, Any]]:
        """Every token issued here (never a token itself): id, scope, state, refusals recorded."""
        from mnemolog.projections import tokens as tq

        with self.session() as s:
            rows = tq.list_tokens(s.conn)
        now = self.clock()
        refused = scope.refusal_counts(self.refusals.path)
        for t in rows:
            t.pop("sha256", None)
            t["refusals"] = refused.get(t["token_id"], 0)
            t["state"] = (
                "revoked"
                if t["revoked_seq"] is not None
                else "expired"
                if t["expires_at"] is not None and t["expires_at"] <= now
                else "active"
            )
        return rows

    def authenticate(self, token: str, *, tenant: str | None = None) -> scope.Scope:
        """The scope of a token this home issued.

        TokenRefused when it is unknown, revoked, expired or another tenant's.
        """
        from mnemolog.projections import tokens as tq

        named, token_id, digest = scope.parse_token(token)
        if named != tenant:
            raise scope.TokenRefused("this token belongs to another home")
        with self.session() as s:
            # Every request of a server asks this: the table is kept in memory, and read again
            # only when an entry appended since (by any process) issued or revoked a token.
            size = self.log.size
            cached = self._token_rows
            if cached is not None and cached[0] != size:
                fresh = size > cached[0] and size - cached[0] <= TOKEN_SCAN
                if fresh:
                    types = {e.type for e in self.log.iter_entries(cached[0], size)}
                    fresh = not types & {v.TOKEN_ISSUED, v.TOKEN_REVOKED, v.LOG_ROLLBACK_ACCEPTED}
                cached = (size, cached[1]) if fresh else None
            if cached is None:
                cached = (size, {(t["token_id"], t["sha256"]): t for t in tq.list_tokens(s.conn)})
            self._token_rows = cached
        row = cached[1].get((token_id, digest))
        if row is None or row["revoked_seq"] is not None:
            raise scope.TokenRefused("this token is unknown here or was revoked")
        if row["expires_at"] is not None and row["expires_at"] <= self.clock():
            raise scope.TokenRefused(f"token {token_id} has expired")
        namespaces = tuple(row["namespaces"])
        return scope.Scope(
            level=row["level"] if row["level"] in scope.LEVELS else "read",
            namespaces=namespaces,
            shared=scope.shared_with(self.sharing, namespaces),
            projects=tuple(row["projects"]),
            token_id=token_id,
            tenant=tenant,
            rate_per_minute=row["rate_per_minute"],
        )

    def authorise(
        self, sc: scope.Scope, access: scope.Access, arguments: Mapping[str, Any], operation: str
    ) -> None:
        """The one scope check, before an operation runs: ScopeRefused (recorded) or nothing."""
        try:
            self._authorise(sc, access, arguments, operation)
        except scope.ScopeRefused as exc:
            self.refusals.record(sc, operation, exc)
            raise

    def _authorise(
        self, sc: scope.Scope, access: scope.Access, arguments: Mapping[str, Any], operation: str
    ) -> None:
        refuse = scope.ScopeRefused
        if not sc.allows(access.level):
            raise refuse(
                f"{operation} needs a {access.level} token; this one is {sc.level}",
                operation=operation,
                needs=access.level,
            )
        if not sc.bound:
            return
        if access.tenant_wide:
            raise refuse(
                f"{operation} answers about the whole home; this token is bound to {sc.describe()}",
                operation=operation,
            )
        writing = access.level != "read"
        for name in access.namespaces:
            ns = arguments.get(name)
            if not isinstance(ns, str):
                continue
            ok = (
                sc.writes_namespace(ns)
                if writing
                else sc.reads_namespace(ns)
                or any(r.startswith(ns.rstrip("/") + "/") for r in sc.within() or ())
            )
            if not ok:
                raise refuse(f"namespace {ns!r} is outside this token's scope", field=name)
        for name in access.projects:
            p = arguments.get(name)
            if isinstance(p, str) and p and sc.projects and p not in sc.projects:
                raise refuse(f"project {p!r} is outside this token's scope", field=name)
        for name in access.project_data:
            p = arguments.get(name)
            if isinstance(p, str) and p not in sc.projects:
                raise refuse(
                    f"project {p!r}: its state belongs to the home; this token is not bound to it",
                    field=name,
                )
        checks = [(n, writing) for n in access.ids] + [(n, False) for n in access.read_ids]
        if not checks and not access.histories:
            return
        with self.session() as s:
            for name, write in checks:
                mid = arguments.get(name)
                m = s.get(mid) if isinstance(mid, str) else None
                if m is None:
                    continue  # the operation itself says it is not found
                if not (sc.writes(m) if write else sc.sees(m)):
                    raise refuse(f"memory {mid} is outside this token's scope", field=name)
            for name in access.histories:
                mid = arguments.get(name)
                if not isinstance(mid, str):
                    continue
                # A history is its entries: an edge or an atomisation names the other memories.
                around = q.touched_with(s.conn, mid)
                inside = q.allowed_ids(
                    s.conn, around, self._bound(Filters(include_archived=True, statuses=()), sc)
                )
                if set(around) - inside:
                    raise refuse(
                        f"memory {mid}: its history names memories outside this token's scope", field=name
                    )

    def with_token(self, token: str, *, tenant: str | None = None) -> scope.Scoped:
        """This home as a token's holder sees it: every call checked and confined (substrate.scope)."""
        return scope.Scoped(self, self.authenticate(token, tenant=tenant))

    def set_embedder(self, kind: str, model: str | None = None) -> dict[str, Any]:
        """Record `kind` (and `model`) as the home's embedder; vectors follow (see `embed_pending`).

        Raises Unchanged (exit 1) when the home already embeds with that model,
        EmbedderFailed (exit 4) when the embedder cannot be reached to ask its
        version and dimension.
        """
        record: EmbedderConfigured = self.embedding.choose(self, kind, model)
        return record.model_dump()

    def embed_pending(self, *, limit: int | None = None, progress: bool | None = None) -> dict[str, int]:
        """Embed the memories and chunks waiting for a vector now (what the background worker does)."""
        return self.embedding.drain(self, limit=limit, progress=progress)

    def embedding_status(self) -> EmbeddingStatus:
        """The recorded embedder (and its history), the configured one, vectors, pending, cached."""
        return self.embedding.status(self)

    # -- documents and context packs -------------------------------------------------

    def ingest(
        self,
        paths: Sequence[str | Path],
        *,
        project: str | None = None,
        globs: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> dict[str, Any]:
        """Ingest files and directories as documents and chunks (see substrate.context)."""
        settings = ctx.IngestSettings.from_config(self.home.config.raw)
        report = ctx.ingest(self, paths, project=project, globs=globs, settings=settings, progress=progress)
        return report.to_json()

    def build_context(
        self,
        query: str,
        *,
        project: str | None = None,
        budget: int | None = None,
        unit: str | None = None,
        record: bool = True,
        personal: bool = False,
    ) -> dict[str, Any]:
        """The context pack for `query`: five tiers under a budget; recorded as `context.built`.

        `project` is a registered name or any of its aliases; memories are ranked as `recall` ranks.
        `personal` asks for the personal scope (`[context] personal_domains`), without any project.
        """
        cfg = pack_config(self.home.config.raw)
        return ctx.build_context(
            self,
            query,
            now=self.clock(),
            config=cfg,
            project=project,
            budget=budget,
            unit=unit,
            record=record,
            embedding=self.embedding,
            fusion=self.fusion,
            personal=personal,
        )

    def show_context(self, pack_id: str) -> dict[str, Any]:
        """A recorded pack re-rendered from the log alone, its hash and quoted texts verified."""
        sc = scope.current()
        if sc is not None and sc.bound:
            # A pack quotes memories, state and chunks: a bound token sees it only when it
            # could have seen every memory in it and owns every project it quotes.
            members = ctx.pack_members(self, pack_id)
            with self.session() as s:
                f = self._bound(Filters(include_archived=True, statuses=()), sc)
                ids = [*members.get("memory", [])]
                outside = set(ids) - q.allowed_ids(s.conn, ids, f)
            if outside or ((members.get("state") or members.get("chunk")) and not sc.projects):
                raise scope.ScopeRefused(
                    f"context pack {pack_id} quotes what lies outside this token's scope",
                    pack_id=pack_id,
                )
        return ctx.show_context(self, self.log, pack_id, self.keys)

    def context_why(self, member_id: str, *, limit: int = 50) -> builtins.list[dict[str, Any]]:
        """The packs a memory, state entry or chunk went into (or was trimmed from), newest first."""
        return ctx.context_why(self, member_id, check_limit(limit))

    def render_agent_folder(
        self, root: str | Path, agent: str = "mnemolog", namespace: str | None = None
    ) -> dict[str, Any]:
        """Write (merge) persona files, journal days and run logs under root/agent; hand edits kept."""
        from mnemolog.substrate.vault import agentfolder  # the vault's planners: only a render needs them

        return agentfolder.render_agent_folder(self, Path(root), agent, self.home.config, namespace).to_json()

    def promote_to_persona(
        self, memory_id: str, *, file: str | None = None, section: str | None = None
    ) -> Memory:
        """Record that a memory joins the agent's persona (today), optionally in one file's section."""
        today = datetime.datetime.fromtimestamp(self.clock() / 1e6, datetime.UTC).date()
        from mnemolog.substrate.vault import agentfolder

        return agentfolder.promote_to_persona(self, memory_id, today=today, file=file, section=section)

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
        from mnemolog.substrate.erasure import service as erasure

        return erasure.forget(
            self,
            ids=list(memory_ids) if memory_ids else None,
            namespace=namespace,
            project=project,
            document=document,
            interaction=interaction,
            before=before,
            reason=reason,
            requested_by=requested_by or "api",
            dry_run=dry_run,
            vaults=[Path(p) for p in vaults],
            receipt=Path(receipt) if receipt is not None else None,
            expired=expired,
        )

    def rebuild(self, *, accept_rollback: bool = False) -> dict[str, Any]:
        """Drop every projection and replay the whole log.

        Refused (RollbackRefused, exit 8) when the log no longer holds a
        position the home recorded — the entry the projection last applied,
        or a high-water checkpoint — since replaying would erase the last
        trace of the lost entries. With `accept_rollback` the loss is first
        recorded in the log (a signed `log.rollback_accepted` naming the old
        and new size and root), checkpoints the log no longer matches are set
        aside under `log/rolled-back/`, and the high-water mark follows.
        """
        with self._lock:
            found = self.projections.rollback() or self._high_water_rollback()
            accepted: dict[str, Any] | None = None
            if found is not None:
                if not accept_rollback:
                    raise RollbackRefused(
                        f"the log has {found.new_size} entries but the home recorded {found.old_size} "
                        f"({found.source}), and the log no longer holds them: it was truncated or "
                        "rolled back. A rebuild would erase that evidence: check the log with "
                        "`mnemolog log verify`; if the rollback is intended, run `mnemolog rebuild "
                        "--accept-rollback`, which records it in the log",
                        check="projection.rollback",
                        seq=found.new_size,
                        file=found.source,
                        expected=found.old_size,
                        found=found.new_size,
                    )
                accepted = self._accept_rollback(found)
            n = self.projections.rebuild()
        return {"replayed": n, "log_size": self.log.size, "rollback_accepted": accepted}

    def verify_projections(self) -> dict[str, Any]:
        """Re-fold the log and compare every projection table with disk (VerificationError on a
        difference: table, key, column, expected, found)."""
        with self._lock:
            from mnemolog.projections import audit  # a re-fold and a comparison: only verify needs it

            return audit.verify_projections(self.projections, self.keys.upcast).to_json()

    def _high_water_rollback(self) -> Rollback | None:
        """A high-water mark of this log that the log no longer covers with the same root."""
        size = self.log.refresh()
        try:
            marks = self.home.high_water_marks()
        except VerificationError:
            return None  # a missing mark proves nothing here; `log verify` reports it
        for hw in marks:
            try:
                body = hw.body()
            except MnemologError:
                continue  # not a checkpoint at all: `log verify` reports it
            if body.origin != self.log.origin:
                continue  # another log's mark: the trust anchor judges that
            if body.size > size or self.log.root(body.size) != body.root:
                return Rollback(body.size, body.root, size, self.log.root(size), hw.source)
        return None

    def _accept_rollback(self, found: Rollback) -> dict[str, Any]:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        w = self.home.open_writer(
            durability=self._durability, clock=self.clock, progress=self._progress, accept_rollback=True
        )
        try:
            new_size = w.size
            self.log.refresh()
            payload = RollbackAccepted(
                old_size=found.old_size,
                old_root=found.old_root,
                new_size=new_size,
                new_root=self.log.root(new_size),
                source=found.source,
            )
            r = w.append(payload.TYPE, payload.to_data(), payload.TV)
            w.checkpoint()
            set_aside = list(w.set_aside)
        finally:
            w.close()
        self.log.refresh()
        return {
            "seq": r.seq,
            "old_size": payload.old_size,
            "old_root": payload.old_root.hex() if payload.old_root else None,
            "new_size": payload.new_size,
            "new_root": payload.new_root.hex(),
            "source": payload.source,
            "set_aside": set_aside,
        }


def _write_folder(out: Path, notes: list[tuple[str, bytes]]) -> int:
    """Write `notes` (relative paths) as the folder `out`, which must be absent or empty.

    The notes go into a hidden sibling first and the folder is renamed into
    place, so a failure (a full disk) leaves no half-written export.
    """
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UsageError(
            f"{out} exists and is not a folder; a basic-memory export writes a folder", file=str(out)
        )
    if out.is_dir() and any(out.iterdir()):
        raise UsageError(
            f"{out} is not empty; a basic-memory export writes a new or empty folder", file=str(out)
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    # A fresh name (mkdtemp), never a guessed one that might be someone's folder to delete;
    # mkdtemp makes it 0700, so the export is private to its owner until they share it.
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        for rel, data in notes:
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as fh:
                fh.write(data)
                os.fsync(fh.fileno())
        if out.is_dir():
            out.rmdir()  # empty, checked above
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsio.fsync_dir(out.parent)
    return len(notes)
