"""The fold's contract, the pass that runs the folds, and what several folds read.

Every room of `projections/` that keeps tables folds the log into them with
a `Fold`: `HANDLES` maps each event type it reads to its handler, `TABLES`
names the tables it owns, the only ones it writes (as an event processor
with its own view: pyeventsourcing's `EventProcessor.topics`). One event
may concern several rooms (`memory.erased` drops rows in each): each room
declares it and does its own part. `engine.FOLDS` lists the folds, and
which event types none of them reads (`engine.IGNORED`).

`FoldPass` runs them over entries in seq order, inside the caller's
transaction: each entry is upcast once and handed to every fold that
declared its type, in the order of the list (a fold that reads another's
table relies on that order; `engine.FOLDS` says where). The pass itself
keeps the two tables about every entry: `touches` (which memories it
touched: the vocabulary's rule, for each type some fold reads) and
`event_counts`.

A fold may buffer inserts; a handler that reads or changes existing rows
first calls `Shared.flush`, which flushes every fold's buffers (the pass's
own rows wait for the end of the batch: no fold reads them), so the
result is the same whatever the batch size: which is what makes an
incremental catch-up and a full rebuild give the same answers.

Folds are total: they never raise on a payload (`mnemolog log append` can
write any map, and one odd entry must not make the projection unbuildable).

No fold imports another. What several read lives here: the project index
(names and aliases as of this point of the log: the knowledge fold writes
its tables, every fold that stores a project name canonicalises through
it), who an erasure names, whether an entry changed a memory, and the one
JSON text of a map.
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple, TypeVar

import duckdb

from mnemolog.eventlog.format import sealing
from mnemolog.eventlog.format.entry import Entry, to_jsonable
from mnemolog.eventlog.vocabulary.events import read_id, touched_ids
from mnemolog.eventlog.vocabulary.knowledge import PROJECT_NAME, PROJECT_REGISTERED
from mnemolog.projections.db import sql_literal
from mnemolog.projections.knowledge.rules import canonical_name, project_key

Upcast = Callable[[str, int, dict[str, Any]], dict[str, Any]]
Handler = Callable[[Any, Entry, dict[str, Any]], None]

FLUSH_ROWS = 20_000  # entries (and touches) since the last flush that force one
SMALL_FLUSH = 8  # at most this many rows: parameterised statements, no Arrow round trip


def canonical_json(value: Any) -> str:
    """The one JSON text the tables store for a map: sorted keys, compact, bytes as hex."""
    return json.dumps(
        to_jsonable(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr
    )


@dataclass
class IndexStats:
    """Corpus statistics kept in proj_state: BM25's N and total length, and the index's parts."""

    docs: int = 0
    total_len: int = 0
    main_rows: int = 0
    delta_rows: int = 0


class RepeatedId(Exception):
    """A bulk insert met an id the table holds already; the batch must be redone carefully."""


def insert_rows(
    conn: duckdb.DuckDBPyConnection, table: str, cols: Sequence[str], rows: list[tuple[Any, ...]]
) -> None:
    """Append rows to a table: a few as one parameterised statement, many through Arrow."""
    if len(rows) <= SMALL_FLUSH:
        one = "(" + ", ".join("?" * len(cols)) + ")"
        conn.execute(
            f"INSERT INTO {table} ({', '.join(cols)}) VALUES {', '.join([one] * len(rows))}",
            [v for r in rows for v in r],
        )
        return
    import pyarrow as pa  # only a fold big enough to need it pays for the import

    arrays = list(zip(*rows, strict=True))
    tbl = pa.table({c: list(a) for c, a in zip(cols, arrays, strict=True)})
    conn.register("ml_rows", tbl)
    try:
        conn.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(cols)} FROM ml_rows")
    finally:
        conn.unregister("ml_rows")


@contextmanager
def threads(conn: duckdb.DuckDBPyConnection, n: int | None) -> Iterator[None]:
    """DuckDB's worker threads set to `n` inside the block (None: left as they are).

    The setting is the database instance's: the caller holds the projection session, so no
    other statement of this process runs meanwhile, and the previous value is put back.
    """
    if n is None:
        yield
        return
    row = conn.execute("SELECT current_setting('threads')").fetchone()
    before = int(row[0]) if row else None
    conn.execute(f"SET threads = {int(n)}")
    try:
        yield
    except BaseException:
        # The failed statement may have aborted the transaction (a repeated id, which the
        # engine redoes carefully): a SET there would fail too and hide the error. Another
        # connection of the same instance puts it back (the setting is the instance's).
        if before is not None:
            with suppress(duckdb.Error):
                other = conn.cursor()
                try:
                    other.execute(f"SET threads = {before}")
                finally:
                    other.close()
        raise
    if before is not None:
        conn.execute(f"SET threads = {before}")


#: At most this many ids go inline as literals; more are registered as a table (`id_set`).
SMALL_SET = 64


@contextmanager
def id_set(
    conn: duckdb.DuckDBPyConnection, name: str, ids: Iterable[str] | Iterable[int], *, ints: bool = False
) -> Iterator[str]:
    """`ids` as a subquery for `... IN {ids}` inside the block (VARCHAR, or BIGINT with `ints`).

    Set-wise statements over many ids: bound as literals (projections.db), a
    list costs DuckDB a parse and a cast per element, ~100 ms for 10k ids,
    where a registered Arrow table `name` costs a few; a few ids stay inline,
    since registering costs about a millisecond.
    """
    values = list(ids)
    if len(values) <= SMALL_SET:
        yield f"(SELECT unnest({sql_literal(values)}::{'BIGINT' if ints else 'VARCHAR'}[]))"
        return
    import pyarrow as pa  # only a statement over many ids pays for the import

    try:
        tbl = pa.table({"id": pa.array(values, pa.int64() if ints else pa.string())})
    except UnicodeEncodeError:
        for x in values:
            sql_literal(x)  # the BadInput that names the value which is not Unicode text
        raise
    conn.register(name, tbl)
    try:
        yield f"(SELECT id FROM {name})"
    finally:
        conn.unregister(name)


# -- what several folds read ---------------------------------------------------


def load_project_index(conn: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Every registered name and alias, by its `project_key`, to its project's name."""
    index = {project_key(str(n)): str(n) for (n,) in conn.execute("SELECT name FROM projects").fetchall()}
    aliases = conn.execute("SELECT alias_key, name FROM project_aliases").fetchall()
    index.update({str(k): str(n) for k, n in aliases})
    return index


def _project_name(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    stripped = value.strip()
    return stripped if PROJECT_NAME.fullmatch(stripped) else None


class Registration(NamedTuple):
    """What one project.registered or project.aliased adds: (name, description) and aliases.

    `aliases` holds (key, alias as written, project name); a name or alias a
    registered project already holds keeps its first owner and is left out.
    """

    project: tuple[str, str] | None
    aliases: list[tuple[str, str, str]]

    def named(self) -> list[tuple[str, str]]:
        """(key, project name) of every name and alias added, the project's own first."""
        own = [(project_key(self.project[0]), self.project[0])] if self.project else []
        return own + [(k, n) for k, _, n in self.aliases]


class ProjectIndex:
    """Project names and aliases as of this point of the log (read from the tables when first needed).

    `register` applies a project event once, whichever fold asks first, and
    gives every fold that asks the same answer.
    """

    def __init__(self, conn: duckdb.DuckDBPyConnection) -> None:
        self._conn = conn
        self._index: dict[str, str] | None = None
        self._applied: tuple[int, Registration] | None = None

    def _loaded(self) -> dict[str, str]:
        if self._index is None:
            self._index = load_project_index(self._conn)
        return self._index

    def canonical(self, name: str) -> str:
        """The registered project ``name`` stands for, as of this point of the log."""
        return canonical_name(self._loaded(), name)

    def register(self, e: Entry, d: dict[str, Any]) -> Registration:
        """What project.registered or project.aliased `e` adds (applied to the index the first time)."""
        if self._applied is not None and self._applied[0] == e.seq:
            return self._applied[1]
        index = self._loaded()
        project: tuple[str, str] | None = None
        owner: str | None = None
        wanted: list[Any] = []
        if e.type == PROJECT_REGISTERED:
            name = _project_name(d.get("name"))
            if name is not None and project_key(name) not in index:
                description = d.get("description")
                project = (name, description if isinstance(description, str) else "")
                index[project_key(name)] = owner = name
                aliases = d.get("aliases")
                wanted = aliases if isinstance(aliases, list) else []
        else:
            given = _project_name(d.get("name"))
            owner = index.get(project_key(given)) if given else None
            wanted = [d.get("alias")]
        added: list[tuple[str, str, str]] = []
        for alias in wanted:
            alias_name = _project_name(alias)
            if owner is None or alias_name is None or project_key(alias_name) in index:
                continue
            index[project_key(alias_name)] = owner
            added.append((project_key(alias_name), alias_name, owner))
        reg = Registration(project, added)
        self._applied = (e.seq, reg)
        return reg


class Erasure(NamedTuple):
    """The subjects a memory.erased names, each list sorted, unique, without empty ids."""

    memories: list[str]
    interactions: list[str]
    documents: list[str]
    others: list[str]  # subjects that are none of the above (the packs')
    keys: list[str]


def erasure_subjects(d: dict[str, Any]) -> Erasure:
    """Who memory.erased `d` names (read totally: a field of the wrong type names nobody)."""

    def ids_of(name: str) -> list[str]:
        raw = d.get(name)
        return sorted({read_id(x) for x in raw} - {""}) if isinstance(raw, list) else []

    mids, inter, docs = ids_of("ids"), ids_of("interactions"), ids_of("documents")
    other = sorted(set(ids_of("subjects")) - {*mids, *inter, *docs})
    return Erasure(mids, inter, docs, other, ids_of("keys"))


def changed_memory(conn: duckdb.DuckDBPyConnection, memory_id: str, seq: int) -> bool:
    """Whether the entry at `seq` changed memory `memory_id` (its fold ran before the caller's)."""
    row = conn.execute("SELECT last_event_seq FROM memories WHERE id = ?", [memory_id]).fetchone()
    return row is not None and int(row[0]) == seq


def has_table(conn: duckdb.DuckDBPyConnection, table: str) -> bool:
    return conn.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = ?", [table]).fetchone() is not None


# -- the contract ----------------------------------------------------------------


@dataclass
class Shared:
    """What every fold of one pass shares: the connection, the corpus statistics, the project index."""

    conn: duckdb.DuckDBPyConnection
    stats: IndexStats
    careful: bool
    projects: ProjectIndex
    flush: Callable[[], None] = field(repr=False)
    # The last batch of a rebuild, which ends with `settle(force=True)` before it commits: a
    # fold may hold rows back for `settle` to write at once (the postings, sorted) instead
    # of appending them flush by flush.
    bulk: bool = False


class Fold:
    """One room's fold: the event types it reads (`HANDLES`) and the tables it owns (`TABLES`)."""

    HANDLES: ClassVar[Mapping[str, Handler]] = {}
    TABLES: ClassVar[tuple[str, ...]] = ()

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.conn = shared.conn

    def flush(self) -> None:
        """Write what this fold buffered (the pass calls it; handlers call `shared.flush`)."""

    def settle(self, *, force: bool) -> None:
        """The end of a catch-up (`force`: of a rebuild): work deferred to the last batch."""


F = TypeVar("F", bound=Fold)


class FoldPass:
    """One pass of the folds over a batch of entries. `careful=True` redoes a batch that repeats an id;
    `bulk=True`: a rebuild's last batch (`Shared.bulk`)."""

    def __init__(
        self,
        conn: duckdb.DuckDBPyConnection,
        upcast: Upcast,
        stats: IndexStats,
        folds: Sequence[type[Fold]],
        *,
        careful: bool = False,
        opened: Mapping[int, tuple[bytes, dict[str, Any]]] | None = None,
        bulk: bool = False,
    ) -> None:
        self.conn = conn
        self.upcast = upcast
        # seq -> (leaf hash, the values its box holds): entries this process's writer sealed and
        # just appended. Taken only for an entry whose bytes hash to that leaf (those very bytes,
        # so that very box); any other entry's box is opened with the keys, as always.
        self.opened = opened or {}
        self.shared = Shared(conn, stats, careful, ProjectIndex(conn), self._flush_folds, bulk)
        self.folds = [f(self.shared) for f in folds]
        self._dispatch = _dispatch(self.folds)
        self.touches: list[tuple[str, int, str]] = []
        self.counts: dict[str, int] = {}

    @property
    def stats(self) -> IndexStats:
        return self.shared.stats

    def fold(self, kind: type[F]) -> F:
        """This pass's fold of that class."""
        return next(f for f in self.folds if isinstance(f, kind))

    def apply(self, entries: Iterable[Entry]) -> Entry | None:
        """Fold entries into the tables (caller owns the transaction); return the last one."""
        last: Entry | None = None
        dispatch = self._dispatch
        upcast = self.upcast
        opened = self.opened
        pending = len(self.touches)
        for e in entries:
            t = e.type
            handle = dispatch.get(t)
            if handle is not None:
                own = opened.get(e.seq) if opened else None
                if own is not None and own[0] == e.leaf:
                    data = upcast(t, e.tv, sealing.opened_with(e.data, own[1]))
                else:
                    data = upcast(t, e.tv, e.data)
                if isinstance(data, dict):
                    handle(e, data)
                    for mid in touched_ids(t, data):
                        self.touches.append((mid, e.seq, t))
                        pending += 1
            # Not aliased: a flush replaces the pass's lists and maps.
            self.counts[t] = self.counts.get(t, 0) + 1
            last = e
            pending += 1
            if pending >= FLUSH_ROWS:
                self.flush()
                pending = 0
        self.flush()
        return last

    def settle(self, *, force: bool) -> None:
        """The end of a catch-up: every fold's deferred work (the index compaction)."""
        for f in self.folds:
            f.settle(force=force)

    def _flush_folds(self) -> None:
        for f in self.folds:
            f.flush()

    def flush(self) -> None:
        """Every fold's buffers, then the pass's own rows.

        A handler's flush (`Shared.flush`, before it reads rows) leaves the
        pass's rows buffered: no fold reads them, and a batch of updates
        would otherwise pay for a statement per table per entry.
        """
        self._flush_folds()
        if self.touches:
            insert_rows(self.conn, "touches", ["memory_id", "seq", "type"], self.touches)
            self.touches = []
        if self.counts:
            # One statement for every type in the batch: a store is a few statements, each counts.
            items = list(self.counts.items())
            values = ", ".join(["(?, ?)"] * len(items))
            args = [x for t, n in items for x in (t, n)]
            done = {
                r[0]
                for r in self.conn.execute(
                    f"UPDATE event_counts SET n = event_counts.n + v.n FROM (VALUES {values}) v(type, n) "
                    "WHERE event_counts.type = v.type RETURNING event_counts.type",
                    args,
                ).fetchall()
            }
            missing = [(t, n) for t, n in items if t not in done]
            if missing:
                self.conn.execute(
                    f"INSERT INTO event_counts VALUES {', '.join(['(?, ?)'] * len(missing))}",
                    [x for t, n in missing for x in (t, n)],
                )
            self.counts = {}


#: The tables the pass keeps itself, about every entry whatever folds read it.
PASS_TABLES = ("touches", "event_counts")


def _dispatch(folds: Sequence[Fold]) -> dict[str, Callable[[Entry, dict[str, Any]], None]]:
    """Event type -> one callable running, in the folds' order, every handler declared for it."""
    by_type: dict[str, list[Callable[[Entry, dict[str, Any]], None]]] = {}
    for f in folds:
        for t, handler in f.HANDLES.items():
            by_type.setdefault(t, []).append(types.MethodType(handler, f))
    return {t: hs[0] if len(hs) == 1 else _chain(tuple(hs)) for t, hs in by_type.items()}


def _chain(
    handlers: tuple[Callable[[Entry, dict[str, Any]], None], ...],
) -> Callable[[Entry, dict[str, Any]], None]:
    def run(e: Entry, d: dict[str, Any]) -> None:
        for h in handlers:
            h(e, d)

    return run
