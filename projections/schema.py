"""The projection schema (version `SCHEMA_VERSION`) and the archive guard.

All read models of a home live in one DuckDB file and advance together: the
one row of `proj_state` records the last applied seq and its leaf hash,
written in the same transaction as the rows it accounts for, together with
the corpus statistics BM25 needs (document count, total length) and the size
of the index's two parts. A code change that alters what the fold produces
bumps SCHEMA_VERSION; an older database is then rebuilt from the log rather
than migrated (it is derived data).

A memory's document number (`doc` in the postings) is its stored_seq: unique,
never reused, the same whether the tables were built incrementally or by a
rebuild, and the order in which memories rows are appended, so DuckDB's zone
maps find a memory by it without an index. (There is deliberately no ART
index besides the primary keys: DuckDB 1.5 lost the entries of a secondary
index that a killed process had only in its WAL.) `hidden` lists the memories
the archive guard hides (kept by the fold with the guard itself), so that
recall can exclude them without evaluating the guard over every memory.
"""

from __future__ import annotations

import duckdb

SCHEMA_VERSION = 4

# The one archive guard (DESIGN §4), shared by recall, search and list. A
# memory is hidden when an operator archived it, or when atomisation archived
# it — and then only with both signals present, so a half-finished
# atomisation (one signal only) stays visible. It is never NULL, so
# NOT (guard) is exactly the hidden set.
ARCHIVE_GUARD = (
    "({m}.archived_at IS NULL AND NOT (coalesce({m}.atomised_into, 0) > 0 "
    "AND {m}.atomisation_archived_at IS NOT NULL))"
)


def visible(alias: str = "m") -> str:
    """The archive guard as SQL over the memories alias `alias` (true when recall may show it)."""
    return ARCHIVE_GUARD.format(m=alias)


POSTING_COLUMNS = "term VARCHAR NOT NULL, doc BIGINT NOT NULL, tf INTEGER NOT NULL, dl INTEGER NOT NULL"

DDL = [
    """CREATE TABLE IF NOT EXISTS proj_state(
        version INTEGER NOT NULL, last_seq BIGINT NOT NULL, last_leaf BLOB NOT NULL,
        log_id BLOB NOT NULL, docs BIGINT NOT NULL, total_len BIGINT NOT NULL,
        main_rows BIGINT NOT NULL, delta_rows BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS memories(
        id VARCHAR PRIMARY KEY,
        namespace VARCHAR NOT NULL,
        kind VARCHAR NOT NULL,
        title VARCHAR,
        content VARCHAR NOT NULL,
        tags VARCHAR[] NOT NULL,
        confidence DOUBLE,
        source VARCHAR,
        metadata VARCHAR NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        last_seen BIGINT,
        atom_of VARCHAR,
        source_span INTEGER[],
        atomised_into INTEGER,
        atomisation_archived_at BIGINT,
        archived_at BIGINT,
        archive_reason VARCHAR,
        stored_seq BIGINT NOT NULL,
        last_event_seq BIGINT NOT NULL,
        doc_len INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS links(
        seq BIGINT NOT NULL, src VARCHAR NOT NULL, dst VARCHAR NOT NULL,
        relation VARCHAR NOT NULL, metadata VARCHAR NOT NULL, created_at BIGINT NOT NULL)""",
    f"CREATE TABLE IF NOT EXISTS postings({POSTING_COLUMNS})",
    f"CREATE TABLE IF NOT EXISTS postings_delta({POSTING_COLUMNS})",
    "CREATE TABLE IF NOT EXISTS hidden(id VARCHAR NOT NULL, doc BIGINT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS policies(namespace VARCHAR PRIMARY KEY, policy VARCHAR NOT NULL,
        seq BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS atomisations(
        seq BIGINT NOT NULL, source_id VARCHAR NOT NULL, status VARCHAR NOT NULL,
        request_seq BIGINT, detail VARCHAR NOT NULL, ts BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS touches(memory_id VARCHAR NOT NULL, seq BIGINT NOT NULL,
        type VARCHAR NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS migrations(
        seq BIGINT NOT NULL, type VARCHAR NOT NULL, run_id VARCHAR NOT NULL, detail VARCHAR NOT NULL,
        ts BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS event_counts(type VARCHAR PRIMARY KEY, n BIGINT NOT NULL)""",
    # What each migration update replaced, so a migration.rolled_back can put it back.
    """CREATE TABLE IF NOT EXISTS migration_undo(seq BIGINT NOT NULL, run VARCHAR NOT NULL,
        memory_id VARCHAR NOT NULL, before VARCHAR NOT NULL)""",
]

TABLES = [
    "memories",
    "links",
    "postings",
    "postings_delta",
    "hidden",
    "policies",
    "atomisations",
    "touches",
    "migrations",
    "event_counts",
    "migration_undo",
    "proj_state",
]

# Tables of earlier schema versions, dropped when a database is reset.
RETIRED_TABLES = ["counters", "postings_new", "dead"]


def create(conn: duckdb.DuckDBPyConnection) -> None:
    """Create every table of this schema version (if missing)."""
    for stmt in DDL:
        conn.execute(stmt)


def drop_all(conn: duckdb.DuckDBPyConnection) -> None:
    """Drop every table, of this version and earlier ones."""
    for t in TABLES + RETIRED_TABLES:
        conn.execute(f"DROP TABLE IF EXISTS {t}")
