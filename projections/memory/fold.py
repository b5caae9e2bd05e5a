"""The memory fold: memories, their text index, links, policies, atomisations and migrations.

Tables: `memories`, `hidden` (what the archive guard hides), `inactive`
(memories whose status is not active), the inverted index `postings` and
`postings_delta`, `links`, `policies`, `atomisations`, `migrations` and
`migration_undo`. Besides the memory events it reads every event that
changes a memory's row: the knowledge loop's status changes, a project
registration (which re-canonicalises the project names memories hold), and
an erasure. The text index is kept here, with the rows it counts, because a
memory's `doc_len` and BM25's corpus statistics change in the same step.

Inserts (memories with their postings, links, atomisation and migration
records) are buffered; anything that reads or changes existing rows
flushes every fold first (`projections.fold.Shared.flush`). A flush of a
few rows (the store path) is a handful of parameterised statements; a big
one (catch-up, rebuild) goes through an Arrow batch and the bulk tokenizer.
Fields of the wrong type are read through the vocabulary's readers
(mnemolog.eventlog.vocabulary.events), as the bundle's fold reads them.

Search terms go into an inverted index in two tables: `postings`, kept
sorted by term so DuckDB's zone maps skip to the few row groups a query
needs, and `postings_delta`, where new documents land. A posting's `doc` is
its memory's stored_seq. Storing a memory appends to the delta, so its cost
does not grow with the corpus; changing a memory's text deletes its old
postings at once (so the index never holds a stale version) and appends the
new ones. Compaction rewrites `postings` sorted, folding the delta in and
leaving deleted rows behind. It runs only at the end of a catch-up and only
when the delta holds more than max(COMPACT_MIN_ROWS, main / COMPACT_FRACTION)
rows: the main table grows geometrically between compactions, so the work
per stored memory is constant (amortised), and a compaction is rare — at
100k memories about one store in 6,000 pays for one, far beyond the 99th
percentile. Query results never depend on when it ran.

The last batch of a rebuild (`Shared.bulk`; the whole rebuild up to
engine.REBUILD_BATCH entries) writes no delta: each flush's postings go into
a temporary table (HELD: memory, spilling to the projection's temp
directory, never the database file), which the final compaction of the same
transaction sorts into the main table with the rest: one write of each
posting instead of two and a copy.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import duckdb

from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.eventlog.vocabulary import knowledge as vk
from mnemolog.eventlog.vocabulary.events import (
    ATOMISATION_ARCHIVED_KEY,
    merge_metadata,
    mirror_atomisation_archive,
    read_float,
    read_id,
    read_int,
    read_span,
    read_str,
    read_tags,
)
from mnemolog.eventlog.vocabulary.knowledge import status_after
from mnemolog.projections import fold
from mnemolog.projections.fold import Fold, Handler, RepeatedId, canonical_json, erasure_subjects
from mnemolog.projections.recall.text import (
    DATED_BY,
    ONE_DOC_POSTINGS,
    doc_text_py,
    drop_staged,
    stage_postings,
)
from mnemolog.projections.schema import visible

if TYPE_CHECKING:
    import pyarrow as pa

COMPACT_MIN_ROWS = 50_000
COMPACT_FRACTION = 16
ARROW_CHUNK = 4096
HELD = "ml_post_held"  # a rebuild's postings until its end (temporary: never in the file)
MAX_DELETE_TERMS = 256  # a text update deletes old postings by term (zone maps) up to this many


#: The memories table's columns as Arrow types (by name: pyarrow is imported only by
#: a fold big enough to need it, never by a store or a recall).
MEMORY_COLUMNS = [
    ("id", "string"),
    ("namespace", "string"),
    ("kind", "string"),
    ("title", "string"),
    ("content", "string"),
    ("tags", "list<string>"),
    ("confidence", "float64"),
    ("source", "string"),
    ("metadata", "string"),
    ("created_at", "int64"),
    ("updated_at", "int64"),
    ("last_seen", "int64"),
    ("atom_of", "string"),
    ("source_span", "list<int32>"),
    ("project", "string"),
    ("domains", "list<string>"),
    ("status", "string"),
    ("promoted_at", "int64"),
    ("stored_seq", "int64"),
    ("occurred_at", "int64"),
]
_MEMORY_NAMES = [c for c, _ in MEMORY_COLUMNS]
_SEQ, _CREATED, _OCCURRED = (_MEMORY_NAMES.index(c) for c in ("stored_seq", "created_at", "occurred_at"))


@functools.cache
def memory_schema() -> pa.Schema:
    import pyarrow as pa

    def arrow(t: str) -> pa.DataType:
        if t.startswith("list<"):
            return pa.list_(arrow(t[5:-1]))
        return {"string": pa.string(), "float64": pa.float64(), "int64": pa.int64(), "int32": pa.int32()}[t]

    return pa.schema([(c, arrow(t)) for c, t in MEMORY_COLUMNS])


_INSERT_COLS = ", ".join([*_MEMORY_NAMES, "last_event_seq", "doc_len"])
# The registered Arrow batch, shaped as stage_postings wants it.
_STAGE = "(SELECT *, stored_seq AS doc FROM ml_rows)"
_LIST_TYPES = {"tags": "VARCHAR[]", "source_span": "INTEGER[]", "domains": "VARCHAR[]"}
# Typed so that an empty list or a NULL binds without guessing.
_MEMORY_PARAMS = ", ".join(f"?::{_LIST_TYPES[c]}" if c in _LIST_TYPES else "?" for c in _MEMORY_NAMES)


@dataclass
class _Buffer:
    memories: dict[str, list[Any]] = field(default_factory=lambda: {c: [] for c in _MEMORY_NAMES})
    ids: set[str] = field(default_factory=set)
    links: list[tuple[int, str, str, str, str, int]] = field(default_factory=list)
    atomisations: list[tuple[int, str, str, int | None, str, int]] = field(default_factory=list)
    migrations: list[tuple[int, str, str, str, int]] = field(default_factory=list)
    inactive: list[int] = field(default_factory=list)  # stored_seq of memories stored not active
    # memory.superseded events not applied yet (id -> seq, confidence)
    superseded: dict[str, tuple[int, float | None]] = field(default_factory=dict)


class MemoryFold(Fold):
    """The memory room's fold (see the module docstring). `shared.careful`: skip repeated ids in bulk."""

    TABLES: ClassVar[tuple[str, ...]] = (
        "memories",
        "hidden",
        "inactive",
        "postings",
        "postings_delta",
        "links",
        "policies",
        "atomisations",
        "migrations",
        "migration_undo",
    )

    def __init__(self, shared: fold.Shared) -> None:
        super().__init__(shared)
        self.stats = shared.stats
        self.careful = shared.careful
        self.buf = _Buffer()
        # The postings of a rebuild's last batch, held in a temporary table (HELD) until
        # `settle` writes them sorted with the rest: they count as delta rows meanwhile.
        self.holding = False

    def flush(self) -> None:
        b = self.buf
        if b.memories["id"]:
            self._flush_memories()
        if b.superseded:
            self._flush_superseded()
        if b.links:
            self._insert_rows("links", ["seq", "src", "dst", "relation", "metadata", "created_at"], b.links)
            b.links = []
        if b.atomisations:
            self._insert_rows(
                "atomisations",
                ["seq", "source_id", "status", "request_seq", "detail", "ts"],
                b.atomisations,
            )
            b.atomisations = []
        if b.migrations:
            self._insert_rows("migrations", ["seq", "type", "run_id", "detail", "ts"], b.migrations)
            b.migrations = []

    def _insert_rows(self, table: str, cols: list[str], rows: list[tuple[Any, ...]]) -> None:
        fold.insert_rows(self.conn, table, cols, rows)

    def settle(self, *, force: bool) -> None:
        if force or self.needs_compaction():
            self.compact()

    def _drop_held(self) -> None:
        self.conn.execute(f"DROP TABLE IF EXISTS {HELD}")
        self.holding = False

    def _flush_memories(self) -> None:
        b = self.buf
        cols = b.memories
        inactive = b.inactive
        b.memories = {c: [] for c in _MEMORY_NAMES}
        b.ids = set()
        b.inactive = []
        if len(cols["id"]) <= fold.SMALL_FLUSH:
            for i in range(len(cols["id"])):
                self._insert_memory([cols[c][i] for c in _MEMORY_NAMES])
        else:
            import pyarrow as pa

            self._insert_memories(pa.table(cols, schema=memory_schema()))
        if inactive:
            # From the table, not the buffer: a repeated id's store did not count.
            self.conn.execute(
                "INSERT INTO inactive SELECT id, stored_seq FROM memories "
                "WHERE stored_seq IN (SELECT unnest(?::BIGINT[])) AND status <> 'active'",
                [inactive],
            )

    def _insert_memory(self, row: list[Any]) -> None:
        """One memory and its postings: the store path, a few statements, no staging tables."""
        conn = self.conn
        if conn.execute("SELECT 1 FROM memories WHERE id = ?", [row[0]]).fetchone():
            return  # a repeated id: the first store wins
        # A memory is dated by when it happened, else when it was stored (created_at).
        when = row[_OCCURRED] if row[_OCCURRED] is not None else row[_CREATED]
        dl = self._add_postings(row[_SEQ], row[3], row[5], row[4], when)
        conn.execute(
            f"INSERT INTO memories ({_INSERT_COLS}) VALUES ({_MEMORY_PARAMS}, ?, ?)", [*row, row[_SEQ], dl]
        )
        self.stats.docs += 1
        self.stats.total_len += dl

    def _add_postings(
        self, doc: int, title: str | None, tags: list[str], content: str, created_at: int | None
    ) -> int:
        """Index one memory's text and its date as words; returns its length in terms."""
        rows = self.conn.execute(
            f"INSERT INTO postings_delta {ONE_DOC_POSTINGS} RETURNING dl",
            [doc_text_py(title, tags, content, created_at), doc],
        ).fetchall()
        self.stats.delta_rows += len(rows)
        return int(rows[0][0]) if rows else 0

    def _insert_memories(self, tbl: pa.Table) -> None:
        """Many memories at once: Arrow in, the bulk tokenizer, set-based inserts."""
        conn = self.conn
        # Chunked, so that DuckDB scans it with all its threads (one chunk is one thread).
        import pyarrow as pa

        tbl = pa.Table.from_batches(tbl.to_batches(max_chunksize=ARROW_CHUNK))
        conn.register("ml_rows", tbl)
        try:
            # One chunk (an import's batch, a store's few rows) is one thread's scan: the other
            # threads only add the cost of splitting and merging the joins and aggregates
            # (tokenising 2,000 memories: about 115 ms of CPU on two threads, 72 ms on one,
            # and less wall time too on a busy machine). A rebuild's batches keep every thread.
            with fold.threads(conn, 1 if tbl.num_rows <= ARROW_CHUNK else None):
                stage_postings(conn, _STAGE, dated=True)
                self._insert_staged(tbl)
        finally:
            conn.unregister("ml_rows")

    def _insert_staged(self, tbl: pa.Table) -> None:
        conn = self.conn
        select = f"""SELECT {", ".join("s." + c for c in _MEMORY_NAMES)}, s.stored_seq, d.dl
                     FROM {_STAGE} s JOIN ml_dl d USING (doc) ORDER BY s.doc"""
        if not self.careful:
            # A plain INSERT keeps the rows in stored_seq order (INSERT OR IGNORE does not),
            # which is what lets zone maps find a memory by its stored_seq. A repeated id
            # makes it fail: the engine then redoes the batch carefully.
            try:
                conn.execute(f"INSERT INTO memories ({_INSERT_COLS}) {select}")
            except duckdb.ConstraintException as exc:
                raise RepeatedId(str(exc)) from exc
            row = conn.execute("SELECT count(*), coalesce(sum(dl), 0) FROM ml_dl").fetchone()
            n, total = (int(row[0]), int(row[1])) if row else (0, 0)
            self.stats.docs += n
            self.stats.total_len += total
            inserted: list[tuple[Any, ...]] = []
        else:
            inserted = conn.execute(
                f"INSERT OR IGNORE INTO memories ({_INSERT_COLS}) {select} RETURNING stored_seq, doc_len"
            ).fetchall()
            self.stats.docs += len(inserted)
            self.stats.total_len += sum(int(r[1]) for r in inserted)
        if self.careful and len(inserted) < tbl.num_rows:
            # Repeated ids (the first store wins): their text is not indexed.
            live = {int(r[0]) for r in inserted}
            dups = [d for d in tbl.column("stored_seq").to_pylist() if d not in live]
            conn.execute("DELETE FROM ml_post WHERE list_contains(?::BIGINT[], doc)", [dups])
        if self.shared.bulk:
            # A rebuild holds them (in memory, not written to the file) for `compact`, which
            # writes every posting once, sorted, instead of appending them to the delta here and
            # copying them into the main table at the end.
            if not self.holding:
                conn.execute(f"CREATE OR REPLACE TEMP TABLE {HELD} AS FROM postings_delta LIMIT 0")
                self.holding = True
            row = conn.execute(f"INSERT INTO {HELD} SELECT term, doc, tf, dl FROM ml_post").fetchone()
        else:
            row = conn.execute("INSERT INTO postings_delta SELECT term, doc, tf, dl FROM ml_post").fetchone()
        self.stats.delta_rows += int(row[0]) if row else 0
        drop_staged(conn)

    def _replace_text(
        self,
        doc: int,
        old: tuple[str | None, list[str], str, int],
        title: str | None,
        tags: list[str],
        content: str,
        occurred_at: int | None = None,
    ) -> int:
        """Re-index a memory whose text (or, with `occurred_at`, whose date) changed; returns the
        new length in terms. The row still holds the old date when this runs.

        The old postings are deleted at once, so the index never holds a stale
        version: the delta is small, and in the main table the old terms' row
        groups are found by their zone maps. A memory's postings are all in
        one part (stored and re-indexed into the delta, moved whole by a
        compaction): when the delta held them, the main table holds none, and
        the old text is not tokenised again to find them (a rebuild's updates).
        """
        conn = self.conn
        row = conn.execute("DELETE FROM postings_delta WHERE doc = ?", [doc]).fetchone()
        in_delta = int(row[0]) if row else 0
        if self.holding:
            row = conn.execute(f"DELETE FROM {HELD} WHERE doc = ?", [doc]).fetchone()
            in_delta += int(row[0]) if row else 0
        self.stats.delta_rows -= in_delta
        if in_delta:
            got = conn.execute(
                f"SELECT NULL, {DATED_BY} FROM memories WHERE stored_seq = ?", [doc]
            ).fetchone()
        else:
            # The date words of the memory's date as it was are among the old terms.
            got = conn.execute(
                f"SELECT list_distinct(ml_doc_terms(?, ?::VARCHAR[], ?, {DATED_BY})), {DATED_BY} "
                "FROM memories WHERE stored_seq = ?",
                [old[0], old[1], old[2], doc],
            ).fetchone()
        terms: list[str] = list(got[0] or []) if got else []
        if terms:
            if len(terms) <= MAX_DELETE_TERMS:
                sql = f"DELETE FROM postings WHERE term IN ({', '.join('?' * len(terms))}) AND doc = ?"
                row = conn.execute(sql, [*terms, doc]).fetchone()
            else:
                row = conn.execute("DELETE FROM postings WHERE doc = ?", [doc]).fetchone()
            self.stats.main_rows -= int(row[0]) if row else 0
        dated = occurred_at if occurred_at is not None else (got[1] if got else None)
        dl = self._add_postings(doc, title, tags, content, dated)
        self.stats.total_len += dl - old[3]
        return dl

    # -- handlers --------------------------------------------------------------

    def stored(self, e: Entry, d: dict[str, Any]) -> None:
        # The rebuild's inner loop (one call per memory): plain locals, no helper calls on
        # the common shapes, the same values as the helpers give.
        get = d.get
        mid = get("id")
        if not isinstance(mid, str) or not mid or mid in self.buf.ids:
            return  # a repeated id never replaces the first memory (first write wins)
        if mid in self.buf.superseded:
            self.shared.flush()  # a supersession logged before the store must find no memory
        m = self.buf.memories
        title, source, tags, meta = get("title"), get("source"), get("tags"), get("metadata")
        m["id"].append(mid)
        m["namespace"].append(str(get("namespace", "default")))
        m["kind"].append(str(get("kind", "observation")))
        m["title"].append(title if isinstance(title, str) else None)
        content = get("content", "")
        m["content"].append(content if type(content) is str else str(content))
        m["tags"].append(read_tags(tags) if tags else [])
        m["confidence"].append(read_float(get("confidence")))
        m["source"].append(source if isinstance(source, str) else None)
        m["metadata"].append(canonical_json(meta) if meta and isinstance(meta, dict) else "{}")
        m["created_at"].append(read_int(get("created_at")) or e.ts)
        m["updated_at"].append(e.ts)
        m["last_seen"].append(read_int(get("last_seen")))
        atom_of = get("atom_of")
        m["atom_of"].append(atom_of if isinstance(atom_of, str) and atom_of else None)
        m["source_span"].append(read_span(get("source_span")))
        project, domains, status = get("project"), get("domains"), get("status")
        m["project"].append(
            self.shared.projects.canonical(project) if project and isinstance(project, str) else ""
        )
        m["domains"].append(read_tags(domains) if domains else [])
        m["promoted_at"].append(None)
        if status == "candidate":
            m["status"].append("candidate")
            self.buf.inactive.append(e.seq)
        else:
            m["status"].append("active")
        m["stored_seq"].append(e.seq)
        m["occurred_at"].append(read_int(get("occurred_at")))
        self.buf.ids.add(mid)

    def updated(self, e: Entry, d: dict[str, Any]) -> None:
        self.shared.flush()
        mid = read_id(d.get("id"))
        row = self.conn.execute(
            "SELECT metadata, title, content, stored_seq, doc_len, tags, occurred_at "
            "FROM memories WHERE id = ?",
            [mid],
        ).fetchone()
        if row is None:
            return
        if d.get("migration_run"):
            self._remember_before(e.seq, str(d["migration_run"]), mid)
        sets: list[str] = ["updated_at = ?", "last_event_seq = ?"]
        args: list[Any] = [e.ts, e.seq]
        for col in ("namespace", "kind", "source"):
            if d.get(col) is not None:
                sets.append(f"{col} = ?")
                args.append(str(d[col]))
        conf = read_float(d.get("confidence"))
        if conf is not None:
            sets.append("confidence = ?")
            args.append(conf)
        seen = read_int(d.get("last_seen"))
        if seen is not None:
            sets.append("last_seen = ?")
            args.append(seen)
        old_tags = list(row[5] or [])
        tags = read_tags(d["tags"]) if isinstance(d.get("tags"), list) else old_tags
        if tags != old_tags:
            sets.append("tags = ?::VARCHAR[]")
            args.append(tags)
        if isinstance(d.get("project"), str):
            sets.append("project = ?")
            args.append(self.shared.projects.canonical(d["project"]) if d["project"] else "")
        if isinstance(d.get("domains"), list):
            sets.append("domains = ?::VARCHAR[]")
            args.append(read_tags(d["domains"]))
        if isinstance(d.get("metadata"), dict):
            sets.append("metadata = ?")
            args.append(canonical_json(merge_metadata(json.loads(row[0]), d["metadata"])))
        title = str(d["title"]) if d.get("title") is not None else row[1]
        content = str(d["content"]) if d.get("content") is not None else row[2]
        occurred = read_int(d.get("occurred_at"))
        redate = occurred is not None and occurred != row[6]
        if title != row[1] or content != row[2] or tags != old_tags or redate:
            dl = self._replace_text(
                int(row[3]), (row[1], old_tags, row[2], int(row[4])), title, tags, content, occurred
            )
            sets += ["title = ?", "content = ?", "doc_len = ?"]
            args += [title, content, dl]
        if redate:
            sets.append("occurred_at = ?")
            args.append(occurred)
        self.conn.execute(f"UPDATE memories SET {', '.join(sets)} WHERE id = ?", [*args, mid])

    def _refresh_hidden(self, mid: str) -> None:
        """Re-evaluate the archive guard for one memory after its signals changed."""
        self.conn.execute("DELETE FROM hidden WHERE id = ?", [mid])
        self.conn.execute(
            "INSERT INTO hidden SELECT m.id, m.stored_seq FROM memories m "
            f"WHERE m.id = ? AND NOT {visible('m')}",
            [mid],
        )

    def archived(self, e: Entry, d: dict[str, Any]) -> None:
        self.shared.flush()
        mid = read_id(d.get("id"))
        if d.get("by") == "atomisation":
            self.conn.execute(
                "UPDATE memories SET atomisation_archived_at = ?, last_event_seq = ? WHERE id = ?",
                [e.ts, e.seq, mid],
            )
            self._mirror_archive(mid, e.ts)
        else:
            self.conn.execute(
                "UPDATE memories SET archived_at = ?, archive_reason = ?, last_event_seq = ? WHERE id = ?",
                [e.ts, read_str(d.get("reason")), e.seq, mid],
            )
        self._refresh_hidden(mid)

    def _mirror_archive(self, mid: str, archived_us: int | None) -> None:
        """The metadata mirror of the atomisation archive, as memview's fold keeps it."""
        row = self.conn.execute("SELECT metadata FROM memories WHERE id = ?", [mid]).fetchone()
        if row is None:
            return
        meta = json.loads(row[0])
        if archived_us is None and ATOMISATION_ARCHIVED_KEY not in meta:
            return
        self.conn.execute(
            "UPDATE memories SET metadata = ? WHERE id = ?",
            [canonical_json(mirror_atomisation_archive(meta, archived_us)), mid],
        )

    def restored(self, e: Entry, d: dict[str, Any]) -> None:
        self.shared.flush()
        mid = read_id(d.get("id"))
        self._mirror_archive(mid, None)
        self.conn.execute(
            "UPDATE memories SET archived_at = NULL, archive_reason = NULL, "
            "atomisation_archived_at = NULL, last_event_seq = ? WHERE id = ?",
            [e.seq, mid],
        )
        self._refresh_hidden(mid)

    def unlinked(self, e: Entry, d: dict[str, Any]) -> None:
        """link.removed: the edges src -> dst of that relation created before it leave the graph."""
        self.shared.flush()
        self.conn.execute(
            "DELETE FROM links WHERE src = ? AND dst = ? AND relation = ? AND seq < ?",
            [read_id(d.get("src")), read_id(d.get("dst")), str(d.get("relation", "")), e.seq],
        )

    def linked(self, e: Entry, d: dict[str, Any]) -> None:
        meta = d.get("metadata")
        self.buf.links.append(
            (
                e.seq,
                read_id(d.get("src")),
                read_id(d.get("dst")),
                str(d.get("relation", "")),
                canonical_json(meta if isinstance(meta, dict) else {}),
                e.ts,
            )
        )

    def policy(self, e: Entry, d: dict[str, Any]) -> None:
        """policy.set at tv 2 (older payloads arrive upcast): clear, set, unset."""
        self.shared.flush()
        ns = str(d.get("namespace", ""))
        row = self.conn.execute("SELECT policy FROM policies WHERE namespace = ?", [ns]).fetchone()
        current: dict[str, Any] = {} if d.get("clear") or row is None else json.loads(row[0])
        for k in d.get("unset") or []:
            current.pop(str(k), None)
        changes = d.get("changes")
        if isinstance(changes, dict):
            current.update({str(k): v for k, v in changes.items() if v is not None})
        if current:
            self.conn.execute(
                "INSERT OR REPLACE INTO policies VALUES (?, ?, ?)", [ns, canonical_json(current), e.seq]
            )
        else:
            self.conn.execute("DELETE FROM policies WHERE namespace = ?", [ns])

    def atomisation(self, e: Entry, d: dict[str, Any]) -> None:
        status = e.type.split(".", 1)[1]
        src = read_id(d.get("source_id"))
        atoms = d.get("atom_ids")
        if status == "completed" and isinstance(atoms, list):
            self.shared.flush()
            self.conn.execute(
                "UPDATE memories SET atomised_into = ?, last_event_seq = ? WHERE id = ?",
                [len(atoms), e.seq, src],
            )
            self._refresh_hidden(src)
        self.buf.atomisations.append(
            (e.seq, src, status, read_int(d.get("request_seq")), canonical_json(d), e.ts)
        )

    def migration(self, e: Entry, d: dict[str, Any]) -> None:
        self.buf.migrations.append((e.seq, e.type, str(d.get("run_id", "")), canonical_json(d), e.ts))
        size = read_int(d.get("snapshot_size"))
        if e.type == v.MIGRATION_ROLLED_BACK and size is not None:
            self._roll_back(e, size)

    # -- migration rollback ----------------------------------------------------

    def _remember_before(self, seq: int, run: str, mid: str) -> None:
        row = self.conn.execute(
            f"SELECT {', '.join(v.UNDO_FIELDS)} FROM memories WHERE id = ?", [mid]
        ).fetchone()
        if row is None:
            return
        before = dict(zip(v.UNDO_FIELDS, row, strict=True))
        before["tags"] = list(before["tags"] or [])
        before["domains"] = list(before["domains"] or [])
        self.conn.execute(
            "INSERT INTO migration_undo VALUES (?, ?, ?, ?)", [seq, run, mid, canonical_json(before)]
        )

    def _roll_back(self, e: Entry, snapshot_size: int) -> None:
        """Put back what every migration update at or after the snapshot replaced, newest first.

        The log keeps the migration's events; the projected rows return to the
        snapshot. Text that changes back is re-indexed like any text update.
        """
        self.shared.flush()
        rows = self.conn.execute(
            "SELECT seq, memory_id, before FROM migration_undo WHERE seq >= ? ORDER BY seq DESC",
            [snapshot_size],
        ).fetchall()
        for _, mid, before_json in rows:
            b = json.loads(before_json)
            cur = self.conn.execute(
                "SELECT title, content, stored_seq, doc_len, tags, occurred_at, created_at "
                "FROM memories WHERE id = ?",
                [mid],
            ).fetchone()
            if cur is None:
                continue
            # A snapshot taken before tv 5 of memory.updated has no date: the memory's stays.
            occurred = b.get("occurred_at", cur[5])
            sets = [
                "title = ?", "content = ?", "kind = ?", "namespace = ?", "tags = ?::VARCHAR[]",
                "confidence = ?", "source = ?", "metadata = ?", "last_seen = ?", "updated_at = ?",
                "last_event_seq = ?", "project = ?", "domains = ?::VARCHAR[]", "occurred_at = ?",
            ]  # fmt: skip
            args: list[Any] = [
                b["title"], b["content"], b["kind"], b["namespace"], b["tags"], b["confidence"],
                b["source"], b["metadata"], b["last_seen"], b["updated_at"], b["last_event_seq"],
                b["project"], b["domains"], occurred,
            ]  # fmt: skip
            cur_tags = list(cur[4] or [])
            redate = occurred != cur[5]
            if b["title"] != cur[0] or b["content"] != cur[1] or list(b["tags"] or []) != cur_tags or redate:
                old = (cur[0], cur_tags, cur[1], int(cur[3]))
                # The date put back may be none: the memory is then dated by when it was created.
                dated = (occurred if occurred is not None else cur[6]) if redate else None
                dl = self._replace_text(
                    int(cur[2]), old, b["title"], list(b["tags"] or []), b["content"], dated
                )
                sets.append("doc_len = ?")
                args.append(dl)
            self.conn.execute(f"UPDATE memories SET {', '.join(sets)} WHERE id = ?", [*args, mid])
        self.conn.execute("DELETE FROM migration_undo WHERE seq >= ?", [snapshot_size])

    # -- compaction ------------------------------------------------------------

    def needs_compaction(self) -> bool:
        s = self.stats
        return s.delta_rows > max(COMPACT_MIN_ROWS, s.main_rows // COMPACT_FRACTION)

    def compact(self) -> None:
        """Merge the delta into the main postings, sorted by term (deleted rows drop out)."""
        self.shared.flush()
        conn = self.conn
        held = f" UNION ALL SELECT * FROM {HELD}" if self.holding else ""
        conn.execute(
            f"""CREATE OR REPLACE TABLE postings_new AS
               SELECT term, doc, tf, dl FROM (
                   SELECT * FROM postings UNION ALL SELECT * FROM postings_delta{held})
               ORDER BY term"""
        )
        if self.holding:
            self._drop_held()
        conn.execute("DROP TABLE postings")
        conn.execute("ALTER TABLE postings_new RENAME TO postings")
        conn.execute("DELETE FROM postings_delta")
        row = conn.execute("SELECT count(*) FROM postings").fetchone()
        self.stats.main_rows = int(row[0]) if row else 0
        self.stats.delta_rows = 0

    # -- the knowledge loop's changes to a memory ------------------------------------

    def _transition(self, e: Entry, d: dict[str, Any]) -> str | None:
        """The memory's id when ``e`` changes its status (applied here), else None."""
        self.shared.flush()
        mid = read_id(d.get("id"))
        row = self.conn.execute("SELECT status, stored_seq FROM memories WHERE id = ?", [mid]).fetchone()
        after = status_after(e.type, row[0] if row else None)
        if row is None or after is None:
            return None
        self.conn.execute(
            "UPDATE memories SET status = ?, last_event_seq = ? WHERE id = ?", [after, e.seq, mid]
        )
        self.conn.execute("DELETE FROM inactive WHERE id = ?", [mid])
        if after != "active":
            self.conn.execute("INSERT INTO inactive VALUES (?, ?)", [mid, row[1]])
        return mid

    def promoted(self, e: Entry, d: dict[str, Any]) -> None:
        mid = self._transition(e, d)
        if mid is None:
            return
        project = d.get("project")
        domains = d.get("domains")
        self.conn.execute(
            "UPDATE memories SET promoted_at = ?, project = ?, domains = ?::VARCHAR[] WHERE id = ?",
            [
                e.ts,
                self.shared.projects.canonical(project) if isinstance(project, str) and project else "",
                read_tags(domains) if isinstance(domains, list) else [],
                mid,
            ],
        )

    def rejected(self, e: Entry, d: dict[str, Any]) -> None:
        self._transition(e, d)

    def reinforced(self, e: Entry, d: dict[str, Any]) -> None:
        self.shared.flush()
        confidence = read_float(d.get("confidence"))
        if confidence is None or not 0.0 <= confidence <= 1.0:
            return
        self.conn.execute(
            "UPDATE memories SET confidence = ?, reference_count = reference_count + 1, "
            "last_referenced_at = ?, last_event_seq = ? WHERE id = ? AND status = 'active'",
            [confidence, e.ts, e.seq, read_id(d.get("id"))],
        )

    def reinstated(self, e: Entry, d: dict[str, Any]) -> None:
        mid = self._transition(e, d)
        if mid is not None:  # a person used it: a reference, as memview counts it
            self.conn.execute(
                "UPDATE memories SET reference_count = reference_count + 1, last_referenced_at = ? "
                "WHERE id = ?",
                [e.ts, mid],
            )

    def superseded(self, e: Entry, d: dict[str, Any]) -> None:
        # Buffered: a decay run supersedes thousands of memories at once, and one statement
        # applies them all. The first supersession of an id in a batch is the one that counts,
        # as it would be applied one by one (the next finds the memory superseded already).
        mid = read_id(d.get("id"))
        if not mid or mid in self.buf.superseded:
            return
        confidence = read_float(d.get("confidence"))
        decayed = d.get("by") == "decay" and confidence is not None and 0.0 <= confidence <= 1.0
        self.buf.superseded[mid] = (e.seq, confidence if decayed else None)

    def _flush_superseded(self) -> None:
        """Apply the buffered supersessions to the active memories they name (status_after's rule)."""
        pending = self.buf.superseded
        self.buf.superseded = {}
        assert status_after(vk.MEMORY_SUPERSEDED, "active") == "superseded"
        import pyarrow as pa

        batch = pa.table(
            {
                "id": list(pending),
                "seq": [seq for seq, _ in pending.values()],
                "confidence": pa.array([c for _, c in pending.values()], pa.float64()),
            }
        )
        conn = self.conn
        conn.register("ml_superseded", batch)
        try:
            done = conn.execute(
                "UPDATE memories SET status = 'superseded', last_event_seq = b.seq, "
                "confidence = coalesce(b.confidence, memories.confidence) "
                "FROM ml_superseded b WHERE memories.id = b.id AND memories.status = 'active' "
                "RETURNING memories.id, memories.stored_seq"
            ).fetchall()
        finally:
            conn.unregister("ml_superseded")
        if done:
            rows = pa.table({"id": [r[0] for r in done], "doc": [r[1] for r in done]})
            conn.register("ml_inactive", rows)
            try:
                conn.execute("INSERT INTO inactive SELECT id, doc FROM ml_inactive")
            finally:
                conn.unregister("ml_inactive")

    def project_named(self, e: Entry, d: dict[str, Any]) -> None:
        """project.registered or .aliased: memories holding a name or alias it adds take the name."""
        self.shared.flush()
        for key, name in self.shared.projects.register(e, d).named():
            self.conn.execute(
                "UPDATE memories SET project = ? WHERE lower(project) = ? AND project <> ?", [name, key, name]
            )

    # -- erasure ---------------------------------------------------------------------

    def erased(self, e: Entry, d: dict[str, Any]) -> None:
        """memory.erased: the erased memories' rows, postings, links, atomisations and undo records.

        Their entries stay in the log, sealed under destroyed keys; a rebuild
        folds them as sealed and this drops them again, so an incremental
        fold and a rebuild agree.
        """
        self.shared.flush()
        conn = self.conn
        mids = erasure_subjects(d).memories
        if not mids:
            return
        # One statement per table over the event's ids, registered once (not bound per id).
        with fold.id_set(conn, "ml_erased", mids) as ids:
            got = conn.execute(
                f"SELECT count(*), coalesce(sum(doc_len), 0) FROM memories WHERE id IN {ids}"
            ).fetchone()
            if got is not None and int(got[0]):
                self.stats.docs -= int(got[0])
                self.stats.total_len -= int(got[1])
                docs = f"(SELECT stored_seq FROM memories WHERE id IN {ids})"
                got = conn.execute(f"DELETE FROM postings_delta WHERE doc IN {docs}").fetchone()
                self.stats.delta_rows -= int(got[0]) if got else 0
                if self.holding:
                    got = conn.execute(f"DELETE FROM {HELD} WHERE doc IN {docs}").fetchone()
                    self.stats.delta_rows -= int(got[0]) if got else 0
                got = conn.execute(f"DELETE FROM postings WHERE doc IN {docs}").fetchone()
                self.stats.main_rows -= int(got[0]) if got else 0
            for table, col in (
                ("memories", "id"),
                ("hidden", "id"),
                ("inactive", "id"),
                ("atomisations", "source_id"),
                ("migration_undo", "memory_id"),
                ("links", "src"),
                ("links", "dst"),
            ):
                conn.execute(f"DELETE FROM {table} WHERE {col} IN {ids}")

    HANDLES: ClassVar[dict[str, Handler]] = {
        v.MEMORY_STORED: stored,
        v.MEMORY_UPDATED: updated,
        v.MEMORY_ARCHIVED: archived,
        v.MEMORY_RESTORED: restored,
        v.LINK_CREATED: linked,
        v.LINK_REMOVED: unlinked,
        v.POLICY_SET: policy,
        v.ATOMISATION_REQUESTED: atomisation,
        v.ATOMISATION_COMPLETED: atomisation,
        v.ATOMISATION_FAILED: atomisation,
        v.MIGRATION_STARTED: migration,
        v.MIGRATION_COMPLETED: migration,
        v.MIGRATION_ROLLED_BACK: migration,
        v.MIGRATION_REFUSED: migration,
        vk.MEMORY_PROMOTED: promoted,
        vk.MEMORY_REJECTED: rejected,
        vk.MEMORY_REINFORCED: reinforced,
        vk.MEMORY_SUPERSEDED: superseded,
        vk.MEMORY_REINSTATED: reinstated,
        vk.PROJECT_REGISTERED: project_named,
        vk.PROJECT_ALIASED: project_named,
        v.MEMORY_ERASED: erased,
    }
