"""Read queries over the projection: recall (BM25, any term), search (all keywords), list, get.

BM25 itself (k1 = 1.2, b = 0.5 by default, `[recall] k1` and `b`; idf = ln(1 +
(N - df + 0.5) / (df + 0.5))) is `bm25.score`, a pure function over posting arrays; this module parses
queries, reads postings (from the tables or the connection's copy of the
index, see projections/recall/bm25.py), applies filters and fetches rows. N, the
average document length and df are over every stored memory (archived ones
too) with its current text, so scores depend on the memories, never on the
physical state of the index (what is in the delta, whether compaction has
run, whether a copy served the query). Scores are exact integers multiples
of 1/SCORE_SCALE; ties break by the newest memory first (stored_seq).

The archive guard is applied before the top k is cut: with nothing but the
guard, the hidden docs (usually few) are left out of the scores; other
filters are checked on the ranked candidates, a growing chunk at a time, so
a recall never reads the memories table beyond what it returns.

Reads have no side effects: no access counters, no "last recalled" stamps.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import duckdb

from mnemolog.projections.memory.model import MEMORY_FIELDS, MEMORY_SELECT, Edge, Links, Memory, row_to_memory
from mnemolog.projections.recall import bm25
from mnemolog.projections.recall.text import MAX_TERM_LEN, STOP_WORDS, doc_text
from mnemolog.projections.schema import visible

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    from mnemolog.projections.lazymod import numpy as np

__all__ = [
    "MEMORY_FIELDS",
    "MEMORY_SELECT",
    "Filters",
    "get",
    "links_of",
    "list_memories",
    "query_terms",
    "query_words",
    "rank_bm25",
    "rank_lexical",
    "recall",
    "row_to_memory",
    "search",
    "stats",
]

K1 = bm25.K1
B = bm25.B
SCORE_SCALE = bm25.SCORE_SCALE
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
    statuses: tuple[str, ...] = ("active",)
    project: str | None = None  # canonical; "" selects the memories of no project
    domains: tuple[str, ...] = ()
    # µs since the epoch: memories whose `metadata.vault.expires_at` day has ended by then are
    # left out (None: no expiry check; the Substrate passes the current time).
    expired_at: int | None = None
    # Leave out the memory a `supersedes` link points at, as context packs do.
    hide_superseded: bool = False
    # A token's scope (substrate.scope): only memories in these namespaces (and below), and of
    # these projects or of none. None: no such bound. An empty tuple selects nothing.
    within: tuple[str, ...] | None = None
    projects_within: tuple[str, ...] | None = None

    def lapsed(self) -> tuple[str, list[Any]]:
        """SQL selecting the docs (as `doc`) left out as expired or superseded by a link ('' if none).

        An expiry is the first µs after the `expires_at` day (UTC), as context
        packs read it (projections/context/sources.py: expiry_us). The LIKE
        skips the JSON parse for the memories without an expiry (nearly all).
        """
        parts: list[str] = []
        args: list[Any] = []
        if self.expired_at is not None:
            parts.append(
                "SELECT stored_seq AS doc FROM memories WHERE metadata LIKE '%expires_at%' AND "
                "epoch_us(TRY_CAST(json_extract_string(metadata, '$.vault.expires_at') AS DATE) + 1) <= ?"
            )
            args.append(self.expired_at)
        if self.hide_superseded:
            parts.append(
                "SELECT m.stored_seq AS doc FROM links k JOIN memories m ON m.id = k.dst "
                "WHERE k.relation = 'supersedes'"
            )
        return " UNION ".join(parts), args

    @property
    def only_guard(self) -> bool:
        """True when nothing but the archive guard and the default status restrict the memories."""
        return (
            self.namespace is None
            and not self.kinds
            and not self.tags
            and self.atom_of is None
            and self.statuses == ("active",)
            and self.project is None
            and not self.domains
            and self.within is None
            and self.projects_within is None
        )

    @property
    def guard_and_project(self) -> bool:
        """True when nothing but the archive guard, the default status and a project restrict
        the memories (a context pack's tiers ask for one project, or for none)."""
        return self.project is not None and replace(self, project=None).only_guard

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
        if self.within is not None:
            ors = [f"{alias}.namespace = ? OR starts_with({alias}.namespace, ?)" for _ in self.within]
            clauses.append(f"({' OR '.join(ors) or 'FALSE'})")
            for ns in self.within:
                args += [ns, ns.rstrip("/") + "/"]
        if self.projects_within is not None:
            marks = ", ".join("?" * (len(self.projects_within) + 1))
            clauses.append(f"{alias}.project IN ({marks})")
            args += ["", *self.projects_within]
        if self.kinds:
            clauses.append(f"{alias}.kind IN ({', '.join('?' * len(self.kinds))})")
            args += list(self.kinds)
        if self.tags:
            clauses.append(f"list_has_all({alias}.tags, ?::VARCHAR[])")
            args.append(list(self.tags))
        if self.atom_of is not None:
            clauses.append(f"{alias}.atom_of = ?")
            args.append(self.atom_of)
        if self.statuses:
            clauses.append(f"{alias}.status IN ({', '.join('?' * len(self.statuses))})")
            args += list(self.statuses)
        if self.project is not None:
            clauses.append(f"{alias}.project = ?")
            args.append(self.project)
        if self.domains:
            clauses.append(f"list_has_all({alias}.domains, ?::VARCHAR[])")
            args.append(list(self.domains))
        lapsed, largs = self.lapsed()
        if lapsed:
            clauses.append(f"{alias}.stored_seq NOT IN ({lapsed})")
            args += largs
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


@dataclass(frozen=True)
class Parsed:
    """A query's terms and words, and the projection's position when it was read."""

    terms: list[str]
    words: list[str]
    position: bm25.Position


_ASCII_WORD = re.compile("[a-z0-9]+")
_STOP = frozenset(STOP_WORDS)
_stems: dict[str, str] = {}
MAX_STEMS = 200_000
#: New words of one query stemmed as columns of one row; more go as one list.
STEM_COLUMNS = 32


def ascii_words(text: str) -> list[str] | None:
    """`ml_words` of an ASCII text, computed here; None for any other text.

    In ASCII the separator class is exactly "not a letter or a digit" and
    lowercasing is the same everywhere, so the words are the runs of [a-z0-9]
    (a test holds this to the macro). Beyond ASCII, lowercasing and accent
    stripping are left to the macro alone.
    """
    if not text.isascii():
        return None
    return [w for w in _ASCII_WORD.findall(text.lower()) if len(w) <= MAX_TERM_LEN]


def _stem_all(conn: duckdb.DuckDBPyConnection, words: list[str]) -> None:
    """Put the stems of these words in the cache (a stem is a pure function of its word)."""
    missing = [w for w in dict.fromkeys(words) if w not in _stems]
    if not missing:
        return
    if len(missing) <= STEM_COLUMNS:
        # One column per word: binding a list costs more than the stems (a query's new words
        # cost a statement of about 190 µs instead of 320).
        cols = ", ".join(["stem(?, 'english')"] * len(missing))
        row = conn.execute(f"SELECT {cols}", missing).fetchone()
        stems = list(row) if row else missing
    else:
        sql = "SELECT list_transform(?::VARCHAR[], w -> stem(w, 'english'))"
        row = conn.execute(sql, [missing]).fetchone()
        stems = row[0] if row else missing
    if len(_stems) + len(missing) > MAX_STEMS:
        _stems.clear()
    _stems.update(zip(missing, stems, strict=True))


def parse(conn: duckdb.DuckDBPyConnection, text: str) -> Parsed:
    """Terms, words and the projection's position, with as few statements as possible.

    When the engine has noted the position and the query is ASCII, the words
    are split here and the stems come from a cache (a statement only for
    words never stemmed before); otherwise one statement asks the macros.
    """
    position = bm25.known_position(conn)
    words = ascii_words(text) if position is not None else None
    if position is not None and words is not None:
        kept = [w for w in words if w not in _STOP]
        _stem_all(conn, kept)
        return Parsed(_distinct([_stems[w] for w in kept]), _distinct(words), position)
    row = conn.execute(
        "SELECT ml_terms(?), ml_words(?), last_seq, log_id, docs, total_len FROM proj_state", [text, text]
    ).fetchone()
    if row is None:
        return Parsed([], [], (-1, b"", 0, 0))
    return Parsed(
        _distinct(row[0]), _distinct(row[1]), (int(row[2]), bytes(row[3]), int(row[4]), int(row[5]))
    )


def restriction(filters: Filters) -> tuple[str, list[Any]]:
    """A join (on rows `l` with a `doc` column) that keeps only the memories the filters allow."""
    if filters.only_guard:
        # Only active memories, as by default: candidates, superseded and invalid ones are
        # left out by an anti-join with `inactive`, like the archived with `hidden`.
        inactive = "ANTI JOIN inactive i ON i.doc = l.doc"
        lapsed, largs = filters.lapsed()
        if lapsed:
            inactive += f" ANTI JOIN ({lapsed}) x ON x.doc = l.doc"
        if filters.include_archived:
            return inactive, largs
        return f"ANTI JOIN hidden r ON r.doc = l.doc {inactive}", largs
    where, args = filters.sql("m")
    return f"SEMI JOIN (SELECT m.stored_seq AS doc FROM memories m WHERE {where}) r ON r.doc = l.doc", args


def _left_out(
    conn: duckdb.DuckDBPyConnection, copy: bm25.MemoryIndex | None, include_archived: bool
) -> bm25.I64:
    """The docs the default filters leave out: the archive guard's (unless archived ones are
    included) and those not active. Usually few; a copy keeps them until the position moves."""
    key = "inactive" if include_archived else "hidden_or_inactive"
    if copy is not None and key in copy.left_out:
        return copy.left_out[key]
    sql = "SELECT doc FROM inactive" + ("" if include_archived else " UNION SELECT doc FROM hidden")
    arr = np.asarray(conn.execute(sql).fetchnumpy()["doc"], dtype=np.int64)
    if copy is not None:
        copy.left_out[key] = arr
    return arr


def _allowed(conn: duckdb.DuckDBPyConnection, docs: list[int], filters: Filters) -> set[int]:
    where, args = filters.sql("m")
    ints = ", ".join(str(int(d)) for d in docs)
    return {
        int(r[0])
        for r in conn.execute(
            f"SELECT m.stored_seq FROM memories m WHERE m.stored_seq IN ({ints}) AND {where}", args
        ).fetchall()
    }


def _filtered(
    conn: duckdb.DuckDBPyConnection,
    ranked: list[tuple[int, int]],
    limit: int | None,
    check: Callable[[list[int]], set[int]],
) -> list[tuple[int, int]]:
    """The ranked docs that pass `check`, asked a growing chunk at a time in score order."""
    passed: list[tuple[int, int]] = []
    pos, chunk = 0, max((limit or 16) * 2, 16)
    while pos < len(ranked) and (limit is None or len(passed) < limit):
        part = ranked[pos : pos + chunk]
        ok = check([d for d, _ in part])
        passed += [x for x in part if x[0] in ok]
        pos += len(part)
        chunk *= 4
    return passed if limit is None else passed[:limit]


def rank_bm25(
    conn: duckdb.DuckDBPyConnection,
    parsed: Parsed,
    filters: Filters,
    limit: int | None,
    *,
    require_all: bool = False,
    copy: bm25.MemoryIndex | None = None,
    k1: float = bm25.K1,
    b: float = bm25.B,
) -> list[tuple[int, int]]:
    """(doc, score as an integer multiple of 1/SCORE_SCALE) of the allowed memories, best first.

    `copy` is this connection's copy of the index at the parsed position, if it has one.
    """
    terms = parsed.terms
    if not terms:
        return []
    postings = copy.postings(terms) if copy is not None else bm25.fetch_postings(conn, terms)
    n_docs, total_len = parsed.position[2], parsed.position[3]
    if by_exclusion(filters, copy):
        exclude = excluded(conn, copy, filters)
        return bm25.score(
            postings, n_docs, total_len, limit=limit, require_all=require_all, exclude=exclude, k1=k1, b=b
        )
    ranked = bm25.score(postings, n_docs, total_len, limit=None, require_all=require_all, k1=k1, b=b)
    return _filtered(conn, ranked, limit, lambda docs: _allowed(conn, docs, filters))


DAY_US = 86_400_000_000


def by_exclusion(filters: Filters, copy: bm25.MemoryIndex | None) -> bool:
    """Whether `excluded` expresses these filters: the default ones always, and with a copy of
    the index those plus a project (the copy keeps the docs of other projects)."""
    return filters.only_guard or (copy is not None and filters.guard_and_project)


def excluded(conn: duckdb.DuckDBPyConnection, copy: bm25.MemoryIndex | None, filters: Filters) -> bm25.I64:
    """The docs the default filters leave out, and those expired or superseded by a link; with
    a project (see `by_exclusion`), those of any other project too."""
    exclude = _guard_excluded(conn, copy, filters)
    if filters.project is None:
        return exclude
    key = f"project:{filters.project}"
    other = copy.left_out.get(key) if copy is not None else None
    if other is None:
        # `project = ?` is not true: another project's memories, and any without one (NULL).
        sql = "SELECT stored_seq AS doc FROM memories WHERE (project = ?) IS NOT TRUE"
        other = np.asarray(conn.execute(sql, [filters.project]).fetchnumpy()["doc"], dtype=np.int64)
        if copy is not None:
            copy.left_out[key] = other
    if copy is None:
        return np.union1d(exclude, other)
    # The union too (a pack asks for it twice, every pack), by the sets it is made of.
    both = f"{key}|{_guard_key(filters)}"
    held = copy.left_out.get(both)
    if held is None:
        held = copy.left_out[both] = np.union1d(exclude, other)
    return held


def _guard_key(filters: Filters) -> str:
    """What names the set `_guard_excluded` gives for these filters in a copy's `left_out`."""
    if not filters.lapsed()[0]:
        return "inactive" if filters.include_archived else "hidden_or_inactive"
    day = None if filters.expired_at is None else filters.expired_at // DAY_US
    return f"lapsed:{day}:{filters.hide_superseded}:{filters.include_archived}"


def _guard_excluded(
    conn: duckdb.DuckDBPyConnection, copy: bm25.MemoryIndex | None, filters: Filters
) -> bm25.I64:
    exclude = _left_out(conn, copy, filters.include_archived)
    lapsed, largs = filters.lapsed()
    if lapsed:
        # Every expiry is a UTC midnight, so within one UTC day the expired set is the same:
        # the copy keeps it for the day (and for its position, like the rest of `left_out`).
        day = None if filters.expired_at is None else filters.expired_at // DAY_US
        key = f"lapsed:{day}:{filters.hide_superseded}"
        both = f"{key}:{filters.include_archived}"
        if copy is not None and both in copy.left_out:
            return copy.left_out[both]  # the union too: every recall asks for it
        more = copy.left_out.get(key) if copy is not None else None
        if more is None:
            more = np.asarray(conn.execute(lapsed, largs).fetchnumpy()["doc"], dtype=np.int64)
            if copy is not None:
                copy.left_out[key] = more
        exclude = np.union1d(exclude, more)
        if copy is not None:
            copy.left_out[both] = exclude
    return exclude


#: How many of BM25's best a neighbour-aware ranking starts from, at least (their neighbours join).
NEIGHBOUR_POOL = 200

# A memory's group: the siblings of one atomised parent, else the memories of one source
# (a conversation, a capture, an import batch that names its source) in one namespace.
_GROUP = "CASE WHEN m.atom_of IS NOT NULL THEN 'atom:' || m.atom_of ELSE 'source:' || m.source END"


# Each memory of a group with the previous and next one (-1: none), in stored order.
_NEIGHBOURS = f"""SELECT m.stored_seq AS doc, lag(m.stored_seq, 1, -1) OVER w AS prev,
                         lead(m.stored_seq, 1, -1) OVER w AS next
                  FROM memories m WHERE m.atom_of IS NOT NULL OR m.source IS NOT NULL
                  WINDOW w AS (PARTITION BY m.namespace, {_GROUP} ORDER BY m.stored_seq)"""


def _neighbour_table(
    conn: duckdb.DuckDBPyConnection, copy: bm25.MemoryIndex
) -> tuple[bm25.I64, bm25.I64, bm25.I64]:
    """Every doc's neighbours as the copy keeps them (docs sorted, previous, next), read once."""
    if copy.neighbours is None:
        t = conn.execute(f"{_NEIGHBOURS} ORDER BY doc").fetchnumpy()
        copy.neighbours = (
            np.asarray(t["doc"], dtype=np.int64),
            np.asarray(t["prev"], dtype=np.int64),
            np.asarray(t["next"], dtype=np.int64),
        )
    return copy.neighbours


def neighbours(
    conn: duckdb.DuckDBPyConnection, docs: list[int], copy: bm25.MemoryIndex | None = None
) -> dict[int, tuple[int, int]]:
    """Each doc's neighbours: the memories stored just before and after it (-1: none) in its
    namespace and group (_GROUP). A memory with neither a source nor a parent has none.

    Adjacency is over every stored memory, whatever the filters: whether a
    neighbour may contribute is the caller's question (it must itself pass
    them). One window over the memories gives every memory's neighbours (a
    few ms at 10k); a copy of the index keeps them until the projection
    moves, a one-shot read keeps only the docs asked for.
    """
    if not docs:
        return {}
    if copy is None:
        ints = ", ".join(str(int(d)) for d in sorted(set(docs)))
        rows = conn.execute(f"SELECT doc, prev, next FROM ({_NEIGHBOURS}) WHERE doc IN ({ints})").fetchall()
        got = {int(d): (int(p), int(n)) for d, p, n in rows}
        return {d: got.get(d, (-1, -1)) for d in docs}
    all_docs, prev, nxt = _neighbour_table(conn, copy)
    want = np.asarray(docs, dtype=np.int64)
    at = np.minimum(np.searchsorted(all_docs, want), max(len(all_docs) - 1, 0))
    found = (all_docs[at] == want) if len(all_docs) else np.zeros(len(want), dtype=bool)
    return {
        int(d): (int(prev[i]), int(nxt[i])) if ok else (-1, -1)
        for d, i, ok in zip(want, at, found, strict=True)
    }


@dataclass(frozen=True)
class Lexical:
    """A BM25 result: its score (own + neighbour contribution) and the two parts, as integer
    multiples of 1/SCORE_SCALE, and which neighbour contributed (None: none did)."""

    doc: int
    score: int
    own: int
    neighbour: int = 0
    neighbour_doc: int | None = None


def rank_lexical(
    conn: duckdb.DuckDBPyConnection,
    parsed: Parsed,
    filters: Filters,
    limit: int,
    *,
    copy: bm25.MemoryIndex | None = None,
    k1: float = bm25.K1,
    b: float = bm25.B,
    neighbour_weight: float = 0.0,
    neighbour_decay: float = 0.0,
) -> list[Lexical]:
    """BM25 with neighbour context: score(d) = bm25(d) + α · the best allowed neighbour's bm25.

    Memories stored in sequence from one source answer together (a question
    and its answer are two turns): a memory with none of the query's terms
    can rank through its neighbour's. The neighbours are the memories just
    before and after d in its group, counted whole, and, when
    `neighbour_decay` is above 0, the ones two places away, counted at that
    share (an answer often comes a turn later). A neighbour contributes only
    when the filters would let recall show it. α = 0 is plain BM25. The
    contribution is rounded to an integer multiple of 1/SCORE_SCALE, so
    scores stay exact and the order deterministic (ties: newest first).
    """
    if not parsed.terms:
        return []
    alpha = float(neighbour_weight)
    if alpha <= 0:
        return [Lexical(d, s, s) for d, s in rank_bm25(conn, parsed, filters, limit, copy=copy, k1=k1, b=b)]
    n_docs, total_len = parsed.position[2], parsed.position[3]
    pool = max(limit * 4, NEIGHBOUR_POOL)

    def scores() -> tuple[bm25.I64, bm25.F64, bm25.I64]:
        terms = parsed.terms
        postings = copy.postings(terms) if copy is not None else bm25.fetch_postings(conn, terms)
        return bm25.totals(postings, n_docs, total_len, k1=k1, b=b)

    # Every match's score, as arrays (no list of every match): `own` looks neighbours up in them.
    # The filters apply after, so a pack's tiers (one question, one position) share them.
    key = ("lexical", parsed.position, tuple(parsed.terms), k1, b)
    uniq, tot, _ = bm25.shared_totals(key, scores)
    live = np.ones(len(uniq), dtype=bool)
    if by_exclusion(filters, copy):
        exclude = excluded(conn, copy, filters)
        if len(exclude):
            live &= ~np.isin(uniq, exclude)
        base = uniq[bm25.best(uniq, tot, np.flatnonzero(live), pool)]

        def allowed(docs: bm25.I64) -> bm25.I64:
            return docs[~np.isin(docs, exclude)] if len(exclude) else docs
    else:
        ranked = bm25.best(uniq, tot, np.arange(len(uniq)), None)
        full = list(zip(uniq[ranked].tolist(), tot[ranked].astype(np.int64).tolist(), strict=True))
        base = np.asarray(
            [d for d, _ in _filtered(conn, full, pool, lambda docs: _allowed(conn, docs, filters))],
            dtype=np.int64,
        )

        def allowed(docs: bm25.I64) -> bm25.I64:
            if not len(docs):
                return docs
            return docs[
                np.isin(docs, np.asarray(sorted(_allowed(conn, docs.tolist(), filters)), dtype=np.int64))
            ]

    if not len(base):
        return []
    return lend(
        uniq,
        tot,
        live,
        base,
        _adjacency(conn, copy),
        allowed,
        alpha=alpha,
        decay=float(neighbour_decay),
        limit=limit,
    )


Lookup = Callable[["bm25.I64"], tuple["bm25.I64", "bm25.I64"]]


# Set operations on the few hundred docs of a pool, by sorting: numpy's own (setdiff1d,
# union1d, isin) go through its hash-based unique and cost 3-5 times more at this size
# (setdiff1d of 800 against 200: 78 µs, this 15 µs). Results are the same sorted, unique docs.
def _sorted_unique(a: bm25.I64) -> bm25.I64:
    s = np.sort(a)
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if len(s) else s


def _member(a: bm25.I64, sorted_b: bm25.I64) -> npt.NDArray[np.bool_]:
    """Whether each of `a` is in `sorted_b` (ascending)."""
    if not len(sorted_b):
        return np.zeros(a.shape, dtype=np.bool_)
    at = np.minimum(np.searchsorted(sorted_b, a), len(sorted_b) - 1)
    out: npt.NDArray[np.bool_] = sorted_b[at] == a
    return out


def _setdiff(a: bm25.I64, b: bm25.I64) -> bm25.I64:
    """np.setdiff1d(a, b): the sorted unique docs of `a` not in `b`."""
    u = _sorted_unique(a)
    return u[~_member(u, np.sort(b))]


def lend(
    uniq: bm25.I64,
    tot: bm25.F64,
    live: npt.NDArray[np.bool_],
    base: bm25.I64,
    lookup: Lookup,
    allowed: Callable[[bm25.I64], bm25.I64],
    *,
    alpha: float,
    decay: float,
    limit: int,
) -> list[Lexical]:
    """The neighbour term over BM25's pool, as arrays (`rank_lexical`).

    `uniq` (ascending), `tot` and `live` are every matching doc, its own
    score and whether it may be shown; `base` is the pool (BM25's best
    allowed docs); `lookup` gives docs' previous and next neighbours (-1:
    none, and for -1); `allowed` keeps the docs the filters allow. The
    pool's allowed adjacent docs join it; each member then gains α times the
    best of w · own(n) over its ring (before and after at weight 1, two
    before and two after at `decay` when it is above 0), n counted only when
    recall could show it, the first best winning ties.
    """

    def own(docs: bm25.I64) -> bm25.F64:
        """Each doc's own BM25 score (0: no match, or not live)."""
        if not len(uniq):
            return np.zeros(docs.shape, dtype=np.float64)
        at = np.minimum(np.searchsorted(uniq, docs), len(uniq) - 1)
        return np.where((uniq[at] == docs) & live[at], tot[at], 0.0)

    prev, nxt = lookup(base)
    ring1 = np.concatenate((prev, nxt))
    joined = allowed(_setdiff(ring1[ring1 >= 0], base))
    jprev, jnxt = lookup(joined)
    ok = np.concatenate((base, joined))
    prev, nxt = np.concatenate((prev, jprev)), np.concatenate((nxt, jnxt))
    cols = [prev, nxt]
    weights = [1.0, 1.0]
    if decay > 0:
        # The second ring is reached through the first, shown or not: adjacency is stored order.
        cols += [lookup(prev)[0], lookup(nxt)[1]]
        weights += [decay, decay]
    rings = np.stack(cols, axis=1)
    outer = _setdiff(rings[rings >= 0], ok)
    shown = _sorted_unique(np.concatenate((ok, allowed(outer))))
    # w · own(n) for each ring member n that recall could show (0 otherwise); the first best
    # wins ties, as the members are tried in order: before, after, two before, two after.
    lent = np.where((rings >= 0) & _member(rings, shown), np.asarray(weights) * own(rings), 0.0)
    pick = np.argmax(lent, axis=1)
    best = lent[np.arange(len(ok)), pick]
    add = np.floor(alpha * best + 0.5)
    mine = own(ok)
    total = mine + add
    keep = np.flatnonzero(total > 0)
    keep = keep[np.lexsort((-ok[keep], -total[keep]))][:limit]
    by = rings[keep, pick[keep]]
    return [
        Lexical(d, t, o, a, n if a else None)
        for d, t, o, a, n in zip(
            ok[keep].tolist(),
            total[keep].astype(np.int64).tolist(),
            mine[keep].astype(np.int64).tolist(),
            add[keep].astype(np.int64).tolist(),
            by.tolist(),
            strict=True,
        )
    ]


def _adjacency(conn: duckdb.DuckDBPyConnection, copy: bm25.MemoryIndex | None) -> Lookup:
    """A lookup of docs' previous and next neighbours (-1: none, and for -1), as `neighbours`."""

    def lookup(docs: bm25.I64) -> tuple[bm25.I64, bm25.I64]:
        if copy is not None:
            all_docs, prev, nxt = _neighbour_table(conn, copy)
            if not len(all_docs) or not len(docs):
                none = np.full(len(docs), -1, dtype=np.int64)
                return none, none.copy()
            at = np.minimum(np.searchsorted(all_docs, docs), len(all_docs) - 1)
            found = all_docs[at] == docs
            return np.where(found, prev[at], -1), np.where(found, nxt[at], -1)
        want = [d for d in dict.fromkeys(docs.tolist()) if d >= 0]
        nb = neighbours(conn, want, None)
        pairs = [nb.get(d, (-1, -1)) for d in docs.tolist()]
        return (
            np.asarray([p for p, _ in pairs], dtype=np.int64).reshape(len(docs)),
            np.asarray([n for _, n in pairs], dtype=np.int64).reshape(len(docs)),
        )

    return lookup


MAX_CACHED_ROWS = 20_000
#: Row fetches at one position after which the copy loads every row (up to MAX_CACHED_ROWS).
PRELOAD_AFTER = 8


def _rows(
    conn: duckdb.DuckDBPyConnection, docs: list[int], copy: bm25.MemoryIndex | None = None
) -> dict[int, Memory]:
    """The memories of these stored_seqs, keyed by it.

    Two steps, both cheap for a few rows whatever the corpus: zone maps find the
    stored_seqs (the table is in their order) and give the ids, then the primary
    key fetches the rows. A scan for the whole rows would decompress every
    column around each match, three times slower at 100k memories. A copy of
    the index keeps the rows it has seen at its position, and after
    PRELOAD_AFTER fetches at one position (a home being read, not written)
    every row, when there are at most MAX_CACHED_ROWS.
    """
    if not docs:
        return {}
    raw: dict[int, tuple[Any, ...]] = {}
    if copy is not None:
        copy.fetches += 1
        if not copy.all_rows and copy.fetches >= PRELOAD_AFTER and copy.n_docs <= MAX_CACHED_ROWS:
            # A position that keeps being read (no store in between): one scan for every row
            # costs what a few dozen fetches by key do, and leaves none to fetch.
            every = conn.execute(f"SELECT m.stored_seq, {MEMORY_SELECT} FROM memories m").fetchall()
            copy.rows = {int(r[0]): tuple(r[1:]) for r in every}
            copy.all_rows = True
        raw = {d: copy.rows[d] for d in docs if d in copy.rows}
    want = [d for d in docs if d not in raw]
    if want:
        if copy is not None and all(d in copy.ids for d in want):
            ids = [copy.ids[d] for d in want]
        else:
            ints = ", ".join(str(int(d)) for d in want)
            sql = f"SELECT id FROM memories WHERE stored_seq IN ({ints})"
            ids = [r[0] for r in conn.execute(sql).fetchall()]
        if ids:
            marks = ", ".join("?" * len(ids))
            fetched = conn.execute(
                f"SELECT m.stored_seq, {MEMORY_SELECT} FROM memories m WHERE m.id IN ({marks})", ids
            ).fetchall()
            for r in fetched:
                raw[int(r[0])] = tuple(r[1:])
            if copy is not None:
                if len(copy.rows) > MAX_CACHED_ROWS:
                    copy.rows.clear()
                    copy.all_rows = False
                copy.rows.update((int(r[0]), tuple(r[1:])) for r in fetched)
    return {d: row_to_memory(r) for d, r in raw.items()}


def with_rows(
    conn: duckdb.DuckDBPyConnection, ranked: list[tuple[int, int]], copy: bm25.MemoryIndex | None = None
) -> list[tuple[Memory, float]]:
    rows = _rows(conn, [d for d, _ in ranked], copy)
    return [(rows[d], s / SCORE_SCALE) for d, s in ranked if d in rows]


def recall(
    conn: duckdb.DuckDBPyConnection, query: str, filters: Filters, limit: int = 10
) -> list[tuple[Memory, float]]:
    """Natural-language recall: rank by any matching term (never all-terms-must-match)."""
    parsed = parse(conn, query)
    copy = bm25.index_for(conn, parsed.position) if parsed.terms else None
    return with_rows(conn, rank_bm25(conn, parsed, filters, limit, copy=copy), copy)


def search(
    conn: duckdb.DuckDBPyConnection, query: str, filters: Filters, limit: int = 10
) -> list[tuple[Memory, float]]:
    """Keyword search: every keyword must appear as a whole word (of the title, tags or content).

    The index finds the memories holding every keyword's term (stems match
    more than the words), then the words are checked on the candidates in
    score order, a growing chunk at a time, until `limit` pass.
    """
    parsed = parse(conn, query)
    words = parsed.words
    if not words:
        return []
    check = f"list_has_all(ml_words({doc_text('m.title', 'm.tags', 'm.content')}), ?::VARCHAR[])"
    if not parsed.terms:
        # Only stop words ("to be"): no index to narrow with, so scan.
        where, args = filters.sql("m")
        rows = conn.execute(
            f"SELECT m.stored_seq FROM memories m WHERE {where} AND {check} "
            "ORDER BY m.stored_seq DESC LIMIT ?",
            [*args, words, limit],
        ).fetchall()
        return with_rows(conn, [(int(r[0]), 0) for r in rows])
    copy = bm25.index_for(conn, parsed.position)
    ranked = rank_bm25(conn, parsed, filters, None, require_all=True, copy=copy)

    def has_words(docs: list[int]) -> set[int]:
        return {
            int(r[0])
            for r in conn.execute(
                f"SELECT m.stored_seq FROM memories m "
                f"WHERE m.stored_seq IN ({', '.join('?' * len(docs))}) AND {check}",
                [*docs, words],
            ).fetchall()
        }

    return with_rows(conn, _filtered(conn, ranked, limit, has_words), copy)


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
        "statuses": dict(
            conn.execute("SELECT status, count(*) FROM memories GROUP BY status ORDER BY status").fetchall()
        ),
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


def scoped_stats(conn: duckdb.DuckDBPyConnection, filters: Filters) -> dict[str, Any]:
    """`stats` for a token's scope: counts over the memories the filters allow, nothing home-wide."""
    where, args = filters.sql("m")

    def rows(sql: str) -> list[tuple[Any, ...]]:
        return conn.execute(sql.format(where=where), args).fetchall()

    total = rows("SELECT count(*) FROM memories m WHERE {where}")[0][0]
    return {
        "memories": total,
        "visible": rows(f"SELECT count(*) FROM memories m WHERE {{where}} AND {visible('m')}")[0][0],
        "statuses": dict(
            rows("SELECT status, count(*) FROM memories m WHERE {where} GROUP BY status ORDER BY 1")
        ),
        "namespaces": rows("SELECT count(DISTINCT namespace) FROM memories m WHERE {where}")[0][0],
        "kinds": dict(rows("SELECT kind, count(*) FROM memories m WHERE {where} GROUP BY kind ORDER BY 1")),
        "scoped": True,
    }


def allowed_ids(conn: duckdb.DuckDBPyConnection, ids: list[str], filters: Filters) -> set[str]:
    """Which of `ids` are memories the filters allow."""
    if not ids:
        return set()
    where, args = filters.sql("m")
    found = conn.execute(
        f"SELECT m.id FROM memories m WHERE m.id IN (SELECT unnest(?::VARCHAR[])) AND {where}", [ids, *args]
    ).fetchall()
    return {str(r[0]) for r in found}


def touched_with(conn: duckdb.DuckDBPyConnection, memory_id: str) -> list[str]:
    """Every memory an entry touching `memory_id` also touches (itself included)."""
    rows = conn.execute(
        "SELECT DISTINCT t2.memory_id FROM touches t1 JOIN touches t2 ON t2.seq = t1.seq "
        "WHERE t1.memory_id = ?",
        [memory_id],
    ).fetchall()
    return [str(r[0]) for r in rows]
