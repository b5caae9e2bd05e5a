"""The home's embedder at work: which one (the log), reaching it (config), embed-on-insert, pending work.

Which embedder a home uses is the last `embedder.configured` in its log. A
home that has recorded none uses the one its configuration asks for
(`[embeddings]` in config.toml, MNEMOLOG_EMBED*; MiniLM by default), and
its first write that needs a vector records that choice in the same batch:
every vector of a home is derived under a signed choice. `set` records a
new choice; the configuration never switches a home by itself (two
processes with different environments would otherwise take turns
re-embedding everything).

Embed-on-insert: before a batch of events is appended (`before_append`,
called by `Session.append_many`), the texts the batch gives memories (a
store's, an update's result) are embedded, checked and put in the cache;
the fold's catch-up then finds them there (projections/embedding/vectors.py). The
chunks of an ingested document are embedded the same way, so tier 5 of a
context pack ranks them by meaning too. An
embedder that answers with the wrong dimension, NaN or infinity refuses the
write (`embedder_failed`, reason `bad_vectors`, exit 4) before anything is
written. One that cannot be reached now (down, timing out, not serving the
recorded model) does not block the write: the memory waits in
`vector_pending`, the write reports `embedding: "pending"`, and `drain` (the
background worker of a long-lived process, or `mnemolog embeddings sync`)
embeds it later. A source stored under a synchronous auto-atomise policy is
not embedded: its atoms are.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, TypedDict

from mnemolog.curators.base import TierLocked
from mnemolog.curators.embedding.embedder import (
    EmbedConfig,
    Embedder,
    EmbedderFailed,
    Vectors,
    check_vectors,
    make_embedder,
    parse_embed_config,
)
from mnemolog.eventlog.errors import Informational
from mnemolog.eventlog.progress import Progress
from mnemolog.projections.embedding import vectors
from mnemolog.projections.embedding.cache import EmbedCache
from mnemolog.substrate.events import EmbedderConfigured, MemoryStored, MemoryUpdated, Payload
from mnemolog.substrate.events.context import DocumentIngested
from mnemolog.substrate.home import Home
from mnemolog.substrate.recall.fusion import parse_fusion
from mnemolog.substrate.session import Session, Sessions

if TYPE_CHECKING:
    import numpy as np
else:
    from mnemolog.projections.lazymod import numpy as np

__all__ = ["DRAIN_BATCH", "Embedding", "EmbeddingOutcome", "embed_text_of", "parse_fusion"]

EmbeddingOutcome = Literal["embedded", "pending", "skipped_synchronous_atomise", "off"]
#: Texts embedded per step of a drain (one embedder call, one cache write, one fill).
DRAIN_BATCH: Final = 512
QUERY_CACHE: Final = 256


class Unchanged(Informational):
    """The home already embeds with this model (exit 1: nothing to do)."""

    slug = "unchanged"


class EmbeddingStatus(TypedDict):
    recorded: dict[str, Any] | None
    configured: dict[str, Any]
    differs: bool
    vectors: int
    pending: int
    cached: int
    history: list[dict[str, Any]]


def embed_text_of(p: MemoryStored) -> str:
    return vectors.embed_text(p.title, p.content, p.tags)


def describe(e: Embedder) -> EmbedderConfigured:
    """The event recording `e` as the home's embedder (asks it for its version and dimension)."""
    return EmbedderConfigured(kind=e.kind, model=e.model, version=e.version, dim=e.dim, model_id=e.model_id)


class Embedding:
    """One home's embedding: see the module docstring. Thread-safe."""

    def __init__(
        self,
        home: Home,
        cache: EmbedCache,
        sessions: Sessions,
        *,
        embedder: Embedder | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.home = home
        self.cache = cache
        self.sessions = sessions
        self._override = embedder
        self._environ = environ
        self._lock = threading.Lock()
        self._built: dict[tuple[str, str | None, int | None], Embedder] = {}
        self._queries: OrderedDict[tuple[str, str], Vectors] = OrderedDict()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.worker_errors: list[str] = []

    # -- which embedder ------------------------------------------------------------------

    def config(self) -> EmbedConfig:
        """The `[embeddings]` table of the home's config with the environment's overrides."""
        table = self.home.config.raw.get("embeddings")
        return parse_embed_config(table, environ=self._environ if self._environ is not None else os.environ)

    def build(self, kind: str, model: str | None, dim: int | None = None) -> Embedder | None:
        """The embedder of this kind and model (None for off); built once per process."""
        if kind == "off":
            return None
        if self._override is not None and self._override.kind == kind:
            return self._override
        key = (kind, model, dim)
        with self._lock:
            got = self._built.get(key)
            if got is None:
                got = make_embedder(kind, model, self.config(), dim=dim)
                assert got is not None
                self._built[key] = got
            return got

    def wanted(self) -> tuple[str, str | None]:
        """The (kind, model) to record first: the Substrate's embedder if given, else the configured one."""
        if self._override is not None:
            return self._override.kind, self._override.model
        cfg = self.config()
        return cfg.kind, cfg.model

    def for_record(self, rec: vectors.Recorded) -> Embedder:
        """The embedder that makes the recorded model's vectors, or EmbedderFailed (unavailable)."""
        e = self.build(rec.kind, rec.model, rec.dim)
        assert e is not None
        if e.model_id != rec.model_id or e.dim != rec.dim:
            raise EmbedderFailed(
                f"the home embeds with {rec.model_id} ({rec.dim} dimensions), but the {rec.kind} embedder "
                f"here is {e.model_id} ({e.dim} dimensions); run `mnemolog embeddings set {e.kind}"
                f"{' ' + e.model if e.kind == 'ollama' else ''}` to re-embed with it",
                reason="unavailable",
                expected=rec.model_id,
                found=e.model_id,
            )
        return e

    # -- embedding texts -------------------------------------------------------------------

    def _embed(self, e: Embedder, texts: Sequence[str], dim: int) -> Vectors:
        raw = e.embed(list(texts))
        return check_vectors(raw, count=len(texts), dim=dim, where=f"{e.kind} {e.model}")

    def embed_into_cache(self, rec: vectors.Recorded, items: Mapping[bytes, str]) -> dict[bytes, Vectors]:
        """Vectors of these texts (by hash) under the recorded model: the cache's, the rest embedded.

        Raises EmbedderFailed; nothing is cached for a batch that fails.
        """
        assert rec.model_id is not None and rec.dim is not None
        found = self.cache.get_many(rec.model_id, list(items), rec.dim)
        missing = [s for s in items if s not in found]
        if missing:
            vecs = self._embed(self.for_record(rec), [items[s] for s in missing], rec.dim)
            fresh = dict(zip(missing, vecs, strict=True))
            self.cache.put_many(rec.model_id, fresh)
            found.update(fresh)
        return found

    def cached_query_vector(self, rec: vectors.Recorded, query: str) -> Vectors | None:
        """The query's vector under the recorded model if it is among those kept, else None."""
        if rec.model_id is None:
            return None
        key = (rec.model_id, query)
        with self._lock:
            got = self._queries.get(key)
            if got is not None:
                self._queries.move_to_end(key)
            return got

    def query_vector(self, rec: vectors.Recorded, query: str) -> Vectors:
        """The query's vector under the recorded model (a few recent queries are kept)."""
        assert rec.model_id is not None and rec.dim is not None
        got = self.cached_query_vector(rec, query)
        if got is not None:
            return got
        key = (rec.model_id, query)
        vec: Vectors = self._embed(self.for_record(rec), [query], rec.dim)[0]
        with self._lock:
            self._queries[key] = vec
            while len(self._queries) > QUERY_CACHE:
                self._queries.popitem(last=False)
        return vec

    # -- embed-on-insert ---------------------------------------------------------------------

    def choice(self, s: Session) -> vectors.Recorded | None:
        """The recorded embedder, else the one the first write would record (None: off, or unreachable)."""
        rec = vectors.recorded(s.conn)
        if rec is not None:
            return rec
        record, _ = self._first_record()
        if record is None:
            return None
        return vectors.Recorded(-1, record.kind, record.model, record.version, record.dim, record.model_id)

    def _first_record(self) -> tuple[EmbedderConfigured | None, EmbedderFailed | None]:
        """The record of the wanted embedder (None for off), or the failure to reach it."""
        kind, model = self.wanted()
        if kind == "off":
            return None, None
        try:
            e = self.build(kind, model)
            assert e is not None
            return describe(e), None
        except EmbedderFailed as exc:
            if exc.reason == "bad_vectors":
                raise
            return None, exc

    def before_append(self, s: Session, payloads: Sequence[Payload]) -> list[Payload]:
        """Embed what the batch writes; return the batch, with the embedder's record first if needed."""
        texts: dict[str, str] = {}
        skipped: dict[str, str] = {}
        # Document chunks, by text hash: embedded with the memories, reported by no memory.
        chunk_texts: dict[bytes, str] = {}
        for p in payloads:
            if isinstance(p, DocumentIngested):
                for c in p.chunks:
                    t = vectors.chunk_embed_text(c.heading_path, c.text)
                    chunk_texts[vectors.text_sha(t)] = t
            elif isinstance(p, MemoryStored):
                if p.id in s.skip_embedding:
                    skipped[p.id] = s.skip_embedding[p.id]
                else:
                    texts[p.id] = embed_text_of(p)
            elif isinstance(p, MemoryUpdated) and (
                p.title is not None or p.content is not None or p.tags is not None
            ):
                before = s.get(p.id)
                if before is not None:
                    texts[p.id] = vectors.embed_text(
                        p.title if p.title is not None else before["title"],
                        p.content if p.content is not None else before["content"],
                        p.tags if p.tags is not None else before["tags"],
                    )
        if skipped:
            rec = self.choice(s)
            on = rec is not None and rec.embeds
            s.embedded.update({i: why if on else "off" for i, why in skipped.items()})
        if not texts and not chunk_texts:
            return list(payloads)
        rec = vectors.recorded(s.conn)
        head: list[Payload] = []
        if rec is None:
            record, failure = self._first_record()
            if failure is not None:
                # The choice is recorded by the first write that can reach the embedder.
                s.embedded.update(dict.fromkeys(texts, "pending"))
                s.warnings.append(f"embedding: {failure.message}")
                return list(payloads)
            if record is None:
                s.embedded.update(dict.fromkeys(texts, "off"))
                return list(payloads)
            head = [record]
            rec = vectors.Recorded(-1, record.kind, record.model, record.version, record.dim, record.model_id)
        if not rec.embeds:
            s.embedded.update(dict.fromkeys(texts, "off"))
            return [*head, *payloads]
        by_sha = {**chunk_texts, **{vectors.text_sha(t): t for t in texts.values()}}
        try:
            self.embed_into_cache(rec, by_sha)
        except EmbedderFailed as exc:
            if exc.reason == "bad_vectors":
                raise
            s.embedded.update(dict.fromkeys(texts, "pending"))
            what = "the memory waits for its vector" if texts else "the chunks wait for their vectors"
            s.warnings.append(f"embedding: {exc.message}; {what}")
            self.wake()
            return [*head, *payloads]
        s.embedded.update(dict.fromkeys(texts, "embedded"))
        return [*head, *payloads]

    def embed_memory(self, memory_id: str) -> EmbeddingOutcome:
        """Give one stored memory its vector now (a source whose synchronous atomisation did not happen)."""
        with self.sessions.session() as s:
            rec = vectors.recorded(s.conn)
            m = s.get(memory_id)
            if rec is None or not rec.embeds or m is None:
                return "off"
            text = vectors.embed_text(m["title"], m["content"], m["tags"])
            sha = vectors.text_sha(text)
            try:
                fresh = self.embed_into_cache(rec, {sha: text})
            except EmbedderFailed as exc:
                if exc.reason == "bad_vectors":
                    raise
                self.wake()
                return "pending"
            meta = vectors.read_meta(s.conn)
            if meta is not None and meta.model_id == rec.model_id:
                vectors.fill(s.conn, meta, self.cache, fresh)
            return "embedded"

    # -- changing the embedder ----------------------------------------------------------------

    def choose(self, kind: str, model: str | None = None) -> dict[str, Any]:
        """Record `kind` (and `model`) as the home's embedder; vectors follow (see `embed_pending`).

        Raises Unchanged (exit 1) when the home already embeds with that model,
        EmbedderFailed (exit 4) when the embedder cannot be reached to ask its
        version and dimension.
        """
        if kind == "off":
            record = EmbedderConfigured(kind="off")
        else:
            if kind == "ollama" and not model:
                model = self.config().model
            e = self.build(kind, model)
            assert e is not None
            record = describe(e)
        with self.sessions.session() as s:
            rec = vectors.recorded(s.conn)
            if rec is not None and rec.kind == record.kind and rec.model_id == record.model_id:
                raise Unchanged(
                    f"the home already embeds with {record.model_id or 'nothing (off)'}",
                    model_id=record.model_id,
                )
            s.append(record)
        self.wake()
        return record.model_dump()

    # -- pending work ---------------------------------------------------------------------------

    def drain(
        self,
        *,
        limit: int | None = None,
        progress: bool | None = None,
        batch: int = DRAIN_BATCH,
    ) -> dict[str, int]:
        """Embed the memories and chunks waiting for a vector now (what the background worker does),
        a batch at a time; returns counts. Raises EmbedderFailed."""
        sessions = self.sessions
        embedded = filled = 0
        prog: Progress | None = None
        try:
            while limit is None or embedded < limit:
                with sessions.session() as s:
                    rec = vectors.recorded(s.conn)
                    if rec is None or not rec.embeds:
                        break
                    if prog is None:
                        prog = Progress("embedding", vectors.pending_count(s.conn), enabled=progress)
                    step = batch if limit is None else min(batch, limit - embedded)
                    todo = dict(vectors.pending_texts(s.conn, step))
                if not todo:
                    break
                # Embedded outside the session: a long batch must not hold the projection lock.
                fresh = self.embed_into_cache(rec, todo)
                with sessions.session() as s:
                    meta = vectors.read_meta(s.conn)
                    if meta is None or meta.model_id != rec.model_id:
                        continue  # the model changed meanwhile: start again under the new one
                    filled += vectors.fill(s.conn, meta, self.cache, fresh).filled
                embedded += len(todo)
                prog.advance(len(todo))
        finally:
            if prog is not None:
                prog.close()
        with sessions.session() as s:
            left = vectors.pending_count(s.conn)
        return {"embedded": embedded, "filled": filled, "pending": left}

    def status(self) -> EmbeddingStatus:
        """The recorded embedder (and its history), the configured one, vectors, pending, cached."""
        sessions = self.sessions
        kind, model = self.wanted()
        with sessions.session() as s:
            rec = vectors.recorded(s.conn)
            hist = [r.to_json() for r in vectors.history(s.conn)]
            meta = vectors.read_meta(s.conn)
            pending = vectors.pending_count(s.conn)
        cached = self.cache.count(rec.model_id) if rec is not None and rec.model_id else 0
        differs = rec is not None and (rec.kind != kind or (kind == "ollama" and rec.model != model))
        return {
            "recorded": rec.to_json() if rec is not None else None,
            "configured": {"kind": kind, "model": model},
            "differs": differs,
            "vectors": meta.rows if meta is not None else 0,
            "pending": pending,
            "cached": cached,
            "history": hist,
        }

    # -- the background worker ------------------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    def start_worker(self, interval: float = 5.0) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, args=(interval,), name="mnemolog-embedder", daemon=True
        )
        self._thread.start()

    def _loop(self, interval: float) -> None:
        while not self._stop.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.drain(progress=False)
            except EmbedderFailed as exc:
                # Unreachable now: the work stays pending and is tried again at the next wake.
                self.worker_errors = [*self.worker_errors[-9:], exc.message]
            except Exception as exc:  # the worker must outlive any one failure
                self.worker_errors = [*self.worker_errors[-9:], f"{type(exc).__name__}: {exc}"]

    def stop_worker(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=30)
        self._thread = None


def vector_or_none(
    embedding: Embedding, rec: vectors.Recorded, query: str, on_error: Callable[[EmbedderFailed], None]
) -> np.ndarray | None:
    """The query's vector, or None (after `on_error`) when the embedder cannot give one now."""
    try:
        return embedding.query_vector(rec, query)
    except EmbedderFailed as exc:
        on_error(exc)
        return None


def require_vectors(rec: vectors.Recorded | None, mode: str) -> vectors.Recorded:
    """The recorded embedder, or TierLocked (exit 3) for a vector mode on a home without one."""
    if rec is None or not rec.embeds:
        raise TierLocked(
            f"recall --mode {mode} needs an embedder, and this home has "
            f"{'none recorded' if rec is None else 'embeddings off'}; "
            "`mnemolog embeddings set minilm` turns on the offline one",
            mode=mode,
        )
    return rec
