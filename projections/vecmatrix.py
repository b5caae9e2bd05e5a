"""An in-memory copy of the vectors table for exact vector search, bit for bit what DuckDB computes.

Below the HNSW threshold (projections/embedding/vectors.py) a vector search is an exact
scan. In SQL that scan reads and decompresses every stored vector on every
query; this copy holds them as one float32 matrix per connection instead,
built after a connection has searched a few times (like BM25's copy,
projections/recall/bm25.py) and rebuilt whenever the vector metadata (model,
dimension, synced seq, row count) moves; the chunks' vectors (`TABLES`) the
same way. A copy outlives the file being let go and attached again (the
metadata, read afresh, says whether it still holds).

Results must equal the SQL scan's, distances included. DuckDB's
`array_cosine_distance` on FLOAT arrays accumulates the dot product and both
squared norms in float32, element after element, then takes
`1 - clamp(dot / sqrt(|l|² · |r|²), -1, 1)` in float32. `exact` repeats that
sequence with numpy's float32 arithmetic, so each distance is the same float:
every step is IEEE round-to-nearest, and the sums add element after element
because they reduce along the slow axis of a C-contiguous (dim, rows) array
(numpy adds each element to the running result there; its pairwise summation
is only for the fast axis). The rows' squared norms are summed once, when the
copy is built (`cumsum`, which adds in order by definition). A BLAS
product, which adds in another order, only chooses candidates: every memory
whose BLAS distance is within `MARGIN` of the k-th best is scored exactly,
and the answer stands only when its last exact distance is below the
margin-widened bound (otherwise k grows), so rounding can never drop a
memory the scan would have kept. The float32 error of either order is below
dim · 2⁻²⁴ relative to |l|·|r| (1.5e-5 at 256 dimensions); MARGIN is far wider.
A matrix with a zero or non-finite vector is never used (the scan is).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import duckdb

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    F32 = npt.NDArray[np.float32]
    I64 = npt.NDArray[np.int64]
else:
    from mnemolog.projections.lazymod import numpy as np

#: Searches on one connection before it builds a copy (a one-shot process keeps scanning).
BUILD_AFTER: Final = 3
#: How far (in cosine distance) a BLAS-ordered candidate may be from the float32 sequence's value.
MARGIN: Final = 1e-3


@dataclass(frozen=True)
class Matrix:
    key: tuple[object, ...]
    docs: I64  # ascending
    vecs: F32  # one row per doc
    norms: F32  # float32 Euclidean norms, for the BLAS candidates only
    sq: F32  # each row's squared norm as DuckDB sums it (in order, float32)

    def rows_of(self, docs: I64) -> I64:
        """The rows of those of `docs` this copy holds (the others are left out)."""
        if not len(self.docs):
            return np.zeros(0, np.int64)
        at = np.minimum(np.searchsorted(self.docs, docs), len(self.docs) - 1)
        found: I64 = at[self.docs[at] == docs]
        return found

    def exact(self, rows: I64, query: F32) -> npt.NDArray[np.float64]:
        """DuckDB's `array_cosine_distance(vec, query)` of these rows, as the floats it returns."""
        if len(rows) < 2:
            # One row is a contiguous vector, which add.reduce would sum pairwise: cumsum adds in order.
            dot = np.cumsum(self.vecs[rows] * query, axis=1, dtype=np.float32)[:, -1]
        else:
            # (dim, rows), C-contiguous: add.reduce over axis 0 adds each element in turn (see above).
            sub = np.ascontiguousarray(self.vecs.take(rows, axis=0).T)
            np.multiply(sub, query[:, None], out=sub)
            dot = np.add.reduce(sub, axis=0, dtype=np.float32)
        nr = np.cumsum(query * query, dtype=np.float32)[-1]
        den = self.sq.take(rows)
        np.multiply(den, nr, out=den)
        np.sqrt(den, out=den)
        np.divide(dot, den, out=dot)
        np.clip(dot, np.float32(-1.0), np.float32(1.0), out=dot)
        np.subtract(np.float32(1.0), dot, out=dot)
        out: npt.NDArray[np.float64] = dot.astype(np.float64)
        return out

    def search(
        self,
        query: F32,
        limit: int,
        allowed: Callable[[list[int]], set[int]] | None = None,
        *,
        exclude: I64 | None = None,
        also: I64 | None = None,
        newest_first: bool = True,
    ) -> tuple[list[tuple[int, float]], dict[int, float]]:
        """(doc, distance) of the `limit` nearest docs, nearest first, ties by newest (by oldest
        unless `newest_first`); and the
        distances of the `also` docs this copy holds (computed with the candidates' in one pass).

        The docs kept are those `allowed` keeps (asked of the candidates only), or, without
        it, all but the `exclude` docs: a known set is applied before the candidates are
        chosen, so they are the `limit` nearest kept docs and the few within the margin.
        """
        n = len(self.docs)
        extra = self.rows_of(also) if also is not None and len(also) else np.zeros(0, np.int64)
        if n == 0 or limit <= 0:
            return [], self.distances(extra, query)
        approx = self._approx(query)
        mask: npt.NDArray[np.bool_] | None = None  # the rows kept (None: all)
        if allowed is None and exclude is not None and len(exclude):
            out = self.rows_of(np.asarray(exclude, dtype=np.int64))
            if len(out):
                mask = np.ones(n, dtype=bool)
                mask[out] = False
                approx[out] = np.inf  # never among the k nearest kept rows
        kept = n if mask is None else int(mask.sum())
        if kept == 0:
            return [], self.distances(extra, query)
        k = min(kept, limit) if allowed is None else min(n, max(limit * 4, 64))
        while True:
            if k < kept:
                kth = float(np.partition(approx, k - 1)[k - 1])
                rows = np.flatnonzero(approx <= kth + 2 * MARGIN)
                if mask is not None:
                    rows = rows[mask[rows]]
            else:
                kth = float("inf")
                rows = np.arange(n) if mask is None else np.flatnonzero(mask)
            both = self.exact(np.concatenate((rows, extra)), query)
            exact, docs = both[: len(rows)], self.docs[rows]
            if allowed is not None:
                keep = allowed(docs.tolist())
                ok = np.fromiter((d in keep for d in docs.tolist()), dtype=bool, count=len(docs))
                exact, docs = exact[ok], docs[ok]
            # Equal distances: the newest doc first (memories), or the oldest (chunks).
            order = np.lexsort((-docs if newest_first else docs, exact))[:limit]
            found = list(zip(docs[order].tolist(), exact[order].tolist(), strict=True))
            # A row left out has a BLAS distance above kth + 2·MARGIN, so an exact one above kth + MARGIN.
            if len(rows) == kept or (len(found) == limit and found[-1][1] < kth + MARGIN):
                return found, dict(zip(self.docs[extra].tolist(), both[len(rows) :].tolist(), strict=True))
            k = min(kept, k * 4)

    def _approx(self, query: F32) -> F32:
        """Every row's BLAS-ordered distance to `query` (candidates only: the margin covers the
        rounding), a fresh array the caller may change; within `one_question`, computed once."""
        memo = getattr(_shared, "memo", None)
        key = (id(self.vecs), query.tobytes()) if memo is not None else None
        hit = memo.get(key) if memo is not None else None
        if hit is not None and hit[0] is self.vecs:  # (the very matrix: an id is reused only after)
            kept: F32 = hit[1].copy()
            return kept
        # In place, one temporary.
        with _one_blas_thread():
            approx: F32 = self.vecs @ query
        approx /= self.norms
        qn = float(np.linalg.norm(query))
        # A zero or non-finite query has no nearest: NaN candidates make the loop score all rows.
        approx *= np.float32(-1.0 / qn) if 0.0 < qn < float("inf") else np.float32("nan")
        approx += np.float32(1.0)
        if memo is not None:
            memo[key] = (self.vecs, approx.copy())
        return approx

    def distances(self, rows: I64, query: F32) -> dict[int, float]:
        """The exact distance of these rows, by doc."""
        return dict(zip(self.docs[rows].tolist(), self.exact(rows, query).tolist(), strict=True))


@functools.cache
def _blas() -> Any:
    """The process's BLAS thread pools (threadpoolctl), looked up once (about 2 ms)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


_blas_lock = threading.Lock()


@contextmanager
def _one_blas_thread() -> Iterator[None]:
    """BLAS on one thread for one product, then as the host program had it.

    One question against the matrix is a matrix-vector product of a few MB:
    OpenBLAS's threads add no speed at this size and spin on a busy machine
    (10k × 384 on two cores under load: 2.7 ms of CPU with its default two
    threads, 0.6 ms with one; a hybrid recall 8.1 -> 3.6 ms). The limit is
    process-wide, so it is taken under a lock (two threads restoring each
    other's setting would leave the pool at one thread for good) and put back.
    """
    with _blas_lock, _blas().limit(limits=1, user_api="blas"):
        yield


_lock = threading.Lock()
_copies: dict[Any, Matrix] = {}
# Per thread, inside `one_question`: the BLAS products computed so far, by matrix and query.
_shared = threading.local()


@contextmanager
def one_question() -> Iterator[None]:
    """Searches of one query vector share its product with the matrix while this lasts: a context
    pack ranks each tier with the same question (the same floats, computed once)."""
    outer = getattr(_shared, "memo", None)
    if outer is None:
        _shared.memo = {}
        _shared.values = {}
    try:
        yield
    finally:
        if outer is None:
            _shared.memo = None
            _shared.values = None


def within_question(key: tuple[object, ...], compute: Callable[[], Any]) -> Any:
    """`compute()`, or within `one_question` what it gave for `key` earlier in it: for what one
    question's searches read alike and nothing between them changes (they share a session)."""
    values: dict[tuple[object, ...], Any] | None = getattr(_shared, "values", None)
    if values is None:
        return compute()
    if key not in values:
        values[key] = compute()
    return values[key]


_uses: dict[Any, int] = {}
#: The tables a connection may keep a copy of: the memories' vectors and the chunks'.
TABLES: Final = ("vectors", "chunk_vectors")


def _slot(conn: duckdb.DuckDBPyConnection, table: str) -> Any:
    return id(conn) if table == "vectors" else (id(conn), table)


def forget(conn: duckdb.DuckDBPyConnection) -> None:
    """Drop this connection's copies (the file was attached again, the vectors changed here)."""
    with _lock:
        for table in TABLES:
            _copies.pop(_slot(conn, table), None)


def keep(conn: duckdb.DuckDBPyConnection, m: Matrix, key: tuple[object, ...], table: str = "vectors") -> None:
    """Keep `m` as this connection's copy under a new metadata `key`: the caller knows the
    table holds the same rows at both (only the synced seq moved)."""
    with _lock:
        _copies[_slot(conn, table)] = Matrix(key, m.docs, m.vecs, m.norms, m.sq)


def current(
    conn: duckdb.DuckDBPyConnection, key: tuple[object, ...], table: str = "vectors"
) -> Matrix | None:
    """This connection's copy if it is one of vector metadata `key` (never builds one)."""
    with _lock:
        copy = _copies.get(_slot(conn, table))
    return copy if copy is not None and copy.key == key else None


def for_search(
    conn: duckdb.DuckDBPyConnection, key: tuple[object, ...], dim: int, table: str = "vectors"
) -> Matrix | None:
    """This connection's copy for vector metadata `key`, once it has searched enough to want one."""
    cid = _slot(conn, table)
    with _lock:
        uses = _uses.get(cid, 0) + 1
        _uses[cid] = uses
        copy = _copies.get(cid)
        if copy is not None and copy.key == key:
            return copy
        _copies.pop(cid, None)
        if uses < BUILD_AFTER:
            return None
    docs, vecs = _load(conn, dim, table)
    norms = np.linalg.norm(vecs, axis=1).astype(np.float32) if len(docs) else np.zeros(0, np.float32)
    if not (np.isfinite(vecs).all() and (norms > 0).all()):
        return None  # DuckDB's clamp of a NaN similarity is not numpy's: leave those to SQL
    sq = np.zeros(len(docs), np.float32)
    for lo in range(0, len(docs), 4096):  # cumsum along a row adds in order; in slices, bounded memory
        part = vecs[lo : lo + 4096]
        sq[lo : lo + len(part)] = np.cumsum(part * part, axis=1, dtype=np.float32)[:, -1]
    m = Matrix(key, docs, vecs, norms, sq)
    with _lock:
        _copies[cid] = m
    return m


def _load(conn: duckdb.DuckDBPyConnection, dim: int, table: str) -> tuple[I64, F32]:
    # Through Arrow: the fixed-size arrays arrive as one flat float32 buffer, not a list per row.
    assert table in TABLES
    tbl = conn.execute(f"SELECT doc, vec FROM {table} ORDER BY doc").to_arrow_table()
    docs = tbl.column("doc").to_numpy().astype(np.int64)
    if len(docs) == 0:
        return docs, np.zeros((0, dim), np.float32)
    flat = tbl.column("vec").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    return docs, np.ascontiguousarray(flat.reshape(len(docs), dim), dtype=np.float32)
