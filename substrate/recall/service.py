"""The recall service: every read that selects memories by a question or by filters.

`recall` (and its `report`), `search`, `list`, a context pack's memory tiers
and triage's duplicate check all come here, so the filters mean one thing
through every door (Python, CLI, MCP, HTTP): `filters` is the one place a
request's namespace, kinds, tags, statuses, project, domains, expiry and
archive guard become a `Filters`, confined to the token's scope when one is
applied, and `resolve` is the one place its project alias is canonicalised
and its expiry judged as of the point asked about. The mode (bm25 | vector |
hybrid), the query's vector and the fallback are `policy`'s; the ranking
math is the projection's (projections/recall).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, NotRequired, ParamSpec, Protocol, TypedDict

import duckdb

from mnemolog.eventlog.errors import BadInput, UsageError
from mnemolog.eventlog.store.writer import Clock, LogWriter
from mnemolog.eventlog.vocabulary.knowledge import DEFAULT_STATUS, check_statuses
from mnemolog.projections.embedding import vectors
from mnemolog.projections.memory.model import Memory
from mnemolog.projections.recall import hybrid
from mnemolog.projections.recall import query as q
from mnemolog.projections.recall.query import Filters
from mnemolog.substrate.embedding.service import Embedding
from mnemolog.substrate.events.limits import check_kind, check_limit, check_namespace, check_tags
from mnemolog.substrate.hooks import HookChain
from mnemolog.substrate.memory import asof
from mnemolog.substrate.recall import hits as recall_hits
from mnemolog.substrate.recall import policy as recall_policy
from mnemolog.substrate.session import Session, Sessions
from mnemolog.substrate.tenancy import scope

__all__ = ["Projects", "Recall", "RecallReport"]

Ranker = Callable[[duckdb.DuckDBPyConnection, str, Filters, int], builtins.list[tuple[Memory, float]]]


def results_of(
    report: Callable[P, RecallReport],
) -> Callable[P, builtins.list[Memory]]:
    """A method that answers with only the results of `report`, whose signature it keeps."""

    @functools.wraps(report)
    def recall(*args: P.args, **kwargs: P.kwargs) -> builtins.list[Memory]:
        return report(*args, **kwargs)["results"]

    recall.__name__ = "recall"
    recall.__signature__ = inspect.signature(report).replace(  # type: ignore[attr-defined]
        return_annotation="builtins.list[Memory]"
    )
    recall.__qualname__ = report.__qualname__.rsplit(".", 1)[0] + ".recall"
    recall.__doc__ = (
        "Rank memories for a natural-language query: the results of `report` (see there), best first."
    )
    return recall


class RecallReport(TypedDict):
    """A recall's results and how they were ranked.

    `mode` is the mode used; `fallback` says why it is not the one asked for
    (the default mode is hybrid when the home embeds, and falls back to bm25
    when the query cannot be embedded now).
    """

    mode: str
    requested: str | None
    fallback: str | None
    results: builtins.list[Memory]
    as_of: NotRequired[dict[str, Any]]  # {"seq": N, "ts": ISO time}: the log prefix answered from


P = ParamSpec("P")


class Projects(Protocol):
    """What recall needs of the knowledge loop: its domain vocabulary and its project names."""

    def domains(self, values: Iterable[str]) -> builtins.list[str]: ...

    def canonical_project(self, s: Session, project: str | None, registry: Any = None) -> str: ...


class _At:
    """The sessions of a home at one point of its log (None: now), for the recall policy."""

    def __init__(self, recall: Recall, at: asof.AsOf | None) -> None:
        self.recall = recall
        self.at = at

    def session(self) -> contextlib.AbstractContextManager[Session]:
        return self.recall.reading(self.at)


class Recall:
    """Recall, search and list over a home (`Substrate.retrieval`), and the filters they share."""

    def __init__(
        self,
        sessions: Sessions,
        *,
        past: asof.AsOfProjections,
        hooks: HookChain,
        projects: Projects,
        embedding: Embedding,
        fusion: hybrid.Fusion,
        clock: Clock,
        state_dir: Path,
    ) -> None:
        self.sessions = sessions
        self.past = past
        self.hooks = hooks
        self.projects = projects
        self.embedding = embedding
        #: How hybrid ranking fuses its two sides (`[recall]` of config.toml).
        self.fusion = fusion
        self.clock = clock
        self.state_dir = state_dir

    # -- the filters ------------------------------------------------------------------

    def filters(
        self,
        namespace: str | None = None,
        descendants: bool = True,
        kinds: Sequence[str] = (),
        tags: Sequence[str] = (),
        include_archived: bool = False,
        statuses: Sequence[str] = (DEFAULT_STATUS,),
        project: str | None = None,
        domains: Sequence[str] = (),
        include_expired: bool = False,
        *,
        scoped: bool = True,
    ) -> Filters:
        """A request's filters, checked; confined to the applied token's scope unless not `scoped`.

        Expired memories are hidden as context packs hide them, unless asked for; a memory a
        `supersedes` link points at too, unless superseded ones are asked for. The project is
        canonicalised by `resolve`, in the session the read runs in.
        """
        if namespace is not None:
            check_namespace(namespace)
        for k in kinds:
            check_kind(k)
        f = Filters(
            namespace,
            descendants,
            tuple(kinds),
            tuple(check_tags(tags)),
            include_archived,
            statuses=check_statuses(statuses),
            project=project,
            domains=tuple(self.projects.domains(domains)),
            expired_at=None if include_expired else self.clock(),
            hide_superseded="superseded" not in statuses,
        )
        return scope.bound(f, scope.current()) if scoped else f

    def resolve(self, s: Session, f: Filters, at: asof.AsOf | None = None) -> Filters:
        """The filters as a read in `s` applies them: the project canonical (the registry is read in
        the session), and, as of a point, a memory's expiry judged at that point's time, not now."""
        if at is not None and f.expired_at is not None:
            f = replace(f, expired_at=at.ts)
        if f.project is None:
            return f
        return replace(f, project=self.projects.canonical_project(s, f.project))

    # -- sessions now and in the past ----------------------------------------------------

    @contextmanager
    def reading(self, at: asof.AsOf | None) -> Iterator[Session]:
        """A session on the live tables, or on the fold of the log up to `at` (read-only)."""
        if at is None:
            with self.sessions.session() as s:
                yield s
            return

        def refuse() -> LogWriter:
            raise UsageError("an as-of read cannot write")

        with self.past.session(at) as (conn, proj):
            yield Session(conn, refuse, proj, self.hooks)

    def point(self, value: int | str | None) -> asof.AsOf | None:
        """The log point an `as_of` names (a seq or an ISO 8601 UTC time); None: now."""
        return None if value is None else asof.resolve(self.past.log, asof.parse(value))

    # -- ranking, for every caller ---------------------------------------------------------

    def rank(
        self,
        s: Session,
        plan: recall_policy.Plan,
        query: str,
        f: Filters,
        limit: int,
        *,
        min_score: float | None = None,
        in_scope: bool = False,
    ) -> tuple[recall_policy.Plan, builtins.list[tuple[Memory, hybrid.Ranked]]]:
        """The `limit` best memories under `f` (confined to the applied token's scope) in the plan's
        mode, with the home's fusion: what `recall` and a context pack's memory tiers rank with."""
        f = scope.bound(f, scope.current())
        return recall_policy.rank(
            s, plan, query, f, limit, self.fusion, min_score=min_score, in_scope=in_scope
        )

    def project(self, s: Session, name: str | None) -> str | None:
        """The canonical name of a project given by any of its names (None: none given)."""
        return None if name is None else self.projects.canonical_project(s, name)

    def similar(self, s: Session, text: str, limit: int, exclude: str | None = None) -> builtins.list[Memory]:
        """The memories most like `text` by BM25 recall, best first, that an unscoped `recall` with
        the default filters could return (active, not archived, not expired, not superseded by a
        link), across the home: triage's duplicate check and the neighbours a triager reads."""
        f = self.resolve(s, self.filters(scoped=False))
        found = q.recall(s.conn, text, f, limit=limit + 1)
        return [m for m, _score in found if m["id"] != exclude][:limit]

    def nearest(self, s: Session, memory_id: str) -> tuple[str, float] | None:
        """The memory nearest `memory_id` by embedding among those `similar` draws from, and their
        cosine similarity (None: no vectors, or none for it yet): triage's duplicate by meaning."""
        return vectors.nearest_to_memory(s.conn, memory_id, self.resolve(s, self.filters(scoped=False)))

    # -- reads ---------------------------------------------------------------------------

    def report(
        self,
        query: str,
        *,
        limit: int = 10,
        namespace: str | None = None,
        descendants: bool = True,
        kinds: Sequence[str] = (),
        tags: Sequence[str] = (),
        include_archived: bool = False,
        statuses: Sequence[str] = (DEFAULT_STATUS,),
        project: str | None = None,
        domains: Sequence[str] = (),
        mode: hybrid.Mode | None = None,
        explain: bool = False,
        include_expired: bool = False,
        min_score: float | None = None,
        as_of: int | str | None = None,
    ) -> RecallReport:
        """Rank memories for a natural-language query (any term may match), with the mode used and why
        it differs from the one asked for (if it does). Writes nothing to the log; the ids it
        answers with are noted in the local recall-hit ledger, which decay reads.

        `mode`: "bm25" (title, tags and content), "vector" (cosine of the
        embeddings), "hybrid" (both, fused), or None: hybrid when the home
        embeds, else bm25. `explain` adds each result's ranks and scores under
        `explain`.

        Only active memories unless ``statuses`` says otherwise; ``project``
        ("" = memories of no project) and ``domains`` (all of them) narrow it.
        ``as_of`` (a seq or an ISO 8601 UTC time) answers from the log as it stood then, and the
        report says which seq it answered at (`as_of`: seq and ts).
        """
        f = self.filters(
            namespace, descendants, kinds, tags, include_archived, statuses, project, domains, include_expired
        )
        return self._report(query, f, limit, mode, explain, min_score, as_of)

    #: `report`'s results alone: what `mem.recall(...)` answers (the parameters are `report`'s).
    recall = results_of(report)

    def _report(
        self,
        query: str,
        f: Filters,
        limit: int,
        mode: hybrid.Mode | None,
        explain: bool,
        min_score: float | None,
        as_of: int | str | None,
    ) -> RecallReport:
        if min_score is not None and (
            isinstance(min_score, bool) or not isinstance(min_score, int | float) or not min_score >= 0
        ):
            raise UsageError("min_score must be a number >= 0", field="min_score", found=repr(min_score)[:40])
        if not isinstance(query, str) or not query.strip():
            raise BadInput("the query is empty", field="query")
        recall_policy.check_mode(mode)
        n = check_limit(limit)
        at = self.point(as_of)

        def ranked(s: Session, plan: recall_policy.Plan) -> RecallReport:
            if at is not None:
                plan = recall_policy.prefix_vectors(s.conn, plan)
            plan, found = self.rank(s, plan, query, self.resolve(s, f, at), n, min_score=min_score)
            results: builtins.list[Memory] = []
            for m, r in found:
                m["score"] = r.score
                if explain:
                    m["explain"] = {"mode": plan.mode, **r.explain()}
                    if r.neighbour_doc is not None:
                        row = s.conn.execute(
                            "SELECT id FROM memories WHERE stored_seq = ?", [r.neighbour_doc]
                        ).fetchone()
                        m["explain"]["neighbour_id"] = row[0] if row else None
                    if plan.mode == "hybrid":
                        m["explain"]["fusion"] = self.fusion.method
                results.append(m)
            return {
                "mode": plan.mode,
                "requested": plan.requested,
                "fallback": plan.fallback,
                "results": results,
            }

        # One session when the plan needs no model call (bm25, or a query whose vector is
        # kept); otherwise the query is embedded between two, outside the projection lock.
        with self.reading(at) as s:
            ready = recall_policy.plan_in(s, self.embedding, query, mode)
            if ready is not None:
                report = ranked(s, ready)
        if ready is None:
            plan = recall_policy.plan(_At(self, at), self.embedding, query, mode)
            with self.reading(at) as s:
                report = ranked(s, plan)
        results = report["results"]
        if at is not None:
            report["as_of"] = at.to_json()
        else:  # decay counts a hit as a reference; a look into the past references nothing now
            recall_hits.note(self.state_dir, (m["id"] for m in results), self.clock())
        return report

    def search(
        self,
        query: str,
        *,
        limit: int = 10,
        namespace: str | None = None,
        descendants: bool = True,
        kinds: Sequence[str] = (),
        tags: Sequence[str] = (),
        include_archived: bool = False,
        statuses: Sequence[str] = (DEFAULT_STATUS,),
        project: str | None = None,
        domains: Sequence[str] = (),
        include_expired: bool = False,
        as_of: int | str | None = None,
    ) -> builtins.list[Memory]:
        """Exact keywords, all required, ranked by BM25.

        Only active memories unless ``statuses`` says otherwise; ``project``
        ("" = memories of no project) and ``domains`` (all of them) narrow it.
        ``as_of`` (a seq or an ISO 8601 UTC time) answers from the log as it stood then.
        """
        f = self.filters(
            namespace, descendants, kinds, tags, include_archived, statuses, project, domains, include_expired
        )
        return self._ranked(q.search, query, f, limit, as_of)

    def _ranked(
        self, ranker: Ranker, query: str, f: Filters, limit: int, as_of: int | str | None = None
    ) -> builtins.list[Memory]:
        if not isinstance(query, str) or not query.strip():
            raise BadInput("the query is empty", field="query")
        at = self.point(as_of)
        with self.reading(at) as s:
            out = []
            for m, score in ranker(s.conn, query, self.resolve(s, f, at), check_limit(limit)):
                m["score"] = score
                out.append(m)
            return out

    def list(
        self,
        *,
        limit: int = 50,
        offset: int = 0,
        namespace: str | None = None,
        descendants: bool = True,
        kinds: Sequence[str] = (),
        tags: Sequence[str] = (),
        include_archived: bool = False,
        statuses: Sequence[str] = (DEFAULT_STATUS,),
        project: str | None = None,
        domains: Sequence[str] = (),
        include_expired: bool = False,
        as_of: int | str | None = None,
    ) -> builtins.list[Memory]:
        """Memories newest first (by when stored); active ones unless ``statuses`` says otherwise.

        Expired memories (`metadata.vault.expires_at` passed) are left out unless `include_expired`.
        ``as_of`` (a seq or an ISO 8601 UTC time) lists them as the log stood then.
        """
        f = self.filters(
            namespace, descendants, kinds, tags, include_archived, statuses, project, domains, include_expired
        )
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < 2**63:
            raise UsageError(
                "offset must be an integer in [0, 2**63)", field="offset", found=repr(offset)[:40]
            )
        at = self.point(as_of)
        with self.reading(at) as s:
            return q.list_memories(s.conn, self.resolve(s, f, at), check_limit(limit), offset)

    def listed(self, s: Session, f: Filters, page: int = 1000) -> builtins.list[Memory]:
        """Every memory `f` selects, newest first, read in pages in the caller's session (one state)."""
        out: builtins.list[Memory] = []
        f = self.resolve(s, f)
        while chunk := q.list_memories(s.conn, f, page, len(out)):
            out += chunk
        return out
