"""The fold: log entries in, projection rows out, in the transaction that records them.

`Fold.apply` consumes entries in seq order. Inserts (memories, their postings,
links, touches, atomisation records) are buffered and written in Arrow batches;
anything that reads or changes existing rows flushes the buffer first, so the
result is the same whatever the batch size — which is what makes an
incremental catch-up and a full rebuild give the same answers.

Search terms go into an inverted index in two tables: `postings`, kept sorted
by term so DuckDB's zone maps skip to the few row groups a query needs, and
`postings_delta`, where new documents land. Storing a memory appends to the
delta (cost independent of the corpus); when the delta outgrows a fraction of
the main table, `compact` merges them in sorted order and drops postings of
superseded document versions. Query results never depend on when that ran.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa

from mnemolog.eventlog.entry import Entry, to_jsonable

Upcast = Callable[[str, int, dict[str, Any]], dict[str, Any]]

COMPACT_MIN_ROWS = 50_000
COMPACT_FRACTION = 16

MEMORY_COLUMNS = [
    ("id", pa.string()),
    ("doc", pa.int32()),
    ("namespace", pa.string()),
    ("kind", pa.string()),
    ("title", pa.string()),
    ("content", pa.string()),
    ("tags", pa.list_(pa.string())),
    ("confidence", pa.float64()),
    ("source", pa.string()),
    ("metadata", pa.string()),
    ("created_at", pa.int64()),
    ("updated_at", pa.int64()),
    ("last_seen", pa.int64()),
    ("atom_of", pa.string()),
    ("source_span", pa.list_(pa.int32())),
    ("stored_seq", pa.int64()),
]
MEMORY_SCHEMA = pa.schema(MEMORY_COLUMNS)


def canonical_json(value: Any) -> str:
    return json.dumps(to_jsonable(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def merge_metadata(old: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Top-level merge: keys in the patch replace, a null value removes the key."""
    out = dict(old)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


@dataclass
class _Buffer:
    memories: dict[str, list[Any]] = field(default_factory=lambda: {c: [] for c, _ in MEMORY_COLUMNS})
    ids: set[str] = field(default_factory=set)
    links: list[tuple[int, str, str, str, str, int]] = field(default_factory=list)
    touches: list[tuple[str, int, str]] = field(default_factory=list)
    atomisations: list[tuple[int, str, str, int | None, str, int]] = field(default_factory=list)
    migrations: list[tuple[int, str, str, str, int]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.memories["id"]) + len(self.links) + len(self.touches) + len(self.atomisations)


class Fold:
    def __init__(self, conn: duckdb.DuckDBPyConnection, upcast: Upcast) -> None:
        self.conn = conn
        self.upcast = upcast
        self.buf = _Buffer()
        self.next_doc = self._counter("next_doc")
        self.delta_rows = self._counter("delta_rows")
        self.main_rows = self._counter("main_rows")

    # -- counters ------------------------------------------------------------

    def _counter(self, name: str) -> int:
        row = self.conn.execute("SELECT value FROM counters WHERE name = ?", [name]).fetchone()
        return int(row[0]) if row else 0

    def _save_counters(self) -> None:
        for name, value in (
            ("next_doc", self.next_doc),
            ("delta_rows", self.delta_rows),
            ("main_rows", self.main_rows),
        ):
            self.conn.execute("INSERT OR REPLACE INTO counters VALUES (?, ?)", [name, value])

    # -- the fold ------------------------------------------------------------

    def apply(self, entries: Iterable[Entry]) -> Entry | None:
        """Fold entries into the tables (caller owns the transaction); return the last one."""
        last: Entry | None = None
        for e in entries:
            data = self.upcast(e.type, e.tv, e.data)
            handler = _HANDLERS.get(e.type)
            if handler is not None:
                handler(self, e, data)
            self.buf.counts[e.type] = self.buf.counts.get(e.type, 0) + 1
            last = e
            if len(self.buf) >= 20_000:
                self.flush()
        self.flush()
        self._save_counters()
        return last

    def flush(self) -> None:
        b = self.buf
        if b.memories["id"]:
            self._flush_memories()
        if b.links:
            self._insert_rows("links", ["seq", "src", "dst", "relation", "metadata", "created_at"], b.links)
            b.links = []
        if b.touches:
            self._insert_rows("touches", ["memory_id", "seq", "type"], b.touches)
            b.touches = []
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
        if b.counts:
            for t, n in b.counts.items():
                self.conn.execute(
                    "INSERT INTO event_counts VALUES (?, ?) "
                    "ON CONFLICT (type) DO UPDATE SET n = event_counts.n + excluded.n",
                    [t, n],
                )
            b.counts = {}

    def _insert_rows(self, table: str, cols: list[str], rows: list[tuple[Any, ...]]) -> None:
        arrays = list(zip(*rows, strict=True))
        tbl = pa.table({c: list(a) for c, a in zip(cols, arrays, strict=True)})
        self.conn.register("ml_rows", tbl)
        try:
            self.conn.execute(
                f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(cols)} FROM ml_rows"
            )
        finally:
            self.conn.unregister("ml_rows")

    def _flush_memories(self) -> None:
        b = self.buf
        tbl = pa.table(b.memories, schema=MEMORY_SCHEMA)
        b.memories = {c: [] for c, _ in MEMORY_COLUMNS}
        b.ids = set()
        conn = self.conn
        conn.register("ml_rows", tbl)
        try:
            conn.execute(
                "CREATE OR REPLACE TEMP TABLE ml_stage AS "
                "SELECT *, ml_doc_terms(title, content) AS terms FROM ml_rows"
            )
        finally:
            conn.unregister("ml_rows")
        conn.execute(
            """INSERT INTO memories (id, doc, namespace, kind, title, content, tags, confidence,
                source, metadata, created_at, updated_at, last_seen, atom_of, source_span,
                stored_seq, last_event_seq, doc_len)
               SELECT id, doc, namespace, kind, title, content, tags, confidence, source, metadata,
                created_at, updated_at, last_seen, atom_of, source_span, stored_seq, stored_seq,
                len(terms) FROM ml_stage"""
        )
        row = conn.execute(
            """INSERT INTO postings_delta SELECT term, doc, count(*)::INTEGER
               FROM (SELECT doc, unnest(terms) AS term FROM ml_stage) GROUP BY term, doc"""
        ).fetchone()
        self.delta_rows += int(row[0]) if row else 0
        conn.execute("DROP TABLE ml_stage")

    # -- handlers --------------------------------------------------------------

    def _exists(self, memory_id: str) -> bool:
        if memory_id in self.buf.ids:
            return True
        row = self.conn.execute("SELECT 1 FROM memories WHERE id = ?", [memory_id]).fetchone()
        return row is not None

    def stored(self, e: Entry, d: dict[str, Any]) -> None:
        mid = str(d.get("id", ""))
        if not mid or self._exists(mid):
            return  # a repeated id never replaces the first memory (first write wins)
        m = self.buf.memories
        span = d.get("source_span")
        m["id"].append(mid)
        m["doc"].append(self.next_doc)
        self.next_doc += 1
        m["namespace"].append(str(d.get("namespace", "default")))
        m["kind"].append(str(d.get("kind", "observation")))
        m["title"].append(d.get("title"))
        m["content"].append(str(d.get("content", "")))
        m["tags"].append([str(t) for t in d.get("tags", [])])
        conf = d.get("confidence")
        m["confidence"].append(float(conf) if conf is not None else None)
        m["source"].append(d.get("source"))
        m["metadata"].append(canonical_json(d.get("metadata") or {}))
        m["created_at"].append(int(d.get("created_at") or e.ts))
        m["updated_at"].append(e.ts)
        m["last_seen"].append(d.get("last_seen"))
        m["atom_of"].append(d.get("atom_of"))
        m["source_span"].append(list(span) if span else None)
        m["stored_seq"].append(e.seq)
        self.buf.ids.add(mid)
        self.buf.touches.append((mid, e.seq, e.type))
        if d.get("atom_of"):
            self.buf.touches.append((str(d["atom_of"]), e.seq, e.type))

    def updated(self, e: Entry, d: dict[str, Any]) -> None:
        self.flush()
        mid = str(d.get("id", ""))
        row = self.conn.execute(
            "SELECT metadata, title, content FROM memories WHERE id = ?", [mid]
        ).fetchone()
        if row is None:
            return
        sets: list[str] = ["updated_at = ?", "last_event_seq = ?"]
        args: list[Any] = [e.ts, e.seq]
        for col in ("namespace", "kind", "source"):
            if d.get(col) is not None:
                sets.append(f"{col} = ?")
                args.append(str(d[col]))
        if d.get("confidence") is not None:
            sets.append("confidence = ?")
            args.append(float(d["confidence"]))
        if d.get("last_seen") is not None:
            sets.append("last_seen = ?")
            args.append(int(d["last_seen"]))
        if d.get("tags") is not None:
            sets.append("tags = ?")
            args.append([str(t) for t in d["tags"]])
        if d.get("metadata") is not None:
            sets.append("metadata = ?")
            args.append(canonical_json(merge_metadata(json.loads(row[0]), d["metadata"])))
        title = d["title"] if "title" in d and d["title"] is not None else row[1]
        content = d["content"] if d.get("content") is not None else row[2]
        if title != row[1] or content != row[2]:
            # A new document version: its postings go in under a fresh ordinal; the old
            # version's postings are dead from now on and dropped at compaction.
            doc = self.next_doc
            self.next_doc += 1
            sets += ["title = ?", "content = ?", "doc = ?", "doc_len = len(ml_doc_terms(?, ?))"]
            args += [title, content, doc, title, content]
            r = self.conn.execute(
                """INSERT INTO postings_delta SELECT term, ?, count(*)::INTEGER
                   FROM (SELECT unnest(ml_doc_terms(?, ?)) AS term) GROUP BY term""",
                [doc, title, content],
            ).fetchone()
            self.delta_rows += int(r[0]) if r else 0
        self.conn.execute(f"UPDATE memories SET {', '.join(sets)} WHERE id = ?", [*args, mid])
        self.buf.touches.append((mid, e.seq, e.type))

    def archived(self, e: Entry, d: dict[str, Any]) -> None:
        self.flush()
        mid = str(d.get("id", ""))
        if d.get("by") == "atomisation":
            self.conn.execute(
                "UPDATE memories SET atomisation_archived_at = ?, last_event_seq = ? WHERE id = ?",
                [e.ts, e.seq, mid],
            )
        else:
            self.conn.execute(
                "UPDATE memories SET archived_at = ?, archive_reason = ?, last_event_seq = ? WHERE id = ?",
                [e.ts, d.get("reason"), e.seq, mid],
            )
        self.buf.touches.append((mid, e.seq, e.type))

    def restored(self, e: Entry, d: dict[str, Any]) -> None:
        self.flush()
        mid = str(d.get("id", ""))
        self.conn.execute(
            "UPDATE memories SET archived_at = NULL, archive_reason = NULL, "
            "atomisation_archived_at = NULL, last_event_seq = ? WHERE id = ?",
            [e.seq, mid],
        )
        self.buf.touches.append((mid, e.seq, e.type))

    def linked(self, e: Entry, d: dict[str, Any]) -> None:
        src, dst = str(d.get("src", "")), str(d.get("dst", ""))
        self.buf.links.append(
            (e.seq, src, dst, str(d.get("relation", "")), canonical_json(d.get("metadata") or {}), e.ts)
        )
        self.buf.touches.append((src, e.seq, e.type))
        if dst != src:
            self.buf.touches.append((dst, e.seq, e.type))

    def policy(self, e: Entry, d: dict[str, Any]) -> None:
        self.flush()
        ns = str(d.get("namespace", ""))
        if d.get("cleared"):
            self.conn.execute("DELETE FROM policies WHERE namespace = ?", [ns])
        else:
            self.conn.execute(
                "INSERT OR REPLACE INTO policies VALUES (?, ?, ?)",
                [ns, canonical_json(d.get("policy") or {}), e.seq],
            )

    def atomisation(self, e: Entry, d: dict[str, Any]) -> None:
        status = e.type.split(".", 1)[1]
        src = str(d.get("source_id", ""))
        if status == "completed":
            self.flush()
            atoms = d.get("atom_ids") or []
            self.conn.execute(
                "UPDATE memories SET atomised_into = ?, last_event_seq = ? WHERE id = ?",
                [len(atoms), e.seq, src],
            )
            for a in atoms:
                self.buf.touches.append((str(a), e.seq, e.type))
        self.buf.atomisations.append((e.seq, src, status, d.get("request_seq"), canonical_json(d), e.ts))
        self.buf.touches.append((src, e.seq, e.type))

    def migration(self, e: Entry, d: dict[str, Any]) -> None:
        self.buf.migrations.append((e.seq, e.type, str(d.get("run_id", "")), canonical_json(d), e.ts))

    # -- compaction ------------------------------------------------------------

    def needs_compaction(self) -> bool:
        return self.delta_rows > max(COMPACT_MIN_ROWS, self.main_rows // COMPACT_FRACTION)

    def compact(self) -> None:
        """Merge the delta into the sorted main postings, dropping dead document versions."""
        self.flush()
        conn = self.conn
        conn.execute(
            """CREATE OR REPLACE TABLE postings_new AS
               SELECT p.term, p.doc, p.tf
               FROM (SELECT * FROM postings UNION ALL SELECT * FROM postings_delta) p
               SEMI JOIN memories m ON m.doc = p.doc
               ORDER BY p.term, p.doc"""
        )
        conn.execute("DROP TABLE postings")
        conn.execute("ALTER TABLE postings_new RENAME TO postings")
        conn.execute("DELETE FROM postings_delta")
        row = conn.execute("SELECT count(*) FROM postings").fetchone()
        self.main_rows = int(row[0]) if row else 0
        self.delta_rows = 0
        self._save_counters()


_HANDLERS: dict[str, Callable[[Fold, Entry, dict[str, Any]], None]] = {
    "memory.stored": Fold.stored,
    "memory.updated": Fold.updated,
    "memory.archived": Fold.archived,
    "memory.restored": Fold.restored,
    "link.created": Fold.linked,
    "policy.set": Fold.policy,
    "atomisation.requested": Fold.atomisation,
    "atomisation.completed": Fold.atomisation,
    "atomisation.failed": Fold.atomisation,
    "migration.started": Fold.migration,
    "migration.completed": Fold.migration,
    "migration.rolled_back": Fold.migration,
    "migration.refused": Fold.migration,
}
