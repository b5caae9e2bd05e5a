"""Read queries over the projection: recall (BM25, any term), search (all keywords), list, get.

BM25 (k1 = 1.2, b = 0.75) is computed in SQL over the inverted index, with
document frequencies and corpus statistics taken over live documents only,
so results do not depend on the physical state of the index. Ties break by
newest store first, then by id. Reads have no side effects: no access
counters, no "last recalled" stamps.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import duckdb

from mnemolog.projections.schema import visible

K1 = 1.2
B = 0.75
MAX_QUERY_TERMS = 64

MEMORY_FIELDS = [
    "id",
    "namespace",
    "kind",
    "title",
    "content",
    "tags",
    "confidence",
    "source",
    "metadata",
    "created_at",
    "updated_at",
    "last_seen",
    "atom_of",
    "source_span",
    "atomised_into",
    "atomisation_archived_at",
    "archived_at",
    "archive_reason",
    "stored_seq",
    "last_event_seq",
]
_SELECT = ", ".join(f"m.{c}" for c in MEMORY_FIELDS)


@dataclass(frozen=True)
class Filters:
    namespace: str | None = None
    descendants: bool = True
    kinds: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    include_archived: bool = False
    atom_of: str | None = None

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
            clauses.append(f"list_has_all({alias}.tags, ?)")
            args.append(list(self.tags))
        if self.atom_of is not None:
            clauses.append(f"{alias}.atom_of = ?")
            args.append(self.atom_of)
        return (" AND ".join(clauses) or "TRUE"), args


def row_to_memory(row: tuple[Any, ...]) -> dict[str, Any]:
    m = dict(zip(MEMORY_FIELDS, row, strict=False))
    m["metadata"] = json.loads(m["metadata"]) if m["metadata"] else {}
    m["tags"] = list(m["tags"] or [])
    if m["source_span"] is not None:
        m["source_span"] = list(m["source_span"])
    return m


def query_terms(conn: duckdb.DuckDBPyConnection, text: str) -> list[str]:
    """The distinct search terms of a query, in query order."""
    row = conn.execute("SELECT ml_terms(?)", [text]).fetchone()
    seen: dict[str, None] = {}
    for t in (row[0] if row else None) or []:
        seen.setdefault(t, None)
    return list(seen)[:MAX_QUERY_TERMS]


def query_words(conn: duckdb.DuckDBPyConnection, text: str) -> list[str]:
    row = conn.execute("SELECT ml_words(?)", [text]).fetchone()
    seen: dict[str, None] = {}
    for t in (row[0] if row else None) or []:
        seen.setdefault(t, None)
    return list(seen)[:MAX_QUERY_TERMS]


def _bm25(
    conn: duckdb.DuckDBPyConnection,
    terms: list[str],
    filters: Filters,
    limit: int,
    *,
    require_all: bool = False,
    words: list[str] | None = None,
) -> list[tuple[dict[str, Any], float]]:
    if not terms and not words:
        return []
    where, args = filters.sql("m")
    having = ""
    if require_all and terms:
        having = f"HAVING count(DISTINCT live.term) = {len(terms)}"
    exact = ""
    exact_args: list[Any] = []
    if words:
        # Exact keywords: each must be a whole word of the title or content.
        exact = " AND list_has_all(ml_words(coalesce(m.title, '') || ' ' || m.content), ?)"
        exact_args = [words]
    if not terms:
        # Only stop words were given (search "to be"): no index to narrow with, so scan.
        sql = f"""SELECT {_SELECT}, 0.0 AS score FROM memories m
                  WHERE {where}{exact}
                  ORDER BY m.stored_seq DESC, m.id LIMIT ?"""
        rows = conn.execute(sql, [*args, *exact_args, limit]).fetchall()
        return [(row_to_memory(r[:-1]), float(r[-1])) for r in rows]
    ph = ", ".join("?" * len(terms))
    sql = f"""
        WITH p AS (
            SELECT term, doc, tf FROM postings WHERE term IN ({ph})
            UNION ALL
            SELECT term, doc, tf FROM postings_delta WHERE term IN ({ph})
        ),
        live AS (SELECT p.term, p.doc, p.tf, m.doc_len FROM p JOIN memories m ON m.doc = p.doc),
        df AS (SELECT term, count(*) AS df FROM live GROUP BY term),
        st AS (SELECT count(*)::DOUBLE AS n, greatest(coalesce(avg(doc_len), 1), 1)::DOUBLE AS avgdl
               FROM memories),
        scored AS (
            SELECT live.doc,
                   list_sum(list(
                       ln(1 + (st.n - df.df + 0.5) / (df.df + 0.5))
                       * live.tf * {K1 + 1}
                       / (live.tf + {K1} * (1 - {B} + {B} * live.doc_len / st.avgdl))
                       ORDER BY live.term)) AS score
            FROM live JOIN df USING (term) CROSS JOIN st
            GROUP BY live.doc {having}
        )
        SELECT {_SELECT}, s.score FROM scored s JOIN memories m ON m.doc = s.doc
        WHERE {where}{exact}
        ORDER BY s.score DESC, m.stored_seq DESC, m.id
        LIMIT ?"""
    rows = conn.execute(sql, [*terms, *terms, *args, *exact_args, limit]).fetchall()
    return [(row_to_memory(r[:-1]), float(r[-1])) for r in rows]


def recall(
    conn: duckdb.DuckDBPyConnection, query: str, filters: Filters, limit: int = 10
) -> list[tuple[dict[str, Any], float]]:
    """Natural-language recall: rank by any matching term (never all-terms-must-match)."""
    return _bm25(conn, query_terms(conn, query), filters, limit)


def search(
    conn: duckdb.DuckDBPyConnection, query: str, filters: Filters, limit: int = 10
) -> list[tuple[dict[str, Any], float]]:
    """Keyword search: every keyword must appear as a word; ranked by BM25."""
    return _bm25(
        conn,
        query_terms(conn, query),
        filters,
        limit,
        require_all=True,
        words=query_words(conn, query),
    )


def get(conn: duckdb.DuckDBPyConnection, memory_id: str) -> dict[str, Any] | None:
    row = conn.execute(f"SELECT {_SELECT} FROM memories m WHERE m.id = ?", [memory_id]).fetchone()
    return row_to_memory(row) if row else None


def list_memories(
    conn: duckdb.DuckDBPyConnection, filters: Filters, limit: int = 50, offset: int = 0
) -> list[dict[str, Any]]:
    where, args = filters.sql("m")
    rows = conn.execute(
        f"SELECT {_SELECT} FROM memories m WHERE {where} ORDER BY m.stored_seq DESC, m.id LIMIT ? OFFSET ?",
        [*args, limit, offset],
    ).fetchall()
    return [row_to_memory(r) for r in rows]


def links_of(conn: duckdb.DuckDBPyConnection, memory_id: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {"outgoing": [], "incoming": []}
    for direction, col in (("outgoing", "src"), ("incoming", "dst")):
        rows = conn.execute(
            f"SELECT seq, src, dst, relation, metadata, created_at FROM links WHERE {col} = ? ORDER BY seq",
            [memory_id],
        ).fetchall()
        out[direction] = [
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
    return out


def stats(conn: duckdb.DuckDBPyConnection) -> dict[str, Any]:
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
