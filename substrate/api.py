"""`Substrate`: the Python API agents use. Commands become events; reads are projections.

Every write runs inside a projection session (the projection lock, with the
tables caught up to the log), checks its preconditions against that state,
appends its event, and folds it before returning, so a stored memory is
recallable the moment `store` returns. The projection lock is taken before
the log's writer lock, never the other way round, so processes cannot
deadlock, and two writers of the same home see each other's effects.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypedDict

import duckdb
from pydantic import ValidationError

from mnemolog.curators.embed import Embedder, EmbedderFailed
from mnemolog.eventlog.errors import BadInput, NotFound, UsageError
from mnemolog.eventlog.vocabulary import MUTABLE_FIELDS
from mnemolog.eventlog.writer import Clock, Durability, LogWriter, TornTail, system_clock
from mnemolog.projections import hybrid, vectors
from mnemolog.projections import recall as q
from mnemolog.projections.engine import Projections
from mnemolog.projections.memories import Edge, Memory
from mnemolog.projections.recall import Filters
from mnemolog.substrate import witnessing
from mnemolog.substrate.atomise import Atomiser, AtomiseResult
from mnemolog.substrate.embedding import Embedding, EmbeddingStatus, parse_fusion, require_vectors
from mnemolog.substrate.events import (
    LinkCreated,
    MemoryArchived,
    MemoryRestored,
    MemoryStored,
    MemoryUpdated,
    Payload,
    Policy,
    PolicySet,
    upcast,
)
from mnemolog.substrate.events.embedding import EmbedderConfigured
from mnemolog.substrate.events.limits import (
    MAX_CONTENT_BYTES,
    check_kind,
    check_limit,
    check_namespace,
    check_tags,
)
from mnemolog.substrate.governance import ResolvedPolicy
from mnemolog.substrate.home import Home
from mnemolog.substrate.hooks import Hook, HookChain
from mnemolog.substrate.importer import BATCH, ImportReport, import_jsonl
from mnemolog.substrate.session import Session

__all__ = ["MAX_CONTENT_BYTES", "Edge", "Memory", "RecallReport", "Substrate"]

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
    ) -> None:
        self.home = home.require()
        self.clock = clock
        self.writer: LogWriter = home.open_writer(durability=durability, clock=clock, progress=progress)
        self.recovered: list[TornTail] = list(self.writer.recovered)
        self.log = home.open_log()
        self.projections = Projections(
            home.projections_dir,
            self.log,
            upcast,
            hold=long_lived,
            idle_release_ms=home.config.projection_idle_release_ms,
            progress=progress,
        )
        self.hooks = HookChain(home.config.hooks, hooks)
        self._lock = threading.RLock()
        self._closed = False
        self.atomiser = Atomiser(self.home, self, curator_options)
        self.embedding = Embedding(self.home, self.projections.cache, embedder=embedder)
        self.fusion = parse_fusion(self.home.config.raw.get("recall"))
        if long_lived and worker:
            self.atomiser.start_worker()
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
    ) -> Substrate:
        """Open a home (a path, a Home, or None for the default home).

        `embedder` replaces the embedder of its kind that the home would build
        (tests, benchmarks); the home's recorded choice still decides which kind.
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
        )

    def close(self) -> None:
        """Stop the worker and release the projection, the writer and the log (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.atomiser.stop_worker()
        self.embedding.stop_worker()
        self.projections.close()
        self.writer.close()
        self.log.close()
        if self._witnesses is not None:
            self._witnesses.close()  # after the closing checkpoint, so it is sent too

    def __enter__(self) -> Substrate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sessions ------------------------------------------------------------

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A unit of work: the projection lock held, tables caught up with the log."""
        with self._lock, self.projections.session() as conn:
            yield Session(conn, self.writer, self.projections, self.hooks, self.embedding)

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
    ) -> Memory:
        """Store a memory; returns it as recall would show it.

        Under an auto-atomise policy the response also carries `atomise_mode` and
        `atomise_outcome`: "requested" (deferred: a worker will atomise it),
        "atomised" / "skipped_below_threshold" / "skipped_already_atomic" /
        "failed" (synchronous: the curator ran before this returned).
        """
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
        )
        planned: list[tuple[str, str | None]] = []

        def follow(policy: ResolvedPolicy) -> Sequence[Payload]:
            mode, action, extra = self.atomiser.plan(policy, payload)
            planned.append((mode, action))
            if action == "synchronous":
                # Its atoms are embedded, not the source (decompose, then embed).
                s.skip_embedding[payload.id] = "skipped_synchronous_atomise"
            return extra

        with self.session() as s:
            mem = s.with_warnings(s.write_memory(payload, follow=follow))
            embedded = s.embedded.get(payload.id, "off")
            if embedded != "off":  # only where embeddings are in play, like the atomise_* keys
                mem["embedding"] = embedded
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

    def atomise(
        self,
        memory_id: str,
        *,
        force: bool = False,
        max_atom_tokens: int | None = None,
        curator: str | None = None,
        max_retries: int | None = None,
    ) -> AtomiseResult:
        """Atomise a memory now (see substrate.atomise); raises the seed's errors."""
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
    ) -> Memory:
        """Change fields of a memory (a `memory.updated`): given fields replace, metadata keys merge.

        The fields are the `memory.updated` model's (MUTABLE_FIELDS); None means
        "leave as it is", and the model holds every limit a store has.
        """
        given = dict(
            zip(
                MUTABLE_FIELDS,
                (title, content, kind, namespace, tags, confidence, source, metadata, last_seen),
                strict=True,
            )
        )
        fields = {k: v for k, v in given.items() if v is not None}
        if not fields:
            raise UsageError("nothing to update: give at least one field")
        payload = MemoryUpdated.model_validate({"id": memory_id, **fields})
        with self.session() as s:
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
        """Draw an edge src -> dst (both must exist)."""
        payload = LinkCreated.model_validate(
            {"src": src, "dst": dst, "relation": relation, "metadata": metadata}
        )
        with self.session() as s:
            return s.with_warnings(s.write_link(payload))

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
        """Undo an archive (the operator's or atomisation's); a visible memory is returned as it is."""
        payload = MemoryRestored(id=memory_id, reason=reason) if isinstance(memory_id, str) else None
        with self.session() as s:
            m = s.require(memory_id)
            if (m["archived_at"] is None and m["atomisation_archived_at"] is None) or payload is None:
                return m
            s.append(payload)
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
        with self.session() as s:
            s.append(payload)
            return s.policy(namespace).to_json()

    def clear_policy(self, namespace: str) -> dict[str, Any]:
        """Drop a namespace's own policy: every field inherits again."""
        check_namespace(namespace, allow_root=True)
        with self.session() as s:
            if s.own_policy(namespace) is None:
                raise NotFound(f"namespace {namespace!r} has no policy of its own")
            s.append(PolicySet(namespace=namespace, clear=True))
            return s.policy(namespace).to_json()

    def get_policy(self, namespace: str) -> dict[str, Any]:
        """The effective policy, where each field comes from, and the namespace's own policy."""
        check_namespace(namespace, allow_root=True)
        with self.session() as s:
            out = s.policy(namespace).to_json()
            out["own"] = s.own_policy(namespace)
            return out

    # -- reads -----------------------------------------------------------------

    def get(self, memory_id: str) -> Memory:
        """One memory with its links (NotFound, exit 2, for an unknown id)."""
        with self.session() as s:
            m = s.require(memory_id)
            m["links"] = s.links(memory_id)
            return m

    def _filters(
        self,
        namespace: str | None,
        descendants: bool,
        kinds: Sequence[str],
        tags: Sequence[str],
        include_archived: bool,
    ) -> Filters:
        if namespace is not None:
            check_namespace(namespace)
        for k in kinds:
            check_kind(k)
        return Filters(namespace, descendants, tuple(kinds), tuple(check_tags(tags)), include_archived)

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
        mode: hybrid.Mode | None = None,
        explain: bool = False,
    ) -> list[Memory]:
        """Rank memories for a natural-language query (any term may match). No side effects.

        `mode`: "bm25" (title, tags and content), "vector" (cosine of the
        embeddings), "hybrid" (both, fused by reciprocal rank), or None: hybrid
        when the home embeds, else bm25. `explain` adds each result's ranks
        and scores under `explain`. See `recall_report` for the mode used.
        """
        return self.recall_report(
            query,
            limit=limit,
            namespace=namespace,
            descendants=descendants,
            kinds=kinds,
            tags=tags,
            include_archived=include_archived,
            mode=mode,
            explain=explain,
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
        mode: hybrid.Mode | None = None,
        explain: bool = False,
    ) -> RecallReport:
        """`recall`, with the mode used and why it differs from the one asked for (if it does)."""
        f = self._filters(namespace, descendants, kinds, tags, include_archived)
        if not isinstance(query, str) or not query.strip():
            raise BadInput("the query is empty", field="query")
        if mode is not None and mode not in hybrid.MODES:
            raise UsageError(f"unknown recall mode {mode!r}; expected one of {', '.join(hybrid.MODES)}")
        n = check_limit(limit)
        with self.session() as s:
            rec = vectors.recorded(s.conn)
            meta = vectors.read_meta(s.conn)
        used: hybrid.Mode = mode or (
            "hybrid" if rec is not None and rec.embeds and meta is not None else "bm25"
        )
        fallback: str | None = None
        qvec = None
        if used != "bm25":
            rec = require_vectors(rec, used)
            try:
                # Embedded outside the projection lock: a remote embedder may take a while.
                qvec = self.embedding.query_vector(rec, query)
            except EmbedderFailed as exc:
                if mode is not None:
                    raise
                used, fallback = "bm25", f"the query could not be embedded: {exc.message}"
        with self.session() as s:
            meta = vectors.read_meta(s.conn)
            if used != "bm25" and meta is None:
                used, fallback = "bm25", fallback or "the home has no vectors yet"
            use_index = meta is not None and used != "bm25" and vectors.maintain_index(s.conn, meta)
            ranked = hybrid.rank(
                s.conn,
                query,
                qvec,
                f,
                n,
                mode=used,
                fusion=self.fusion,
                meta=meta,
                use_index=use_index,
            )
            results: list[Memory] = []
            for m, r in hybrid.with_memories(s.conn, ranked):
                m["score"] = r.score
                if explain:
                    m["explain"] = {"mode": used, **r.explain()}
                    if used == "hybrid":
                        m["explain"]["fusion"] = self.fusion.method
                results.append(m)
        return {"mode": used, "requested": mode, "fallback": fallback, "results": results}

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
    ) -> list[Memory]:
        """Exact keywords, all required, ranked by BM25."""
        f = self._filters(namespace, descendants, kinds, tags, include_archived)
        return self._ranked(q.search, query, f, limit)

    def _ranked(self, ranker: Ranker, query: str, f: Filters, limit: int) -> list[Memory]:
        if not isinstance(query, str) or not query.strip():
            raise BadInput("the query is empty", field="query")
        with self.session() as s:
            out = []
            for m, score in ranker(s.conn, query, f, check_limit(limit)):
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
    ) -> list[Memory]:
        """Memories newest first (by when they were stored)."""
        f = self._filters(namespace, descendants, kinds, tags, include_archived)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise UsageError("offset must not be negative")
        with self.session() as s:
            return q.list_memories(s.conn, f, check_limit(limit), offset)

    def stats(self) -> dict[str, Any]:
        """Counts of memories, links, policies, events, the index and atomisations."""
        with self.session() as s:
            out = q.stats(s.conn)
            out["atomisation"] = self.atomiser.counts(s)
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
        )
        if report["atomisation_requested"]:
            self.atomiser.wake()
        if warnings:
            report["warnings"] = warnings
        return report

    # -- embeddings ----------------------------------------------------------------

    def set_embedder(self, kind: str, model: str | None = None) -> dict[str, Any]:
        """Record `kind` (and `model`) as the home's embedder; vectors follow (see `embed_pending`).

        Raises Unchanged (exit 1) when the home already embeds with that model,
        EmbedderFailed (exit 4) when the embedder cannot be reached to ask its
        version and dimension.
        """
        record: EmbedderConfigured = self.embedding.choose(self, kind, model)
        return record.model_dump()

    def embed_pending(self, *, limit: int | None = None, progress: bool | None = None) -> dict[str, int]:
        """Embed the memories waiting for a vector now (what the background worker does)."""
        return self.embedding.drain(self, limit=limit, progress=progress)

    def embedding_status(self) -> EmbeddingStatus:
        """The recorded embedder (and its history), the configured one, vectors, pending, cached."""
        return self.embedding.status(self)

    def rebuild(self) -> dict[str, Any]:
        """Drop every projection and replay the whole log."""
        with self._lock:
            n = self.projections.rebuild()
        return {"replayed": n, "log_size": self.log.size}
