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

Vectors need a model, so the scratch fold reads the home's embedding cache
(it never embeds): the chunk vectors it fills must equal the disk's, and
are compared when the log records an embedder. Memory vectors are not
compared.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from mnemolog.eventlog.errors import VerificationError
from mnemolog.projections import schema
from mnemolog.projections.db import CATALOG, DB_NAME
from mnemolog.projections.engine import NOTHING_APPLIED, Projections, read_state
from mnemolog.projections.fold import Upcast

FRESH = "fresh"


@dataclass(frozen=True)
class Compared:
    """One logical table: the rows to compare (a SELECT over the catalog `{c}`) and their key."""

    name: str
    select: str
    key: tuple[str, ...]


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
# Memory vectors are not compared (a re-fold would fill every one of them; issue for later).
VECTOR_COMPARED = [
    Compared("chunk_vectors", "SELECT doc, sha, vec::FLOAT[] AS vec FROM {c}.chunk_vectors", ("doc",)),
    Compared("chunk_vector_pending", "SELECT * FROM {c}.chunk_vector_pending", ("doc",)),
]

COVERED_TABLES = {"postings_delta"} | {c.name for c in COMPARED}


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
        if size > projections.log.refresh():
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
            fresh = Projections(
                Path(tmp),
                projections.log,
                upcast,
                memory_limit=limit,
                cache_dir=projections.cache.path.parent,
            )
            try:
                fresh.rebuild(stop=size)
            finally:
                fresh.close()
            report.refold_seconds = time.perf_counter() - t0
            t0 = time.perf_counter()
            path = str(Path(tmp) / DB_NAME).replace("'", "''")
            conn.execute(f"ATTACH '{path}' AS {FRESH} (READ_ONLY)")
            try:
                for c in COMPARED:
                    report.tables[c.name] = _compare(conn, c)
                for c in VECTOR_COMPARED:
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
