"""The projection schema (version `SCHEMA_VERSION`) and the archive guard.

All read models of a home live in one DuckDB file and advance together: one
row of `proj_state` records the last applied seq and its leaf hash, written in
the same transaction as the rows it accounts for. A code change that alters
what the fold produces bumps SCHEMA_VERSION; an older database is then
rebuilt from the log rather than migrated (it is derived data).
"""

from __future__ import annotations

import duckdb

SCHEMA_VERSION = 1
STATE_NAME = "core"

# The one archive guard (DESIGN §4), shared by recall, search and list. A
# memory is hidden when an operator archived it, or when atomisation archived
# it — and then only with both signals present, so a half-finished
# atomisation (one signal only) stays visible.
ARCHIVE_GUARD = (
    "({m}.archived_at IS NULL AND NOT (coalesce({m}.atomised_into, 0) > 0 "
    "AND {m}.atomisation_archived_at IS NOT NULL))"
)


def visible(alias: str = "m") -> str:
    return ARCHIVE_GUARD.format(m=alias)


DDL = [
    """CREATE TABLE IF NOT EXISTS proj_state(
        name VARCHAR PRIMARY KEY, version INTEGER NOT NULL, last_seq BIGINT NOT NULL,
        last_leaf BLOB NOT NULL, log_id BLOB NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS counters(name VARCHAR PRIMARY KEY, value BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS memories(
        id VARCHAR PRIMARY KEY,
        doc INTEGER NOT NULL,
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
    """CREATE TABLE IF NOT EXISTS postings(term VARCHAR NOT NULL, doc INTEGER NOT NULL,
        tf INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS postings_delta(term VARCHAR NOT NULL, doc INTEGER NOT NULL,
        tf INTEGER NOT NULL)""",
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
]

TABLES = [
    "memories",
    "links",
    "postings",
    "postings_delta",
    "policies",
    "atomisations",
    "touches",
    "migrations",
    "event_counts",
    "counters",
    "proj_state",
]


def create(conn: duckdb.DuckDBPyConnection) -> None:
    for stmt in DDL:
        conn.execute(stmt)


def drop_all(conn: duckdb.DuckDBPyConnection) -> None:
    for t in TABLES:
        conn.execute(f"DROP TABLE IF EXISTS {t}")
    conn.execute("DROP TABLE IF EXISTS postings_new")
