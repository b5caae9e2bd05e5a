"""Memory vectors: stored beside the memories, cached by content, searched by cosine distance.

Tables (the vector part of the projection; derived data like the rest):

    vector_meta(version, model_id, dim, synced_seq, rows)   one row: whose vectors these are
    vectors(doc, sha, vec FLOAT[dim])                       one per embedded memory (doc = stored_seq)
    ecache.embed_cache(model, sha, vec FLOAT[])             the content-addressed cache, in its own
                                                            file (CACHE_FILE) that a rebuild keeps

A memory's vector is its embedder's vector of `embed_text(title, content)`.
The cache is keyed by (model id, SHA-256 of that text): a rebuild, a model
switched back, or two memories with one text never ask the embedder twice,
so a rebuild needs no embedding server. Every memory has a vector except a
source fully atomised (both atomisation signals): its atoms carry its
meaning, as they carry its recall.

`sync` brings `vectors` up to the memories: what changed since `synced_seq`
(from `touches`, which records every event that touches a memory, a
migration rollback included) is re-checked by text hash; cache hits are
copied, misses embedded. Vectors depend only on the memories' texts, the
model and the cache, so an incremental sync and a rebuild hold the same
rows. A model change (`configure` with another model id) drops the vectors;
the next sync re-embeds, from the cache where it can.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from mnemolog.eventlog.errors import BadInput
from mnemolog.projections.recall import Filters, restriction

Vectors = npt.NDArray[np.float32]
#: Embeds texts (the substrate's embedder): an (n, dim) array of unit vectors, or None when
#: the embedder cannot be reached now (those texts stay pending and are retried).
EmbedFn = Callable[[list[str]], Vectors | None]

VECTOR_VERSION: Final = 1
CACHE_CATALOG: Final = "ecache"
CACHE_FILE: Final = "embed-cache.duckdb"
#: Below this many vectors an exact scan is used (see docs/recall.md for the measurement).
HNSW_MIN_ROWS: Final = 20_000
#: HNSW candidates fetched per wanted result before filters; doubled until enough pass.
HNSW_OVERFETCH: Final = 4
HNSW_MAX_CANDIDATES: Final = 4096
HNSW_EF_SEARCH: Final = 64
#: The most recently added vectors the index must find after an attach.
HNSW_CHECK_LAST: Final = 8
EMBED_BATCH: Final = 256
INDEX_NAME: Final = "vectors_hnsw"

# The memories that carry a vector: all but a fully atomised source.
ELIGIBLE = "NOT (coalesce({m}.atomised_into, 0) > 0 AND {m}.atomisation_archived_at IS NOT NULL)"

META_DDL = """CREATE TABLE IF NOT EXISTS vector_meta(
    version INTEGER NOT NULL, model_id VARCHAR NOT NULL, dim INTEGER NOT NULL,
    synced_seq BIGINT NOT NULL, rows BIGINT NOT NULL)"""
CACHE_DDL = f"""CREATE TABLE IF NOT EXISTS {CACHE_CATALOG}.embed_cache(
    model VARCHAR NOT NULL, sha BLOB NOT NULL, vec FLOAT[] NOT NULL)"""
TABLES: Final = ("vectors", "vector_meta")

# Connections whose file was attached since their index was last checked (by id()).
_unchecked: set[int] = set()


def embed_text(title: str | None, content: str) -> str:
    """The text a memory is embedded from: its title, then its content."""
    return f"{title}\n{content}" if title else content


def text_sha(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def vector_literal(v: np.ndarray) -> str:
    """A vector as DuckDB array text: each float32 exactly (its shortest float64 repr).

    Bound as one VARCHAR and cast in SQL: binding a Python list of 256 floats
    costs milliseconds, parsing one string a few microseconds.
    """
    return "[" + ",".join(repr(float(x)) for x in np.asarray(v, dtype=np.float32)) + "]"


def _arrow_numbers(arr: np.ndarray, typ: pa.DataType) -> pa.Array:
    """A numpy array as Arrow, from its buffer.

    Not `pa.array(arr)`: that asks whether `arr` is a pandas object, and
    projections/db.py marks pandas unimportable (DuckDB would otherwise try
    to import it on every bound parameter), which makes that question raise.
    """
    return pa.Array.from_buffers(typ, len(arr), [None, pa.py_buffer(np.ascontiguousarray(arr))])


def _arrow_vectors(vecs: Vectors) -> pa.Array:
    """(n, dim) float32 as an Arrow fixed-size list, without a per-element Python round trip."""
    dim = vecs.shape[1]
    flat = _arrow_numbers(np.ascontiguousarray(vecs, dtype=np.float32).reshape(-1), pa.float32())
    return pa.FixedSizeListArray.from_arrays(flat, dim)


@dataclass(frozen=True)
class Meta:
    model_id: str
    dim: int
    synced_seq: int
    rows: int


@dataclass(frozen=True)
class SyncResult:
    """What a sync did: vectors embedded by the model, copied from the cache, removed, left to do."""

    embedded: int = 0
    cached: int = 0
    removed: int = 0
    pending: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "embedded": self.embedded,
            "cached": self.cached,
            "removed": self.removed,
            "pending": self.pending,
        }


# -- tables ------------------------------------------------------------------------------------


def attached(conn: duckdb.DuckDBPyConnection) -> None:
    """Called after the projection file is attached: create the cache table, distrust the index."""
    conn.execute(CACHE_DDL)
    distrust_index(conn)


def distrust_index(conn: duckdb.DuckDBPyConnection) -> None:
    """The next search on this connection checks the HNSW index before using it."""
    _unchecked.add(id(conn))


def read_meta(conn: duckdb.DuckDBPyConnection) -> Meta | None:
    try:
        row = conn.execute("SELECT version, model_id, dim, synced_seq, rows FROM vector_meta").fetchone()
    except duckdb.CatalogException:
        return None
    if row is None or row[0] != VECTOR_VERSION:
        return None
    return Meta(str(row[1]), int(row[2]), int(row[3]), int(row[4]))


def drop(conn: duckdb.DuckDBPyConnection) -> None:
    for t in TABLES:
        conn.execute(f"DROP TABLE IF EXISTS {t}")


def configure(conn: duckdb.DuckDBPyConnection, model_id: str, dim: int) -> Meta:
    """Make the vector tables those of this model (dropping another model's vectors)."""
    meta = read_meta(conn)
    if meta is not None and meta.model_id == model_id and meta.dim == dim:
        return meta
    drop(conn)
    conn.execute(META_DDL)
    conn.execute(
        f"CREATE TABLE vectors(doc BIGINT NOT NULL, sha BLOB NOT NULL, vec FLOAT[{int(dim)}] NOT NULL)"
    )
    conn.execute("INSERT INTO vector_meta VALUES (?, ?, ?, -1, 0)", [VECTOR_VERSION, model_id, dim])
    return Meta(model_id, dim, -1, 0)


def _last_seq(conn: duckdb.DuckDBPyConnection) -> int:
    row = conn.execute("SELECT last_seq FROM proj_state").fetchone()
    return int(row[0]) if row else -1


# -- the cache ---------------------------------------------------------------------------------


def cached(conn: duckdb.DuckDBPyConnection, model_id: str, shas: Sequence[bytes]) -> dict[bytes, Vectors]:
    """The cached vectors of these text hashes under this model."""
    if not shas:
        return {}
    rows = conn.execute(
        f"SELECT sha, any_value(vec) FROM {CACHE_CATALOG}.embed_cache "
        "WHERE model = ? AND sha IN (SELECT unnest(?::BLOB[])) GROUP BY sha",
        [model_id, list(shas)],
    ).fetchall()
    return {bytes(s): np.asarray(v, dtype=np.float32) for s, v in rows}


def remember(conn: duckdb.DuckDBPyConnection, model_id: str, shas: Sequence[bytes], vecs: Vectors) -> None:
    """Add vectors to the cache (those it lacks)."""
    if not len(shas):
        return
    n, dim = vecs.shape
    offsets = _arrow_numbers(np.arange(0, (n + 1) * dim, dim, dtype=np.int32), pa.int32())
    tbl = pa.table(
        {
            "sha": pa.array(list(shas), pa.binary()),
            "vec": pa.ListArray.from_arrays(offsets, _arrow_vectors(vecs).flatten()),
        }
    )
    conn.register("ml_cache_new", tbl)
    try:
        conn.execute(
            f"INSERT INTO {CACHE_CATALOG}.embed_cache SELECT ?, n.sha, n.vec FROM ml_cache_new n "
            f"WHERE n.sha NOT IN (SELECT sha FROM {CACHE_CATALOG}.embed_cache WHERE model = ?)",
            [model_id, model_id],
        )
    finally:
        conn.unregister("ml_cache_new")


# -- sync ----------------------------------------------------------------------------------------


def _changed(conn: duckdb.DuckDBPyConnection, since: int) -> list[tuple[int, str | None, str, bool]]:
    """(doc, title, content, eligible) of the memories touched after seq `since` (all if -1)."""
    eligible = ELIGIBLE.format(m="m")
    if since < 0:
        sql = f"SELECT m.stored_seq, m.title, m.content, {eligible} FROM memories m"
        args: list[Any] = []
    else:
        sql = (
            f"SELECT m.stored_seq, m.title, m.content, {eligible} FROM memories m "
            "SEMI JOIN (SELECT DISTINCT memory_id FROM touches WHERE seq > ?) t ON t.memory_id = m.id"
        )
        args = [since]
    return [(int(r[0]), r[1], r[2], bool(r[3])) for r in conn.execute(sql, args).fetchall()]


def sync(
    conn: duckdb.DuckDBPyConnection,
    embed: EmbedFn | None,
    meta: Meta,
    *,
    batch: int = EMBED_BATCH,
    progress: Callable[[int], None] | None = None,
) -> SyncResult:
    """Bring `vectors` up to the memories. Call it outside a transaction: it runs its own.

    `embed` None means cache only: what the cache lacks stays pending, as it
    does when `embed` returns None (the embedder cannot be reached now).
    Whatever `embed` raises propagates before `vectors` is touched. New
    vectors go into the cache first, each batch as it is embedded (DuckDB
    writes one attached file per transaction; the cache only ever grows,
    so a batch cached by a sync that later fails is simply found next time),
    then the vectors table changes in one transaction with its position.
    A store that embeds its text before it is logged puts the vector in the
    cache first (`remember`), and the sync finds it there.
    """
    target = _last_seq(conn)
    changed = _changed(conn, meta.synced_seq)
    if not changed:
        if target != meta.synced_seq:
            _save(conn, meta, target)
        return SyncResult()
    docs = [c[0] for c in changed]
    have = {
        int(d): bytes(s)
        for d, s in conn.execute(
            "SELECT doc, sha FROM vectors WHERE doc IN (SELECT unnest(?::BIGINT[]))", [docs]
        ).fetchall()
    }
    stale: list[int] = []
    want: dict[int, tuple[bytes, str]] = {}
    for doc, title, content, eligible in changed:
        if not eligible:
            if doc in have:
                stale.append(doc)
            continue
        text = embed_text(title, content)
        sha = text_sha(text)
        if have.get(doc) == sha:
            continue
        if doc in have:
            stale.append(doc)
        want[doc] = (sha, text)
    found = cached(conn, meta.model_id, [s for s, _ in want.values()])
    from_cache = sum(1 for s, _ in want.values() if s in found)
    embedded = 0
    pending = 0
    todo: dict[bytes, str] = {}
    for sha, text in want.values():
        if sha not in found:
            todo.setdefault(sha, text)
    items = list(todo.items())
    for lo in range(0, len(items), batch):
        part = items[lo : lo + batch]
        vecs = embed([t for _, t in part]) if embed is not None else None
        if vecs is None:
            pending += len(items) - lo
            break
        _check_shape(vecs, len(part), meta)
        remember(conn, meta.model_id, [s for s, _ in part], vecs)
        for (s, _), v in zip(part, vecs, strict=True):
            found[s] = v
        embedded += len(part)
        if progress is not None:
            progress(len(part))
    rows = [(doc, sha) for doc, (sha, _) in want.items() if sha in found]
    conn.execute("BEGIN TRANSACTION")
    try:
        if stale:
            conn.execute("DELETE FROM vectors WHERE doc IN (SELECT unnest(?::BIGINT[]))", [stale])
        if rows:
            _insert(conn, rows, found, meta.dim)
        # The position only moves past changes fully applied; pending ones are looked at again.
        _save(conn, meta, target if pending == 0 else meta.synced_seq)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return SyncResult(embedded=embedded, cached=from_cache, removed=len(stale), pending=pending)


def _check_shape(vecs: Vectors, n: int, meta: Meta) -> None:
    if vecs.shape != (n, meta.dim) or not np.isfinite(vecs).all():
        raise BadInput(
            f"vectors for {meta.model_id} must be {n} finite vectors of {meta.dim} dimensions; "
            f"found shape {list(vecs.shape)}",
            expected=[n, meta.dim],
            found=list(vecs.shape),
        )


def _insert(
    conn: duckdb.DuckDBPyConnection, rows: list[tuple[int, bytes]], found: dict[bytes, Vectors], dim: int
) -> None:
    vecs = np.vstack([found[s] for _, s in rows]).astype(np.float32)
    if vecs.shape[1] != dim:
        raise BadInput(
            f"a cached vector has {vecs.shape[1]} dimensions; the vectors table holds {dim}",
            expected=dim,
            found=int(vecs.shape[1]),
        )
    tbl = pa.table(
        {
            "doc": pa.array([d for d, _ in rows], pa.int64()),
            "sha": pa.array([s for _, s in rows], pa.binary()),
            "vec": _arrow_vectors(vecs),
        }
    )
    conn.register("ml_vec_new", tbl)
    try:
        conn.execute(f"INSERT INTO vectors SELECT doc, sha, vec::FLOAT[{dim}] FROM ml_vec_new ORDER BY doc")
    finally:
        conn.unregister("ml_vec_new")


def _save(conn: duckdb.DuckDBPyConnection, meta: Meta, synced: int) -> None:
    conn.execute("UPDATE vector_meta SET synced_seq = ?, rows = (SELECT count(*) FROM vectors)", [synced])


def pending_count(conn: duckdb.DuckDBPyConnection) -> int:
    """Memories that should have a vector and have none (or a stale one): work left for a sync."""
    eligible = ELIGIBLE.format(m="m")
    row = conn.execute(
        f"SELECT count(*) FROM memories m WHERE {eligible} "
        "AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.doc = m.stored_seq)"
    ).fetchone()
    return int(row[0]) if row else 0


# -- the HNSW index ------------------------------------------------------------------------------


def has_index(conn: duckdb.DuckDBPyConnection) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM duckdb_indexes() WHERE index_name = ? AND database_name = current_database()",
        [INDEX_NAME],
    ).fetchone()
    return bool(row and row[0])


def drop_index(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute(f"DROP INDEX IF EXISTS {INDEX_NAME}")


def build_index(conn: duckdb.DuckDBPyConnection) -> None:
    """(Re)build the HNSW index from the stored vectors."""
    drop_index(conn)
    conn.execute(f"CREATE INDEX {INDEX_NAME} ON vectors USING HNSW (vec) WITH (metric = 'cosine')")


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
    if meta.rows == 0:
        return []
    lit = vector_literal(query)
    qv = f"?::VARCHAR::FLOAT[{meta.dim}]"
    restrict, rargs = restriction(filters)
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
