"""The knowledge loop's commands: projects, trusted state, capture, extraction, triage,
promotion and rejection, reinforcement, decay, and the domain-prefix migration.

`Knowledge` turns each command into signed events through sessions (the
projection lock, tables caught up). A model is never called while the lock
is held: a command reads what it needs in one session, asks the extractor or
triager outside it, and writes in a second session after checking that
nobody decided in between. Every outcome is an event, failures included
(`extraction.failed`, `triage.failed`), so nothing is dropped silently.

Project names are canonicalised at every boundary by the registry
(`ProjectRegistry.canonical`): what a command is given, what a model
suggests, and (in the fold) what the log holds.
"""

from __future__ import annotations

import contextvars
import logging
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from mnemolog.curators.config import HOST_ENV, MODEL_ENV, LlmConfig, resolve_llm
from mnemolog.curators.knowledge.extract import Extraction, InteractionText
from mnemolog.curators.knowledge.triage import Neighbour, TriageItem, TriageVerdict, decide
from mnemolog.curators.outcome import ModelFailure
from mnemolog.eventlog.errors import Informational, MnemologError, NotFound, UsageError
from mnemolog.eventlog.store.writer import Clock
from mnemolog.eventlog.vocabulary.knowledge import (
    check_category,
    check_domains,
    check_project_name,
    status_after,
)
from mnemolog.projections import standing
from mnemolog.projections.knowledge import queries as kq
from mnemolog.projections.knowledge.match import echo, normalised, terms
from mnemolog.projections.knowledge.rules import (
    DAY_US,
    DecayPolicy,
    ProjectRegistry,
    base_confidence,
    decay_days,
    decayed_confidence,
    decays_out,
    reinforced,
)
from mnemolog.projections.memory.model import Memory
from mnemolog.substrate.events import (
    MemoryStored,
    MemoryUpdated,
    MigrationCompleted,
    MigrationStarted,
    Payload,
)
from mnemolog.substrate.events.knowledge import (
    MAX_MESSAGE_CHARS,
    CandidateExtracted,
    CandidateTriaged,
    ExtractionFailed,
    InteractionCaptured,
    MemoryPromoted,
    MemoryReinforced,
    MemoryRejected,
    MemorySuperseded,
    ProjectAliased,
    ProjectRegistered,
    StateInvalidated,
    StateSet,
    TriageFailed,
)
from mnemolog.substrate.events.limits import check_limit, check_namespace, check_occurred_at
from mnemolog.substrate.home import Home
from mnemolog.substrate.ids import new_id
from mnemolog.substrate.knowledge.config import KnowledgeSettings, parse_knowledge
from mnemolog.substrate.recall import hits as recall_hits
from mnemolog.substrate.session import Session, Sessions
from mnemolog.substrate.tenancy import scope

if TYPE_CHECKING:
    import duckdb

__all__ = ["ExtractionFailedError", "Knowledge", "TriageFailedError"]

#: Interactions or candidates handled per read / model / write round.
CHUNK: Final = 32
#: Neighbours shown to a triager, and how many similar memories are checked for a duplicate.
NEIGHBOURS: Final = 5
DUPLICATE_POOL: Final = 20
#: Supersessions written per batch by a decay run.
DECAY_BATCH: Final = 1000
#: Long-lived processes run decay this long after they start, then once a day.
#: The scheduled run's trigger, set only in the scheduler's own thread (a new thread starts
#: with this at its default, so a request served meanwhile is never marked "cron").
_TRIGGER: contextvars.ContextVar[str | None] = contextvars.ContextVar("mnemolog_trigger", default=None)


def _trigger() -> dict[str, Any]:
    t = _TRIGGER.get()
    return {"trigger": t} if t else {}


def seconds_until(now_s: float, at_minute: int) -> float:
    """Seconds from `now_s` (Unix time) to the next `at_minute` (minutes past midnight, UTC)."""
    day = 86_400.0
    target = (now_s // day) * day + at_minute * 60.0
    return target - now_s if target > now_s else target + day - now_s


DAILY_FIRST_S: Final = 60.0
SCHEDULED_KEPT: Final = 30
DAILY_S: Final = 86_400.0
_PREFIX: Final = re.compile(kq.PREFIX_PATTERN)
_log = logging.getLogger("mnemolog.knowledge")
_MAX_LISTED: Final = 1000


class ExtractionFailedError(MnemologError):
    """At least one extraction gave no usable answer (exit 4); each is an `extraction.failed` event."""

    exit_code = 4
    slug = "extraction_failed"


class TriageFailedError(MnemologError):
    """At least one triage gave no verdict (exit 4); each is a `triage.failed` event."""

    exit_code = 4
    slug = "triage_failed"


def _iso(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1_000_000, UTC)


def _failure_fields(failure: ModelFailure) -> dict[str, Any]:
    """What an extraction.failed or triage.failed keeps of a curator's failure, beside whose it was."""
    return {
        "version": failure.version,
        "model": failure.model,
        "prompt_sha256": failure.prompt_sha256,
        "reason": failure.reason,
        "message": failure.message[:MAX_MESSAGE_CHARS],
        "attempts": failure.attempts,
        "responses": list(failure.responses),
    }


def _exemption(row: Mapping[str, Any], policy: DecayPolicy) -> str | None:
    """Why decay leaves this memory alone (a key of the run's ``exempt`` counts), or None."""
    if policy.exempt_pinned and row["pinned"]:
        return "pinned"
    if row["kind"] in policy.exempt_kinds:
        return "kind"
    if policy.exempt_stored and row["direct"]:
        return "stored"
    if row["in_pack"]:
        return "in_pack"
    if row["recalled"]:
        return "recalled"
    return None


#: (session, text, limit, an id to leave out) -> the memories most like the text, best first.
Similar = Callable[[Session, str, int, str | None], list[Memory]]
#: The memory nearest a memory by embedding, and their cosine (None: no vectors for it).
Nearest = Callable[[Session, str], tuple[str, float] | None]


@dataclass(frozen=True, slots=True)
class Duplicate:
    """An active memory a candidate duplicates (same words, or embeddings at the threshold), if any,
    and the active memory nearest it by embedding with their cosine (None when nothing is embedded)."""

    id: str | None
    nearest: tuple[str, float] | None = None


class Knowledge:
    """The knowledge loop over a home; ``sessions`` is the Substrate (anything with ``session()``)."""

    def __init__(
        self,
        home: Home,
        sessions: Sessions,
        *,
        clock: Clock,
        checkpoint: Callable[[], tuple[int, bytes]] | None = None,
        options: Mapping[str, Any] | None = None,
        similar: Similar,
        nearest: Nearest,
    ) -> None:
        self.home = home
        self.sessions = sessions
        #: The recall service's `similar` and `nearest`: the memories a candidate may duplicate.
        self.similar = similar
        self.nearest = nearest
        self.clock = clock
        self._checkpoint = checkpoint
        self.options = dict(options or {})
        self._settings: KnowledgeSettings | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nightly: threading.Thread | None = None
        self.daily_errors: list[str] = []
        #: Failures of the scheduled runs of this process (counted by `stats`), newest last.
        self.scheduled_failures: list[str] = []
        #: The scheduled runs of this process, newest last (at most SCHEDULED_KEPT).
        self.scheduled_runs: list[dict[str, Any]] = []

    # -- configuration --------------------------------------------------------------------

    @property
    def settings(self) -> KnowledgeSettings:
        """The home's [knowledge] settings (parsed on first use: a bad table fails the loop only)."""
        if self._settings is None:
            self._settings = parse_knowledge(self.home.config.raw, str(self.home.config_path))
        return self._settings

    def llm(self) -> LlmConfig | None:
        cfg = self.home.config.llm
        return resolve_llm(os.environ.get(HOST_ENV) or cfg.host, os.environ.get(MODEL_ENV) or cfg.model)

    def _retries(self, max_retries: int | None) -> int:
        n = self.settings.max_retries if max_retries is None else max_retries
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 10:
            raise UsageError(f"max_retries must be an integer in 0..10; got {n!r}", field="max_retries")
        return n

    def domains(self, values: Iterable[str]) -> list[str]:
        """Domain tags checked against the home's vocabulary (BadInput, exit 65, for an unknown one)."""
        given = list(values)
        # No tags, no configuration read: a bad [knowledge] table must not stop plain stores.
        return list(check_domains(given, self.settings.domains)) if given else []

    # -- projects ---------------------------------------------------------------------------

    @staticmethod
    def registry(s: Session) -> ProjectRegistry:
        # Kept while no memory-changing entry is folded (project events are such entries); a
        # registry is immutable, so every caller may hold the same one.
        return standing.kept(s.conn, "project_registry", None, lambda: kq.project_registry(s.conn))

    def canonical_project(
        self, s: Session, project: str | None, registry: ProjectRegistry | None = None
    ) -> str:
        """The one canonicalisation of a project name given at a boundary ("" for none).

        `registry`: one read in this session already, for callers that canonicalise many names."""
        if project is None:
            return ""
        return (registry or self.registry(s)).canonical(check_project_name(project))

    def register_project(
        self, name: str, *, aliases: Sequence[str] = (), description: str = ""
    ) -> dict[str, Any]:
        """Register a project name (with aliases); rows holding any of them resolve to it."""
        with self.sessions.session() as s:
            registry = self.registry(s).with_project(name, aliases=aliases, description=description)
            project = registry.resolve(name)
            s.append(
                ProjectRegistered(name=project.name, aliases=list(project.aliases), description=description)
            )
            return self._project(s, project.name)

    def alias_project(self, name: str, alias: str) -> dict[str, Any]:
        """Make ``alias`` another name of project ``name`` (old rows resolve too)."""
        with self.sessions.session() as s:
            registry = self.registry(s)
            registry.with_alias(name, alias)  # the checks; the fold applies the event
            canonical = registry.resolve(name).name
            s.append(ProjectAliased(name=canonical, alias=check_project_name(alias, allow_empty=False)))
            return self._project(s, canonical)

    def projects(self) -> list[dict[str, Any]]:
        """Registered projects with their aliases and counts."""
        with self.sessions.session() as s:
            return kq.projects(s.conn)

    @staticmethod
    def _project(s: Session, name: str) -> dict[str, Any]:
        return next(p for p in kq.projects(s.conn) if p["name"] == name)

    # -- trusted state ------------------------------------------------------------------------

    def set_state(
        self, project: str, category: str, key: str, value: str, *, source: str | None = None
    ) -> dict[str, Any]:
        """Upsert (project, category, key) = value; the same value again writes nothing."""
        check_category(category)
        payload = StateSet(project=project, category=category, key=key, value=value, source=source)
        with self.sessions.session() as s:
            canonical = self.canonical_project(s, project)
            current = kq.state_entries(s.conn, canonical, category=category, key=payload.key)
            if current and current[0]["value"] == payload.value and current[0]["source"] == payload.source:
                return {**current[0], "changed": False}
            s.append(payload.model_copy(update={"project": canonical}))
            (entry,) = kq.state_entries(s.conn, canonical, category=category, key=payload.key)
            return {**entry, "changed": True}

    def get_state(
        self, project: str, *, category: str | None = None, history: bool = False
    ) -> list[dict[str, Any]]:
        """A project's current state entries (every version with ``history``)."""
        if category is not None:
            check_category(category)
        with self.sessions.session() as s:
            return kq.state_entries(
                s.conn, self.canonical_project(s, project), category=category, history=history
            )

    def invalidate_state(
        self, project: str, category: str, key: str, *, reason: str | None = None
    ) -> dict[str, Any]:
        """The entry no longer holds; its history stays."""
        check_category(category)
        payload = StateInvalidated(project=project, category=category, key=key, reason=reason)
        with self.sessions.session() as s:
            canonical = self.canonical_project(s, project)
            if not kq.state_entries(s.conn, canonical, category=category, key=payload.key):
                raise NotFound(
                    f"project {canonical!r} has no current state entry {category}/{payload.key}",
                    project=canonical,
                    category=category,
                    key=payload.key,
                )
            s.append(payload.model_copy(update={"project": canonical}))
            history = kq.state_entries(s.conn, canonical, category=category, key=payload.key, history=True)
            return history[-1]

    # -- capture ------------------------------------------------------------------------------

    def capture(
        self,
        prompt: str,
        response: str = "",
        *,
        project: str = "",
        client: str | None = None,
        session: str | None = None,
        context_id: str | None = None,
        namespace: str = "default",
        reinforce: bool = False,
        occurred_at: int | str | None = None,
    ) -> dict[str, Any]:
        """Record an interaction; with ``reinforce``, reinforce the active memories its response echoes.

        ``occurred_at`` (µs or ISO 8601 text) is when it happened, if not now: the candidates
        extracted from it are dated by it (else by when it was captured), not by the extraction.
        """
        check_namespace(namespace)
        payload = InteractionCaptured(
            id=new_id(),
            namespace=namespace,
            project=project,
            prompt=prompt,
            response=response,
            client=client,
            session=session,
            context_id=context_id,
            reinforce=bool(reinforce),
            occurred_at=check_occurred_at(occurred_at),
        )
        policy = self.settings.reinforce if reinforce else None
        with self.sessions.session() as s:
            s.check_write(s.policy(namespace), namespace)
            canonical = self.canonical_project(s, payload.project) if payload.project else ""
            payload = payload.model_copy(update={"project": canonical})
            follow: list[Payload] = []
            if policy is not None and payload.response:
                said = terms(payload.response)
                for mid, text, confidence in kq.reinforcement_pool(s.conn, canonical):
                    match = echo(terms(text), said, policy)
                    if match is None:
                        continue
                    follow.append(
                        MemoryReinforced(
                            id=mid,
                            interaction_id=payload.id,
                            overlap=match.overlap,
                            size=match.size,
                            mode=match.mode,
                            confidence_before=base_confidence(confidence),
                            confidence=reinforced(confidence, policy.step),
                            policy=policy.to_data(),
                        )
                    )
            receipt = s.append_many([payload, *follow])[0]
        return {
            "id": payload.id,
            "seq": receipt.seq,
            "project": canonical,
            "namespace": namespace,
            "reinforced": [
                {"id": r.id, "mode": r.mode, "overlap": r.overlap, "size": r.size, "confidence": r.confidence}
                for r in follow
                if isinstance(r, MemoryReinforced)
            ],
        }

    def interactions(
        self,
        *,
        project: str | None = None,
        session: str | None = None,
        since: int | None = None,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        """Captured interactions, newest first."""
        check_limit(limit)
        with self.sessions.session() as s:
            canonical = self.canonical_project(s, project) if project is not None else None
            return kq.interactions(s.conn, project=canonical, session=session, since=since, limit=limit)

    def interaction(self, interaction_id: str) -> dict[str, Any]:
        """One captured interaction with the candidates extracted from it."""
        with self.sessions.session() as s:
            row = kq.interaction(s.conn, interaction_id) if isinstance(interaction_id, str) else None
            if row is None:
                raise NotFound(f"no interaction with id {interaction_id!r}", id=interaction_id)
            row["candidates"] = kq.candidate_ids(s.conn, interaction_id)
            return row

    # -- extraction ------------------------------------------------------------------------------

    def _work(
        self,
        given: Sequence[str],
        pending: bool,
        limit: int,
        waiting: Callable[[duckdb.DuckDBPyConnection, int], list[str]],
        known: Callable[[duckdb.DuckDBPyConnection, Sequence[str]], set[str]],
        noun: str,
        step: str,
    ) -> list[str]:
        """The ids a step works on: the ``given`` ones (each must exist) or up to ``limit`` waiting.

        NotFound (exit 2) for a given id that is not a ``noun``; Informational
        (exit 1) when there is nothing to do.
        """
        with self.sessions.session() as s:
            ids = waiting(s.conn, check_limit(limit)) if pending else list(given)
            found = known(s.conn, [i for i in ids if isinstance(i, str)])
            for i in ids:
                if i not in found:
                    raise NotFound(f"no {noun} with id {i!r}", id=i)
        if not ids:
            raise Informational(f"no {noun} is waiting for {step}")
        return ids

    def extract(
        self,
        *,
        interaction_ids: Sequence[str] = (),
        pending: bool = False,
        extractor: str | None = None,
        limit: int = 100,
        max_retries: int | None = None,
    ) -> dict[str, Any]:
        """Extract candidates from interactions; every outcome is an event.

        Informational (exit 1) when nothing is pending; ExtractionFailedError
        (exit 4, the whole summary in its details) when any extraction failed.
        """
        if bool(interaction_ids) == bool(pending):
            raise UsageError("give interaction ids or --pending (one of them)")
        retries = self._retries(max_retries)
        name = extractor or self.settings.extractor
        # Imported here: the rule-based curators compile their patterns on import, and every
        # command line process builds a Substrate, though few of them extract.
        from mnemolog.curators.knowledge.choice import make_extractor

        ex = make_extractor(
            name, self.llm() if name == "ollama" else None, domains=self.settings.domains, **self.options
        )
        ids = self._work(
            interaction_ids,
            pending,
            limit,
            kq.pending_interactions,
            kq.known_interactions,
            "interaction",
            "extraction",
        )
        results: list[dict[str, Any]] = []
        # In chunks: one read and one write (one sync) per chunk, the model called between them
        # with no lock held, and a crash loses at most one chunk's answers.
        for start in range(0, len(ids), CHUNK):
            with self.sessions.session() as s:
                rows = [kq.interaction(s.conn, iid) for iid in ids[start : start + CHUNK]]
            answers = [
                (
                    row,
                    ex.extract(
                        InteractionText(row["prompt"], row["response"], row["project"]), max_retries=retries
                    ),
                )
                if row is not None and row["extraction"] == "pending"
                else (row, None)
                for row in rows
            ]
            with self.sessions.session() as s:
                results += self._write_extractions(s, answers)
        summary = {
            "extractor": ex.name,
            "model": ex.model,
            "interactions": len(results),
            "candidates": sum(len(r.get("candidates", [])) for r in results),
            "failed": sum(r["outcome"] == "failed" for r in results),
            "results": results,
        }
        if summary["failed"]:
            raise ExtractionFailedError(
                f"{summary['failed']} of {len(results)} extraction(s) failed; each is an extraction.failed "
                "event and the interaction stays pending",
                **summary,
            )
        return summary

    def _write_extractions(
        self, s: Session, answers: Sequence[tuple[dict[str, Any] | None, Any]]
    ) -> list[dict[str, Any]]:
        """The events of a chunk's extractions, in one batch; the result of each."""
        registry = self.registry(s)
        vocabulary = set(self.settings.domains)
        stores: list[MemoryStored] = []
        events: list[Payload] = []
        results: list[dict[str, Any]] = []
        described: dict[str, dict[str, Any]] = {}
        states = kq.extraction_states(s.conn, [row["id"] for row, _ in answers if row is not None])
        for row, outcome in answers:
            assert row is not None
            iid = row["id"]
            if outcome is None or states.get(iid) != "pending":
                results.append({"interaction": iid, "outcome": "already_extracted"})
                continue
            if isinstance(outcome, ModelFailure):
                events.append(
                    ExtractionFailed(
                        interaction_id=iid,
                        extractor=outcome.curator,
                        **_failure_fields(outcome),
                        **_trigger(),
                    )
                )
                results.append(
                    {
                        "interaction": iid,
                        "outcome": "failed",
                        "reason": outcome.reason,
                        "message": outcome.message,
                        "attempts": outcome.attempts,
                    }
                )
                continue
            assert isinstance(outcome, Extraction)
            mine: list[MemoryStored] = []
            for c in outcome.candidates:
                store = MemoryStored.new(
                    c.content,
                    namespace=row["namespace"],
                    kind=c.kind,
                    confidence=c.confidence,
                    source=f"interaction:{iid}",
                    project=registry.canonical(c.project) if c.layer == "project" else "",
                    domains=[d for d in c.domains if d in vocabulary],
                    status="candidate",
                    # What the interaction says happened when it happened, not when it was read.
                    occurred_at=row.get("occurred_at") or row.get("captured_at"),
                )
                mine.append(store)
                described[store.id] = {
                    "id": store.id,
                    "layer": c.layer,
                    "kind": c.kind,
                    "confidence": c.confidence,
                    **({"rule": c.rule} if c.rule else {}),
                    **({"source": c.source} if c.source else {}),
                }
            stores += mine
            events.append(
                CandidateExtracted(
                    interaction_id=iid,
                    candidate_ids=[p.id for p in mine],
                    candidates=[described[p.id] for p in mine],
                    extractor=outcome.extractor,
                    version=outcome.version,
                    model=outcome.model,
                    prompt_sha256=outcome.prompt_sha256,
                    domains=list(self.settings.domains),
                    responses=list(outcome.responses),
                    attempts=outcome.attempts,
                    input_tokens=outcome.input_tokens,
                    output_tokens=outcome.output_tokens,
                    warnings=list(outcome.warnings),
                    **_trigger(),
                )
            )
            results.append(
                {
                    "interaction": iid,
                    "outcome": "extracted",
                    "candidates": [p.id for p in mine],
                    "warnings": list(outcome.warnings),
                }
            )
        if stores or events:
            memories = {m["id"]: m for m in s.write_memories(stores, extra=events)}
        for r in results:
            if r["outcome"] == "extracted":
                r["candidates"] = [
                    {
                        "id": cid,
                        "layer": described[cid]["layer"],
                        "project": memories[cid]["project"],
                        "domains": memories[cid]["domains"],
                        "content": memories[cid]["content"],
                    }
                    for cid in r["candidates"]
                ]
        return results

    # -- triage ------------------------------------------------------------------------------------

    def triage(
        self,
        *,
        candidate_ids: Sequence[str] = (),
        pending: bool = False,
        triager: str | None = None,
        dry_run: bool = False,
        limit: int = 100,
        max_retries: int | None = None,
    ) -> dict[str, Any]:
        """Give candidates verdicts; promote, reject or leave them for a person (curators.triage.decide)."""
        if bool(candidate_ids) == bool(pending):
            raise UsageError("give candidate ids or --pending (one of them)")
        retries = self._retries(max_retries)
        name = triager or self.settings.triager
        from mnemolog.curators.knowledge.choice import make_triager  # see `extract`

        tr = make_triager(
            name, self.llm() if name == "ollama" else None, domains=self.settings.domains, **self.options
        )
        ids = self._work(
            candidate_ids, pending, limit, kq.pending_candidates, kq.known_candidates, "candidate", "triage"
        )
        results: list[dict[str, Any]] = []
        for start in range(0, len(ids), CHUNK):
            with self.sessions.session() as s:
                work = [self._triage_input(s, cid) for cid in ids[start : start + CHUNK]]
            verdicts = [
                tr.triage(item, max_retries=retries) if item is not None else None for _m, item, _d in work
            ]
            with self.sessions.session() as s:
                results += self._write_verdicts(s, work, verdicts, dry_run)
        summary = {
            "triager": tr.name,
            "model": tr.model,
            "dry_run": dry_run,
            "candidates": len(results),
            "promoted": sum(r.get("action") == "promote" for r in results),
            "rejected": sum(r.get("action") == "reject" for r in results),
            "waiting": sum(r.get("action") == "wait" for r in results),
            "failed": sum(r["outcome"] == "failed" for r in results),
            "thresholds": self.settings.triage.to_data(),
            "results": results,
        }
        if summary["failed"]:
            raise TriageFailedError(
                f"{summary['failed']} of {len(results)} triage(s) gave no verdict; each is a triage.failed "
                "event and the candidate stays queued",
                **summary,
            )
        return summary

    def _neighbours(self, s: Session, m: Memory) -> tuple[list[Neighbour], Duplicate]:
        """The neighbours a triager reads, and a duplicate found by words or by embeddings."""
        mine = terms(m["content"])
        similar = self.similar(s, m["content"], DUPLICATE_POOL, m["id"])
        same = normalised(m["content"])
        duplicate = next((n["id"] for n in similar if normalised(n["content"]) == same), None)
        nearest = self.nearest(s, m["id"])
        threshold = self.settings.triage.duplicate_similarity
        if duplicate is None and nearest is not None and nearest[1] >= threshold:
            duplicate = nearest[0]
        out = []
        for n in similar[:NEIGHBOURS]:
            theirs = terms(n["content"])
            shared = len(mine & theirs)
            out.append(
                Neighbour(
                    n["id"],
                    n["content"],
                    n["project"],
                    share=shared / len(mine) if mine else 0.0,
                    coverage=shared / len(theirs) if theirs else 0.0,
                    similarity=nearest[1] if nearest is not None and nearest[0] == n["id"] else None,
                )
            )
        return out, Duplicate(duplicate, nearest)

    def _triage_input(self, s: Session, cid: str) -> tuple[Memory, TriageItem | None, Duplicate]:
        """(the candidate, what the triager reads or None when it is decided, its duplicate)."""
        m = kq.candidate(s.conn, cid)
        assert m is not None
        if m["status"] != "candidate":
            return m, None, Duplicate(None)
        neighbours, duplicate = self._neighbours(s, m)
        info = m.get("candidate", {})
        item = TriageItem(
            candidate_id=cid,
            content=m["content"],
            layer=str(info.get("layer") or ("domain" if not m["project"] and m["domains"] else "project")),
            kind=m["kind"],
            project=m["project"],
            domains=tuple(m["domains"]),
            confidence=base_confidence(m["confidence"]),
            extractor=str(info.get("extractor") or ""),
            rule=info.get("rule"),
            neighbours=tuple(neighbours),
        )
        return m, item, duplicate

    def _write_verdicts(
        self,
        s: Session,
        work: Sequence[tuple[Memory, TriageItem | None, Duplicate]],
        verdicts: Sequence[Any],
        dry_run: bool,
    ) -> list[dict[str, Any]]:
        """The events of a chunk's verdicts, in one batch (none on a dry run); the result of each."""
        policy = self.settings.triage
        registry = self.registry(s)
        events: list[Payload] = []
        results: list[dict[str, Any]] = []
        # Promotions earlier in this chunk count as active memories for the duplicate rule.
        promoted_here: dict[str, str] = {}
        now = kq.statuses_of(s.conn, [m["id"] for m, _i, _d in work])
        for (m, item, seen_duplicate), verdict in zip(work, verdicts, strict=True):
            cid = m["id"]
            if item is None or now.get(cid) != "candidate":
                results.append({"id": cid, "outcome": "already_decided", "status": now.get(cid)})
                continue
            if isinstance(verdict, ModelFailure):
                events.append(
                    TriageFailed(id=cid, triager=verdict.curator, **_failure_fields(verdict), **_trigger())
                )
                results.append(
                    {"id": cid, "outcome": "failed", "reason": verdict.reason, "message": verdict.message}
                )
                continue
            assert isinstance(verdict, TriageVerdict)
            text = normalised(m["content"])
            # Same words, embeddings at the threshold, an earlier promotion of this run, or
            # the triager's own finding that a memory says the same thing.
            duplicate = seen_duplicate.id or promoted_here.get(text) or verdict.duplicate_of
            decision = decide(verdict, policy=policy, duplicate_of=duplicate)
            nearest = seen_duplicate.nearest
            why = decision.why
            if nearest is not None and duplicate == nearest[0] and nearest[1] >= policy.duplicate_similarity:
                why += f" (embedding similarity {nearest[1]:.3f} >= {policy.duplicate_similarity:g})"
            project = registry.canonical(verdict.project)
            domains = [d for d in verdict.domains if d in self.settings.domains] or list(m["domains"])
            events.append(
                CandidateTriaged(
                    id=cid,
                    triager=verdict.triager,
                    version=verdict.version,
                    model=verdict.model,
                    prompt_sha256=verdict.prompt_sha256,
                    verdict=verdict.verdict,
                    confidence=verdict.confidence,
                    reason=verdict.reason or "(no reason)",
                    project=project,
                    domains=domains,
                    conflicts_with=verdict.conflicts_with,
                    duplicate_of=duplicate,
                    similar_to=nearest[0] if nearest is not None else None,
                    similarity=max(-1.0, min(1.0, nearest[1])) if nearest is not None else None,
                    thresholds=policy.to_data(),
                    action=decision.action,
                    why=why[:2048],
                    responses=list(verdict.responses),
                    attempts=verdict.attempts,
                    input_tokens=verdict.input_tokens,
                    output_tokens=verdict.output_tokens,
                    warnings=list(verdict.warnings),
                    **_trigger(),
                )
            )
            if decision.action == "promote":
                promoted_here.setdefault(text, cid)
                events.append(
                    MemoryPromoted(
                        id=cid, by="triage", project=project, domains=domains, reason=verdict.reason
                    )
                )
            elif decision.action == "reject":
                events.append(
                    MemoryRejected(id=cid, by="triage", reason=verdict.reason or "rejected by triage")
                )
            results.append(
                {
                    "id": cid,
                    "outcome": "triaged",
                    "verdict": verdict.verdict,
                    "confidence": verdict.confidence,
                    "reason": verdict.reason,
                    "project": project,
                    "domains": domains,
                    "conflicts_with": verdict.conflicts_with,
                    "duplicate_of": duplicate,
                    "similar_to": nearest[0] if nearest is not None else None,
                    "similarity": nearest[1] if nearest is not None else None,
                    "action": decision.action,
                    "why": why,
                    "warnings": list(verdict.warnings),
                }
            )
        if events and not dry_run:
            s.append_many(events)
        return results

    # -- people's decisions ---------------------------------------------------------------------------

    def candidates(
        self,
        *,
        queues: Sequence[str] = ("pending", "needs_human"),
        project: str | None = None,
        limit: int = 50,
    ) -> list[Memory]:
        """Candidates by queue (pending, needs_human, promoted, rejected), oldest first; a bound
        token sees those of its scope only."""
        unknown = [q for q in queues if q not in kq.CANDIDATE_QUEUES]
        if unknown:
            raise UsageError(
                f"unknown candidate status {unknown[0]!r}; expected one of {', '.join(kq.CANDIDATE_QUEUES)}",
                expected=list(kq.CANDIDATE_QUEUES),
            )
        check_limit(limit)
        with self.sessions.session() as s:
            canonical = self.canonical_project(s, project) if project is not None else None
            found = kq.candidates(s.conn, queues, project=canonical, limit=limit)
        sc = scope.current()
        return found if sc is None or not sc.bound else [m for m in found if sc.sees(m)]

    def promote(
        self,
        memory_id: str,
        *,
        project: str | None = None,
        domains: Sequence[str] | None = None,
        reason: str | None = None,
    ) -> Memory:
        """A person promotes a candidate (optionally to another project or with other domains)."""
        checked = self.domains(domains) if domains is not None else None
        with self.sessions.session() as s:
            m = self._decidable(s, memory_id, "memory.promoted", "promote")
            payload = MemoryPromoted(
                id=memory_id,
                by="person",
                project=self.canonical_project(s, project) if project is not None else m["project"],
                domains=checked if checked is not None else list(m["domains"]),
                reason=reason,
            )
            s.append(payload)
            return s.with_warnings(s.require(memory_id))

    def reject(self, memory_id: str, *, reason: str) -> Memory:
        """A person rejects a candidate; it becomes invalid (and stays in the log)."""
        payload = MemoryRejected(id=memory_id, by="person", reason=reason)
        with self.sessions.session() as s:
            self._decidable(s, memory_id, "memory.rejected", "reject")
            s.append(payload)
            return s.with_warnings(s.require(memory_id))

    def supersede(self, memory_id: str, *, reason: str, by_memory: str | None = None) -> Memory:
        """A person retires an active memory (optionally naming the memory that replaces it)."""
        payload = MemorySuperseded(
            id=memory_id, by="memory" if by_memory else "person", reason=reason, superseded_by=by_memory
        )
        with self.sessions.session() as s:
            m = s.require(memory_id)
            if by_memory is not None:
                if by_memory == memory_id:
                    raise UsageError("a memory cannot supersede itself", id=memory_id)
                s.require(by_memory)
            if status_after("memory.superseded", m["status"]) is None:
                if m["status"] == "superseded":
                    raise Informational(f"memory {memory_id} is superseded already", id=memory_id)
                raise UsageError(
                    f"only active memories can be superseded; memory {memory_id} is {m['status']}",
                    id=memory_id,
                    status=m["status"],
                )
            s.append(payload)
            return s.with_warnings(s.require(memory_id))

    @staticmethod
    def _decidable(s: Session, memory_id: str, event_type: str, verb: str) -> Memory:
        m = s.require(memory_id)
        if status_after(event_type, m["status"]) is not None:
            return m
        target = "active" if verb == "promote" else "invalid"
        if m["status"] == target:
            raise Informational(f"memory {memory_id} is {target} already", id=memory_id, status=m["status"])
        raise UsageError(
            f"only candidates can be {verb}d; memory {memory_id} is {m['status']}",
            id=memory_id,
            status=m["status"],
        )

    # -- decay ------------------------------------------------------------------------------------------

    def decay(
        self,
        *,
        now: int | None = None,
        dry_run: bool = False,
        announce: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> dict[str, Any]:
        """Supersede the memories decay has taken below the floor at clock ``now`` (µs).

        Exempt by default (the policy says which): pinned memories, the
        personal kinds, memories stored directly, and memories a recorded
        context pack included (a reference, like a reinforcement). What is to
        be retired is handed to ``announce`` before anything is written, so a
        person sees the list first; a dry run hands it over and writes nothing.
        """
        at = self.clock() if now is None else now
        if isinstance(at, bool) or not isinstance(at, int) or at < 0:
            raise UsageError(f"now must be a non-negative time in microseconds; got {now!r}", field="now")
        policy = self.settings.decay
        gone: list[dict[str, Any]] = []
        decaying = 0
        exempt = {"pinned": 0, "kind": 0, "stored": 0, "in_pack": 0, "recalled": 0}
        hits = recall_hits.last_hits(self.home.state_dir)
        with self.sessions.session() as s:
            rows = kq.decay_rows(s.conn, at - (policy.idle_days + 1) * DAY_US).to_pylist()
            for row in rows:
                row["recalled"] = row["id"] in hits
                anchor = row["anchor"]
                if decay_days(anchor_us=anchor, reference_count=0, now_us=at, policy=policy) == 0:
                    continue
                why = _exemption(row, policy)
                if why is not None:
                    exempt[why] += 1
                    continue
                decaying += 1
                conf = row["confidence"]
                if decays_out(conf, anchor_us=anchor, reference_count=0, now_us=at, policy=policy):
                    value = decayed_confidence(
                        conf, anchor_us=anchor, reference_count=0, now_us=at, policy=policy
                    )
                    gone.append(
                        {
                            "id": row["id"],
                            "title": row["title"],
                            "kind": row["kind"],
                            "confidence": value,
                            "idle_since": _iso(anchor).date().isoformat(),
                        }
                    )
            if announce is not None:
                announce(gone[:_MAX_LISTED])
            if not dry_run:
                recall_hits.compact(self.home.state_dir, hits)
                recorded = policy.to_data()
                for start in range(0, len(gone), DECAY_BATCH):
                    s.append_many(
                        [
                            MemorySuperseded(
                                id=g["id"],
                                by="decay",
                                confidence=g["confidence"],
                                now=at,
                                policy=recorded,
                                reason=f"unreferenced and idle since {g['idle_since']}: "
                                f"confidence {g['confidence']:.3f} is below the floor {policy.floor:g}",
                            )
                            for g in gone[start : start + DECAY_BATCH]
                        ]
                    )
        return {
            "now": at,
            "dry_run": dry_run,
            "policy": policy.to_data(),
            "checked": len(rows),
            "decaying": decaying,
            "exempt": exempt,
            "superseded_count": len(gone),
            "superseded": gone[:_MAX_LISTED],
        }

    def start_daily(self, *, first: float = DAILY_FIRST_S, every: float = DAILY_S) -> None:
        """Run decay in a background thread: after ``first`` seconds, then every ``every`` seconds."""
        if self._thread is not None:
            return

        def announce(retiring: list[dict[str, Any]]) -> None:
            # Unattended runs say what they retire too (before writing), on the process's log.
            for r in retiring:
                _log.warning(
                    "decay: retiring %s (%s, confidence %.3f, idle since %s); `restore %s` brings it back",
                    r["id"],
                    r["kind"],
                    r["confidence"],
                    r["idle_since"],
                    r["id"],
                )

        def loop() -> None:
            wait = first
            while not self._stop.wait(wait):
                try:
                    self.decay(announce=announce)
                except MnemologError as exc:  # reported, never fatal: the next day tries again
                    self.daily_errors.append(f"{exc.slug}: {exc.message}")
                wait = every

        self._thread = threading.Thread(target=loop, name="mnemolog-decay", daemon=True)
        self._thread.start()

    def scheduled_run(self) -> dict[str, Any]:
        """What a long-lived process runs on its schedule: extraction, then triage, of what is pending.

        Every event it writes carries ``trigger: "cron"``. Nothing pending is not a
        failure; any other error is recorded (and counted by `stats`) and the run goes
        on to the next step, so a model that is down does not stop the rules triager.
        """
        token = _TRIGGER.set("cron")
        out: dict[str, Any] = {"started_at": self.clock()}
        try:
            steps: tuple[tuple[str, Callable[[], dict[str, Any]]], ...] = (
                ("extract", lambda: self.extract(pending=True)),
                ("triage", lambda: self.triage(pending=True)),
            )
            for step, run in steps:
                try:
                    r = run()
                    out[step] = {k: r[k] for k in ("candidates", "failed", "promoted", "waiting") if k in r}
                except Informational:
                    out[step] = {"pending": 0}
                except MnemologError as exc:
                    failure = f"{step}: {exc.slug}: {exc.message}"
                    self.scheduled_failures.append(failure)
                    out[step] = {"error": failure}
                    _log.warning("scheduled %s failed: %s", step, failure)
        finally:
            _TRIGGER.reset(token)
        self.scheduled_runs = [*self.scheduled_runs[-(SCHEDULED_KEPT - 1) :], out]
        return out

    def start_nightly(self, now: Callable[[], float] | None = None) -> None:
        """Run `scheduled_run` every day at the configured time (UTC), in a background thread."""
        schedule = self.settings.schedule
        if self._nightly is not None or not schedule.enabled:
            return
        wall = now or (lambda: datetime.now(UTC).timestamp())

        def loop() -> None:
            while not self._stop.wait(seconds_until(wall(), schedule.at_minute)):
                self.scheduled_run()

        self._nightly = threading.Thread(target=loop, name="mnemolog-nightly", daemon=True)
        self._nightly.start()

    def stop_daily(self) -> None:
        self._stop.set()
        for t in (self._thread, self._nightly):
            if t is not None:
                t.join(timeout=5)
        self._thread = self._nightly = None

    # -- the [domain] prefix migration -------------------------------------------------------------------

    def migrate_domain_prefixes(self, *, dry_run: bool = False, limit: int = 1_000_000) -> dict[str, Any]:
        """Move a leading "[domain]" of old content into the memory's domains, as a recorded migration.

        Each change is a `memory.updated` tagged with the run (content without
        the prefix, the domain added), between `migration.started` (with the
        checkpoint it can be rolled back to) and `migration.completed`. The log
        keeps the content as it was written. Prefixes that name no domain of
        the home are left alone.
        """
        started_at = self.clock()
        run_id = f"domain-prefix-{uuid.uuid4().hex[:12]}"
        vocabulary = self.settings.domains
        with self.sessions.session() as s:
            plan: list[tuple[Memory, str, str]] = []
            skipped = 0
            for m in kq.memories_with_prefix(s.conn, limit):
                match = _PREFIX.match(m["content"])
                name = match.group(1).lower() if match else ""
                rest = m["content"][match.end() :] if match else ""
                if name not in vocabulary or not rest.strip():
                    skipped += 1
                    continue
                plan.append((m, name, rest))
            changes: list[dict[str, Any]] = [
                {"id": m["id"], "domain": name, "domains": list(dict.fromkeys([*m["domains"], name]))}
                for m, name, _ in plan
            ]
            if dry_run or not plan:
                return {
                    "run_id": None,
                    "dry_run": dry_run,
                    "changed": len(plan),
                    "skipped": skipped,
                    "changes": changes,
                }
            if self._checkpoint is None:
                raise UsageError("this process cannot sign a checkpoint for the migration's snapshot")
            size, root = self._checkpoint()
            events: list[Payload] = [
                MigrationStarted(
                    run_id=run_id,
                    snapshot_size=size,
                    snapshot_root=root.hex(),
                    target_version=2,
                    backend_id="knowledge/domain-prefix",
                )
            ]
            events += [
                MemoryUpdated(id=m["id"], content=rest, domains=list(change["domains"]), migration_run=run_id)
                for (m, _, rest), change in zip(plan, changes, strict=True)
            ]
            events.append(
                MigrationCompleted(
                    run_id=run_id,
                    action="migrate",
                    from_version=1,
                    to_version=2,
                    dry_run=False,
                    backend_id="knowledge/domain-prefix",
                    snapshot_ref={"size": str(size), "root": root.hex()},
                    units_touched=len(plan),
                    units_skipped=skipped,
                    rolled_back=False,
                    error="",
                    started_at=_iso(started_at).isoformat(),
                    finished_at=_iso(self.clock()).isoformat(),
                    scripts=["domain-prefix"],
                    outcome="completed",
                )
            )
            s.append_many(events)
        return {
            "run_id": run_id,
            "dry_run": False,
            "changed": len(plan),
            "skipped": skipped,
            "changes": changes,
        }
