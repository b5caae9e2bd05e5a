"""Memory vectors: stored beside the memories, filled from the embedding cache, searched by cosine.

Tables (the vector part of the projection; derived data like the rest):

    vector_meta(version, model_id, dim, synced_seq, rows)   one row: whose vectors these are
    vectors(doc, sha, vec FLOAT[dim])                       one per embedded memory (doc = stored_seq)
    vector_pending(doc, sha)                                memories whose vector is not in the cache yet
    chunk_vectors(doc, sha, vec FLOAT[dim])                 one per embedded chunk (doc = ctx_chunks.doc)
    chunk_vector_pending(doc, sha)                          chunks whose vector is not in the cache yet

A memory's vector is its embedder's vector of `embed_text(title, content,
tags)`, cached by (model id, SHA-256 of that text) in the embedding cache
(projections/embedding/cache.py). Which model: the last `embedder.configured`
in the log (the `embedders` table); a change of model id drops the vectors
and they are filled again, from the cache where it has them.

`follow` runs after every catch-up that applied entries (and after a
rebuild): the memories touched since `synced_seq` (the `touches` table,
which records every event that touches a memory, a migration rollback
included) are checked by text hash in SQL; a vector whose text changed, or
of a memory that no longer carries one, is removed; a memory that needs a
vector gets it from the cache or, when the cache lacks it, waits in
`vector_pending`. Filling never calls a model: the substrate embeds texts
before it writes them (embed-on-insert) and embeds what is pending in the
background, putting the vectors in the cache and calling `fill`. Vectors
therefore depend only on the memories' texts, the recorded model and the
cache: an incremental catch-up and a rebuild hold the same rows.

Every memory has a vector except a source fully atomised (both atomisation
signals): its atoms carry its meaning, as they carry its recall.

Document chunks (ctx_chunks) follow the same way, under the same model and
cache: a chunk's vector is that of `chunk_embed_text(heading path, text)`.
A chunk's text never changes (a new version of a document is new chunks,
numbered by the seq of its entry), so `sync` looks only at chunks of entries
after `synced_seq` and drops the vectors of chunks that left the index.
Chunks are few next to memories and searched by an exact scan.

Search is exact (a scan with `array_cosine_distance`) until the table holds
HNSW_MIN_ROWS vectors; from there an HNSW index (DuckDB vss) finds
candidates. DuckDB 1.5 lost secondary-index entries that a killed process
had only in its write-ahead log, so the index is never trusted across a
crash: the first search after the file is attached checks it (its size, and
that the most recently added vectors are found by it) and rebuilds it from
the stored vectors when the check fails. Above the threshold results are
approximate (HNSW), below it exact.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import duckdb

from mnemolog.eventlog.errors import BadInput
from mnemolog.projections import vecmatrix
from mnemolog.projections.embedding.cache import EmbedCache
from mnemolog.projections.recall import bm25
from mnemolog.projections.recall.query import Filters, by_exclusion, excluded, restriction
from mnemolog.projections.schema import CHUNK_SHIFT, memory_generation

if TYPE_CHECKING:
    import pyarrow as pa

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]
else:
    from mnemolog.projections.lazymod import numpy as np

VECTOR_VERSION: Final = 3  # 3: chunk vectors
#: Below this many vectors an exact scan is used (see docs/recall.md for the measurement).
HNSW_MIN_ROWS: Final = 20_000
#: HNSW candidates fetched per wanted result before filters; doubled until enough pass.
HNSW_OVERFETCH: Final = 4
HNSW_MAX_CANDIDATES: Final = 4096
HNSW_EF_SEARCH: Final = 64
#: The most recently added vectors the index must find after an attach.
HNSW_CHECK_LAST: Final = 8
#: Pending memories looked up in the cache per step of a fill.
FILL_CHUNK: Final = 50_000
INDEX_NAME: Final = "vectors_hnsw"

# The memories that carry a vector: all but a fully atomised source.
ELIGIBLE = "NOT (coalesce({m}.atomised_into, 0) > 0 AND {m}.atomisation_archived_at IS NOT NULL)"
# The text a memory is embedded from, in SQL (`embed_text` is the same in Python; a test holds them equal).
EMBED_TEXT = (
    "concat_ws(chr(10), nullif({m}.title, ''), nullif({m}.content, ''), "
    "nullif(array_to_string({m}.tags, ' '), ''))"
)
TEXT_SHA = "unhex(sha256(" + EMBED_TEXT + "))"
# The text a chunk is embedded from (`chunk_embed_text` in Python; a test holds them equal).
CHUNK_EMBED_TEXT = (
    "concat_ws(chr(10), nullif(array_to_string({c}.heading_path, ' › '), ''), nullif({c}.text, ''))"
)
CHUNK_TEXT_SHA = "unhex(sha256(" + CHUNK_EMBED_TEXT + "))"

META_DDL = """CREATE TABLE IF NOT EXISTS vector_meta(
    version INTEGER NOT NULL, model_id VARCHAR NOT NULL, dim INTEGER NOT NULL,
    synced_seq BIGINT NOT NULL, rows BIGINT NOT NULL)"""
PENDING_DDL = "CREATE TABLE IF NOT EXISTS vector_pending(doc BIGINT NOT NULL, sha BLOB NOT NULL)"
CHUNK_PENDING_DDL = "CREATE TABLE IF NOT EXISTS chunk_vector_pending(doc BIGINT NOT NULL, sha BLOB NOT NULL)"
TABLES: Final = ("vectors", "vector_meta", "vector_pending", "chunk_vectors", "chunk_vector_pending")
#: (vector table, pending table) of memories and of document chunks.
MEMORY_TABLES: Final = ("vectors", "vector_pending")
CHUNK_TABLES: Final = ("chunk_vectors", "chunk_vector_pending")

# Connections whose file was attached since their index was last checked (by id()).
_unchecked: set[int] = set()
# Whether a connection's attached file has the index, as this process last saw or made it
# (forgotten on every attach: another process may have changed the file meanwhile).
_has_index: dict[int, bool] = {}


def embed_text(title: str | None, content: str | None, tags: list[str] | tuple[str, ...] = ()) -> str:
    """The text a memory is embedded from: its title, its content and its tags, one per line."""
    return "\n".join(p for p in (title or "", content or "", " ".join(tags)) if p)


def chunk_embed_text(heading_path: list[str] | tuple[str, ...], text: str) -> str:
    """The text a document chunk is embedded from: its heading path (joined by ' › '), then its text."""
    return "\n".join(p for p in (" › ".join(heading_path), text) if p)


def text_sha(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def vector_literal(v: np.ndarray) -> str:
    """A vector as DuckDB array text: each float32 exactly (its shortest float64 repr).

    Bound as one VARCHAR and cast in SQL: binding a Python list of 256 floats
    costs milliseconds, parsing one string a few microseconds.
    """
    return "[" + ",".join(repr(float(x)) for x in np.asarray(v, dtype=np.float32)) + "]"


def _arrow_numbers(arr: np.ndarray, typ: pa.DataType) -> pa.Array:
    """A numpy array as Arrow, from its buffer (no per-element conversion, no pandas check).

    pyarrow is imported here, by a write that stores vectors, never by a recall.
    """
    import pyarrow as pa

    return pa.Array.from_buffers(typ, len(arr), [None, pa.py_buffer(np.ascontiguousarray(arr))])


def _arrow_vectors(vecs: Vectors) -> pa.Array:
    """(n, dim) float32 as an Arrow fixed-size list, without a per-element Python round trip."""
    import pyarrow as pa

    dim = vecs.shape[1]
    flat = _arrow_numbers(np.ascontiguousarray(vecs, dtype=np.float32).reshape(-1), pa.float32())
    return pa.FixedSizeListArray.from_arrays(flat, dim)


class Recorded(NamedTuple):
    """The home's embedder as the log last recorded it (`embedder.configured`)."""

    seq: int
    kind: str
    model: str | None
    version: str | None
    dim: int | None
    model_id: str | None

    @property
    def embeds(self) -> bool:
        """Whether this choice makes vectors (a kind with a model id and a dimension)."""
        return self.kind != "off" and bool(self.model_id) and bool(self.dim)

    def to_json(self) -> dict[str, Any]:
        return self._asdict()


# The last read of `recorded` per connection, with the position it was read at: the table
# changes only by folding log entries, and every recall asks for it.
_recorded: dict[int, tuple[bm25.Position, Recorded | None]] = {}


def recorded(conn: duckdb.DuckDBPyConnection) -> Recorded | None:
    """The last `embedder.configured`, or None when the log has none."""
    position = bm25.known_position(conn)
    hit = _recorded.get(id(conn)) if position is not None else None
    if hit is not None and hit[0] == position:
        return hit[1]
    row = conn.execute(
        "SELECT seq, kind, model, version, dim, model_id FROM embedders ORDER BY seq DESC LIMIT 1"
    ).fetchone()
    rec = None
    if row is not None:
        dim = None if row[4] is None else int(row[4])
        rec = Recorded(int(row[0]), str(row[1]), row[2], row[3], dim, row[5])
    if position is not None:
        _recorded[id(conn)] = (position, rec)
    return rec


def history(conn: duckdb.DuckDBPyConnection) -> list[Recorded]:
    """Every `embedder.configured`, oldest first."""
    rows = conn.execute(
        "SELECT seq, kind, model, version, dim, model_id FROM embedders ORDER BY seq"
    ).fetchall()
    return [
        Recorded(int(r[0]), str(r[1]), r[2], r[3], None if r[4] is None else int(r[4]), r[5]) for r in rows
    ]


@dataclass(frozen=True)
class Meta:
    model_id: str
    dim: int
    synced_seq: int
    rows: int


@dataclass(frozen=True)
class SyncResult:
    """What a sync did: vectors filled (from the cache or vectors in hand), removed, left pending."""

    filled: int = 0
    removed: int = 0
    pending: int = 0

    def to_json(self) -> dict[str, int]:
        return {"filled": self.filled, "removed": self.removed, "pending": self.pending}


# -- tables ------------------------------------------------------------------------------------


def attached(conn: duckdb.DuckDBPyConnection) -> None:
    """Called after the projection file is attached: distrust the index and what was read of
    the vector tables. The matrix copies stay: each is used only under the metadata it was
    built at, read afresh from the file (every write to a vector table moves the synced seq
    or the row count), as the BM25 copy is used only at its position; a long-lived process
    that let the file go while idle does not load its vectors again."""
    _unchecked.add(id(conn))
    _has_index.pop(id(conn), None)
    _recorded.pop(id(conn), None)
    _metas.pop(id(conn), None)
    _synced.pop(id(conn), None)


def distrust_index(conn: duckdb.DuckDBPyConnection) -> None:
    """The next search on this connection checks the HNSW index before using it."""
    _unchecked.add(id(conn))
    _has_index.pop(id(conn), None)
    _recorded.pop(id(conn), None)
    _changed(conn)


# The last read of `read_meta` per connection, with the position it was read at. Every
# vector recall asks for it, and a statement costs more than the matrix search. The table
# changes only here: through this module's writes (each drops the entry, and so does the
# end of their transactions, committed or not) or a fold that moves the position.
_metas: dict[int, tuple[bm25.Position, Meta | None]] = {}
# Per connection, the synced seq its last `sync` left and the memory generation then
# (schema.memory_generation): the same pair later means no memory changed in between.
_synced: dict[int, tuple[int, int]] = {}


def _changed(conn: duckdb.DuckDBPyConnection) -> None:
    """The vector tables of this connection changed (or may have): forget what was read of them."""
    _metas.pop(id(conn), None)
    _synced.pop(id(conn), None)
    vecmatrix.forget(conn)


def read_meta(conn: duckdb.DuckDBPyConnection) -> Meta | None:
    position = bm25.known_position(conn)
    hit = _metas.get(id(conn)) if position is not None else None
    if hit is not None and hit[0] == position:
        return hit[1]
    try:
        row = conn.execute("SELECT version, model_id, dim, synced_seq, rows FROM vector_meta").fetchone()
    except duckdb.CatalogException:
        row = None
    meta = None
    if row is not None and row[0] == VECTOR_VERSION:
        meta = Meta(str(row[1]), int(row[2]), int(row[3]), int(row[4]))
    if position is not None:
        _metas[id(conn)] = (position, meta)
    return meta


def drop(conn: duckdb.DuckDBPyConnection) -> None:
    _changed(conn)
    for t in TABLES:
        conn.execute(f"DROP TABLE IF EXISTS {t}")
    _has_index[id(conn)] = False  # the index went with its table
    _changed(conn)


def configure(conn: duckdb.DuckDBPyConnection, model_id: str, dim: int) -> Meta:
    """Make the vector tables those of this model (dropping another model's vectors)."""
    meta = read_meta(conn)
    if meta is not None and meta.model_id == model_id and meta.dim == dim:
        return meta
    drop(conn)
    try:
        conn.execute(META_DDL)
        conn.execute(PENDING_DDL)
        conn.execute(CHUNK_PENDING_DDL)
        for table in ("vectors", "chunk_vectors"):
            cols = f"doc BIGINT NOT NULL, sha BLOB NOT NULL, vec FLOAT[{int(dim)}] NOT NULL"
            conn.execute(f"CREATE TABLE {table}({cols})")
        conn.execute("INSERT INTO vector_meta VALUES (?, ?, ?, -1, 0)", [VECTOR_VERSION, model_id, dim])
    finally:
        _changed(conn)
    return Meta(model_id, dim, -1, 0)


def _last_seq(conn: duckdb.DuckDBPyConnection) -> int:
    row = conn.execute("SELECT last_seq FROM proj_state").fetchone()
    return int(row[0]) if row else -1


# -- following the memories ------------------------------------------------------------------


def follow(conn: duckdb.DuckDBPyConnection, cache: EmbedCache) -> SyncResult:
    """After a catch-up: the vector tables of the recorded embedder, synced from the cache.

    With no embedder recorded, or `off`, there are no vector tables.
    """
    rec = recorded(conn)
    if rec is None or not rec.embeds:
        if read_meta(conn) is not None:
            drop(conn)
        return SyncResult()
    assert rec.model_id is not None and rec.dim is not None
    return sync(conn, configure(conn, rec.model_id, rec.dim), cache)


def sync(
    conn: duckdb.DuckDBPyConnection,
    meta: Meta,
    cache: EmbedCache,
    *,
    fresh: Mapping[bytes, Vectors] | None = None,
) -> SyncResult:
    """Bring `vectors` up to the memories touched since `meta.synced_seq`. Runs its own transaction.

    `fresh` holds vectors in hand by text hash (they are looked up before the cache).
    """
    target = _last_seq(conn)
    if meta.synced_seq == target:
        return SyncResult()
    kept = vecmatrix.current(conn, _matrix_key(meta))
    chunks_kept = _chunk_matrix(conn, meta, use=False)
    generation = memory_generation(conn)
    if _synced.get(id(conn)) == (meta.synced_seq, generation) and not _documents_since(conn, meta.synced_seq):
        # This connection synced at `synced_seq` with the memories as they are now, and no
        # document changed since (only recorded context packs were folded): the pass below
        # would find nothing to delete, queue or fill.
        _save(conn, target)
        _synced[id(conn)] = (target, generation)
        moved = Meta(meta.model_id, meta.dim, target, meta.rows)
        if kept is not None:
            vecmatrix.keep(conn, kept, _matrix_key(moved))
        if chunks_kept is not None:
            vecmatrix.keep(conn, chunks_kept, _chunk_key(conn, moved), "chunk_vectors")
        return SyncResult(pending=pending_count(conn))
    eligible = ELIGIBLE.format(m="m")
    sha = TEXT_SHA.format(m="m")
    touched = (
        ""
        if meta.synced_seq < 0
        else "SEMI JOIN (SELECT DISTINCT memory_id FROM touches WHERE seq > ?) t ON t.memory_id = m.id"
    )
    args = [] if meta.synced_seq < 0 else [meta.synced_seq]
    conn.execute(
        f"CREATE OR REPLACE TEMP TABLE ml_vwant AS SELECT m.stored_seq AS doc, {eligible} AS ok, "
        f"{sha} AS sha FROM memories m {touched}",
        args,
    )
    conn.execute("BEGIN TRANSACTION")
    try:
        stale = conn.execute(
            "DELETE FROM vectors WHERE doc IN (SELECT w.doc FROM ml_vwant w JOIN vectors v USING (doc) "
            "WHERE NOT w.ok OR v.sha <> w.sha)"
        ).fetchone()
        conn.execute("DELETE FROM vector_pending WHERE doc IN (SELECT doc FROM ml_vwant)")
        conn.execute(
            "INSERT INTO vector_pending SELECT w.doc, w.sha FROM ml_vwant w "
            "WHERE w.ok AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.doc = w.doc)"
        )
        filled = _fill(conn, meta, cache, fresh, "SELECT doc FROM ml_vwant WHERE ok", [])
        same_rows = filled == 0 and not (stale and stale[0])
        chunks = _sync_chunks(conn, meta, cache, fresh)
        filled += chunks.filled
        _save(conn, target)
        left = pending_count(conn)
        conn.execute("COMMIT")
    except BaseException:
        _synced.pop(id(conn), None)
        conn.execute("ROLLBACK")
        raise
    finally:
        _changed(conn)  # committed or rolled back: what a read inside the transaction saw may be gone
        conn.execute("DROP TABLE IF EXISTS ml_vwant")
    _synced[id(conn)] = (target, generation)
    moved = Meta(meta.model_id, meta.dim, target, meta.rows)
    if kept is not None and same_rows:
        # No vector deleted or added (the memories touched kept their text): the same rows.
        vecmatrix.keep(conn, kept, _matrix_key(moved))
    if chunks_kept is not None and not chunks.filled and not chunks.removed:
        vecmatrix.keep(conn, chunks_kept, _chunk_key(conn, moved), "chunk_vectors")
    return SyncResult(filled=filled, removed=(int(stale[0]) if stale else 0) + chunks.removed, pending=left)


def _documents_since(conn: duckdb.DuckDBPyConnection, seq: int) -> bool:
    """Whether a document was ingested or removed after `seq` (its chunks' vectors follow)."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM ctx_documents WHERE seq > ? OR removed_seq > ?)", [seq, seq]
    ).fetchone()
    return bool(row is None or row[0])


def _sync_chunks(
    conn: duckdb.DuckDBPyConnection, meta: Meta, cache: EmbedCache, fresh: Mapping[bytes, Vectors] | None
) -> SyncResult:
    """Chunk vectors after new entries (inside sync's transaction): gone chunks' out, new ones in."""
    # Chunks change only with a document's version or removal: most catch-ups skip the scans.
    changed = conn.execute(
        "SELECT count(*) FROM ctx_documents WHERE seq > ? OR removed_seq > ?", [meta.synced_seq] * 2
    ).fetchone()
    if not changed or not changed[0]:
        return SyncResult()
    gone = conn.execute("DELETE FROM chunk_vectors WHERE doc NOT IN (SELECT doc FROM ctx_chunks)").fetchone()
    conn.execute("DELETE FROM chunk_vector_pending WHERE doc NOT IN (SELECT doc FROM ctx_chunks)")
    # Chunks are numbered seq << CHUNK_SHIFT + index: those of entries after synced_seq are new.
    first = (meta.synced_seq + 1) << CHUNK_SHIFT
    sha = CHUNK_TEXT_SHA.format(c="c")
    conn.execute(
        f"INSERT INTO chunk_vector_pending SELECT c.doc, {sha} FROM ctx_chunks c WHERE c.doc >= ? "
        "AND NOT EXISTS (SELECT 1 FROM chunk_vectors v WHERE v.doc = c.doc) "
        "AND NOT EXISTS (SELECT 1 FROM chunk_vector_pending p WHERE p.doc = c.doc)",
        [first],
    )
    filled = _fill(
        conn, meta, cache, fresh, "SELECT doc FROM chunk_vector_pending WHERE doc >= ?", [first], CHUNK_TABLES
    )
    return SyncResult(filled=filled, removed=int(gone[0]) if gone else 0)


def fill(
    conn: duckdb.DuckDBPyConnection,
    meta: Meta,
    cache: EmbedCache,
    fresh: Mapping[bytes, Vectors] | None = None,
) -> SyncResult:
    """Give pending memories their vectors: those of `fresh` (just embedded), or, without it, the cache's."""
    conn.execute("BEGIN TRANSACTION")
    try:
        filled = 0
        for tables in (MEMORY_TABLES, CHUNK_TABLES):
            pending = tables[1]
            if fresh is None:
                filled += _fill(conn, meta, cache, None, f"SELECT doc FROM {pending}", [], tables)
            else:
                filled += _fill(
                    conn, meta, cache, fresh,
                    f"SELECT doc FROM {pending} WHERE sha IN (SELECT unnest(?::BLOB[]))", [list(fresh)],
                    tables,
                )  # fmt: skip
        conn.execute("UPDATE vector_meta SET rows = (SELECT count(*) FROM vectors)")
        left = pending_count(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    finally:
        _changed(conn)  # committed or rolled back: what a read inside the transaction saw may be gone
    return SyncResult(filled=filled, pending=left)


def _fill(
    conn: duckdb.DuckDBPyConnection,
    meta: Meta,
    cache: EmbedCache,
    fresh: Mapping[bytes, Vectors] | None,
    candidates: str,
    args: list[Any],
    tables: tuple[str, str] = MEMORY_TABLES,
) -> int:
    """Vectors for the pending rows among `candidates` (a query of docs), a chunk at a time.

    `tables`: (vector table, pending table), of memories or of document chunks.
    """
    table, pending = tables
    cur = conn.execute(
        f"SELECT p.doc, p.sha FROM {pending} p SEMI JOIN ({candidates}) c ON c.doc = p.doc ORDER BY p.doc",
        args,
    )
    todo: list[tuple[int, bytes]] = [(int(d), bytes(s)) for d, s in cur.fetchall()]
    filled = 0
    for lo in range(0, len(todo), FILL_CHUNK):
        part = todo[lo : lo + FILL_CHUNK]
        found: dict[bytes, Vectors] = {}
        if fresh:
            found.update((s, fresh[s]) for _, s in part if s in fresh)
        missing = [s for _, s in part if s not in found]
        if missing:
            found.update(cache.get_many(meta.model_id, missing, meta.dim))
        rows = [(d, s) for d, s in part if s in found]
        if rows:
            _insert(conn, rows, found, meta.dim, table)
            conn.execute(
                f"DELETE FROM {pending} WHERE doc IN (SELECT unnest(?::BIGINT[]))", [[d for d, _ in rows]]
            )
            filled += len(rows)
    return filled


def check_shape(vecs: Vectors, n: int, dim: int, model_id: str) -> None:
    """Refuse vectors of the wrong count, dimension, or with NaN or infinity (nothing is written then)."""
    if vecs.ndim != 2 or vecs.shape != (n, dim) or not np.isfinite(vecs).all():
        raise BadInput(
            f"vectors for {model_id} must be {n} finite vectors of {dim} dimensions; "
            f"found shape {list(vecs.shape)}",
            expected=[n, dim],
            found=list(vecs.shape),
        )


def _insert(
    conn: duckdb.DuckDBPyConnection,
    rows: list[tuple[int, bytes]],
    found: Mapping[bytes, Vectors],
    dim: int,
    table: str = "vectors",
) -> None:
    vecs = np.vstack([found[s] for _, s in rows]).astype(np.float32)
    if vecs.shape[1] != dim:
        raise BadInput(
            f"a cached vector has {vecs.shape[1]} dimensions; the vectors table holds {dim}",
            expected=dim,
            found=int(vecs.shape[1]),
        )
    import pyarrow as pa

    tbl = pa.table(
        {
            "doc": _arrow_numbers(np.asarray([d for d, _ in rows], dtype=np.int64), pa.int64()),
            "sha": pa.array([s for _, s in rows], pa.binary()),
            "vec": _arrow_vectors(vecs),
        }
    )
    _changed(conn)
    conn.register("ml_vec_new", tbl)
    try:
        conn.execute(f"INSERT INTO {table} SELECT doc, sha, vec::FLOAT[{dim}] FROM ml_vec_new ORDER BY doc")
    finally:
        conn.unregister("ml_vec_new")


def _save(conn: duckdb.DuckDBPyConnection, synced: int) -> None:
    _changed(conn)
    conn.execute("UPDATE vector_meta SET synced_seq = ?, rows = (SELECT count(*) FROM vectors)", [synced])


def pending_count(conn: duckdb.DuckDBPyConnection) -> int:
    """Memories and chunks waiting for their vector (the embedder could not be reached, or a model change)."""
    try:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM vector_pending) + (SELECT count(*) FROM chunk_vector_pending)"
        ).fetchone()
    except duckdb.CatalogException:
        return 0
    return int(row[0]) if row else 0


def pending_texts(conn: duckdb.DuckDBPyConnection, limit: int) -> list[tuple[bytes, str]]:
    """Up to `limit` distinct (text hash, text) of pending memories, oldest first, then of pending chunks."""
    text = EMBED_TEXT.format(m="m")
    rows = conn.execute(
        f"""SELECT p.sha, any_value({text}), min(p.doc) AS first FROM vector_pending p
            JOIN memories m ON m.stored_seq = p.doc GROUP BY p.sha ORDER BY first LIMIT ?""",
        [limit],
    ).fetchall()
    out = [(bytes(r[0]), str(r[1])) for r in rows]
    if len(out) < limit:
        ctext = CHUNK_EMBED_TEXT.format(c="c")
        seen = {s for s, _ in out}
        rows = conn.execute(
            f"""SELECT p.sha, any_value({ctext}), min(p.doc) AS first FROM chunk_vector_pending p
                JOIN ctx_chunks c ON c.doc = p.doc GROUP BY p.sha ORDER BY first LIMIT ?""",
            [limit],
        ).fetchall()
        out += [(bytes(r[0]), str(r[1])) for r in rows if bytes(r[0]) not in seen][: limit - len(out)]
    return out


# -- chunk search --------------------------------------------------------------------------------


def _chunk_key(conn: duckdb.DuckDBPyConnection, meta: Meta) -> tuple[object, ...]:
    # The chunks' vectors change in a sync (which moves the synced seq) and in a fill, which
    # only adds rows: the seq and the row count tell every change apart.
    # A pack's chunk searches ask it three times in one session: once is enough.
    def count() -> int:
        row = conn.execute("SELECT count(*) FROM chunk_vectors").fetchone()
        return int(row[0]) if row else -1

    return (
        meta.model_id,
        meta.dim,
        meta.synced_seq,
        vecmatrix.within_question(("chunk_vectors", id(conn)), count),
    )


def _chunk_matrix(
    conn: duckdb.DuckDBPyConnection, meta: Meta, *, use: bool = True
) -> vecmatrix.Matrix | None:
    """The connection's copy of the chunks' vectors: built by `for_search` (`use`), else the
    current one only."""
    key = _chunk_key(conn, meta)
    if use:
        return vecmatrix.for_search(conn, key, meta.dim, "chunk_vectors")
    return vecmatrix.current(conn, key, "chunk_vectors")


def chunk_search(
    conn: duckdb.DuckDBPyConnection,
    query: np.ndarray,
    limit: int,
    *,
    meta: Meta,
    project: str | None = None,
    project_docs: npt.NDArray[np.int64] | None = None,
) -> list[tuple[int, float]]:
    """(chunk doc, cosine distance) of the `limit` nearest chunks (of `project` when given), nearest first.

    An exact scan: from the connection's matrix copy of the chunks' vectors when it has one
    (the same floats, see projections/vecmatrix.py), else in SQL. Ties break by the older
    chunk first (lower doc), as the chunks' BM25 does. `project_docs`, when the caller knows
    them as they are now, are `project`'s chunks (else a statement reads them).
    """
    m = _chunk_matrix(conn, meta)
    if m is not None:
        q = np.asarray(query, dtype=np.float32)
        exclude = None
        if project is not None:
            mine = project_docs
            if mine is None:
                sql = "SELECT doc FROM ctx_chunks WHERE project = ?"
                mine = conn.execute(sql, [project]).fetchnumpy()["doc"]
            exclude = m.docs[~np.isin(m.docs, np.asarray(mine, dtype=np.int64))]
            if len(exclude) == len(m.docs):
                return []
        return m.search(q, limit, exclude=exclude, newest_first=False)[0]
    where, args = ("", [])
    if project is not None:
        where, args = ("WHERE v.doc IN (SELECT doc FROM ctx_chunks WHERE project = ?)", [project])
    rows = conn.execute(
        f"""SELECT v.doc, array_cosine_distance(v.vec, ?::VARCHAR::FLOAT[{meta.dim}]) AS d
            FROM chunk_vectors v {where} ORDER BY d, v.doc LIMIT ?""",
        [vector_literal(query), *args, limit],
    ).fetchall()
    return [(int(d), float(x)) for d, x in rows]


def chunk_distances(
    conn: duckdb.DuckDBPyConnection, query: np.ndarray, docs: list[int], *, meta: Meta
) -> dict[int, float]:
    """The exact cosine distance of these chunks' vectors to `query` (those that have one)."""
    if not docs:
        return {}
    m = _chunk_matrix(conn, meta, use=False)
    if m is not None:
        return m.distances(m.rows_of(np.asarray(docs, dtype=np.int64)), np.asarray(query, dtype=np.float32))
    rows = conn.execute(
        f"SELECT doc, array_cosine_distance(vec, ?::VARCHAR::FLOAT[{meta.dim}]) FROM chunk_vectors "
        "WHERE doc IN (SELECT unnest(?::BIGINT[]))",
        [vector_literal(query), docs],
    ).fetchall()
    return {int(d): float(x) for d, x in rows}


# -- the HNSW index ------------------------------------------------------------------------------


def has_index(conn: duckdb.DuckDBPyConnection) -> bool:
    known = _has_index.get(id(conn))
    if known is not None:
        return known
    row = conn.execute(
        "SELECT count(*) FROM duckdb_indexes() WHERE index_name = ? AND database_name = current_database()",
        [INDEX_NAME],
    ).fetchone()
    _has_index[id(conn)] = found = bool(row and row[0])
    return found


def drop_index(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute(f"DROP INDEX IF EXISTS {INDEX_NAME}")
    _has_index[id(conn)] = False


def build_index(conn: duckdb.DuckDBPyConnection) -> None:
    """(Re)build the HNSW index from the stored vectors."""
    drop_index(conn)
    conn.execute(f"CREATE INDEX {INDEX_NAME} ON vectors USING HNSW (vec) WITH (metric = 'cosine')")
    _has_index[id(conn)] = True


def index_is_sound(conn: duckdb.DuckDBPyConnection, meta: Meta) -> bool:
    """Does the index find the most recently added vectors (those a crash would have lost)?"""
    recent = conn.execute(
        f"SELECT doc, vec FROM vectors ORDER BY doc DESC LIMIT {HNSW_CHECK_LAST}"
    ).fetchall()
    for doc, vec in recent:
        lit = vector_literal(np.asarray(vec, dtype=np.float32))
        got = conn.execute(
            f"SELECT doc, array_cosine_distance(vec, ?::VARCHAR::FLOAT[{meta.dim}]) AS d "
            "FROM vectors ORDER BY d LIMIT 16",
            [lit],
        ).fetchall()
        if not any(int(d) == int(doc) for d, _ in got):
            return False
    return True


def maintain_index(conn: duckdb.DuckDBPyConnection, meta: Meta, *, min_rows: int = HNSW_MIN_ROWS) -> bool:
    """Keep the index as the size calls for; check it once per attach. Returns whether one is in use."""
    rows = meta.rows
    exists = has_index(conn)
    if rows < min_rows:
        if exists:
            drop_index(conn)
        _unchecked.discard(id(conn))
        return False
    if not exists or (id(conn) in _unchecked and not index_is_sound(conn, meta)):
        build_index(conn)
    _unchecked.discard(id(conn))
    return True


# -- search --------------------------------------------------------------------------------------


def _matrix_key(meta: Meta) -> tuple[object, ...]:
    return (meta.model_id, meta.dim, meta.synced_seq, meta.rows)


def _allowed(
    conn: duckdb.DuckDBPyConnection, restrict: str, rargs: list[Any]
) -> Callable[[list[int]], set[int]]:
    """Which of some docs the filters keep: the scan's own restriction, applied to those docs only."""

    def allowed(docs: list[int]) -> set[int]:
        if not docs:
            return set()
        rows = conn.execute(
            f"SELECT l.doc FROM (SELECT unnest(?::BIGINT[]) AS doc) l {restrict}", [docs, *rargs]
        ).fetchall()
        return {int(r[0]) for r in rows}

    return allowed


def distances(
    conn: duckdb.DuckDBPyConnection, query: np.ndarray, docs: list[int], *, meta: Meta
) -> dict[int, float]:
    """The exact cosine distance of these memories' vectors to `query` (those that have one)."""
    if not docs or meta.rows == 0:
        return {}
    m = vecmatrix.current(conn, _matrix_key(meta))
    if m is not None:
        return m.distances(m.rows_of(np.asarray(docs, dtype=np.int64)), np.asarray(query, dtype=np.float32))
    rows = conn.execute(
        f"SELECT doc, array_cosine_distance(vec, ?::VARCHAR::FLOAT[{meta.dim}]) FROM vectors "
        "WHERE doc IN (SELECT unnest(?::BIGINT[]))",
        [vector_literal(query), docs],
    ).fetchall()
    return {int(d): float(x) for d, x in rows}


def search(
    conn: duckdb.DuckDBPyConnection,
    query: np.ndarray,
    filters: Filters,
    limit: int,
    *,
    meta: Meta,
    use_index: bool = False,
) -> list[tuple[int, float]]:
    """(doc, cosine distance) of the `limit` nearest allowed memories, nearest first.

    Ties break by the newest memory first (higher doc), as BM25's do.
    """
    return search_with(conn, query, filters, limit, (), meta=meta, use_index=use_index)[0]


def search_with(
    conn: duckdb.DuckDBPyConnection,
    query: np.ndarray,
    filters: Filters,
    limit: int,
    also: Sequence[int],
    *,
    meta: Meta,
    use_index: bool = False,
) -> tuple[list[tuple[int, float]], dict[int, float]]:
    """`search`, and the exact distances of the `also` memories that have a vector and are
    not among the nearest (`distances`): hybrid recall's BM25 candidates, scored in the
    same pass over the matrix when there is one."""
    if meta.rows == 0:
        return [], {}
    if not use_index:
        m = vecmatrix.for_search(conn, _matrix_key(meta), meta.dim)
        if m is not None:
            q = np.asarray(query, dtype=np.float32)
            extra = np.asarray(also, dtype=np.int64)
            copy = bm25.current_copy(conn)
            if copy is not None and by_exclusion(filters, copy):
                # The docs the default filters leave out, as BM25 keeps them for this position:
                # the same anti-joins as the restriction, without a statement, and known before
                # the candidates are chosen.
                near, dist = m.search(q, limit, exclude=excluded(conn, copy, filters), also=extra)
            else:
                near, dist = m.search(q, limit, _allowed(conn, *restriction(filters)), also=extra)
            found = dict(near)
            return near, {d: x for d, x in dist.items() if d not in found}
    restrict, rargs = restriction(filters)
    near = _scan(conn, query, restrict, rargs, limit, meta=meta, use_index=use_index)
    found = dict(near)
    missing = [d for d in dict.fromkeys(also) if d not in found]
    return near, distances(conn, query, missing, meta=meta) if missing else {}


def _scan(
    conn: duckdb.DuckDBPyConnection,
    query: np.ndarray,
    restrict: str,
    rargs: list[Any],
    limit: int,
    *,
    meta: Meta,
    use_index: bool,
) -> list[tuple[int, float]]:
    """The nearest allowed memories by SQL: HNSW candidates (`use_index`), else an exact scan."""
    lit = vector_literal(query)
    qv = f"?::VARCHAR::FLOAT[{meta.dim}]"
    if use_index:
        n = max(limit * HNSW_OVERFETCH, 64)
        while True:
            rows = conn.execute(
                f"""WITH c AS (SELECT doc, array_cosine_distance(vec, {qv}) AS d
                               FROM vectors ORDER BY d LIMIT {int(n)})
                    SELECT l.doc, l.d FROM c l {restrict} ORDER BY l.d, l.doc DESC LIMIT ?""",
                [lit, *rargs, limit],
            ).fetchall()
            if len(rows) >= limit or n >= min(meta.rows, HNSW_MAX_CANDIDATES):
                if len(rows) >= limit or n >= meta.rows:
                    return [(int(d), float(s)) for d, s in rows]
                break  # too few candidates pass the filters: scan the allowed ones exactly
            n *= 2
    rows = conn.execute(
        f"""SELECT l.doc, array_cosine_distance(l.vec, {qv}) AS d FROM vectors l {restrict}
            ORDER BY d, l.doc DESC LIMIT ?""",
        [lit, *rargs, limit],
    ).fetchall()
    return [(int(d), float(s)) for d, s in rows]


def nearest_to_memory(
    conn: duckdb.DuckDBPyConnection, memory_id: str, filters: Filters
) -> tuple[str, float] | None:
    """The memory `filters` allow whose vector is nearest `memory_id`'s (itself left out), and
    their cosine similarity; None when the home keeps no vectors or this memory has none (yet).

    The same search recall's vector side runs, so what counts as a neighbour here is what a
    recall with these filters could return.
    """
    meta = read_meta(conn)
    if meta is None or meta.rows == 0:
        return None
    row = conn.execute(
        "SELECT v.doc, v.vec FROM vectors v JOIN memories m ON v.doc = m.stored_seq WHERE m.id = ?",
        [memory_id],
    ).fetchone()
    if row is None:
        return None
    own = int(row[0])
    hits = [(d, x) for d, x in search(conn, np.asarray(row[1], dtype=np.float32), filters, 2, meta=meta)]
    near = next(((d, x) for d, x in hits if d != own), None)
    if near is None:
        return None
    found = conn.execute("SELECT id FROM memories WHERE stored_seq = ?", [near[0]]).fetchone()
    return (str(found[0]), 1.0 - near[1]) if found else None
