"""`Substrate`: the Python API agents use. Commands become events; reads are projections.

Every write runs inside a projection session (the projection lock, with the
tables caught up to the log), checks its preconditions against that state,
appends its event, and folds it before returning, so a stored memory is
recallable the moment `store` returns. The projection lock is taken before
the log's writer lock, never the other way round, so processes cannot
deadlock, and two writers of the same home see each other's effects.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
from pydantic import ValidationError

from mnemolog.eventlog.errors import BadInput, NotFound, UsageError
from mnemolog.eventlog.writer import Clock, Durability, LogWriter, Receipt, TornTail, system_clock
from mnemolog.projections import recall as q
from mnemolog.projections.engine import Projections
from mnemolog.projections.recall import Filters
from mnemolog.substrate import governance
from mnemolog.substrate.atomise import Atomiser, AtomiseResult
from mnemolog.substrate.events import (
    CURRENT_TV,
    KINDS,
    RELATIONS,
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
from mnemolog.substrate.governance import ResolvedPolicy, check_namespace
from mnemolog.substrate.home import Home
from mnemolog.substrate.hooks import GovernanceRefused, Hook, HookChain, HookEvent
from mnemolog.substrate.ids import new_id

MAX_CONTENT_BYTES = 256 * 1024
MAX_TITLE_CHARS = 512
MAX_TAGS = 64
MAX_TAG_CHARS = 64
MAX_METADATA_BYTES = 64 * 1024
MAX_SOURCE_CHARS = 2048
MAX_LIMIT = 1000


def _validation(exc: ValidationError, what: str) -> BadInput:
    first = exc.errors()[0]
    loc = ".".join(str(x) for x in first.get("loc", ()))
    return BadInput(f"{what}: {loc}: {first.get('msg')}", field=loc)


def check_content(content: str, what: str = "content") -> str:
    if not isinstance(content, str):
        raise BadInput(f"{what} must be text", field=what)
    if not content.strip():
        raise BadInput(f"{what} is empty", field=what)
    n = len(content.encode("utf-8", "surrogatepass"))
    if n > MAX_CONTENT_BYTES:
        raise BadInput(
            f"{what} is {n} bytes; the limit is {MAX_CONTENT_BYTES} bytes (256 KiB)",
            field=what,
            expected=MAX_CONTENT_BYTES,
            found=n,
        )
    try:
        content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadInput(f"{what} is not valid Unicode text (lone surrogates)", field=what) from exc
    if "\x00" in content:
        raise BadInput(f"{what} contains a NUL character", field=what)
    return content


def check_tags(tags: Sequence[str]) -> list[str]:
    out: list[str] = []
    if isinstance(tags, str):
        tags = [tags]
    if not isinstance(tags, list | tuple):
        raise BadInput("tags must be a list of text", field="tags")
    for t in tags:
        if not isinstance(t, str) or not t.strip() or len(t) > MAX_TAG_CHARS or any(c.isspace() for c in t):
            raise BadInput(f"tag {t!r} must be 1–{MAX_TAG_CHARS} characters without whitespace", field="tags")
        if t not in out:
            out.append(t)
    if len(out) > MAX_TAGS:
        raise BadInput(f"at most {MAX_TAGS} tags", field="tags", found=len(out))
    return out


def check_metadata(meta: Mapping[str, Any] | None) -> dict[str, Any]:
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise BadInput("metadata must be a JSON object", field="metadata")
    try:
        size = len(json.dumps(meta, ensure_ascii=False, allow_nan=False).encode())
    except (TypeError, ValueError) as exc:
        raise BadInput(f"metadata is not JSON-compatible: {exc}", field="metadata") from exc
    if size > MAX_METADATA_BYTES:
        raise BadInput(f"metadata is {size} bytes; the limit is {MAX_METADATA_BYTES}", field="metadata")
    return dict(meta)


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise UsageError(f"unknown kind {kind!r} (one of {', '.join(KINDS)})", field="kind")
    return kind


def check_confidence(c: float | None) -> float | None:
    if c is None:
        return None
    if isinstance(c, bool) or not isinstance(c, int | float) or not 0.0 <= float(c) <= 1.0:
        raise BadInput(f"confidence must be a number in [0, 1], found {c!r}", field="confidence")
    return float(c)


def check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise UsageError(f"limit must be between 1 and {MAX_LIMIT}", field="limit", found=limit)
    return limit


class Substrate:
    """An open home. Thread-safe; one per process is plenty."""

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
        self.warnings: list[str] = []
        self._lock = threading.RLock()
        self._closed = False
        self.atomiser = Atomiser(self, curator_options)
        if long_lived and worker:
            self.atomiser.start_worker()

    @classmethod
    def open(cls, home: str | Path | Home | None = None, **kw: Any) -> Substrate:
        h = home if isinstance(home, Home) else Home.resolve(home)
        return cls(h, **kw)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.atomiser.stop_worker()
        self.projections.close()
        self.writer.close()
        self.log.close()

    def __enter__(self) -> Substrate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sessions ------------------------------------------------------------

    @contextmanager
    def session(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """Projection lock held, tables caught up with the log."""
        with self._lock, self.projections.session() as conn:
            yield conn

    def _append(self, conn: duckdb.DuckDBPyConnection, type_: str, payload: Payload) -> Receipt:
        r = self.writer.append(type_, payload.to_data(), CURRENT_TV.get(type_, 1))
        self.projections.catch_up(conn)
        return r

    def _require(self, conn: duckdb.DuckDBPyConnection, memory_id: str) -> dict[str, Any]:
        m = q.get(conn, memory_id) if isinstance(memory_id, str) else None
        if m is None:
            raise NotFound(f"no memory with id {memory_id!r}", id=memory_id)
        return m

    def policy_for(self, conn: duckdb.DuckDBPyConnection, namespace: str) -> ResolvedPolicy:
        return governance.resolve(conn, namespace)

    def _check_write(self, policy: ResolvedPolicy, namespace: str, atom_index: int | None = None) -> None:
        if policy["write"] == "none":
            where = f" (atom {atom_index})" if atom_index is not None else ""
            raise GovernanceRefused(
                f"namespace {namespace!r} does not accept writes (policy write = none, set on "
                f"{policy.sources['write']!r}){where}",
                namespace=namespace,
                atom_index=atom_index,
            )

    # -- writes --------------------------------------------------------------

    def build_stored(
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
    ) -> MemoryStored:
        """Validate a store command and build its payload (no I/O)."""
        check_content(content)
        check_namespace(namespace)
        check_kind(kind)
        if title is not None and (
            not isinstance(title, str) or len(title) > MAX_TITLE_CHARS or "\x00" in title
        ):
            raise BadInput(
                f"title must be text of at most {MAX_TITLE_CHARS} characters, no NUL", field="title"
            )
        if source is not None and len(source) > MAX_SOURCE_CHARS:
            raise BadInput(f"source longer than {MAX_SOURCE_CHARS} characters", field="source")
        try:
            return MemoryStored(
                id=memory_id or new_id(),
                namespace=namespace,
                kind=kind,  # type: ignore[arg-type]
                title=title or None,
                content=content,
                tags=check_tags(tags),
                confidence=check_confidence(confidence),
                source=source,
                metadata=check_metadata(metadata),
                created_at=created_at,
                last_seen=last_seen,
                atom_of=atom_of,
                source_span=list(source_span) if source_span is not None else None,
            )
        except ValidationError as exc:
            raise _validation(exc, "store") from exc

    def _append_many(
        self, conn: duckdb.DuckDBPyConnection, items: Sequence[tuple[str, Payload]]
    ) -> list[Receipt]:
        """Several events in one batch (one sync), folded before returning."""
        rs = self.writer.append_many([(t, p.to_data(), CURRENT_TV.get(t, 1)) for t, p in items])
        self.projections.catch_up(conn)
        return rs

    def write_memory(
        self,
        conn: duckdb.DuckDBPyConnection,
        payload: MemoryStored,
        atom_index: int | None = None,
        policy: ResolvedPolicy | None = None,
        follow: Callable[[ResolvedPolicy], Sequence[tuple[str, Payload]]] | None = None,
    ) -> dict[str, Any]:
        """Governance, pre_store hooks, the event, post_store hooks; inside a session.

        `follow` may add events that belong with this store (a deferred
        atomisation request): they go into the same batch, so a store under a
        deferred policy costs one sync like any other.
        """
        policy = policy or self.policy_for(conn, payload.namespace)
        self._check_write(policy, payload.namespace, atom_index)
        data = payload.to_data()
        self.hooks.pre(HookEvent("pre_store", payload.namespace, data, atom_index))
        extra = follow(policy) if follow is not None else ()
        self._append_many(conn, [("memory.stored", payload), *extra])
        mem = self._require(conn, payload.id)
        self.warnings += self.hooks.post(HookEvent("post_store", payload.namespace, mem, atom_index))
        return mem

    def store(self, content: str, **kw: Any) -> dict[str, Any]:
        """Store a memory; returns it as recall would show it.

        Under an auto-atomise policy the response also carries `atomise_mode` and
        `atomise_outcome`: "requested" (deferred: a worker will atomise it),
        "atomised" / "skipped_below_threshold" / "skipped_already_atomic" /
        "failed" (synchronous: the curator ran before this returned).
        """
        payload = self.build_stored(content, **kw)
        planned: list[tuple[str, Any]] = []

        def follow(policy: ResolvedPolicy) -> Sequence[tuple[str, Payload]]:
            mode, action, extra = self.atomiser.plan(policy, payload)
            planned.append((mode, action))
            return extra

        with self.session() as conn:
            mem = self.write_memory(conn, payload, follow=follow)
        mode, action = planned[0]
        if action == "requested":
            self.atomiser.wake()
        if action is None:
            return mem
        if action == "below":
            return {**mem, "atomise_mode": mode, "atomise_outcome": "skipped_below_threshold"}
        if action == "requested":
            return {**mem, "atomise_mode": mode, "atomise_outcome": "requested"}
        # Synchronous: the curator runs outside the projection lock, before we return.
        extra = self.atomiser.synchronous(mem)
        return {**self.get(mem["id"]), **extra}

    def atomise(self, memory_id: str, **kw: Any) -> AtomiseResult:
        """Atomise a memory now (see substrate.atomise); raises the seed's errors."""
        return self.atomiser.atomise(memory_id, **kw)

    def drain_atomisations(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Run pending deferred atomisations now (what the worker does)."""
        return self.atomiser.drain(limit=limit)

    def update(self, memory_id: str, **fields: Any) -> dict[str, Any]:
        allowed = {
            "title",
            "content",
            "kind",
            "namespace",
            "tags",
            "confidence",
            "source",
            "metadata",
            "last_seen",
        }
        unknown = set(fields) - allowed
        if unknown:
            raise UsageError(f"cannot update {', '.join(sorted(unknown))}", field=sorted(unknown)[0])
        fields = {k: v for k, v in fields.items() if v is not None}
        if not fields:
            raise UsageError("nothing to update: give at least one field")
        if "content" in fields:
            check_content(fields["content"])
        if "kind" in fields:
            check_kind(fields["kind"])
        if "namespace" in fields:
            check_namespace(fields["namespace"])
        if "tags" in fields:
            fields["tags"] = check_tags(fields["tags"])
        if "confidence" in fields:
            fields["confidence"] = check_confidence(fields["confidence"])
        if "metadata" in fields:
            fields["metadata"] = check_metadata(fields["metadata"])
        try:
            payload = MemoryUpdated(id=memory_id, **fields)
        except ValidationError as exc:
            raise _validation(exc, "update") from exc
        with self.session() as conn:
            before = self._require(conn, memory_id)
            policy = self.policy_for(conn, fields.get("namespace", before["namespace"]))
            self._check_write(policy, before["namespace"])
            self._append(conn, "memory.updated", payload)
            return self._require(conn, memory_id)

    def link(
        self, src: str, dst: str, relation: str = "related_to", metadata: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        if relation not in RELATIONS:
            raise UsageError(
                f"unknown relation {relation!r} (one of {', '.join(RELATIONS)})", field="relation"
            )
        payload = LinkCreated(src=src, dst=dst, relation=relation, metadata=check_metadata(metadata))  # type: ignore[arg-type]
        with self.session() as conn:
            return self.write_link(conn, payload)

    def write_link(
        self, conn: duckdb.DuckDBPyConnection, payload: LinkCreated, atom_index: int | None = None
    ) -> dict[str, Any]:
        src = self._require(conn, payload.src)
        self._require(conn, payload.dst)
        data = payload.to_data()
        self.hooks.pre(HookEvent("pre_link", src["namespace"], data, atom_index))
        r = self._append(conn, "link.created", payload)
        edge = {**data, "seq": r.seq, "created_at": r.ts}
        self.warnings += self.hooks.post(HookEvent("post_link", src["namespace"], edge, atom_index))
        return edge

    def archive(self, memory_id: str, reason: str | None = None) -> dict[str, Any]:
        with self.session() as conn:
            m = self._require(conn, memory_id)
            if m["archived_at"] is not None:
                return m
            self._append(conn, "memory.archived", MemoryArchived(id=memory_id, reason=reason))
            return self._require(conn, memory_id)

    def restore(self, memory_id: str, reason: str | None = None) -> dict[str, Any]:
        with self.session() as conn:
            m = self._require(conn, memory_id)
            if m["archived_at"] is None and m["atomisation_archived_at"] is None:
                return m
            self._append(conn, "memory.restored", MemoryRestored(id=memory_id, reason=reason))
            return self._require(conn, memory_id)

    def set_policy(self, namespace: str, unset: Sequence[str] = (), **fields: Any) -> dict[str, Any]:
        """Set fields of a namespace's own policy (and drop `unset` ones: they inherit again)."""
        check_namespace(namespace, allow_root=True)
        try:
            policy = Policy(**fields)
        except ValidationError as exc:
            raise _validation(exc, "policy") from exc
        unknown = [f for f in unset if f not in Policy.model_fields]
        if unknown:
            raise UsageError(f"unknown policy field(s) {unknown}", field="unset")
        changes = policy.model_dump(exclude_none=True)
        if not changes and not unset:
            raise UsageError("nothing to change: give a field to set or to unset")
        with self.session() as conn:
            own = {**(governance.get_policy(conn, namespace) or {}), **changes}
            for name in unset:
                own.pop(name, None)
            governance.check_atomisable(conn, namespace, own)
            payload = PolicySet(namespace=namespace, changes=changes, unset=list(unset))
            self._append(conn, "policy.set", payload)
            return governance.resolve(conn, namespace).to_json()

    def clear_policy(self, namespace: str) -> dict[str, Any]:
        check_namespace(namespace, allow_root=True)
        with self.session() as conn:
            if governance.get_policy(conn, namespace) is None:
                raise NotFound(f"namespace {namespace!r} has no policy of its own")
            governance.check_atomisable(conn, namespace, None)
            self._append(conn, "policy.set", PolicySet(namespace=namespace, clear=True))
            return governance.resolve(conn, namespace).to_json()

    def get_policy(self, namespace: str) -> dict[str, Any]:
        check_namespace(namespace, allow_root=True)
        with self.session() as conn:
            out = governance.resolve(conn, namespace).to_json()
            out["own"] = governance.get_policy(conn, namespace)
            return out

    # -- reads -----------------------------------------------------------------

    def get(self, memory_id: str) -> dict[str, Any]:
        with self.session() as conn:
            m = self._require(conn, memory_id)
            m["links"] = q.links_of(conn, memory_id)
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
    ) -> list[dict[str, Any]]:
        """BM25 over title and content; any matching term ranks. No side effects."""
        f = self._filters(namespace, descendants, kinds, tags, include_archived)
        return self._ranked(q.recall, query, f, limit)

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
    ) -> list[dict[str, Any]]:
        """Exact keywords, all required, ranked by BM25."""
        f = self._filters(namespace, descendants, kinds, tags, include_archived)
        return self._ranked(q.search, query, f, limit)

    def _ranked(
        self,
        ranker: Callable[[duckdb.DuckDBPyConnection, str, Filters, int], list[tuple[dict[str, Any], float]]],
        query: str,
        f: Filters,
        limit: int,
    ) -> list[dict[str, Any]]:
        if not isinstance(query, str) or not query.strip():
            raise BadInput("the query is empty", field="query")
        with self.session() as conn:
            return [{**m, "score": s} for m, s in ranker(conn, query, f, check_limit(limit))]

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
    ) -> list[dict[str, Any]]:
        f = self._filters(namespace, descendants, kinds, tags, include_archived)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise UsageError("offset must not be negative")
        with self.session() as conn:
            return q.list_memories(conn, f, check_limit(limit), offset)

    def stats(self) -> dict[str, Any]:
        with self.session() as conn:
            out = q.stats(conn)
            out["atomisation"] = self.atomiser.counts(conn)
            out["log"] = {"size": self.log.size, "log_id": self.log.log_id.hex()}
            return out

    def rebuild(self) -> dict[str, Any]:
        with self._lock:
            n = self.projections.rebuild()
        return {"replayed": n, "log_size": self.log.size}
