"""Auditing the projection database against the log: re-fold, compare every table row for row.

The projection is a cache that `get` and `recall` answer from; anyone with
write access to `projections/mnemolog.duckdb` can forge what they serve. An
auditor tells: the log (already verified by `log verify`) is folded again,
by the same fold, into a scratch database up to the position the projection
on disk records, and every table is compared with the one on disk, row for
row (EXCEPT ALL both ways, so duplicates count too). The first difference is
reported with its table, the row's key, the column, what the log says
(expected) and what the disk holds (found): a VerificationError, exit 8.

Some columns record how the rows were built rather than what they mean: the
split of the word index between its main part and its delta depends on when
it was last compacted, so the two parts are compared as one, and the
part sizes in `proj_state` are left out.

The vector tables answer recall too, so they are compared as well. A vector
is the embedder's output for a memory's text, taken from the embedding cache
(re-embedding would need the model): the fresh fold fills its vectors from the
home's cache, and the comparison holds that `vector_meta` names the log's
embedder, that the memories waiting for a vector plus those that have one are
exactly the ones the log gives (`doc`, text `sha`), and that every stored
vector is the cache's vector for its text (the cache only grows, so a memory
still pending on disk may already have one in the fold: that lag is not a
difference). A vector swapped between two memories, or changed, is reported
like any other row.

A projection that records no applied entry while the log has some (its file
missing, or `proj_state` deleted, which resets it on open) holds nothing to
compare: that is reported (`NothingChecked`), never as "ok".

Chunk vectors (document chunks, for tier 5 of context packs) are filled the
same way by the scratch fold, from the home's cache (never a model), and
must equal the disk's wherever either side has them.
"""

from __future__ import annotations

import hashlib
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from mnemolog.eventlog.errors import Informational, VerificationError
from mnemolog.projections import schema
from mnemolog.projections.db import CATALOG, DB_NAME
from mnemolog.projections.embedding import vectors
from mnemolog.projections.engine import NOTHING_APPLIED, Projections, read_state
from mnemolog.projections.fold import Upcast

FRESH = "fresh"
VECTOR_SHOWN = 4  # values of a differing vector quoted in a report


@dataclass(frozen=True)
class Compared:
    """One logical table: the rows to compare (a SELECT over the catalog `{c}`) and their key."""

    name: str
    select: str
    key: tuple[str, ...]
    # Only "every row on disk is one the fold gives" (the fold may hold more: see the docstring).
    subset: bool = False


class NothingChecked(Informational):
    """The projection records no applied entry while the log has some: nothing was compared (exit 1)."""

    slug = "nothing_checked"


POSTINGS = "term, doc, tf, dl"
STATE = "version, last_seq, last_leaf, log_id, docs, total_len, last_root"

# Every table of schema.TABLES appears here (a test holds them equal), postings as one.
COMPARED = [
    Compared("proj_state", f"SELECT {STATE} FROM {{c}}.proj_state", ("last_seq",)),
    Compared("memories", "SELECT * FROM {c}.memories", ("id",)),
    Compared("links", "SELECT * FROM {c}.links", ("seq", "src", "dst", "relation")),
    Compared(
        "postings",
        f"SELECT {POSTINGS} FROM {{c}}.postings UNION ALL SELECT {POSTINGS} FROM {{c}}.postings_delta",
        ("term", "doc"),
    ),
    Compared("hidden", "SELECT * FROM {c}.hidden", ("id", "doc")),
    Compared("policies", "SELECT * FROM {c}.policies", ("namespace",)),
    Compared("tokens", "SELECT * FROM {c}.tokens", ("token_id",)),
    Compared("erasures", "SELECT * FROM {c}.erasures", ("subject", "kind", "seq")),
    Compared("atomisations", "SELECT * FROM {c}.atomisations", ("seq", "source_id")),
    Compared("touches", "SELECT * FROM {c}.touches", ("memory_id", "seq", "type")),
    Compared("migrations", "SELECT * FROM {c}.migrations", ("seq", "run_id")),
    Compared("event_counts", "SELECT * FROM {c}.event_counts", ("type",)),
    Compared("migration_undo", "SELECT * FROM {c}.migration_undo", ("seq", "run", "memory_id")),
    Compared("embedders", "SELECT * FROM {c}.embedders", ("seq",)),
    Compared("model_calls", "SELECT * FROM {c}.model_calls", ("seq",)),
    # The knowledge loop: statuses, projects, trusted state, interactions, candidates.
    Compared("inactive", "SELECT * FROM {c}.inactive", ("id", "doc")),
    Compared("projects", "SELECT * FROM {c}.projects", ("name",)),
    Compared("project_aliases", "SELECT * FROM {c}.project_aliases", ("alias_key",)),
    Compared("project_state", "SELECT * FROM {c}.project_state", ("seq", "project", "category", "key")),
    Compared("interactions", "SELECT * FROM {c}.interactions", ("id",)),
    Compared("candidates", "SELECT * FROM {c}.candidates", ("id",)),
    # Documents, their chunks and chunk index, recorded context packs.
    Compared("ctx_documents", "SELECT * FROM {c}.ctx_documents", ("document_id",)),
    Compared("ctx_document_versions", "SELECT * FROM {c}.ctx_document_versions", ("seq", "document_id")),
    Compared("ctx_chunks", "SELECT * FROM {c}.ctx_chunks", ("doc",)),
    Compared("ctx_chunk_postings", "SELECT * FROM {c}.ctx_chunk_postings", ("term", "doc")),
    Compared("ctx_packs", "SELECT * FROM {c}.ctx_packs", ("seq", "pack_id")),
    Compared(
        "ctx_pack_members", "SELECT * FROM {c}.ctx_pack_members", ("seq", "tier", "source", "id", "included")
    ),
]
# The chunk vectors exist only while the log records an embedder that embeds; the scratch
# re-fold fills them from the home's embedding cache (never a model), so they must agree.
CHUNK_VECTOR_COMPARED = [
    Compared("chunk_vectors", "SELECT doc, sha, vec::FLOAT[] AS vec FROM {c}.chunk_vectors", ("doc",)),
    Compared("chunk_vector_pending", "SELECT * FROM {c}.chunk_vector_pending", ("doc",)),
]

COVERED_TABLES = {"postings_delta"} | {c.name for c in COMPARED}

# The vector tables (projections/embedding/vectors.py), when the log records an embedder that embeds.
VECTOR_COMPARED = [
    Compared("vector_meta", "SELECT version, model_id, dim, synced_seq FROM {c}.vector_meta", ("model_id",)),
    Compared(
        "vector_docs",
        "SELECT doc, sha FROM {c}.vectors UNION ALL SELECT doc, sha FROM {c}.vector_pending",
        ("doc", "sha"),
    ),
    Compared("vectors", "SELECT doc, sha, vec FROM {c}.vectors", ("doc",), subset=True),
    # The row count the search reads (HNSW or exact scan) is the table's.
    Compared(
        "vector_rows",
        "SELECT rows = (SELECT count(*) FROM {c}.vectors) AS rows_match FROM {c}.vector_meta",
        ("rows_match",),
        subset=True,
    ),
]


@dataclass
class ProjectionReport:
    entries: int = 0  # the log prefix the projection on disk records, re-folded
    tables: dict[str, int] = field(default_factory=dict)  # table -> rows compared
    refold_seconds: float = 0.0
    compare_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "tables": self.tables,
            "rows": sum(self.tables.values()),
            "refold_seconds": round(self.refold_seconds, 3),
            "compare_seconds": round(self.compare_seconds, 3),
        }


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v).hex()
    if isinstance(v, list | tuple) and len(v) > VECTOR_SHOWN and all(isinstance(x, float) for x in v):
        # A vector: its first values and a digest of all of them, not hundreds of floats.
        digest = hashlib.sha256(struct.pack(f"<{len(v)}f", *v)).hexdigest()
        return {"dim": len(v), "head": list(v[:VECTOR_SHOWN]), "sha256_f32le": digest}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    return v


def verify_projections(
    projections: Projections, upcast: Upcast, scratch: Path | None = None
) -> ProjectionReport:
    """Re-fold the log and compare every projection table with disk; raise on the first difference."""
    report = ProjectionReport()
    with projections.raw_session() as conn:  # the projection lock: nothing changes it meanwhile
        st = read_state(conn)
        if st is None or st.version != schema.SCHEMA_VERSION:
            raise VerificationError(
                "the projection database has no position this version can read (run `mnemolog rebuild`)",
                check="projection.state",
            )
        if st.log_id != projections.log.log_id:
            raise VerificationError(
                "the projection database was built from another log",
                check="projection.state",
                expected=projections.log.log_id.hex(),
                found=st.log_id.hex(),
            )
        size = st.last_seq + 1 if st.last_seq != NOTHING_APPLIED else 0
        log_size = projections.log.refresh()
        if size == 0 and log_size > 0:
            raise NothingChecked(
                f"checked nothing: the projection records no applied entry, the log has {log_size} "
                "(the database was missing or its proj_state gone, so it was reset; the next "
                "command rebuilds it from the log, and `mnemolog log verify` checks the log)",
                entries=0,
                log_entries=log_size,
            )
        if size > log_size:
            raise VerificationError(
                f"the projection records {size} entries, the log has {projections.log.size}",
                check="projection.state",
                expected=projections.log.size,
                found=size,
            )
        report.entries = size
        with tempfile.TemporaryDirectory(prefix="mnemolog-verify-", dir=scratch) as tmp:
            t0 = time.perf_counter()
            limit = projections.store.memory_limit
            # Vectors come from the home's embedding cache, as the projection's did (borrowed:
            # closing the scratch projection leaves it open).
            fresh = Projections(
                Path(tmp), projections.log, upcast, memory_limit=limit, cache=projections.cache
            )
            try:
                fresh.rebuild(stop=size)
            finally:
                fresh.store.close()
            report.refold_seconds = time.perf_counter() - t0
            t0 = time.perf_counter()
            path = str(Path(tmp) / DB_NAME).replace("'", "''")
            conn.execute(f"ATTACH '{path}' AS {FRESH} (READ_ONLY)")
            try:
                for c in COMPARED:
                    report.tables[c.name] = _compare(conn, c)
                if _vector_tables(conn, FRESH, CATALOG):
                    for c in VECTOR_COMPARED:
                        report.tables[c.name] = _compare(conn, c)
                for c in CHUNK_VECTOR_COMPARED:
                    on_disk, in_fold = (_has_table(conn, cat, c.name) for cat in (CATALOG, FRESH))
                    if on_disk != in_fold:
                        raise VerificationError(
                            f"projection table {c.name} is {'present' if on_disk else 'missing'} on disk "
                            "but not in the log's fold",
                            check="projection.table",
                            table=c.name,
                        )
                    if on_disk:
                        report.tables[c.name] = _compare(conn, c)
            finally:
                conn.execute(f"DETACH {FRESH}")
            report.compare_seconds = time.perf_counter() - t0
    return report


def _vector_tables(conn: duckdb.DuckDBPyConnection, fresh: str, disk: str) -> bool:
    """Whether both sides hold vector tables; raises when only one does (recall would differ)."""
    have = {}
    for cat in (fresh, disk):
        rows = conn.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main'", [cat]
        ).fetchall()
        have[cat] = {str(r[0]) for r in rows} >= set(vectors.TABLES) - set(vectors.CHUNK_TABLES)
    if have[fresh] != have[disk]:
        raise VerificationError(
            "the projection "
            + ("lacks the vector tables the log's embedder gives" if have[fresh] else "holds vector tables")
            + " (vector_meta, vectors, vector_pending)"
            + ("" if have[fresh] else ", but the log records no embedder that embeds"),
            check="projection.row",
            table="vectors",
            key={"tables": [t for t in vectors.TABLES if t not in vectors.CHUNK_TABLES]},
            expected=have[fresh],
            found=have[disk],
        )
    return have[fresh]


def _has_table(conn: duckdb.DuckDBPyConnection, catalog: str, table: str) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND table_name = ?", [catalog, table]
    ).fetchone()
    return bool(row and row[0])


def _compare(conn: duckdb.DuckDBPyConnection, c: Compared) -> int:
    """Rows compared; raises at the first difference.

    One pass first: both sides in one grouping, each row counted +1 on disk
    and -1 in the fold, so equal multisets leave no group with a non-zero
    sum. Only when one does are the differing rows looked for, in order.
    """
    disk, fresh = c.select.format(c=CATALOG), c.select.format(c=FRESH)
    if c.subset:
        order = ", ".join(c.key)
        extra = conn.execute(
            f"SELECT * FROM (({disk}) EXCEPT ALL ({fresh})) ORDER BY {order} LIMIT 1"
        ).fetchall()
        if extra:
            cols = [d[0] for d in conn.execute(f"SELECT * FROM ({fresh}) LIMIT 0").description]
            _report(conn, c, cols, extra[0], None, fresh, disk)
        (n,) = conn.execute(f"SELECT count(*) FROM ({disk})").fetchone() or (0,)
        return int(n)
    (n, differing) = conn.execute(
        f"""SELECT coalesce(sum(audit_n), 0), count(*) FILTER (WHERE audit_d <> 0) FROM (
                SELECT COLUMNS(* EXCLUDE (audit_s)), sum(audit_s) AS audit_d,
                       count(*) FILTER (WHERE audit_s > 0) AS audit_n
                FROM (
                    SELECT *, 1 AS audit_s FROM ({disk})
                    UNION ALL SELECT *, -1 AS audit_s FROM ({fresh})
                ) GROUP BY ALL)"""
    ).fetchone() or (0, 0)
    if differing:
        order = ", ".join(c.key)
        first = "SELECT * FROM (({a}) EXCEPT ALL ({b})) ORDER BY {order} LIMIT 1"
        extra = conn.execute(first.format(a=disk, b=fresh, order=order)).fetchall()
        missing = conn.execute(first.format(a=fresh, b=disk, order=order)).fetchall()
        cols = [d[0] for d in conn.execute(f"SELECT * FROM ({fresh}) LIMIT 0").description]
        _report(conn, c, cols, extra[0] if extra else None, missing[0] if missing else None, fresh, disk)
    return int(n)


def _report(
    conn: duckdb.DuckDBPyConnection,
    c: Compared,
    cols: list[str],
    extra: tuple[Any, ...] | None,
    missing: tuple[Any, ...] | None,
    fresh: str,
    disk: str,
) -> None:
    """Raise for the first differing row (by key): which column, what the log says, what disk holds."""
    ki = [cols.index(k) for k in c.key]

    def key_of(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(row[i] for i in ki)

    rows = [r for r in (extra, missing) if r is not None]
    row = min(rows, key=lambda r: tuple((x is None, x) for x in key_of(r)))
    key = key_of(row)
    where = " AND ".join(f"{k} IS NOT DISTINCT FROM ?" for k in c.key)
    expected = conn.execute(f"SELECT * FROM ({fresh}) WHERE {where} LIMIT 1", list(key)).fetchall()
    found = conn.execute(f"SELECT * FROM ({disk}) WHERE {where} LIMIT 1", list(key)).fetchall()
    key_json = {k: _jsonable(v) for k, v in zip(c.key, key, strict=True)}
    if expected and found:
        for col, a, b in zip(cols, expected[0], found[0], strict=True):
            if a != b:
                raise VerificationError(
                    f"projection table {c.name}, row {key_json}: column {col} differs from the log",
                    check="projection.row",
                    table=c.name,
                    key=key_json,
                    column=col,
                    expected=_jsonable(a),
                    found=_jsonable(b),
                )
        # Same key, same values: a duplicated row on one side.
        raise VerificationError(
            f"projection table {c.name}, row {key_json}: held {'more' if row is extra else 'fewer'} times "
            "than the log gives",
            check="projection.row",
            table=c.name,
            key=key_json,
            column=None,
            expected=_jsonable(expected[0]),
            found=_jsonable(found[0]),
        )
    if found:
        raise VerificationError(
            f"projection table {c.name} holds row {key_json}, which the log does not give",
            check="projection.row",
            table=c.name,
            key=key_json,
            column=None,
            expected=None,
            found=_jsonable(found[0]),
        )
    raise VerificationError(
        f"projection table {c.name} lacks row {key_json}, which the log gives",
        check="projection.row",
        table=c.name,
        key=key_json,
        column=None,
        expected=_jsonable(expected[0]) if expected else None,
        found=None,
    )
