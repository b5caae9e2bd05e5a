"""The projection schema (version `SCHEMA_VERSION`) and the archive guard.

All read models of a home live in one DuckDB file and advance together: the
one row of `proj_state` records the last applied seq, its leaf hash and the
Merkle root of the log up to it (what `rebuild` compares a rolled-back log with),
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

SCHEMA_VERSION = 16  # 5 context packs, 6 the knowledge loop, 7 both, 8 embedders and vectors, 9 model_calls,
# 10 dates as words, 11 model_calls.trigger, 12 chunk vectors, 13 every stored candidate queued, 14 tokens,
# 15 erasures, 16 occurred_at

# The one archive guard, shared by recall, search and list. A
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
        main_rows BIGINT NOT NULL, delta_rows BIGINT NOT NULL, last_root BLOB NOT NULL)""",
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
        doc_len INTEGER NOT NULL,
        project VARCHAR NOT NULL DEFAULT '',
        domains VARCHAR[] NOT NULL DEFAULT [],
        status VARCHAR NOT NULL DEFAULT 'active',
        promoted_at BIGINT,
        reference_count INTEGER NOT NULL DEFAULT 0,
        last_referenced_at BIGINT,
        occurred_at BIGINT)""",
    """CREATE TABLE IF NOT EXISTS links(
        seq BIGINT NOT NULL, src VARCHAR NOT NULL, dst VARCHAR NOT NULL,
        relation VARCHAR NOT NULL, metadata VARCHAR NOT NULL, created_at BIGINT NOT NULL)""",
    f"CREATE TABLE IF NOT EXISTS postings({POSTING_COLUMNS})",
    f"CREATE TABLE IF NOT EXISTS postings_delta({POSTING_COLUMNS})",
    "CREATE TABLE IF NOT EXISTS hidden(id VARCHAR NOT NULL, doc BIGINT NOT NULL)",
    # Memories whose status is not active (candidates, superseded, invalid): left out by default.
    "CREATE TABLE IF NOT EXISTS inactive(id VARCHAR NOT NULL, doc BIGINT NOT NULL)",
    # The knowledge loop: projects and aliases (keys are lowercase), trusted project state
    # (every value ever set; `state` is current, replaced or invalid), captured interactions
    # and where their extraction stands, and what extraction and triage said of each candidate.
    """CREATE TABLE IF NOT EXISTS projects(name VARCHAR PRIMARY KEY, description VARCHAR NOT NULL,
        seq BIGINT NOT NULL, registered_at BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS project_aliases(alias_key VARCHAR PRIMARY KEY, alias VARCHAR NOT NULL,
        name VARCHAR NOT NULL, seq BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS project_state(project VARCHAR NOT NULL, category VARCHAR NOT NULL,
        key VARCHAR NOT NULL, value VARCHAR NOT NULL, source VARCHAR, state VARCHAR NOT NULL,
        seq BIGINT NOT NULL, set_at BIGINT NOT NULL, ended_seq BIGINT, ended_at BIGINT, reason VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS interactions(id VARCHAR PRIMARY KEY, namespace VARCHAR NOT NULL,
        project VARCHAR NOT NULL, client VARCHAR, session VARCHAR, context_id VARCHAR,
        prompt VARCHAR NOT NULL, response VARCHAR NOT NULL, reinforce BOOLEAN NOT NULL,
        captured_at BIGINT NOT NULL, seq BIGINT NOT NULL, extraction VARCHAR NOT NULL,
        extracted_seq BIGINT, failures INTEGER NOT NULL, reinforced INTEGER NOT NULL, occurred_at BIGINT)""",
    """CREATE TABLE IF NOT EXISTS candidates(id VARCHAR PRIMARY KEY, interaction_id VARCHAR NOT NULL,
        layer VARCHAR, rule VARCHAR, side VARCHAR, extractor VARCHAR NOT NULL, model VARCHAR,
        extracted_seq BIGINT NOT NULL, triage VARCHAR NOT NULL, verdict VARCHAR, verdict_confidence DOUBLE,
        reason VARCHAR, conflicts_with VARCHAR, duplicate_of VARCHAR, action VARCHAR, why VARCHAR,
        triager VARCHAR, triaged_seq BIGINT, triage_failures INTEGER NOT NULL, decided_by VARCHAR,
        decided_seq BIGINT)""",
    """CREATE TABLE IF NOT EXISTS policies(namespace VARCHAR PRIMARY KEY, policy VARCHAR NOT NULL,
        seq BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS tokens(token_id VARCHAR PRIMARY KEY, sha256 VARCHAR NOT NULL,
        level VARCHAR NOT NULL, namespaces VARCHAR[] NOT NULL, projects VARCHAR[] NOT NULL,
        expires_at BIGINT, rate_per_minute BIGINT, label VARCHAR, issued_seq BIGINT NOT NULL,
        issued_at BIGINT NOT NULL, revoked_seq BIGINT, revoked_at BIGINT, reason VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS atomisations(
        seq BIGINT NOT NULL, source_id VARCHAR NOT NULL, status VARCHAR NOT NULL,
        request_seq BIGINT, detail VARCHAR NOT NULL, ts BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS touches(memory_id VARCHAR NOT NULL, seq BIGINT NOT NULL,
        type VARCHAR NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS migrations(
        seq BIGINT NOT NULL, type VARCHAR NOT NULL, run_id VARCHAR NOT NULL, detail VARCHAR NOT NULL,
        ts BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS event_counts(type VARCHAR PRIMARY KEY, n BIGINT NOT NULL)""",
    # Every embedder.configured, in log order: the last row is the home's embedder.
    """CREATE TABLE IF NOT EXISTS embedders(seq BIGINT NOT NULL, kind VARCHAR NOT NULL, model VARCHAR,
        version VARCHAR, dim INTEGER, model_id VARCHAR, ts BIGINT NOT NULL)""",
    # What each migration update replaced, so a migration.rolled_back can put it back.
    """CREATE TABLE IF NOT EXISTS migration_undo(seq BIGINT NOT NULL, run VARCHAR NOT NULL,
        memory_id VARCHAR NOT NULL, before VARCHAR NOT NULL)""",
]

# Documents, their chunks and chunk index, and recorded context packs
# (mnemolog.projections.context.store folds and queries them).
CONTEXT_DDL = [
    """CREATE TABLE IF NOT EXISTS ctx_documents(
        document_id VARCHAR NOT NULL, path VARCHAR NOT NULL, name VARCHAR NOT NULL,
        root VARCHAR NOT NULL, project VARCHAR NOT NULL, sha256 VARCHAR NOT NULL, size BIGINT NOT NULL,
        encoding VARCHAR NOT NULL, version INTEGER NOT NULL, chunks INTEGER NOT NULL,
        seq BIGINT NOT NULL, ts BIGINT NOT NULL, removed_seq BIGINT)""",
    """CREATE TABLE IF NOT EXISTS ctx_document_versions(
        document_id VARCHAR NOT NULL, version INTEGER NOT NULL, seq BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS ctx_chunks(
        doc BIGINT NOT NULL, chunk_id VARCHAR NOT NULL, document_id VARCHAR NOT NULL,
        idx INTEGER NOT NULL, heading_path VARCHAR[] NOT NULL, text VARCHAR NOT NULL,
        name VARCHAR NOT NULL, project VARCHAR NOT NULL, dl INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS ctx_chunk_postings(
        term VARCHAR NOT NULL, doc BIGINT NOT NULL, tf INTEGER NOT NULL, dl INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS ctx_packs(
        pack_id VARCHAR NOT NULL, seq BIGINT NOT NULL, ts BIGINT NOT NULL, query VARCHAR NOT NULL,
        project VARCHAR, sha256 VARCHAR NOT NULL, budget BIGINT NOT NULL, unit VARCHAR NOT NULL,
        chars BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS ctx_pack_members(
        pack_id VARCHAR NOT NULL, seq BIGINT NOT NULL, source VARCHAR NOT NULL, id VARCHAR NOT NULL,
        tier VARCHAR NOT NULL, included BOOLEAN NOT NULL, reason VARCHAR)""",
]
DDL += CONTEXT_DDL
# What was forgotten (memory.erased): one row per memory, interaction or document, never content.
DDL.append(
    """CREATE TABLE IF NOT EXISTS erasures(subject VARCHAR NOT NULL, kind VARCHAR NOT NULL,
    seq BIGINT NOT NULL, ts BIGINT NOT NULL, reason VARCHAR, requested_by VARCHAR)"""
)
# Every extraction and triage call (projections.model_calls folds them), for the run logs.
DDL.append(
    """CREATE TABLE IF NOT EXISTS model_calls(seq BIGINT NOT NULL, type VARCHAR NOT NULL,
    model VARCHAR NOT NULL, input_tokens BIGINT NOT NULL, output_tokens BIGINT NOT NULL,
    status VARCHAR NOT NULL, summary VARCHAR NOT NULL, error VARCHAR, ts BIGINT NOT NULL,
    trigger VARCHAR)"""
)

TABLES = [
    "memories",
    "links",
    "postings",
    "postings_delta",
    "hidden",
    "inactive",
    "projects",
    "project_aliases",
    "project_state",
    "interactions",
    "candidates",
    "policies",
    "tokens",
    "atomisations",
    "touches",
    "migrations",
    "event_counts",
    "migration_undo",
    "ctx_documents",
    "ctx_document_versions",
    "ctx_chunks",
    "ctx_chunk_postings",
    "ctx_packs",
    "ctx_pack_members",
    "embedders",
    "model_calls",
    "erasures",
    "proj_state",
]

# Tables of earlier schema versions, dropped when a database is reset.
RETIRED_TABLES = ["counters", "postings_new", "dead"]
# Tables created on demand by another module (projections/embedding/vectors.py), dropped with the rest.
OWNED_ELSEWHERE = ["vectors", "vector_meta", "vector_pending", "chunk_vectors", "chunk_vector_pending"]

#: A chunk's number in ctx_chunks is seq * 2^CHUNK_SHIFT + its index: the entry that holds it
#: is `doc >> CHUNK_SHIFT` (projections/context/store.py folds them, projections/embedding/vectors.py
#: embeds those added since it last looked).
CHUNK_SHIFT = 20
#: The most chunks one document version may have (their numbers fill the low CHUNK_SHIFT bits).
MAX_CHUNKS_PER_DOCUMENT = (1 << CHUNK_SHIFT) - 1


def chunk_id(document_id: str, version: int, index: int) -> str:
    """A chunk's id: its document, the document's version and its place in it."""
    return f"{document_id}/{version}/{index}"


#: Event types whose folds change no memory row, no memory's visibility and no adjacency (the
#: context room's packs and documents): what memory read caches may outlive.
NOT_MEMORY_EVENTS = ("context.built", "document.ingested", "document.removed")


def memory_generation(conn: duckdb.DuckDBPyConnection) -> int:
    """How many entries folded so far may have changed the memories (every type but
    NOT_MEMORY_EVENTS): equal at two points of one log, no memory changed between them."""
    row = conn.execute(
        "SELECT coalesce(sum(n), 0) FROM event_counts WHERE type NOT IN (SELECT unnest(?::VARCHAR[]))",
        [list(NOT_MEMORY_EVENTS)],
    ).fetchone()
    return int(row[0]) if row else -1


def create(conn: duckdb.DuckDBPyConnection) -> None:
    """Create every table of this schema version (if missing)."""
    for stmt in DDL:
        conn.execute(stmt)


def drop_all(conn: duckdb.DuckDBPyConnection) -> None:
    """Drop every table, of this version and earlier ones (the vector tables too)."""
    for t in TABLES + RETIRED_TABLES + OWNED_ELSEWHERE:
        conn.execute(f"DROP TABLE IF EXISTS {t}")
