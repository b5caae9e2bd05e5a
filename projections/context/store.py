"""The context read model's tables and queries: documents, their chunks and a BM25 index, recorded packs.

Tables (DDL in `projections.schema`; rebuilt from the log like every projection):

- `ctx_documents`: the current version of every ingested file (a removed one
  keeps its row with `removed_seq`), keyed by its document id;
- `ctx_document_versions`: the seq of every version, so a chunk id
  (document, version, index) leads to the entry that holds its text;
- `ctx_chunks`: the chunks of current versions only, numbered `doc` =
  seq * 2^20 + index (unique, the same in a rebuild); an older version's
  chunks and postings are deleted when a new version or a removal folds;
- `ctx_chunk_postings`: the inverted index of chunk text (the memory index's
  tokenizer: `projections.text`), title = document name and heading path;
- `ctx_packs` and `ctx_pack_members`: every `context.built` event, and per pack each
  state entry, memory and chunk it included or trimmed, for `context why`,
  `context show` and `capture --context`.

The room's fold (`projections/context/fold.py`) writes them; this module
reads them. Queries are named for what they answer; `chunk_candidates` is the
one place that ranks chunks (BM25, or hybrid with the chunks' vectors, which
projections/embedding/vectors.py keeps beside the memories').
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import duckdb

from mnemolog.projections.context.assemble import ChunkRow
from mnemolog.projections.embedding import vectors
from mnemolog.projections.recall import bm25, hybrid
from mnemolog.projections.recall.query import parse

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    from mnemolog.projections.lazymod import numpy as np

K1: Final = 1.2
B: Final = 0.75
MAX_QUERY_TERMS: Final = 64
# Each term's contribution is rounded to a multiple of 1/SCORE_SCALE, so sums are exact
# integers in any order and a rebuild ranks exactly as the incremental fold did.
SCORE_SCALE: Final = 10**11


# -- queries -------------------------------------------------------------------


@dataclass(frozen=True)
class DocumentRow:
    document_id: str
    path: str
    name: str
    root: str
    project: str
    sha256: str
    size: int
    version: int
    chunks: int
    seq: int
    removed: bool


_DOC_COLS = (
    "document_id, path, name, root, project, sha256, size, version, chunks, seq, removed_seq IS NOT NULL"
)


def _doc(row: Sequence[Any]) -> DocumentRow:
    return DocumentRow(*row)


def document_by_path(conn: duckdb.DuckDBPyConnection, path: str) -> DocumentRow | None:
    """The document last ingested from this absolute path (removed ones included)."""
    row = conn.execute(
        f"SELECT {_DOC_COLS} FROM ctx_documents WHERE path = ? ORDER BY seq DESC LIMIT 1", [path]
    ).fetchone()
    return _doc(row) if row else None


def documents_by_path(conn: duckdb.DuckDBPyConnection, paths: Sequence[str]) -> dict[str, DocumentRow]:
    """The document last ingested from each of these paths (removed ones included), by path."""
    if not paths:
        return {}
    rows = conn.execute(
        f"SELECT {_DOC_COLS} FROM ctx_documents WHERE path IN (SELECT unnest(?::VARCHAR[])) ORDER BY seq",
        [list(paths)],
    ).fetchall()
    return {d.path: d for d in map(_doc, rows)}


def documents_under(conn: duckdb.DuckDBPyConnection, root: str) -> list[DocumentRow]:
    """Current (not removed) documents whose path lies under the directory `root`."""
    prefix = root.rstrip("/") + "/"
    rows = conn.execute(
        f"SELECT {_DOC_COLS} FROM ctx_documents "
        "WHERE removed_seq IS NULL AND starts_with(path, ?) ORDER BY path",
        [prefix],
    ).fetchall()
    return [_doc(r) for r in rows]


def list_documents(conn: duckdb.DuckDBPyConnection, project: str | None = None) -> list[DocumentRow]:
    where, args = ("removed_seq IS NULL", [])
    if project is not None:
        where, args = ("removed_seq IS NULL AND project = ?", [project])
    rows = conn.execute(f"SELECT {_DOC_COLS} FROM ctx_documents WHERE {where} ORDER BY path", args).fetchall()
    return [_doc(r) for r in rows]


def version_seq(conn: duckdb.DuckDBPyConnection, document_id: str, version: int) -> int | None:
    """The seq of the `document.ingested` entry of this version of a document."""
    row = conn.execute(
        "SELECT seq FROM ctx_document_versions WHERE document_id = ? AND version = ? ORDER BY seq LIMIT 1",
        [document_id, version],
    ).fetchone()
    return int(row[0]) if row else None


def parse_chunk_id(cid: str) -> tuple[str, int, int] | None:
    """(document id, version, index) of a chunk id, or None when it is not one."""
    parts = cid.rsplit("/", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return parts[0], int(parts[1]), int(parts[2])


def chunk_count(conn: duckdb.DuckDBPyConnection) -> int:
    row = conn.execute("SELECT count(*) FROM ctx_chunks").fetchone()
    return int(row[0]) if row else 0


#: A connection's packs before it keeps a copy of the chunks' index (one-shot processes build one).
CHUNK_COPY_AFTER: Final = 3
#: Chunk postings beyond which no copy is kept: the SQL statement serves instead.
MAX_CHUNK_POSTINGS: Final = 5_000_000


@dataclass(frozen=True)
class ChunkIndex:
    """The chunks' inverted index in numpy arrays, as it was at `key` (see `_chunk_state`)."""

    key: tuple[object, ...]
    n: float  # count(*) of ctx_chunks, as the statement computes it
    avgdl: float  # greatest(avg(dl), 1), read from DuckDB: the statement's very value
    postings: dict[str, bm25.TermPostings]
    docs: bm25.I64  # every chunk, ascending
    projects: npt.NDArray[np.object_]  # each one's project
    # Chunk rows read at `key`, by doc (a doc's row never changes: a new version is new docs).
    rows: dict[int, tuple[Any, ...]] = field(default_factory=dict)


_chunk_copies: dict[int, ChunkIndex] = {}
_chunk_uses: dict[int, int] = {}
# The engine's position (bm25.known_position) at which each copy was last found to stand: at
# the same position the projection has folded the same entries, so the chunks are the same.
_chunk_confirmed: dict[int, bm25.Position | None] = {}
_chunk_lock = threading.Lock()

# What the chunks are: a chunk's doc is its entry's seq and index, never reused, so any added
# chunk raises the largest doc and a removal alone lowers the count; the log tells homes apart.
_CHUNK_STATE = (
    "SELECT count(*), max(doc), sum(doc), count(*)::DOUBLE, greatest(avg(dl), 1)::DOUBLE, "
    "(SELECT log_id FROM proj_state) FROM ctx_chunks"
)


def _chunk_copy(conn: duckdb.DuckDBPyConnection) -> ChunkIndex | None:
    """This connection's copy of the chunks' index as they are now, once it has ranked chunks
    CHUNK_COPY_AFTER times (a one-shot process keeps none)."""
    cid = id(conn)
    with _chunk_lock:
        uses = _chunk_uses.get(cid, 0) + 1
        _chunk_uses[cid] = uses
        copy = _chunk_copies.get(cid)
        confirmed = _chunk_confirmed.get(cid)
    if copy is None and uses < CHUNK_COPY_AFTER:
        return None
    at = bm25.known_position(conn)
    if copy is not None and at is not None and confirmed == at:
        return copy  # nothing folded since it was found to stand
    row = conn.execute(_CHUNK_STATE).fetchone()
    if row is None:
        return None
    key = (int(row[0]), row[1], row[2], row[5])
    if copy is not None and copy.key == key:
        with _chunk_lock:
            _chunk_confirmed[cid] = at
        return copy
    count = conn.execute("SELECT count(*) FROM ctx_chunk_postings").fetchone()
    if count is None or int(count[0]) > MAX_CHUNK_POSTINGS:
        with _chunk_lock:
            _chunk_copies.pop(cid, None)
        return None
    tbl = conn.execute("SELECT term, doc, tf, dl FROM ctx_chunk_postings").fetchnumpy()
    chunks = conn.execute("SELECT doc, project FROM ctx_chunks ORDER BY doc").fetchnumpy()
    fresh = ChunkIndex(
        key,
        float(row[3]),
        float(row[4]) if row[4] is not None else 1.0,
        bm25.grouped(tbl),
        np.asarray(chunks["doc"], dtype=np.int64),
        np.asarray(chunks["project"], dtype=object),
    )
    with _chunk_lock:
        _chunk_copies[cid] = fresh
        _chunk_confirmed[cid] = at
    return fresh


def moved(conn: duckdb.DuckDBPyConnection, old: bm25.Position, new: bm25.Position) -> None:
    """The engine went from position `old` to `new` folding only entries that change no chunk
    (the caller's own recorded pack): a copy that stood at `old` stands at `new`."""
    with _chunk_lock:
        if _chunk_confirmed.get(id(conn)) == old:
            _chunk_confirmed[id(conn)] = new


def forget_chunks(conn: duckdb.DuckDBPyConnection) -> None:
    """Drop this connection's copy of the chunks' index (tests; a closed store)."""
    with _chunk_lock:
        _chunk_copies.pop(id(conn), None)
        _chunk_uses.pop(id(conn), None)
        _chunk_confirmed.pop(id(conn), None)


def _copy_scores(copy: ChunkIndex, terms: Sequence[str], project: str | None, limit: int) -> dict[int, float]:
    """What `_bm25`'s statement gives, from the copy: the same IEEE double operations in the
    same order (ln is the C library's in both; `round` is C's, half away from zero), summed
    as exact integers, cut and ordered as its ORDER BY and LIMIT are."""
    docs_parts: list[bm25.I64] = []
    contrib_parts: list[bm25.F64] = []
    for t in dict.fromkeys(terms):
        p = copy.postings.get(t)
        if p is None or not len(p.docs):
            continue
        df = float(len(p.docs))
        idf = math.log(1 + (copy.n - df + 0.5) / (df + 0.5))
        raw = (
            idf
            * p.tf
            * float(f"{K1 + 1}")
            / (p.tf + K1 * (1 - B + B * p.dl / copy.avgdl))
            * float(SCORE_SCALE)
        )
        low = np.floor(raw)
        docs_parts.append(p.docs)
        contrib_parts.append(low + (raw - low >= 0.5))  # C's round: raw - floor(raw) is exact
    if not docs_parts:
        return {}
    uniq, inv = np.unique(np.concatenate(docs_parts), return_inverse=True)
    scores = np.bincount(inv, weights=np.concatenate(contrib_parts), minlength=len(uniq))

    def top(cand: bm25.I64) -> list[int]:
        best: list[int] = cand[np.lexsort((uniq[cand], -scores[cand]))][:limit].tolist()
        return best

    chosen = top(np.arange(len(uniq)))
    if project:
        at = np.searchsorted(copy.docs, uniq)
        mine = np.flatnonzero((at < len(copy.docs)) & (copy.docs[np.minimum(at, len(copy.docs) - 1)] == uniq))
        mine = mine[copy.projects[at[mine]] == project]
        chosen += top(mine)
    return {int(uniq[i]): float(scores[i]) if math.isfinite(float(scores[i])) else 0.0 for i in chosen}


def _bm25(
    conn: duckdb.DuckDBPyConnection, query: str, project: str | None, limit: int
) -> tuple[dict[int, float], ChunkIndex | None]:
    """BM25 scores (scaled by SCORE_SCALE) of the `limit` best chunks, and of `project`'s best `limit`.

    From the connection's copy of the chunks' index when it keeps one (`_copy_scores`, the
    same floats), else one statement; and the copy that scored (checked against the chunks
    just now), whose row cache `_rows` may then use."""
    # The memories' parse (an ASCII query's stems from the process's cache, no statement) gives
    # the same terms when they are fewer than MAX_QUERY_TERMS: only their set counts here.
    terms = parse(conn, query).terms
    if not terms or len(terms) >= MAX_QUERY_TERMS:  # none, or cut: the statement's to say
        got = conn.execute("SELECT list_distinct(ml_terms(?))", [query]).fetchone()
        terms = list(got[0] or [])[:MAX_QUERY_TERMS] if got else []
    if not terms:
        return {}, None
    copy = _chunk_copy(conn)
    if copy is not None:
        return _copy_scores(copy, terms, project, limit), copy
    return _sql_bm25(conn, terms, project, limit), None


def _sql_bm25(
    conn: duckdb.DuckDBPyConnection, terms: list[str], project: str | None, limit: int
) -> dict[int, float]:
    ph = ", ".join("?" * len(terms))
    project_top = ""
    args: list[Any] = [*terms, limit]
    if project:
        project_top = """UNION
            (SELECT s.doc, s.score FROM scored s JOIN ctx_chunks c ON c.doc = s.doc WHERE c.project = ?
             ORDER BY s.score DESC, s.doc LIMIT ?)"""
        args += [project, limit]
    # Two steps: the best docs from the index (narrow), then their rows by doc, which the
    # table is in the order of (zone maps), rather than a join that reads every chunk's text.
    best = conn.execute(
        f"""
        WITH st AS (SELECT count(*)::DOUBLE AS n, greatest(avg(dl), 1)::DOUBLE AS avgdl FROM ctx_chunks),
        live AS MATERIALIZED (SELECT term, doc, tf, dl FROM ctx_chunk_postings WHERE term IN ({ph})),
        df AS (SELECT term, count(*)::DOUBLE AS df FROM live GROUP BY term),
        scored AS MATERIALIZED (
            SELECT l.doc, sum(round(ln(1 + (st.n - df.df + 0.5) / (df.df + 0.5)) * l.tf * {K1 + 1}
                                    / (l.tf + {K1} * (1 - {B} + {B} * l.dl / st.avgdl))
                                    * {SCORE_SCALE}::DOUBLE)) AS score
            FROM live l JOIN df USING (term) CROSS JOIN st
            GROUP BY l.doc)
        (SELECT doc, score FROM scored ORDER BY score DESC, doc LIMIT ?)
        {project_top}""",
        args,
    ).fetchall()
    return {int(d): float(sc) if math.isfinite(float(sc)) else 0.0 for d, sc in best}


def _rows(
    conn: duckdb.DuckDBPyConnection, scores: Mapping[int, float], copy: ChunkIndex | None = None
) -> list[ChunkRow]:
    """The chunk rows of these docs with their scores, best first (ties: the older chunk first).

    `copy`, checked against the chunks in this session, keeps the rows it has served: a doc it
    does not hold is no chunk (as the statement would find no row), the others are read once."""
    if not scores:
        return []
    want = sorted(scores)
    rows: list[tuple[Any, ...]] = []
    if copy is not None:
        arr = np.asarray(want, dtype=np.int64)
        at = np.minimum(np.searchsorted(copy.docs, arr), max(len(copy.docs) - 1, 0))
        present = arr[copy.docs[at] == arr] if len(copy.docs) else arr[:0]
        rows = [copy.rows[d] for d in present.tolist() if d in copy.rows]
        want = [d for d in present.tolist() if d not in copy.rows]
    if want:
        ints = ", ".join(str(d) for d in want)
        fetched = conn.execute(
            f"SELECT doc, chunk_id, text, name, heading_path, project FROM ctx_chunks WHERE doc IN ({ints})"
        ).fetchall()
        if copy is not None:
            copy.rows.update((int(r[0]), tuple(r)) for r in fetched)
        rows += fetched
    rows.sort(key=lambda r: (-scores[int(r[0])], int(r[0])))
    return [
        ChunkRow(
            id=r[1],
            text=r[2],
            document=r[3],
            heading_path=tuple(r[4] or ()),
            project=r[5],
            score=scores[int(r[0])],
            hit=True,
        )
        for r in rows
    ]


def chunk_candidates(
    conn: duckdb.DuckDBPyConnection,
    query: str,
    project: str | None,
    limit: int,
    *,
    query_vector: np.ndarray | None = None,
    fusion: hybrid.Fusion | None = None,
) -> list[ChunkRow]:
    """The chunks best matching `query`, best first: by BM25, or hybrid given the query's vector.

    BM25 uses the memories' tokenizer and formula over heading path and text. With
    `query_vector` (the recall policy's, when it ranks memories hybrid) and chunk vectors in
    the projection, chunks are ranked as hybrid recall ranks memories (projections/recall/hybrid.py):
    BM25's and the cosine's candidates fused with the same method and weights, and a chunk
    that shares no word with the query is a candidate only when its cosine reaches
    `fusion.min_cosine`. Any project's chunks compete; the best `limit` of `project` are taken
    too, so the pack's boost can lift them even when other projects fill the first `limit`.
    """
    meta = vectors.read_meta(conn) if query_vector is not None else None
    if query_vector is None or meta is None:
        scores, copy = _bm25(conn, query, project, limit)
        return _rows(conn, {d: sc / SCORE_SCALE for d, sc in scores.items()}, copy)
    fusion = fusion or hybrid.Fusion()
    depth = max(limit, fusion.depth)
    scores, copy = _bm25(conn, query, project, depth)
    lex = {d: sc / SCORE_SCALE for d, sc in scores.items()}
    near = vectors.chunk_search(conn, query_vector, depth, meta=meta)
    if project:
        # The project's chunks from the copy `_bm25` just checked, when it scored with one.
        mine = copy.docs[copy.projects == project] if copy is not None else None
        near += vectors.chunk_search(conn, query_vector, depth, meta=meta, project=project, project_docs=mine)
    near = sorted(set(near), key=lambda x: (x[1], x[0]))
    dist = dict(near)
    missing = [d for d in lex if d not in dist]
    dist.update(vectors.chunk_distances(conn, query_vector, missing, meta=meta))
    if fusion.method == "rrf":
        by_bm25 = sorted(lex, key=lambda d: (-lex[d], d))
        fused = [
            (d, sc)
            for d, sc, _ in hybrid.rrf(
                {"bm25": by_bm25, "vector": [d for d, _ in near]},
                {"bm25": fusion.bm25_weight, "vector": fusion.vector_weight},
                fusion.k,
            )
        ]
    else:
        fused = hybrid.convex(
            list(lex.items()),
            {d: 1.0 - x for d, x in dist.items()},
            [d for d, _ in near],
            (fusion.bm25_weight, fusion.vector_weight),
        )
    # The relevance rule of hybrid recall: a word in common, or a cosine of min_cosine.
    kept = {
        d: sc for d, sc in fused if lex.get(d, 0.0) > 0 or (d in dist and 1.0 - dist[d] >= fusion.min_cosine)
    }
    rows = _rows(conn, kept, copy)
    own = [r for r in rows if project and r.project == project][:limit]
    chosen = {r.id for r in rows[:limit]} | {r.id for r in own}
    return [r for r in rows if r.id in chosen]


@dataclass(frozen=True)
class PackRow:
    pack_id: str
    seq: int
    ts: int
    query: str
    project: str | None
    sha256: str
    budget: int
    unit: str
    chars: int


def pack(conn: duckdb.DuckDBPyConnection, pack_id: str) -> PackRow | None:
    row = conn.execute(
        "SELECT pack_id, seq, ts, query, project, sha256, budget, unit, chars FROM ctx_packs "
        "WHERE pack_id = ? ORDER BY seq LIMIT 1",
        [pack_id],
    ).fetchone()
    return PackRow(*row) if row else None


def packs_with(conn: duckdb.DuckDBPyConnection, member_id: str, limit: int) -> list[dict[str, Any]]:
    """Packs that included or trimmed this memory, state entry or chunk, newest first."""
    rows = conn.execute(
        """SELECT p.pack_id, p.seq, p.ts, p.query, p.project, p.sha256, m.tier, m.included, m.reason
           FROM ctx_pack_members m JOIN ctx_packs p USING (pack_id)
           WHERE m.id = ? ORDER BY p.seq DESC LIMIT ?""",
        [member_id, limit],
    ).fetchall()
    keys = ("pack_id", "seq", "ts", "query", "project", "sha256", "tier", "included", "reason")
    return [dict(zip(keys, r, strict=True)) for r in rows]


def pack_memory_ids(conn: duckdb.DuckDBPyConnection, pack_id: str) -> list[str]:
    """The memories a pack included, sorted by id."""
    return pack_member_ids(conn, pack_id, "memory")


def pack_member_ids(conn: duckdb.DuckDBPyConnection, pack_id: str, source: str) -> list[str]:
    rows = conn.execute(
        "SELECT DISTINCT id FROM ctx_pack_members WHERE pack_id = ? AND included AND source = ? ORDER BY id",
        [pack_id, source],
    ).fetchall()
    return [r[0] for r in rows]
