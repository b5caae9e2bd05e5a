"""BM25 scoring over posting arrays, and a process-local copy of the inverted index.

The one implementation of BM25 (`score`) is a pure function of posting
arrays: for each query term the docs holding it with their term frequency
and length, plus the corpus size and total length. Recall and search call
it with postings from one of two places, which hold the same rows:

  * a SQL read of the query terms' postings (`fetch_postings`): one
    statement, nothing kept; what a one-shot process (a CLI command) uses;
  * `MemoryIndex`, a copy of the whole inverted index in numpy arrays that a
    process builds after a few recalls on one connection and keeps up to
    date: when the projection has moved on (another seq, log or corpus size
    in proj_state) it re-tokenises just the memories touched since (the
    `touches` table) with the projection's own tokenizer, or reloads when
    that is most of the corpus. A query then costs one statement (its terms,
    and the projection's position to check the copy against) and array
    arithmetic, instead of a plan over joins and aggregates.

Exact scores: each term's contribution is rounded (half away from zero) to
an integer multiple of 1/SCORE_SCALE and the contributions are summed as
integers held in float64 (exact below 2^53, in any order), so a score does
not depend on where the postings came from or in which order they are added.
Ties break by the newest memory first (higher doc = stored_seq).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import duckdb

from mnemolog.projections import vecmatrix
from mnemolog.projections.recall.text import drop_staged, stage_postings
from mnemolog.projections.schema import memory_generation

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    I64 = npt.NDArray[np.int64]
    F64 = npt.NDArray[np.float64]
    EMPTY: TermPostings
else:
    from mnemolog.projections.lazymod import numpy as np

#: BM25's defaults; `[recall] k1` and `b` in config.toml override them (docs/recall.md).
K1: Final = 1.2
B: Final = 0.5
SCORE_SCALE: Final = 10**11
#: Recalls on one connection before it builds its own copy of the index.
BUILD_AFTER: Final = 3
#: Postings beyond which no copy is kept (about 10 bytes each): the SQL read serves instead.
MAX_COPY_POSTINGS: Final = 40_000_000
#: A refresh that would re-tokenise more than this share of the corpus reloads instead.
RELOAD_SHARE: Final = 0.2
#: Postings changed since the copy was packed before it is packed again.
REPACK_DELTA: Final = 200_000


@dataclass(frozen=True)
class TermPostings:
    """One term's postings: parallel arrays of doc, term frequency and doc length."""

    docs: I64
    tf: F64
    dl: F64


@functools.cache
def empty() -> TermPostings:
    """The postings of a term no doc holds (one shared instance, made when first needed)."""
    return TermPostings(np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.float64))


def __getattr__(name: str) -> Any:
    if name == "EMPTY":  # the shared empty postings, made (and numpy loaded) when first asked for
        return empty()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def totals(
    postings: Sequence[TermPostings], n_docs: int, total_len: int, *, k1: float = K1, b: float = B
) -> tuple[I64, F64, I64]:
    """Every matching doc (ascending), its score (an integer multiple of 1/SCORE_SCALE held in
    float64) and how many of the non-empty terms it holds: BM25 before any cut or order."""
    n = float(n_docs)
    avgdl = max(total_len, 1) / max(n_docs, 1)
    docs_parts: list[I64] = []
    contrib_parts: list[F64] = []
    for p in postings:
        if not len(p.docs):
            continue
        df = float(len(p.docs))
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        raw = idf * p.tf * (k1 + 1.0) / (p.tf + k1 * (1.0 - b + b * p.dl / avgdl)) * SCORE_SCALE
        docs_parts.append(p.docs)
        contrib_parts.append(np.floor(raw + 0.5))  # half away from zero: raw > 0
    if not docs_parts:
        return np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.int64)
    docs = np.concatenate(docs_parts)
    contrib = np.concatenate(contrib_parts)
    uniq, inv = np.unique(docs, return_inverse=True)
    scores: F64 = np.bincount(inv, weights=contrib, minlength=len(uniq)).astype(np.float64, copy=False)
    held: I64 = np.bincount(inv, minlength=len(uniq)).astype(np.int64, copy=False)
    return uniq, scores, held


def best(docs: I64, scores: F64, cand: I64, limit: int | None) -> I64:
    """The positions `cand` (into `docs` and `scores`) in rank order, best first and newest
    first on ties, cut to `limit`: the order `score` gives."""
    if limit is not None and len(cand) > limit:
        # Everything scoring at least the limit-th best score (ties at the cut included).
        kth = np.partition(scores[cand], len(cand) - limit)[len(cand) - limit]
        cand = cand[scores[cand] >= kth]
    cand = cand[np.lexsort((-docs[cand], -scores[cand]))]
    return cand if limit is None else cand[:limit]


def score(
    postings: Sequence[TermPostings],
    n_docs: int,
    total_len: int,
    *,
    limit: int | None,
    require_all: bool = False,
    exclude: I64 | None = None,
    k1: float = K1,
    b: float = B,
) -> list[tuple[int, int]]:
    """(doc, score as an integer multiple of 1/SCORE_SCALE), best first, newest first on ties.

    `postings` holds one entry per distinct query term. `require_all` keeps
    only docs holding every term; `exclude` docs are left out (the archive
    guard) after the scores are computed, so they never change another's.
    """
    uniq, tot, held = totals(postings, n_docs, total_len, k1=k1, b=b)
    if not len(uniq):
        return []
    keep = np.ones(len(uniq), dtype=bool)
    if require_all:
        terms = len([p for p in postings if len(p.docs)])
        if terms < len(postings):
            return []  # a term no memory holds: nothing holds them all
        keep &= held == terms
    if exclude is not None and len(exclude):
        keep &= ~np.isin(uniq, exclude)
    cand = best(uniq, tot, np.flatnonzero(keep), limit)
    return list(zip(uniq[cand].tolist(), tot[cand].astype(np.int64).tolist(), strict=True))


#: Rankings of one question share its BM25 scores while this lasts (a context pack ranks each
#: tier with the same question at the same position): the one per-question memo of the
#: projections, which also shares the product with the vector matrix.
one_question = vecmatrix.one_question


def shared_totals(
    key: tuple[object, ...], compute: Callable[[], tuple[I64, F64, I64]]
) -> tuple[I64, F64, I64]:
    """`compute()` (a `totals`), or what it gave for `key` earlier within `one_question`. The
    arrays are shared: callers only read them."""
    got: tuple[I64, F64, I64] = vecmatrix.within_question(("bm25", *key), compute)
    return got


def _arrays(tbl: dict[str, Any]) -> tuple[list[str], I64, F64, F64]:
    return (
        [str(t) for t in tbl["term"]],
        np.asarray(tbl["doc"], dtype=np.int64),
        np.asarray(tbl["tf"], dtype=np.float64),
        np.asarray(tbl["dl"], dtype=np.float64),
    )


def _group(terms: list[str], docs: I64, tf: F64, dl: F64) -> dict[str, TermPostings]:
    out: dict[str, TermPostings] = {}
    if not terms:
        return out
    keys = np.asarray(terms, dtype=object)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    starts = np.concatenate(([0], cuts))
    ends = np.concatenate((cuts, [len(keys)]))
    for s, e in zip(starts, ends, strict=True):
        idx = order[s:e]
        out[str(keys[s])] = TermPostings(docs[idx], tf[idx], dl[idx])
    return out


def grouped(tbl: dict[str, Any]) -> dict[str, TermPostings]:
    """Postings by term from a `term, doc, tf, dl` read (`fetchnumpy`)."""
    return _group(*_arrays(tbl))


def fetch_postings(conn: duckdb.DuckDBPyConnection, terms: Sequence[str]) -> list[TermPostings]:
    """The live postings of these terms, read from the index tables (main and delta)."""
    if not terms:
        return []
    ph = ", ".join("?" * len(terms))
    tbl = conn.execute(
        f"SELECT term, doc, tf, dl FROM postings WHERE term IN ({ph}) "
        f"UNION ALL SELECT term, doc, tf, dl FROM postings_delta WHERE term IN ({ph})",
        [*terms, *terms],
    ).fetchnumpy()
    grouped = _group(*_arrays(tbl))
    return [grouped.get(t) or empty() for t in terms]


# -- the process-local copy ----------------------------------------------------------------------

Position = tuple[int, bytes, int, int]  # last_seq, log_id, docs, total_len


@dataclass
class MemoryIndex:
    """The inverted index in numpy arrays: packed (per term) plus per-doc changes since packing."""

    position: Position
    packed: dict[str, TermPostings]
    # Docs re-tokenised since packing: their packed postings are ignored, these replace them.
    changed: dict[int, list[tuple[str, int, int]]] = field(default_factory=dict)
    # Memory rows recall has fetched, by doc, as they are at `position` (cleared when it moves).
    rows: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    # Row fetches at this position, and whether `rows` holds every memory (recall._rows).
    fetches: int = 0
    all_rows: bool = False
    # Docs the default filters leave out (recall._left_out), by which of them.
    left_out: dict[str, I64] = field(default_factory=dict)
    # Every memory's id by doc, so its row is fetched by primary key in one statement.
    ids: dict[int, str] = field(default_factory=dict)
    # Every doc's neighbours (recall.neighbours): docs sorted, previous and next doc (-1: none),
    # read at this position; any store may give a doc a next neighbour, so they go when it moves.
    neighbours: tuple[I64, I64, I64] | None = None
    # schema.memory_generation at `position`: a later position of the same log with the same
    # generation folded no memory change, so everything above holds there too.
    generation: int | None = None
    changed_postings: int = 0
    _changed_by_term: dict[str, TermPostings] | None = None
    _changed_docs: I64 | None = None

    @property
    def n_docs(self) -> int:
        return self.position[2]

    @property
    def total_len(self) -> int:
        return self.position[3]

    def postings(self, terms: Sequence[str]) -> list[TermPostings]:
        if self._changed_by_term is None:
            self._index_changes()
        assert self._changed_by_term is not None and self._changed_docs is not None
        out = []
        for t in terms:
            p = self.packed.get(t) or empty()
            if len(self._changed_docs) and len(p.docs):
                live = ~np.isin(p.docs, self._changed_docs)
                p = TermPostings(p.docs[live], p.tf[live], p.dl[live])
            c = self._changed_by_term.get(t)
            if c is not None:
                p = TermPostings(
                    np.concatenate((p.docs, c.docs)),
                    np.concatenate((p.tf, c.tf)),
                    np.concatenate((p.dl, c.dl)),
                )
            out.append(p)
        return out

    def _index_changes(self) -> None:
        terms: list[str] = []
        docs: list[int] = []
        tfs: list[int] = []
        dls: list[int] = []
        for doc, rows in self.changed.items():
            for term, tf, dl in rows:
                terms.append(term)
                docs.append(doc)
                tfs.append(tf)
                dls.append(dl)
        self._changed_by_term = _group(
            terms, np.asarray(docs, np.int64), np.asarray(tfs, np.float64), np.asarray(dls, np.float64)
        )
        self._changed_docs = np.asarray(sorted(self.changed), dtype=np.int64)

    def apply(
        self, position: Position, redone: dict[int, list[tuple[str, int, int]]], ids: dict[int, str]
    ) -> None:
        self.ids.update(ids)
        # Every cached row goes, not only the touched ones: some events rewrite rows without
        # touching them (registering a project re-canonicalises the `project` of old rows).
        self.rows.clear()
        self.fetches = 0
        self.all_rows = False
        self.left_out = {}
        self.neighbours = None
        for doc, rows in redone.items():
            self.changed_postings += len(rows) - len(self.changed.get(doc, []))
            self.changed[doc] = rows
        self.position = position
        self._changed_by_term = None
        if self.changed_postings > REPACK_DELTA:
            self._repack()

    def _repack(self) -> None:
        self._index_changes()
        assert self._changed_by_term is not None
        terms = set(self.packed) | set(self._changed_by_term)
        self.packed = {t: p for t, p in zip(terms, self.postings(list(terms)), strict=True) if len(p.docs)}
        self.changed = {}
        self.changed_postings = 0
        self._changed_by_term = None


_copies: dict[int, MemoryIndex] = {}
_uses: dict[int, int] = {}
_positions: dict[int, Position | None] = {}
_lock = threading.Lock()


def note_position(conn: duckdb.DuckDBPyConnection, position: Position | None) -> None:
    """The engine tells where the projection stands after each catch-up (None: unknown)."""
    _positions[id(conn)] = position


def known_position(conn: duckdb.DuckDBPyConnection) -> Position | None:
    return _positions.get(id(conn))


def current_copy(conn: duckdb.DuckDBPyConnection) -> MemoryIndex | None:
    """This connection's copy if it is at the position the engine noted (never builds one)."""
    position = _positions.get(id(conn))
    with _lock:
        copy = _copies.get(id(conn))
    return copy if copy is not None and position is not None and copy.position == position else None


def _load(conn: duckdb.DuckDBPyConnection, position: Position) -> MemoryIndex | None:
    row = conn.execute("SELECT main_rows + delta_rows FROM proj_state").fetchone()
    if row is None or int(row[0]) > MAX_COPY_POSTINGS:
        return None
    tbl = conn.execute(
        "SELECT term, doc, tf, dl FROM postings UNION ALL SELECT term, doc, tf, dl FROM postings_delta"
    ).fetchnumpy()
    ids = conn.execute("SELECT stored_seq, id FROM memories").fetchnumpy()
    return MemoryIndex(
        position,
        _group(*_arrays(tbl)),
        ids=dict(zip(ids["stored_seq"].tolist(), ids["id"].tolist(), strict=True)),
        generation=memory_generation(conn),
    )


def _retokenise(
    conn: duckdb.DuckDBPyConnection, since: int
) -> tuple[dict[int, list[tuple[str, int, int]]], dict[int, str]]:
    """Postings (and ids) of every memory touched after seq `since`, from its current text."""
    conn.execute(
        "CREATE OR REPLACE TEMP TABLE ml_redo AS "
        "SELECT m.stored_seq AS doc, m.id, m.title, m.tags, m.content, m.created_at, m.occurred_at "
        "FROM memories m "
        "SEMI JOIN (SELECT DISTINCT memory_id FROM touches WHERE seq > ?) t ON t.memory_id = m.id",
        [since],
    )
    try:
        ids = {int(d): str(i) for d, i in conn.execute("SELECT doc, id FROM ml_redo").fetchall()}
        stage_postings(conn, "ml_redo", dated=True)
        out: dict[int, list[tuple[str, int, int]]] = {d: [] for d in ids}
        for term, doc, tf, dl in conn.execute("SELECT term, doc, tf, dl FROM ml_post").fetchall():
            out[int(doc)].append((str(term), int(tf), int(dl)))
        drop_staged(conn)
        return out, ids
    finally:
        conn.execute("DROP TABLE IF EXISTS ml_redo")


def index_for(conn: duckdb.DuckDBPyConnection, position: Position) -> MemoryIndex | None:
    """This connection's copy of the index at `position`, once it has recalled enough to want one."""
    key = id(conn)
    with _lock:
        uses = _uses.get(key, 0) + 1
        _uses[key] = uses
        copy = _copies.get(key)
        if copy is not None and copy.position == position:
            return copy
        if copy is None and uses < BUILD_AFTER:
            return None
        if copy is not None and copy.position[1] == position[1] and copy.position[0] <= position[0]:
            generation = memory_generation(conn)
            if copy.generation == generation and copy.position[2:] == position[2:]:
                # Only entries that change no memory were folded since (recorded context
                # packs, documents): the postings, rows, left-out sets and neighbours stand.
                copy.position = position
                return copy
            touched = conn.execute(
                "SELECT count(DISTINCT memory_id) FROM touches WHERE seq > ?", [copy.position[0]]
            ).fetchone()
            if touched is not None and int(touched[0]) <= RELOAD_SHARE * max(position[2], 1):
                copy.apply(position, *_retokenise(conn, copy.position[0]))
                copy.generation = generation
                return copy
        fresh = _load(conn, position)
        if fresh is None:
            _copies.pop(key, None)
        else:
            _copies[key] = fresh
        return fresh


def moved(conn: duckdb.DuckDBPyConnection, old: Position, new: Position) -> None:
    """The engine went from `old` to `new` folding only entries that change no memory (the
    caller's own recorded pack): a copy at `old` is the copy at `new`, as `index_for` would
    find once it had read the unchanged memory generation."""
    with _lock:
        copy = _copies.get(id(conn))
        if copy is not None and copy.position == old and old[1:] == new[1:]:
            copy.position = new


def forget(conn: duckdb.DuckDBPyConnection) -> None:
    """Drop this connection's copy (tests; a closed store)."""
    with _lock:
        _copies.pop(id(conn), None)
        _uses.pop(id(conn), None)
