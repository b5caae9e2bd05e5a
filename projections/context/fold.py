"""The context room's fold: documents, their chunks and chunk index, recorded packs.

Tables (described in `projections/context/store.py`, which queries them):
`ctx_documents`, `ctx_document_versions`, `ctx_chunks`,
`ctx_chunk_postings`, `ctx_packs`, `ctx_pack_members`. Ingested documents
are buffered, so a batch of them is tokenised and inserted in one pass at
the flush. Total: a malformed payload folds to nothing rather than raising.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final

import duckdb

from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.vocabulary import events as ve
from mnemolog.projections.fold import Fold, Handler, Shared, erasure_subjects
from mnemolog.projections.recall.text import drop_staged, stage_postings
from mnemolog.projections.schema import CHUNK_SHIFT, MAX_CHUNKS_PER_DOCUMENT, chunk_id

if TYPE_CHECKING:
    import pyarrow as pa

CTX_FLUSH_DOCS: Final = 256  # buffered document versions (each up to an entry's size) that force a flush
CTX_FLUSH_CHUNKS: Final = 20_000


class ContextFold(Fold):
    """The context room's fold (see the module docstring)."""

    TABLES: ClassVar[tuple[str, ...]] = (
        "ctx_documents",
        "ctx_document_versions",
        "ctx_chunks",
        "ctx_chunk_postings",
        "ctx_packs",
        "ctx_pack_members",
    )

    def __init__(self, shared: Shared) -> None:
        super().__init__(shared)
        self.docs: list[tuple[int, int, dict[str, Any]]] = []
        self.chunks = 0

    def flush(self) -> None:
        if self.docs:
            docs, self.docs, self.chunks = self.docs, [], 0
            fold_ingested_many(self.conn, docs)

    def ingested(self, e: Entry, d: dict[str, Any]) -> None:
        self.docs.append((e.seq, e.ts, d))
        chunks = d.get("chunks")
        self.chunks += len(chunks) if isinstance(chunks, list) else 0
        if len(self.docs) >= CTX_FLUSH_DOCS or self.chunks >= CTX_FLUSH_CHUNKS:
            self.shared.flush()

    def removed(self, e: Entry, d: dict[str, Any]) -> None:
        self.shared.flush()
        fold_removed(self.conn, e.seq, d)

    def built(self, e: Entry, d: dict[str, Any]) -> None:
        self.shared.flush()
        fold_pack(self.conn, e.seq, e.ts, d)

    def erased(self, e: Entry, d: dict[str, Any]) -> None:
        self.shared.flush()
        fold_erased(self.conn, erasure_subjects(d).documents)

    HANDLES: ClassVar[Mapping[str, Handler]] = {
        ve.DOCUMENT_INGESTED: ingested,
        ve.DOCUMENT_REMOVED: removed,
        ve.CONTEXT_BUILT: built,
        ve.MEMORY_ERASED: erased,
    }


# -- reading hostile payloads --------------------------------------------------


def _s(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _i(v: Any, default: int = 0) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and -(2**62) < v < 2**62 else default


def _strs(v: Any) -> list[str]:
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


# -- folds -------------------------------------------------------------------


def fold_erased(conn: duckdb.DuckDBPyConnection, document_ids: Sequence[str]) -> None:
    """memory.erased of documents: their chunks, postings and versions leave the tables (the embedding
    fold drops their vectors)."""
    if not document_ids:
        return
    ids = list(document_ids)
    _drop_chunks(conn, ids)
    for t in ("ctx_documents", "ctx_document_versions"):
        conn.execute(f"DELETE FROM {t} WHERE document_id IN (SELECT unnest(?::VARCHAR[]))", [ids])


def _drop_chunks(conn: duckdb.DuckDBPyConnection, document_ids: Sequence[str]) -> None:
    """Delete the chunks (and their postings) of these documents' current versions."""
    if not document_ids:
        return
    ids = list(document_ids)
    seqs = [
        int(r[0])
        for r in conn.execute(
            "SELECT seq FROM ctx_documents WHERE document_id IN (SELECT unnest(?::VARCHAR[]))", [ids]
        ).fetchall()
    ]
    if not seqs:
        return
    # A version's chunks are numbered seq * 2^20 + index: one scan finds them all.
    conn.execute(
        f"DELETE FROM ctx_chunk_postings WHERE (doc >> {CHUNK_SHIFT}) IN (SELECT unnest(?::BIGINT[]))", [seqs]
    )
    conn.execute("DELETE FROM ctx_chunks WHERE document_id IN (SELECT unnest(?::VARCHAR[]))", [ids])


@dataclass(frozen=True)
class _Version:
    seq: int
    ts: int
    document_id: str
    version: int
    path: str
    name: str
    root: str
    project: str
    sha256: str
    size: int
    encoding: str
    chunks: list[Mapping[str, Any]]


def _version(seq: int, ts: int, d: Mapping[str, Any]) -> _Version | None:
    doc_id = _s(d.get("document_id"))
    if not doc_id:
        return None
    raw = d.get("chunks")
    chunks = [c for c in raw if isinstance(c, Mapping)] if isinstance(raw, list) else []
    return _Version(
        seq=seq,
        ts=ts,
        document_id=doc_id,
        version=_i(d.get("version"), 1),
        path=_s(d.get("path")),
        name=_s(d.get("name")) or _s(d.get("path")),
        root=_s(d.get("root")),
        project=_s(d.get("project")),
        sha256=_s(d.get("sha256")),
        size=_i(d.get("size")),
        encoding=_s(d.get("encoding")),
        chunks=chunks[:MAX_CHUNKS_PER_DOCUMENT],
    )


def fold_ingested_many(
    conn: duckdb.DuckDBPyConnection, items: Sequence[tuple[int, int, Mapping[str, Any]]]
) -> None:
    """`document.ingested` events (seq order): each document's newest version and its chunks, indexed.

    One pass for the whole batch: the tokenizer runs once over every chunk,
    the older versions' rows go in one scan.
    """
    versions = [v for v in (_version(seq, ts, d) for seq, ts, d in items) if v is not None]
    if not versions:
        return
    import pyarrow as pa  # a fold with documents to insert pays for the import, recall never does

    latest: dict[str, _Version] = {}
    for v in versions:
        latest[v.document_id] = v
    _drop_chunks(conn, list(latest))
    conn.execute(
        "DELETE FROM ctx_documents WHERE document_id IN (SELECT unnest(?::VARCHAR[]))", [list(latest)]
    )
    docs = list(latest.values())
    _insert_arrow(
        conn,
        "ctx_documents",
        "SELECT *, NULL",
        pa.table(
            {
                "document_id": [v.document_id for v in docs],
                "path": [v.path for v in docs],
                "name": [v.name for v in docs],
                "root": [v.root for v in docs],
                "project": [v.project for v in docs],
                "sha256": [v.sha256 for v in docs],
                "size": pa.array([v.size for v in docs], pa.int64()),
                "encoding": [v.encoding for v in docs],
                "version": pa.array([v.version for v in docs], pa.int32()),
                "chunks": pa.array([len(v.chunks) for v in docs], pa.int32()),
                "seq": pa.array([v.seq for v in docs], pa.int64()),
                "ts": pa.array([v.ts for v in docs], pa.int64()),
            }
        ),
    )
    _insert_arrow(
        conn,
        "ctx_document_versions",
        "SELECT *",
        pa.table(
            {
                "document_id": [v.document_id for v in versions],
                "version": pa.array([v.version for v in versions], pa.int32()),
                "seq": pa.array([v.seq for v in versions], pa.int64()),
            }
        ),
    )
    cols: dict[str, list[Any]] = {
        k: [] for k in ("doc", "chunk_id", "document_id", "idx", "heading_path", "text", "name", "project")
    }
    for v in docs:
        base = v.seq << CHUNK_SHIFT
        for i, c in enumerate(v.chunks):
            cols["doc"].append(base + i)
            cols["chunk_id"].append(chunk_id(v.document_id, v.version, i))
            cols["document_id"].append(v.document_id)
            cols["idx"].append(i)
            cols["heading_path"].append(_strs(c.get("heading_path")))
            cols["text"].append(_s(c.get("text")))
            cols["name"].append(v.name)
            cols["project"].append(v.project)
    if not cols["doc"]:
        return
    import pyarrow as pa

    tbl = pa.table(
        {
            **cols,
            "doc": pa.array(cols["doc"], pa.int64()),
            "idx": pa.array(cols["idx"], pa.int32()),
            "heading_path": pa.array(cols["heading_path"], pa.list_(pa.string())),
        }
    )
    conn.register("ml_ctx_chunks", tbl)
    try:
        stage_postings(
            conn,
            "(SELECT doc, name || ' ' || array_to_string(heading_path, ' ') AS title, "
            "NULL::VARCHAR[] AS tags, text AS content FROM ml_ctx_chunks)",
        )
        conn.execute(
            "INSERT INTO ctx_chunks SELECT s.doc, s.chunk_id, s.document_id, s.idx, s.heading_path, s.text, "
            "s.name, s.project, d.dl FROM ml_ctx_chunks s JOIN ml_dl d USING (doc) ORDER BY s.doc"
        )
        conn.execute(
            "INSERT INTO ctx_chunk_postings SELECT term, doc, tf, dl FROM ml_post ORDER BY doc, term"
        )
        drop_staged(conn)
    finally:
        conn.unregister("ml_ctx_chunks")


def _insert_arrow(conn: duckdb.DuckDBPyConnection, table: str, select: str, tbl: pa.Table) -> None:
    """INSERT INTO `table` `select` FROM the Arrow table (registered as ml_ctx_rows while it runs)."""
    conn.register("ml_ctx_rows", tbl)
    try:
        conn.execute(f"INSERT INTO {table} {select} FROM ml_ctx_rows")
    finally:
        conn.unregister("ml_ctx_rows")


def fold_ingested(conn: duckdb.DuckDBPyConnection, seq: int, ts: int, d: Mapping[str, Any]) -> None:
    """One `document.ingested` (see `fold_ingested_many`)."""
    fold_ingested_many(conn, [(seq, ts, d)])


def fold_removed(conn: duckdb.DuckDBPyConnection, seq: int, d: Mapping[str, Any]) -> None:
    """`document.removed`: its chunks leave the index; the document row remembers when."""
    doc_id = _s(d.get("document_id"))
    if not doc_id:
        return
    _drop_chunks(conn, [doc_id])
    conn.execute("UPDATE ctx_documents SET removed_seq = ?, chunks = 0 WHERE document_id = ?", [seq, doc_id])


def fold_pack(conn: duckdb.DuckDBPyConnection, seq: int, ts: int, d: Mapping[str, Any]) -> None:
    """`context.built`: the pack and, per tier, what it included and trimmed."""
    pack_id = _s(d.get("pack_id"))
    if not pack_id:
        return
    project = d.get("project")
    conn.execute(
        "INSERT INTO ctx_packs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            pack_id,
            seq,
            ts,
            _s(d.get("query")),
            project if isinstance(project, str) else None,
            _s(d.get("sha256")),
            _i(d.get("budget")),
            _s(d.get("unit")),
            _i(d.get("chars")),
        ],
    )
    rows: list[tuple[Any, ...]] = []
    tiers = d.get("tiers")
    for t in tiers if isinstance(tiers, list) else []:
        if not isinstance(t, Mapping):
            continue
        tier = _s(t.get("name"))
        for key, included in (("included", True), ("trimmed", False)):
            items = t.get(key)
            for e in items if isinstance(items, list) else []:
                if isinstance(e, Mapping) and _s(e.get("id")):
                    reason = None if included else _s(e.get("reason"))
                    rows.append((pack_id, seq, _s(e.get("source")), _s(e.get("id")), tier, included, reason))
    if rows:
        one = "(?, ?, ?, ?, ?, ?, ?)"
        conn.execute(
            f"INSERT INTO ctx_pack_members VALUES {', '.join([one] * len(rows))}",
            [x for r in rows for x in r],
        )
