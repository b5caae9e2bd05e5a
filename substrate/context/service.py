"""Documents and context packs as commands: ingest, build, show, why.

`ingest` reads files (`substrate.documents`), chunks them
(`projections.context.chunker`) and writes one `document.ingested` per new
or changed file, with its chunks and their text; unchanged files write
nothing; a file gone from a directory ingested again is `document.removed`.
Files are read outside the projection lock and written in batches (one
sync per batch), so a large tree neither holds other processes up nor
needs its whole text in memory.

`build_context` resolves the project in scope as every entry point does
(a registered name or alias, any case: `knowledge_queries.canonical_project`),
so the CLI, MCP, HTTP and the Python API all get it; gathers candidate rows
(`projections.context.sources`) ranked by the recall policy `recall` uses
(`substrate.recall_policy`: hybrid when the home embeds, else BM25);
assembles the pack (`projections.context.assemble`, pure) and, unless told
not to, records it as a signed `context.built` event. `show_context`
re-renders a recorded pack from its log entry alone, checks the hash the
entry signed, and checks every memory, chunk and state text it quoted
against the log as it was when the pack was built. `context_why` lists the
packs an entry went into (or was trimmed from).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from mnemolog.curators.tokens import count_tokens
from mnemolog.eventlog.bundle import memview, packview
from mnemolog.eventlog.errors import BadInput, NotFound, UsageError, VerificationError
from mnemolog.eventlog.format.entry import encode_payload
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.writer import MAX_PAYLOAD_BYTES, Clock
from mnemolog.eventlog.vocabulary.knowledge import check_project_name
from mnemolog.projections import schema, vecmatrix
from mnemolog.projections.context import sources, store
from mnemolog.projections.context.assemble import assemble
from mnemolog.projections.context.chunker import DEFAULT_MAX_CHARS, check_max_chars, chunk_text, is_markdown
from mnemolog.projections.context.config import PackConfig
from mnemolog.projections.context.decode import DEFAULT_FALLBACKS, DocumentRefused, check_fallbacks
from mnemolog.projections.knowledge import queries as kq
from mnemolog.projections.memory import queries
from mnemolog.projections.memory.model import Memory
from mnemolog.projections.recall import bm25
from mnemolog.projections.recall.query import Filters, allowed_ids
from mnemolog.substrate.context.config import pack_config
from mnemolog.substrate.context.documents import (
    DEFAULT_GLOBS,
    DEFAULT_MAX_FILE_BYTES,
    DocumentText,
    Found,
    discover,
    matches,
    read_document,
)
from mnemolog.substrate.embedding.service import Embedding
from mnemolog.substrate.erasure.datakeys import DataKeys
from mnemolog.substrate.events.context import (
    MAX_QUERY_CHARS,
    ChunkRecord,
    ContextBuilt,
    DocumentIngested,
    DocumentRemoved,
)
from mnemolog.substrate.events.limits import check_limit, check_unicode
from mnemolog.substrate.home import Home
from mnemolog.substrate.ids import new_id
from mnemolog.substrate.recall import policy as recall_policy
from mnemolog.substrate.recall.service import Recall
from mnemolog.substrate.session import Session, Sessions
from mnemolog.substrate.tenancy import scope

#: Documents written per batch (one sync each), and the most text a batch holds in memory.
BATCH_FILES: Final = 64
BATCH_BYTES: Final = 16 << 20


def check_project(project: str | None) -> str:
    """A project name as given, stripped ("" = none), by the one rule of project names."""
    return "" if project is None else check_project_name(project)


# -- configuration -----------------------------------------------------------------


@dataclass(frozen=True)
class IngestSettings:
    """`[ingest]` in config.toml: file size limit, chunk size, fallback encodings, default globs."""

    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_chars: int = DEFAULT_MAX_CHARS
    encodings: tuple[str, ...] = DEFAULT_FALLBACKS
    globs: tuple[str, ...] = DEFAULT_GLOBS

    @classmethod
    def from_config(cls, raw: Mapping[str, Any]) -> IngestSettings:
        t = raw.get("ingest", {})
        if not isinstance(t, Mapping):
            raise BadInput("config.toml: [ingest] must be a table", field="ingest")
        unknown = sorted(set(t) - {"max_file_bytes", "max_chars", "encodings", "globs"})
        if unknown:
            raise BadInput(f"config.toml: unknown [ingest] setting(s): {', '.join(unknown)}", field="ingest")
        kw: dict[str, Any] = {}
        size = t.get("max_file_bytes", DEFAULT_MAX_FILE_BYTES)
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_PAYLOAD_BYTES:
            raise BadInput(
                f"config.toml: ingest.max_file_bytes must be 1..{MAX_PAYLOAD_BYTES}",
                field="ingest.max_file_bytes",
            )
        kw["max_file_bytes"] = size
        try:
            kw["max_chars"] = check_max_chars(t.get("max_chars", DEFAULT_MAX_CHARS))
            kw["encodings"] = check_fallbacks(t.get("encodings", DEFAULT_FALLBACKS))
        except ValueError as exc:
            raise BadInput(f"config.toml: [ingest]: {exc}", field="ingest") from None
        globs = t.get("globs", DEFAULT_GLOBS)
        if isinstance(globs, str) or not all(isinstance(g, str) and g for g in globs):
            raise BadInput("config.toml: ingest.globs must be a list of patterns", field="ingest.globs")
        kw["globs"] = tuple(globs)
        return cls(**kw)


# -- ingest ------------------------------------------------------------------------


@dataclass
class IngestReport:
    ingested: list[dict[str, Any]] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "ingested": self.ingested,
            "unchanged": len(self.unchanged),
            "removed": self.removed,
            "refused": self.refused,
            "skipped": self.skipped,
            "chunks": sum(d["chunks"] for d in self.ingested),
        }


def _refusal(f: Found, exc: DocumentRefused) -> dict[str, Any]:
    return {"path": f.path, "reason": exc.details.get("reason", exc.slug), "message": exc.message}


def _payload(
    f: Found, doc: DocumentText, project: str, known: store.DocumentRow | None, settings: IngestSettings
) -> DocumentIngested:
    markdown = is_markdown(f.name)
    chunks = chunk_text(doc.text, max_chars=settings.max_chars, markdown=markdown)
    if len(chunks) > schema.MAX_CHUNKS_PER_DOCUMENT:
        raise DocumentRefused(
            f"{f.path}: {len(chunks)} chunks, over the limit of {schema.MAX_CHUNKS_PER_DOCUMENT}; skipped",
            file=f.path,
            reason="too_large",
        )
    # A lower bound of the encoded event, so a hostile file (thousands of one-line sections)
    # is refused before thousands of models are built for nothing.
    floor = sum(len(c.text.encode()) + sum(len(h) for h in c.heading_path) + 24 for c in chunks)
    if floor > MAX_PAYLOAD_BYTES:
        raise _entry_too_large(f.path, floor)
    return DocumentIngested(
        document_id=known.document_id if known else new_id(),
        path=f.path,
        name=f.name,
        root=f.root,
        project=project,
        sha256=doc.sha256,
        size=doc.size,
        encoding=doc.encoding,
        version=known.version + 1 if known else 1,
        max_chars=settings.max_chars,
        markdown=markdown,
        chunks=[
            ChunkRecord(
                index=c.index, heading_path=list(c.heading_path), text=c.text, start=c.start, end=c.end
            )
            for c in chunks
        ],
    )


def _entry_too_large(path: str, n: int) -> DocumentRefused:
    return DocumentRefused(
        f"{path}: its chunks make an event of at least {n} bytes, over the log's entry limit "
        f"({MAX_PAYLOAD_BYTES} bytes); skipped",
        file=path,
        reason="too_large",
    )


def _fits(payload: DocumentIngested) -> int:
    return len(encode_payload(payload.to_data()))


def ingest(
    sessions: Sessions,
    paths: Sequence[str | os.PathLike[str]],
    *,
    project: str | None = None,
    globs: Sequence[str] | None = None,
    settings: IngestSettings | None = None,
    progress: Callable[[int, int], None] | None = None,
    canonical: Callable[[Session, str], str | None],
) -> IngestReport:
    """Ingest files and directories (see the module docstring); refusals are reported, not raised.

    `canonical`: the registered name a project name or alias stands for (the recall service's).
    """
    settings = settings or IngestSettings()
    proj = check_project(project)
    patterns = tuple(globs) if globs else settings.globs
    if not paths:
        raise UsageError("give at least one file or directory to ingest")
    found, skipped = discover(paths, patterns)
    report = IngestReport(skipped=[{"path": s.path, "reason": s.reason} for s in skipped])
    dirs = sorted({str(Path(p).resolve()) for p in paths if Path(p).is_dir()})
    i = 0
    while i < len(found):
        batch: list[tuple[Found, DocumentText]] = []
        size = 0
        while i < len(found) and len(batch) < BATCH_FILES and size < BATCH_BYTES:
            f = found[i]
            i += 1
            try:
                doc = read_document(f.path, max_bytes=settings.max_file_bytes, fallbacks=settings.encodings)
            except DocumentRefused as exc:
                report.refused.append(_refusal(f, exc))
                continue
            batch.append((f, doc))
            size += doc.size
        _write_batch(sessions, batch, proj, settings, report, canonical)
        if progress is not None:
            progress(i, len(found))
    if dirs:
        seen = {f.path for f in found}
        with sessions.session() as s:
            gone: list[DocumentRemoved] = []
            for root in dirs:
                for d in store.documents_under(s.conn, root):
                    rel = os.path.relpath(d.path, root)
                    hidden = any(part.startswith(".") for part in rel.split(os.sep))
                    if d.path not in seen and not hidden and matches(os.path.basename(d.path), patterns):
                        gone.append(DocumentRemoved(document_id=d.document_id, path=d.path))
            for k in range(0, len(gone), BATCH_FILES):
                s.append_many(gone[k : k + BATCH_FILES])
            report.removed = [{"path": g.path, "document_id": g.document_id} for g in gone]
    return report


def _write_batch(
    sessions: Sessions,
    batch: Sequence[tuple[Found, DocumentText]],
    project: str,
    settings: IngestSettings,
    report: IngestReport,
    canonical: Callable[[Session, str], str | None],
) -> None:
    if not batch:
        return
    with sessions.session() as s:
        project = canonical(s, project) or ""
        out: list[DocumentIngested] = []
        claimed: set[str] = set()
        known_by_path = store.documents_by_path(s.conn, [f.path for f, _ in batch])
        for f, doc in batch:
            known = known_by_path.get(f.path)
            if known and not known.removed and known.sha256 == doc.sha256 and known.project == project:
                report.unchanged.append(f.path)
                continue
            try:
                payload = _payload(f, doc, project, known, settings)
                n = _fits(payload)
                if n > MAX_PAYLOAD_BYTES:
                    raise _entry_too_large(f.path, n)
            except (DocumentRefused, BadInput) as exc:
                report.refused.append(
                    {"path": f.path, "reason": exc.details.get("reason", exc.slug), "message": exc.message}
                )
                continue
            if payload.document_id in claimed:
                continue
            claimed.add(payload.document_id)
            out.append(payload)
        if out:
            s.append_many(out)
        for p in out:
            report.ingested.append(
                {"path": p.path, "document_id": p.document_id, "version": p.version, "chunks": len(p.chunks)}
            )


# -- packs ----------------------------------------------------------------------------


def check_query(query: str) -> str:
    if not isinstance(query, str) or not query.strip():
        raise BadInput("the query is empty", field="query")
    if len(query) > MAX_QUERY_CHARS:
        raise BadInput(f"the query is longer than {MAX_QUERY_CHARS} characters", field="query")
    if "\x00" in query:
        raise BadInput("the query contains a NUL character", field="query")
    check_unicode(query, "query")
    return query


def measure_for(unit: str) -> Callable[[str], int]:
    return len if unit == "chars" else count_tokens


def build_context(
    sessions: Sessions,
    query: str,
    *,
    now: int,
    config: PackConfig,
    project: str | None = None,
    budget: int | None = None,
    unit: str | None = None,
    record: bool = True,
    retrieval: Recall,
    personal: bool = False,
) -> dict[str, Any]:
    """The pack for `query` as JSON (with `pack_id` and `seq` when recorded).

    `project` may be a registered name or any alias of it (canonicalised as
    `recall` does it). Memories are ranked by the recall service, in the mode
    `recall` would choose, with its fusion, confined to the token's scope as
    `recall` is. `personal` asks for the personal
    scope: memories of the personal domains may enter, and nothing of any
    project does (so it cannot be combined with `project`).
    """
    check_query(query)
    name = check_project(project)
    if not isinstance(personal, bool):
        raise UsageError("personal must be true or false", field="personal")
    if personal and name:
        raise UsageError(
            "a personal pack holds no project data; ask for --personal or --project, not both",
            field="personal",
        )
    cfg = config.with_request(budget, unit, personal)
    measure = measure_for(cfg.unit)
    fusion = retrieval.fusion

    def build(s: Session, plan: recall_policy.Plan) -> dict[str, Any]:
        proj = retrieval.project(s, name) or None
        used = plan
        recording = record

        def rank(q: str, f: Filters, limit: int) -> list[tuple[Memory, float]]:
            nonlocal used
            # The project in scope is wanted whatever the question: its memories are
            # ranked, not filtered by relevance; memories of no project must be relevant.
            in_scope = bool(f.project)
            used, found = retrieval.rank(s, plan, q, f, limit, in_scope=in_scope)
            return [(m, r.score) for m, r in found]

        # Chunks are ranked in the mode memories are: hybrid with the same query vector and
        # fusion (both fall back to BM25 when the projection has no vectors).
        # The tiers share one product of the query with the matrix, and its BM25 scores.
        with vecmatrix.one_question():  # the question's matrix product and BM25 scores, once
            c = sources.candidates(
                s.conn,
                query,
                proj,
                cfg,
                rank,
                query_vector=plan.query_vector if plan.mode == "hybrid" else None,
                fusion=fusion,
            )
        sc = scope.current()
        if sc is not None and sc.bound:
            c = _confined(s.conn, c, sc)
        if sc is not None and not sc.allows("write"):
            recording = False  # a read token reads: its packs are not signed into the log
        pack = assemble(
            query,
            proj,
            now=now,
            config=cfg,
            state=c.state,
            memories=c.memories,
            chunks=c.chunks,
            measure=measure,
        )
        # The mode decided which memories were candidates: recorded with the other settings.
        policy = {"recall_mode": used.mode}
        out = pack.to_json()
        out["config"] = {**out["config"], **policy}
        out["recall_fallback"] = used.fallback
        if not recording:
            return {"pack_id": None, "seq": None, **out}
        recorded = pack.record()
        recorded["config"] = {**recorded["config"], **policy}
        payload = ContextBuilt(
            pack_id=new_id(),
            memory_ids=[e.id for e in pack.entries() if e.source == "memory"],
            **recorded,
        )
        before = bm25.known_position(s.conn)
        r = s.append(payload)
        after = bm25.known_position(s.conn)
        if before is not None and after is not None and after[0] == r.seq == before[0] + 1:
            # Only this pack's entry was folded, and a pack changes no memory and no chunk: the
            # connection's copies stand at the new position without a statement to say so.
            bm25.moved(s.conn, before, after)
            store.moved(s.conn, before, after)
        return {"pack_id": payload.pack_id, "seq": r.seq, **out}

    # One session when the plan needs no model call (bm25, or a query whose vector the process
    # keeps), as `recall` does; otherwise the query is embedded between two, outside the lock.
    with sessions.session() as s:
        ready = recall_policy.plan_in(s, retrieval.embedding, query)
        if ready is not None:
            return build(s, ready)
    plan = recall_policy.plan(sessions, retrieval.embedding, query)
    with sessions.session() as s:
        return build(s, plan)


def _confined(conn: Any, c: sources.Candidates, sc: scope.Scope) -> sources.Candidates:
    """What a bound token may see of a pack's candidates: its memories; state and chunks only of
    the projects it is bound to (they belong to the home, not to a namespace)."""
    ok = allowed_ids(conn, [m.id for m in c.memories], scope.everything(sc))
    owned = set(sc.projects)
    return sources.Candidates(
        state=[r for r in c.state if r.project in owned],
        memories=[m for m in c.memories if m.id in ok],
        chunks=[k for k in c.chunks if k.project in owned],
    )


def _state_then(conn: Any, log: Log, entry_id: str, seq: int, keys: DataKeys) -> str | None:
    """The value the log held at ``seq`` for a state entry id PROJECT/CATEGORY/KEY (None: none then).

    The project is canonicalised again: a name registered after the pack may have renamed it.
    """
    parts = entry_id.split("/", 2)
    if len(parts) != 3:
        return None
    project, category, key = parts
    at = kq.state_at(conn, kq.canonical_project(conn, project), category, key, seq)
    if at is None:
        return None
    entry = log.entry(at)
    value = keys.upcast(entry.type, entry.tv, entry.data).get("value")
    return value if isinstance(value, str) else None


def _check_sources(conn: Any, log: Log, data: Mapping[str, Any], seq: int, keys: DataKeys) -> int:
    """Every memory, chunk and state text the pack quotes equals the log's as of the pack; how many."""
    entries = packview.recorded_entries(data, seq)
    quoted = [e for es in entries.values() for e in es if not e.get("gap")]
    mids = sorted({e["id"] for e in quoted if e["source"] == "memory"})
    views: dict[str, dict[str, Any]] = {}
    if mids:
        seqs = sorted(queries.touching_seqs(conn, mids, seq))
        views = memview.fold_views((log.entry(x) for x in seqs), mids, keys=keys.get)
    checked = 0
    chunk_docs: dict[int, Mapping[str, Any]] = {}
    for e in quoted:
        if e["source"] == "memory":
            have = views.get(e["id"], {}).get("content")
        elif e["source"] == "chunk":
            parsed = store.parse_chunk_id(e["id"])
            vseq = store.version_seq(conn, parsed[0], parsed[1]) if parsed else None
            have = None
            if parsed and vseq is not None and vseq < seq:
                if vseq not in chunk_docs:
                    entry = log.entry(vseq)
                    chunk_docs[vseq] = keys.upcast(entry.type, entry.tv, entry.data)
                chunks = chunk_docs[vseq].get("chunks")
                if (
                    isinstance(chunks, list)
                    and parsed[2] < len(chunks)
                    and isinstance(chunks[parsed[2]], dict)
                ):
                    have = chunks[parsed[2]].get("text")
        elif e["source"] == "state":
            have = _state_then(conn, log, e["id"], seq, keys)
        else:
            continue
        if have != e["text"]:
            raise VerificationError(
                f"pack at seq {seq} quotes {e['source']} {e['id']} as {e['text']!r:.60}, but the log "
                f"held {have!r:.60} then",
                check="context.source",
                seq=seq,
                expected=have,
                found=e["text"],
            )
        checked += 1
    return checked


def show_context(sessions: Sessions, log: Log, pack_id: str, keys: DataKeys) -> dict[str, Any]:
    """A recorded pack re-rendered from the log, its hash and every quoted text checked."""
    if not isinstance(pack_id, str) or not pack_id:
        raise UsageError("give a pack id", field="pack_id")
    with sessions.session() as s:
        row = store.pack(s.conn, pack_id)
        if row is None:
            raise NotFound(f"no context pack with id {pack_id!r}", id=pack_id)
        entry = log.entry(row.seq)
        data = keys.upcast(entry.type, entry.tv, entry.data)
        text = packview.check_recorded(data, row.seq)
        holes = packview.gaps(data, row.seq)
        checked = _check_sources(s.conn, log, data, row.seq, keys)
    return {
        "pack_id": pack_id,
        "seq": row.seq,
        "ts": entry.ts,
        "query": data.get("query"),
        "project": data.get("project"),
        "budget": data.get("budget"),
        "unit": data.get("unit"),
        "sha256": data.get("sha256"),
        # Every setting that decided the pack, as recorded (the personal scope among them).
        "config": data.get("config"),
        # A pack that quoted what was forgotten since re-renders with marked gaps: its hash
        # (over what was shown then) cannot be checked any more, and the answer says so.
        "verified": not holes,
        "gaps": holes,
        "sources_checked": checked,
        "tiers": data.get("tiers"),
        "text": text,
    }


def context_why(sessions: Sessions, member_id: str, limit: int = 50) -> list[dict[str, Any]]:
    """The packs that included (or trimmed) a memory, state entry or chunk, newest first."""
    if not isinstance(member_id, str) or not member_id:
        raise UsageError("give a memory, state entry or chunk id", field="id")
    with sessions.session() as s:
        return store.packs_with(s.conn, member_id, limit)


def pack_members(sessions: Sessions, pack_id: str) -> dict[str, list[str]]:
    """What a recorded pack included, by source (for `capture --context`); NotFound when unknown."""
    with sessions.session() as s:
        if store.pack(s.conn, pack_id) is None:
            raise NotFound(f"no context pack with id {pack_id!r}", id=pack_id)
        return {src: store.pack_member_ids(s.conn, pack_id, src) for src in ("state", "memory", "chunk")}


class Context:
    """Documents and context packs over an open home (`Substrate.context`)."""

    def __init__(
        self,
        sessions: Sessions,
        *,
        home: Home,
        log: Log,
        keys: DataKeys,
        clock: Clock,
        embedding: Embedding,
        retrieval: Recall,
    ) -> None:
        self.sessions = sessions
        self.home = home
        self.log = log
        self.keys = keys
        self.clock = clock
        self.embedding = embedding
        self.retrieval = retrieval

    def ingest(
        self,
        paths: Sequence[str | Path],
        *,
        project: str | None = None,
        globs: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> dict[str, Any]:
        """Ingest files and directories as documents and chunks (see substrate.context)."""
        settings = IngestSettings.from_config(self.home.config.raw)
        report = ingest(
            self.sessions,
            paths,
            project=project,
            globs=globs,
            settings=settings,
            progress=progress,
            canonical=self.retrieval.project,
        )
        return report.to_json()

    def build(
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
        return build_context(
            self.sessions,
            query,
            now=self.clock(),
            config=pack_config(self.home.config.raw),
            project=project,
            budget=budget,
            unit=unit,
            record=record,
            retrieval=self.retrieval,
            personal=personal,
        )

    def show(self, pack_id: str) -> dict[str, Any]:
        """A recorded pack re-rendered from the log alone, its hash and quoted texts verified."""
        sc = scope.current()
        if sc is not None and sc.bound:
            # A pack quotes memories, state and chunks: a bound token sees it only when it
            # could have seen every memory in it and owns every project it quotes.
            members = pack_members(self.sessions, pack_id)
            with self.sessions.session() as s:
                ids = [*members.get("memory", [])]
                outside = set(ids) - allowed_ids(s.conn, ids, scope.everything(sc))
            if outside or ((members.get("state") or members.get("chunk")) and not sc.projects):
                raise scope.ScopeRefused(
                    f"context pack {pack_id} quotes what lies outside this token's scope",
                    pack_id=pack_id,
                )
        return show_context(self.sessions, self.log, pack_id, self.keys)

    def why(self, member_id: str, *, limit: int = 50) -> list[dict[str, Any]]:
        """The packs a memory, state entry or chunk went into (or was trimmed from), newest first."""
        return context_why(self.sessions, member_id, check_limit(limit))
