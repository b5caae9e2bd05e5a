"""`Substrate`: the Python API agents use, and the composition root of the feature services.

An open home wires one service per feature (`memories`, `retrieval`,
`knowledge`, `context`, `embedding`, `atomiser`, `tenancy`) to one log, one
projection and one writer; `mem.knowledge.capture(...)` and the flat name
the README documents, `mem.capture(...)`, are the same bound method (each
flat name is an `alias`, so its signature is declared once, in its service).
What is here joins the features: opening and closing, the unit of work
(`session`), the writer, home-wide counts, forgetting, rebuilds.

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
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mnemolog.eventlog.errors import MnemologError, StorageError, VerificationError
from mnemolog.eventlog.store.writer import Clock, Durability, LogWriter, TornTail, system_clock
from mnemolog.projections.engine import Projections, Rollback, RollbackRefused
from mnemolog.projections.memory.model import MEMORY_FIELDS, Edge, Memory
from mnemolog.substrate.alias import alias, deferred
from mnemolog.substrate.erasure.datakeys import DataKeys
from mnemolog.substrate.events.limits import MAX_CONTENT_BYTES
from mnemolog.substrate.home import Home
from mnemolog.substrate.hooks import Hook, HookChain
from mnemolog.substrate.recall.fusion import parse_fusion
from mnemolog.substrate.session import Session
from mnemolog.substrate.tenancy import scope
from mnemolog.substrate.tenancy.service import Tenancy

if TYPE_CHECKING:
    from mnemolog.curators.embedding.embedder import Embedder
    from mnemolog.projections.recall import hybrid
    from mnemolog.substrate.atomise.service import Atomiser
    from mnemolog.substrate.context.service import Context
    from mnemolog.substrate.embedding.service import Embedding
    from mnemolog.substrate.erasure.service import Erasure
    from mnemolog.substrate.events import Payload
    from mnemolog.substrate.knowledge.service import Knowledge
    from mnemolog.substrate.memory import asof
    from mnemolog.substrate.memory.service import Memories
    from mnemolog.substrate.recall.service import Recall, RecallReport
    from mnemolog.substrate.vault.folder import AgentFolder
else:
    # A command pays for the features it uses only: each service's module is imported when
    # the service is first built (the cached properties below), and a flat name (`alias`)
    # resolves its method then. `RecallReport` stays importable from here (`__getattr__`).
    Atomiser = deferred("mnemolog.substrate.atomise.service", "Atomiser")
    Context = deferred("mnemolog.substrate.context.service", "Context")
    Embedding = deferred("mnemolog.substrate.embedding.service", "Embedding")
    Erasure = deferred("mnemolog.substrate.erasure.service", "Erasure")
    Knowledge = deferred("mnemolog.substrate.knowledge.service", "Knowledge")
    Memories = deferred("mnemolog.substrate.memory.service", "Memories")
    Recall = deferred("mnemolog.substrate.recall.service", "Recall")
    AgentFolder = deferred("mnemolog.substrate.vault.folder", "AgentFolder")


def __getattr__(name: str) -> Any:
    # `RecallReport` is part of this module's API; its module loads only when it is asked for.
    if name == "RecallReport":
        from mnemolog.substrate.recall.service import RecallReport

        return RecallReport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["MAX_CONTENT_BYTES", "MEMORY_FIELDS", "Edge", "Memory", "RecallReport", "Substrate"]


class _KnowledgeOnDemand:
    """Recall's view of the knowledge loop, which builds the loop only when a recall names
    domains or a project: a plain recall never imports it."""

    def __init__(self, sub: Substrate) -> None:
        self.sub = sub

    def domains(self, values: Iterable[str]) -> builtins.list[str]:
        given = list(values)
        return self.sub.knowledge.domains(given) if given else []

    def canonical_project(self, s: Session, project: str | None, registry: Any = None) -> str:
        return self.sub.knowledge.canonical_project(s, project, registry)


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
        self._curator_options = curator_options
        self._embedder = embedder
        self._long_lived = long_lived
        # A bad `[recall]` table refuses the open, whichever command runs.
        self._fusion = parse_fusion(self.home.config.raw.get("recall"))
        # Tokens and scopes are checked on every call, and a bad `[sharing]` refuses the open.
        self.tenancy = Tenancy(self)
        #: Namespaces declared shared (`[sharing]`), and the refusals of scoped tokens so far.
        self.sharing = self.tenancy.sharing
        self.refusals = self.tenancy.refusals
        self._retention: Any = None
        if long_lived:
            # Threads (workers, a server's requests) may rank at once: numpy loads here, not
            # lazily from two threads (projections.lazymod).
            from mnemolog.projections import lazymod

            lazymod.load_now()
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
            self.embedding.start_worker()
        # A long-lived process sends its checkpoints to the home's witnesses from a thread.
        self._witnesses: Any = None
        if long_lived:
            from mnemolog.substrate.witness import service as witnessing

            self._witnesses = witnessing.start_watcher(self.home.root, self.home.log_dir, self.home.keys_dir)

    # -- the feature services, each built (and its module imported) on first use -----------
    # The flat names below are their methods (see substrate.alias). A short-lived process
    # (one CLI command) builds only what its command touches.

    @cached_property
    def atomiser(self) -> Atomiser:
        """Atomisation: the rule and LLM curators, the deferred queue and its worker."""
        from mnemolog.substrate.atomise.service import Atomiser

        return Atomiser(self.home, self, self._curator_options, require_writer=self.require_writer)

    @cached_property
    def knowledge(self) -> Knowledge:
        """The knowledge loop: projects, interactions, candidates, their schedules."""
        from mnemolog.substrate.knowledge.service import Knowledge

        return Knowledge(
            self.home,
            self,
            clock=self.clock,
            checkpoint=self._checkpoint_now,
            options=self._curator_options,
            # Triage's duplicate check asks the recall service (which reads the knowledge
            # loop's project names): looked up when triage runs.
            similar=lambda s, text, limit, exclude: self.retrieval.similar(s, text, limit, exclude),  # noqa: PLW0108
            nearest=lambda s, memory_id: self.retrieval.nearest(s, memory_id),  # noqa: PLW0108
        )

    @cached_property
    def embedding(self) -> Embedding:
        """The home's embedder: embed-on-insert, query vectors, pending work."""
        from mnemolog.substrate.embedding.service import Embedding

        return Embedding(self.home, self.projections.cache, self, embedder=self._embedder)

    @cached_property
    def _asof(self) -> asof.AsOfProjections:
        from mnemolog.substrate.memory import asof

        return asof.AsOfProjections(self.home, self.keys.upcast, self.projections.cache)

    @cached_property
    def retrieval(self) -> Recall:
        """Recall, search and list, under the one recall policy."""
        from mnemolog.substrate.recall.service import Recall

        return Recall(
            self,
            past=self._asof,
            hooks=self.hooks,
            projects=_KnowledgeOnDemand(self),
            embedding=self.embedding,
            fusion=self._fusion,
            clock=self._now,
            state_dir=self.home.state_dir,
        )

    @cached_property
    def memories(self) -> Memories:
        """Memories one by one and in bulk."""
        from mnemolog.substrate.memory.service import Memories

        return Memories(self)

    @cached_property
    def context(self) -> Context:
        """Documents and context packs."""
        from mnemolog.substrate.context.service import Context

        return Context(
            self,
            home=self.home,
            log=self.log,
            keys=self.keys,
            clock=self._now,
            embedding=self.embedding,
            retrieval=self.retrieval,
        )

    @cached_property
    def agent_folder(self) -> AgentFolder:
        """The agent folder (the vault)."""
        from mnemolog.substrate.vault.folder import AgentFolder

        return AgentFolder(self, self.home, self._now)

    @cached_property
    def erasure(self) -> Erasure:
        """Forgetting."""
        from mnemolog.substrate.erasure.service import Erasure

        return Erasure(self)

    def _built(self, name: str) -> Any:
        """The service `name` if it has been built, else None (closing builds nothing)."""
        return self.__dict__.get(name)

    def before_append(self, s: Session, payloads: Sequence[Payload]) -> builtins.list[Payload]:
        """Embed-on-insert (substrate.embedding), for every session's batches."""
        return self.embedding.before_append(s, payloads)

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
        if (a := self._built("atomiser")) is not None:
            a.stop_worker()
        if (k := self._built("knowledge")) is not None:
            k.stop_daily()
        if (e := self._built("embedding")) is not None:
            e.stop_worker()
        if (past := self._built("_asof")) is not None:
            past.close()
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

    def _now(self) -> int:
        # The services read the clock through here: `clock` may be replaced on an open home.
        return self.clock()

    def _checkpoint_now(self) -> tuple[int, bytes]:
        cp, _raw = self.writer.checkpoint()
        return cp.size, cp.root

    # -- sessions ------------------------------------------------------------

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
    def recovered(self) -> builtins.list[TornTail]:
        """Torn tails the writer cut when it opened (none before the first write)."""
        return list(self._writer.recovered) if self._writer is not None else []

    def require_writer(self) -> None:
        """Open the writer now: a command that must sign fails here, before anything runs."""
        _ = self.writer

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A unit of work: the projection lock held, tables caught up with the log."""
        with self._lock:
            self.keys.refresh()
            with self.projections.session() as conn:
                yield Session(conn, lambda: self.writer, self.projections, self.hooks, self, self.keys)

    @property
    def fusion(self) -> hybrid.Fusion:
        """How hybrid recall fuses BM25 and vectors (`[recall]`; the recall service's)."""
        return self.retrieval.fusion

    @fusion.setter
    def fusion(self, value: hybrid.Fusion) -> None:
        self.retrieval.fusion = value

    # -- the flat API: each name is one feature service's method (signatures declared there) ----

    # memories one by one (substrate.memory)
    store = alias("memories", Memories.store)
    get = alias("memories", Memories.get)
    update = alias("memories", Memories.update)
    link = alias("memories", Memories.link)
    unlink = alias("memories", Memories.unlink)
    archive = alias("memories", Memories.archive)
    restore = alias("memories", Memories.restore)
    set_policy = alias("memories", Memories.set_policy)
    clear_policy = alias("memories", Memories.clear_policy)
    get_policy = alias("memories", Memories.get_policy)
    # and in bulk
    import_jsonl = alias("memories", Memories.import_jsonl)
    import_from = alias("memories", Memories.import_from)
    export_memories = alias("memories", Memories.export_memories)

    # recall, search and list (substrate.recall)
    recall = alias("retrieval", Recall.recall)
    recall_report = alias("retrieval", Recall.report)
    search = alias("retrieval", Recall.search)
    list = alias("retrieval", Recall.list)

    # atomisation (substrate.atomise)
    atomise = alias("atomiser", Atomiser.atomise)
    drain_atomisations = alias("atomiser", Atomiser.drain)

    # the knowledge loop (substrate.knowledge)
    register_project = alias("knowledge", Knowledge.register_project)
    alias_project = alias("knowledge", Knowledge.alias_project)
    projects = alias("knowledge", Knowledge.projects)
    set_state = alias("knowledge", Knowledge.set_state)
    get_state = alias("knowledge", Knowledge.get_state)
    invalidate_state = alias("knowledge", Knowledge.invalidate_state)
    capture = alias("knowledge", Knowledge.capture)
    interactions = alias("knowledge", Knowledge.interactions)
    interaction = alias("knowledge", Knowledge.interaction)
    extract = alias("knowledge", Knowledge.extract)
    triage = alias("knowledge", Knowledge.triage)
    candidates = alias("knowledge", Knowledge.candidates)
    promote = alias("knowledge", Knowledge.promote)
    reject = alias("knowledge", Knowledge.reject)
    supersede = alias("knowledge", Knowledge.supersede)
    decay = alias("knowledge", Knowledge.decay)
    migrate_domain_prefixes = alias("knowledge", Knowledge.migrate_domain_prefixes)

    # embeddings (substrate.embedding)
    set_embedder = alias("embedding", Embedding.choose)
    embed_pending = alias("embedding", Embedding.drain)
    embedding_status = alias("embedding", Embedding.status)

    # documents and context packs (substrate.context)
    ingest = alias("context", Context.ingest)
    build_context = alias("context", Context.build)
    show_context = alias("context", Context.show)
    context_why = alias("context", Context.why)

    # tokens and scopes (substrate.tenancy)
    issue_token = alias("tenancy", Tenancy.issue_token)
    revoke_token = alias("tenancy", Tenancy.revoke_token)
    tokens = alias("tenancy", Tenancy.tokens)
    authenticate = alias("tenancy", Tenancy.authenticate)
    authorise = alias("tenancy", Tenancy.authorise)
    with_token = alias("tenancy", Tenancy.with_token)

    # the agent folder (substrate.vault) and forgetting (substrate.erasure)
    render_agent_folder = alias("agent_folder", AgentFolder.render)
    promote_to_persona = alias("agent_folder", AgentFolder.promote)
    forget = alias("erasure", Erasure.forget)

    # -- what joins the features -----------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counts of memories, links, policies, events, the index and atomisations."""
        from mnemolog.projections.recall import query as q

        sc = scope.current()
        if sc is not None and sc.bound:
            # A bound token learns about its own memories only: no home-wide counts.
            with self.session() as s:
                f = scope.everything(sc)
                return q.scoped_stats(s.conn, f)
        from mnemolog.projections.knowledge import queries as kq

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
            from mnemolog.substrate.events.log import RollbackAccepted

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
