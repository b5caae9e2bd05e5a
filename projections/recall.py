"""Read queries over the projection: recall (BM25, any term), search (all keywords), list, get.

BM25 (k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5))) is
computed in SQL over the inverted index. N, the average document length and
df are over every stored memory (archived ones too) with its current text,
so scores depend on the memories, never on the physical state of the index
(what is in the delta, whether compaction has run).

Scores are exact: each term's contribution is rounded to a multiple of
1/SCORE_SCALE, i.e. an integer once scaled, and sums of integers below 2^53
are exact in floating point in any order. So a score does not depend on the
order a parallel aggregate happens to add in (float addition is otherwise
not associative): an incremental catch-up and a rebuild give bit-identical
scores. (A contribution is at most (k1 + 1) * ln(1 + 2N) < 50 for any N a
home can hold, and a query has at most MAX_QUERY_TERMS terms: 64 * 50 *
SCORE_SCALE is far below 2^53.) Ties break by the newest memory first (its
stored_seq, which is unique), as `list` orders.

A query runs in two steps: its terms (the tokenizer macro), then the scoring
with those terms as constants, which lets DuckDB skip to the row groups of
the sorted postings that hold them; the rows of the top k are fetched last
(by stored_seq, which the memories table is in the order of, then by id).
The archive guard is applied before the top k is cut, as an anti-join with
`hidden` (the memories the guard hides, usually few) when it is the only
filter, so an unfiltered recall never reads the memories table beyond its k
rows; other filters select the allowed memories with the guard itself.

Reads have no side effects: no access counters, no "last recalled" stamps.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import duckdb

from mnemolog.projections.memories import MEMORY_FIELDS, MEMORY_SELECT, Edge, Links, Memory, row_to_memory
from mnemolog.projections.schema import visible

__all__ = [
    "MEMORY_FIELDS",
    "MEMORY_SELECT",
    "Filters",
    "get",
    "links_of",
    "list_memories",
    "query_terms",
    "query_words",
    "recall",
    "row_to_memory",
    "search",
    "stats",
]

K1 = 1.2
B = 0.75
SCORE_SCALE = 10**11
MAX_QUERY_TERMS = 64


@dataclass(frozen=True)
class Filters:
    """What a read is restricted to: a namespace (and below), kinds, tags, archived, atoms of one parent."""

    namespace: str | None = None
    descendants: bool = True
    kinds: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    include_archived: bool = False
    atom_of: str | None = None

    @property
    def only_guard(self) -> bool:
        """True when nothing but the archive guard (if that) restricts the memories."""
        return self.namespace is None and not self.kinds and not self.tags and self.atom_of is None

    def sql(self, alias: str = "m") -> tuple[str, list[Any]]:
        clauses: list[str] = []
        args: list[Any] = []
        if not self.include_archived:
            clauses.append(visible(alias))
        if self.namespace is not None:
            if self.descendants:
                clauses.append(f"({alias}.namespace = ? OR starts_with({alias}.namespace, ?))")
                args += [self.namespace, self.namespace.rstrip("/") + "/"]
            else:
                clauses.append(f"{alias}.namespace = ?")
                args.append(self.namespace)
        if self.kinds:
            clauses.append(f"{alias}.kind IN ({', '.join('?' * len(self.kinds))})")
            args += list(self.kinds)
        if self.tags:
            clauses.append(f"list_has_all({alias}.tags, ?::VARCHAR[])")
            args.append(list(self.tags))
        if self.atom_of is not None:
            clauses.append(f"{alias}.atom_of = ?")
            args.append(self.atom_of)
        return (" AND ".join(clauses) or "TRUE"), args


def _distinct(values: list[str] | None) -> list[str]:
    seen: dict[str, None] = {}
    for t in values or []:
        seen.setdefault(t, None)
    return list(seen)[:MAX_QUERY_TERMS]


def query_terms(conn: duckdb.DuckDBPyConnection, text: str) -> list[str]:
    """The distinct search terms of a query, in query order."""
    row = conn.execute("SELECT ml_terms(?)", [text]).fetchone()
    return _distinct(row[0] if row else None)


def query_words(conn: duckdb.DuckDBPyConnection, text: str) -> list[str]:
    """The distinct words of a query (stop words kept, not stemmed), in query order."""
    row = conn.execute("SELECT ml_words(?)", [text]).fetchone()
    return _distinct(row[0] if row else None)


def _restriction(filters: Filters) -> tuple[str, list[Any]]:
    """A join (on postings `l`) that keeps only postings of memories the filters allow."""
    if filters.only_guard:
        if filters.include_archived:
            return "", []
        return "ANTI JOIN hidden r ON r.doc = l.doc", []
    where, args = filters.sql("m")
    return f"SEMI JOIN (SELECT m.stored_seq AS doc FROM memories m WHERE {where}) r ON r.doc = l.doc", args


def _scored(
    conn: duckdb.DuckDBPyConnection,
    terms: list[str],
    filters: Filters,
    *,
    limit: int | None,
    require_all: bool,
) -> list[tuple[int, int]]:
    """(doc, score as an integer multiple of 1/SCORE_SCALE), best first."""
    ph = ", ".join("?" * len(terms))
    restrict, rargs = _restriction(filters)
    having = f"HAVING count(*) = {len(terms)}" if require_all else ""
    cut = "LIMIT ?" if limit is not None else ""
    sql = f"""
        WITH st AS (
            SELECT docs::DOUBLE AS n, greatest(total_len, 1)::DOUBLE / greatest(docs, 1) AS avgdl
            FROM proj_state),
        live AS MATERIALIZED (
            SELECT term, doc, tf, dl FROM postings WHERE term IN ({ph})
            UNION ALL
            SELECT term, doc, tf, dl FROM postings_delta WHERE term IN ({ph})),
        df AS (SELECT term, count(*)::DOUBLE AS df FROM live GROUP BY term),
        scored AS (
            SELECT l.doc,
                   sum(round(ln(1 + (st.n - df.df + 0.5) / (df.df + 0.5))
                             * l.tf * {K1 + 1}::DOUBLE
                             / (l.tf + {K1}::DOUBLE * (1 - {B}::DOUBLE + {B}::DOUBLE * l.dl / st.avgdl))
                             * {SCORE_SCALE}::DOUBLE)) AS score
            FROM live l JOIN df USING (term) CROSS JOIN st
            {restrict}
            GROUP BY l.doc {having})
        SELECT doc, score FROM scored ORDER BY score DESC, doc DESC {cut}"""
    args: list[Any] = [*terms, *terms, *rargs]
    if limit is not None:
        args.append(limit)
    return [(int(d), int(s)) for d, s in conn.execute(sql, args).fetchall()]


def _rows(conn: duckdb.DuckDBPyConnection, docs: list[int]) -> dict[int, Memory]:
    """The memories of these stored_seqs, keyed by it.

    Two steps, both cheap for a few rows whatever the corpus: zone maps find the
    stored_seqs (the table is in their order) and give the ids, then the primary
    key fetches the rows. A scan for the whole rows would decompress every
    column around each match, three times slower at 100k memories.
    """
    if not docs:
        return {}
    ints = ", ".join(str(int(d)) for d in docs)
    ids = [r[0] for r in conn.execute(f"SELECT id FROM memories WHERE stored_seq IN ({ints})").fetchall()]
    if not ids:
        return {}
    rows = conn.execute(
        f"SELECT m.stored_seq, {MEMORY_SELECT} FROM memories m WHERE m.id IN ({', '.join('?' * len(ids))})",
        ids,
    ).fetchall()
    return {int(r[0]): row_to_memory(r[1:]) for r in rows}


def _with_rows(conn: duckdb.DuckDBPyConnection, ranked: list[tuple[int, int]]) -> list[tuple[Memory, float]]:
    rows = _rows(conn, [d for d, _ in ranked])
    return [(rows[d], s / SCORE_SCALE) for d, s in ranked if d in rows]


def recall(
    conn: duckdb.DuckDBPyConnection, query: str, filters: Filters, limit: int = 10
) -> list[tuple[Memory, float]]:
    """Natural-language recall: rank by any matching term (never all-terms-must-match)."""
    terms = query_terms(conn, query)
    if not terms:
        return []
    return _with_rows(conn, _scored(conn, terms, filters, limit=limit, require_all=False))


def search(
    conn: duckdb.DuckDBPyConnection, query: str, filters: Filters, limit: int = 10
) -> list[tuple[Memory, float]]:
    """Keyword search: every keyword must appear as a whole word; ranked by BM25.

    The index finds the memories holding every keyword's term (stems match
    more than the words), then the words are checked on the candidates in
    score order, a growing chunk at a time, until `limit` pass.
    """
    words = query_words(conn, query)
    if not words:
        return []
    terms = query_terms(conn, query)
    check = "list_has_all(ml_words(coalesce(m.title, '') || ' ' || m.content), ?::VARCHAR[])"
    if not terms:
        # Only stop words ("to be"): no index to narrow with, so scan.
        where, args = filters.sql("m")
        rows = conn.execute(
            f"SELECT m.stored_seq FROM memories m WHERE {where} AND {check} "
            "ORDER BY m.stored_seq DESC LIMIT ?",
            [*args, words, limit],
        ).fetchall()
        return _with_rows(conn, [(int(r[0]), 0) for r in rows])
    ranked = _scored(conn, terms, filters, limit=None, require_all=True)
    passed: list[tuple[int, int]] = []
    pos, chunk = 0, max(limit * 2, 16)
    while pos < len(ranked) and len(passed) < limit:
        part = ranked[pos : pos + chunk]
        ok = {
            int(r[0])
            for r in conn.execute(
                f"SELECT m.stored_seq FROM memories m "
                f"WHERE m.stored_seq IN ({', '.join('?' * len(part))}) AND {check}",
                [*[d for d, _ in part], words],
            ).fetchall()
        }
        passed += [x for x in part if x[0] in ok]
        pos += len(part)
        chunk *= 4
    return _with_rows(conn, passed[:limit])


def get(conn: duckdb.DuckDBPyConnection, memory_id: str) -> Memory | None:
    """One memory by id, or None."""
    row = conn.execute(f"SELECT {MEMORY_SELECT} FROM memories m WHERE m.id = ?", [memory_id]).fetchone()
    return row_to_memory(row) if row else None


def list_memories(
    conn: duckdb.DuckDBPyConnection, filters: Filters, limit: int = 50, offset: int = 0
) -> list[Memory]:
    """Memories the filters allow, newest first (by stored_seq)."""
    where, args = filters.sql("m")
    rows = conn.execute(
        f"SELECT {MEMORY_SELECT} FROM memories m WHERE {where} "
        "ORDER BY m.stored_seq DESC, m.id LIMIT ? OFFSET ?",
        [*args, limit, offset],
    ).fetchall()
    return [row_to_memory(r) for r in rows]


def _edges(conn: duckdb.DuckDBPyConnection, col: str, memory_id: str) -> list[Edge]:
    rows = conn.execute(
        f"SELECT seq, src, dst, relation, metadata, created_at FROM links WHERE {col} = ? ORDER BY seq",
        [memory_id],
    ).fetchall()
    return [
        {
            "seq": r[0],
            "src": r[1],
            "dst": r[2],
            "relation": r[3],
            "metadata": json.loads(r[4]),
            "created_at": r[5],
        }
        for r in rows
    ]


def links_of(conn: duckdb.DuckDBPyConnection, memory_id: str) -> Links:
    """The edges leaving and entering a memory, oldest first."""
    return {"outgoing": _edges(conn, "src", memory_id), "incoming": _edges(conn, "dst", memory_id)}


def stats(conn: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """Counts over the tables for `stats`: memories, visibility, atoms, links, policies, events, index."""

    def one(sql: str) -> Any:
        row = conn.execute(sql).fetchone()
        return row[0] if row else None

    return {
        "memories": one("SELECT count(*) FROM memories"),
        "visible": one(f"SELECT count(*) FROM memories m WHERE {visible('m')}"),
        "archived_by_operator": one("SELECT count(*) FROM memories WHERE archived_at IS NOT NULL"),
        "atomised_parents": one("SELECT count(*) FROM memories WHERE coalesce(atomised_into, 0) > 0"),
        "atoms": one("SELECT count(*) FROM memories WHERE atom_of IS NOT NULL"),
        "links": one("SELECT count(*) FROM links"),
        "namespaces": one("SELECT count(DISTINCT namespace) FROM memories"),
        "kinds": dict(
            conn.execute("SELECT kind, count(*) FROM memories GROUP BY kind ORDER BY kind").fetchall()
        ),
        "policies": one("SELECT count(*) FROM policies"),
        "events": dict(conn.execute("SELECT type, n FROM event_counts ORDER BY type").fetchall()),
        "index": {
            "postings": one("SELECT count(*) FROM postings"),
            "postings_delta": one("SELECT count(*) FROM postings_delta"),
        },
    }
