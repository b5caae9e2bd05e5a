"""The operations agents call, once for every surface: MCP tools and the HTTP API.

Each operation is an argument model (pydantic, strict, unknown fields
refused; its JSON Schema is the MCP tool's input schema and the HTTP
request body's), the JSON Schema of its result, its behaviour hints
(read-only, destructive, idempotent) and a function of an open Substrate.
`invoke` validates and runs one: a result is `{"ok": true, ...}`, a failure
is the MnemologError the CLI would print with --json (a malformed argument
is a usage error, exit 64, naming the field).

Results are compact by default (see cli.views); `verbose: true` returns
every field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mnemolog.cli.agents import views
from mnemolog.cli.agents.client_paths import ClientPaths
from mnemolog.eventlog.errors import StorageError, UsageError
from mnemolog.eventlog.vocabulary.knowledge import StateCategory, Status
from mnemolog.substrate.events import Kind, Relation
from mnemolog.substrate.tenancy.scope import Access, Scope, applied

if TYPE_CHECKING:
    from mnemolog.eventlog.format.keys import VerifierKey
    from mnemolog.substrate.api import Substrate

# -- arguments -------------------------------------------------------------------------


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Verbose(Args):
    verbose: bool = Field(False, description="Every field of each memory instead of the compact view.")


def _active() -> list[Status]:
    return ["active"]


class Filters(Verbose):
    limit: int = Field(10, ge=1, le=1000, description="At most this many results.")
    namespace: str | None = Field(None, description="Only this namespace (and, by default, those below it).")
    descendants: bool = Field(True, description="Include the namespaces below `namespace`.")
    kinds: list[Kind] = Field(default_factory=list, description="Only memories of these kinds.")
    tags: list[str] = Field(default_factory=list, description="Only memories carrying all these tags.")
    include_archived: bool = Field(False, description="Also archived (hidden) memories.")
    include_expired: bool = Field(False, description="Also memories whose expires_at has passed.")
    project: str | None = Field(None, description="Only this project ('' for memories of no project).")
    domains: list[str] = Field(default_factory=list, description="Only memories with all these domains.")
    statuses: list[Status] = Field(
        default_factory=_active, description="Only memories in these knowledge statuses."
    )
    as_of: int | str | None = Field(
        None,
        description="Answer from the log as it stood then: a seq (entries 0..seq) or an ISO 8601 "
        "UTC time such as 2026-12-04T17:00:00Z (the entries stamped at or before it).",
    )

    def filters(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "descendants": self.descendants,
            "kinds": list(self.kinds),
            "tags": list(self.tags),
            "include_archived": self.include_archived,
            "include_expired": self.include_expired,
            "project": self.project,
            "domains": list(self.domains),
            "statuses": tuple(self.statuses) or ("active",),
        }


class StoreArgs(Verbose):
    content: str = Field(description="The memory's text (at most 256 KiB).")
    namespace: str = Field("default", description="Where it lives, e.g. team/project.")
    kind: Kind = Field("observation", description="What sort of memory it is.")
    title: str | None = Field(None, description="A short title.")
    tags: list[str] = Field(default_factory=list)
    confidence: float | None = Field(None, ge=0, le=1, description="How sure, in [0, 1].")
    source: str | None = Field(None, description="Where it came from (a URL, a file, a conversation id).")
    metadata: dict[str, Any] | None = Field(None, description="Any JSON object (at most 64 KiB).")
    project: str = Field("", description="The project it belongs to ('': every project).")
    domains: list[str] = Field(default_factory=list, description="Knowledge domains it is filed under.")
    occurred_at: str | int | None = Field(
        None,
        description="When it happened, if not now: ISO 8601 (2023-05-08 or 2023-05-08T14:30Z, UTC unless "
        "an offset is given) or µs since the epoch. Its date is indexed as words for recall.",
    )
    id: str | None = Field(
        None,
        description="A ULID chosen by the caller: stored at most once; a retry with the same content "
        "returns the memory with already_stored, different content under it is refused (exit 65).",
    )


class QueryArgs(Filters):
    query: str = Field(description="What to look for.")


class RecallArgs(QueryArgs):
    mode: Literal["bm25", "vector", "hybrid"] | None = Field(
        None,
        description="How to rank: bm25 (title, tags and content), vector (embeddings) or hybrid "
        "(both fused). Default: hybrid when the home embeds, else bm25.",
    )
    explain: bool = Field(False, description="Add each result's BM25 and vector ranks and scores.")
    min_score: float | None = Field(
        None, ge=0, description="Only results scoring at least this (default: any above 0)."
    )


class IdArgs(Verbose):
    id: str = Field(description="The memory's id.")


class ListArgs(Filters):
    limit: int = Field(50, ge=1, le=1000, description="At most this many memories.")
    offset: int = Field(0, ge=0, le=10**9, description="Skip this many (newest first).")


class LinkArgs(Args):
    src: str = Field(description="The memory the edge starts at.")
    dst: str = Field(description="The memory it points to.")
    relation: Relation = "related_to"
    metadata: dict[str, Any] | None = None


class UnlinkArgs(Args):
    src: str = Field(description="The memory the edge starts at.")
    dst: str = Field(description="The memory it points to.")
    relation: Relation = "related_to"
    reason: str | None = Field(None, description="Why the edge is taken back.")


class UpdateArgs(Verbose):
    id: str
    title: str | None = None
    content: str | None = None
    kind: Kind | None = None
    namespace: str | None = None
    tags: list[str] | None = Field(None, description="Replaces the tags.")
    confidence: float | None = Field(None, ge=0, le=1)
    source: str | None = None
    metadata: dict[str, Any] | None = Field(None, description="Keys to set; a null value removes a key.")
    project: str | None = None
    domains: list[str] | None = Field(None, description="Replaces the domains.")
    occurred_at: str | int | None = Field(
        None,
        description="When it happened, put right: ISO 8601 (2023-05-08 or 2023-05-08T14:30Z) or µs since "
        "the epoch. Its date words in the index follow.",
    )


class ArchiveArgs(Verbose):
    id: str
    reason: str | None = None


class ForgetArgs(Args):
    id: str | None = Field(None, description="A memory to forget (with its atoms).")
    ids: list[str] | None = Field(None, description="Several memories to forget.")
    namespace: str | None = Field(
        None, description="Every memory and interaction in this namespace and below."
    )
    project: str | None = None
    document: str | None = Field(None, description="A document id: the document and its chunks.")
    interaction: str | None = Field(None, description="An interaction and its candidates.")
    before: str | None = Field(None, description="Only what was created before this ISO 8601 UTC time.")
    reason: str | None = None
    dry_run: bool = Field(False, description="List what would be erased; erase nothing.")
    expired: bool = Field(False, description="What the namespaces' retention policies let expire.")


class AtomiseArgs(Args):
    id: str
    force_re_atomise: bool = Field(False, description="Atomise again (old atoms are kept, archived).")
    max_atom_tokens: int | None = Field(None, ge=50, le=1000)
    curator: Literal["ollama", "rules"] | None = Field(None, description="Default: the namespace policy.")


class NoArgs(Args):
    pass


class HistoryArgs(Args):
    id: str = Field(description="The memory's id.")


class VerifyArgs(Args):
    hashes_only: bool = Field(False, description="Chain and tree only, without every entry's signature.")
    trusted_key: str | None = Field(None, description="A pinned public key (name+hash+base64).")


class BundleArgs(Args):
    memory_id: str
    include_atomisation_chain: bool = Field(True, description="Also its parent, atoms and siblings.")
    output: str | None = Field(None, description="Where to write the tar (default: <home>/bundles/).")


class BundleVerifyArgs(Args):
    path: str = Field(description="The bundle (a tar file).")
    trusted_key: str | None = Field(None, description="A pinned public key (name+hash+base64).")


# The knowledge loop's tools.

#: The candidate queues (projections.knowledge_queries.CANDIDATE_QUEUES, which a test holds equal).
CandidateQueue = Literal["pending", "needs_human", "promoted", "rejected"]


class CaptureArgs(Args):
    prompt: str = Field(description="The prompt, as the agent received it.")
    response: str = Field("", description="The response the agent gave.")
    project: str = Field("", description="The project it was about ('': none).")
    client: str | None = Field(None, description="The client that captured it.")
    session: str | None = Field(None, description="The client's session id.")
    context_id: str | None = Field(None, description="The context pack the response was given with.")
    namespace: str = Field("default", description="Whose interaction it is.")
    reinforce: bool = Field(False, description="The active memories the response echoes gain confidence.")
    occurred_at: str | int | None = Field(
        None,
        description="When it happened, if not now: ISO 8601 (2023-05-08 or 2023-05-08T14:30Z, UTC unless "
        "an offset is given) or µs since the epoch. Its date is indexed as words for recall.",
    )


class StateGetArgs(Args):
    project: str = Field(description="The project (a name or an alias).")
    category: StateCategory | None = Field(None, description="Only this category.")
    history: bool = Field(False, description="Also the entries later ones replaced.")


class StateSetArgs(Args):
    project: str = Field(description="The project (a name or an alias).")
    category: StateCategory
    key: str
    value: str
    source: str | None = Field(None, description="Where the value comes from.")


class CandidatesArgs(Args):
    statuses: list[CandidateQueue] = Field(
        default_factory=list, description="These queues (default: pending and needs_human)."
    )
    project: str | None = Field(None, description="Only candidates of this project.")
    limit: int = Field(50, ge=1, le=1000, description="At most this many candidates.")


class PromoteArgs(Args):
    id: str = Field(description="The candidate's id.")
    project: str | None = Field(None, description="Promote it to this project.")
    domains: list[str] | None = Field(None, description="File it under these domains.")
    reason: str | None = None


class RejectArgs(Args):
    id: str = Field(description="The candidate's id.")
    reason: str


# The context packs' tools.


class ContextBuildArgs(Args):
    query: str = Field(description="The prompt the context is for.")
    project: str | None = Field(None, description="The project it is about.")
    budget: int | None = Field(None, ge=1, description="The pack's size budget (default: the home's).")
    unit: Literal["chars", "tokens"] | None = Field(None, description="What the budget counts.")
    record: bool = Field(True, description="Sign the pack as a context.built event.")
    personal: bool = Field(
        False,
        description="The personal scope: memories of the personal domains may enter; no project data does.",
    )


class ContextShowArgs(Args):
    pack_id: str = Field(description="The pack_id context_build returned.")


# -- result schemas ----------------------------------------------------------------------


def _opt(t: str) -> dict[str, Any]:
    return {"type": [t, "null"]}


MEMORY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "namespace": {"type": "string"},
        "kind": {"type": "string"},
        "title": _opt("string"),
        "content": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "confidence": _opt("number"),
        "source": _opt("string"),
        "created_at": {"type": ["string", "null"], "description": "ISO 8601, UTC"},
        "updated_at": {"type": ["string", "null"], "description": "ISO 8601, UTC"},
        "occurred_at": {
            "type": ["string", "null"],
            "description": "When it happened, if given: ISO 8601, UTC",
        },
        "archived": {"type": "boolean"},
        "score": {"type": "number"},
    },
    "required": ["id", "namespace", "kind", "content"],
}
MEMORIES_SCHEMA: dict[str, Any] = {"type": "array", "items": MEMORY_SCHEMA}
EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "seq": {"type": "integer"},
        "ts": {"type": "string", "description": "ISO 8601, UTC"},
        "type": {"type": "string"},
        "data": {"type": "object"},
        "leaf_hash": {"type": "string"},
        "signed_by": {"type": "string"},
        "signature": {"const": "verified"},
    },
    "required": ["seq", "ts", "type", "data", "leaf_hash", "signature"],
}


def ok_schema(props: Mapping[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"ok": {"const": True}, **props},
        "required": ["ok", *required],
    }


# -- the operations ----------------------------------------------------------------------


@dataclass(frozen=True)
class Operation:
    """One agent operation: a strict argument model, its result's schema, its hints, its call."""

    name: str
    title: str
    description: str
    args: type[Args]
    output: dict[str, Any]
    run: Callable[[Substrate, Any], dict[str, Any]]
    #: What a token must allow for it to run (substrate.scope): required, so a new
    #: operation says it, and the isolation suite covers it.
    access: Access
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False

    @property
    def input_schema(self) -> dict[str, Any]:
        return self.args.model_json_schema()


def _store(s: Substrate, a: StoreArgs) -> dict[str, Any]:
    m = s.store(
        a.content,
        namespace=a.namespace,
        kind=a.kind,
        title=a.title,
        tags=list(a.tags),
        confidence=a.confidence,
        source=a.source,
        metadata=a.metadata,
        project=a.project,
        domains=list(a.domains),
        memory_id=a.id,
        occurred_at=a.occurred_at,
    )
    return {"memory": views.memory_view(m, a.verbose)}


def _recall(s: Substrate, a: RecallArgs) -> dict[str, Any]:
    r = s.recall_report(
        a.query,
        limit=a.limit,
        mode=a.mode,
        explain=a.explain,
        min_score=a.min_score,
        as_of=a.as_of,
        **a.filters(),
    )
    out: dict[str, Any] = {
        "query": a.query,
        "mode": r["mode"],
        "fallback": r["fallback"],
        # Said outright, so an agent does not quote a weak hit as an answer.
        "matched": bool(r["results"]),
        "results": views.memories_view(r["results"], a.verbose),
    }
    if "as_of" in r:
        out["as_of"] = r["as_of"]
    return out


def _search(s: Substrate, a: QueryArgs) -> dict[str, Any]:
    hits = s.search(a.query, limit=a.limit, as_of=a.as_of, **a.filters())
    return {"query": a.query, "matched": bool(hits), "results": views.memories_view(hits, a.verbose)}


def _get(s: Substrate, a: IdArgs) -> dict[str, Any]:
    return {"memory": views.memory_view(s.get(a.id), a.verbose)}


def _list(s: Substrate, a: ListArgs) -> dict[str, Any]:
    rows = s.list(limit=a.limit, offset=a.offset, as_of=a.as_of, **a.filters())
    return {"memories": views.memories_view(rows, a.verbose)}


def _link(s: Substrate, a: LinkArgs) -> dict[str, Any]:
    e = s.link(a.src, a.dst, a.relation, a.metadata)
    return {"link": {**e, "created_at": views.iso(e.get("created_at"))}}


def _unlink(s: Substrate, a: UnlinkArgs) -> dict[str, Any]:
    out = s.unlink(a.src, a.dst, a.relation, a.reason)
    removed = [{**e, "created_at": views.iso(e.get("created_at"))} for e in out["removed"]]
    return {"unlinked": {**out, "removed": removed}}


def _update(s: Substrate, a: UpdateArgs) -> dict[str, Any]:
    # Attribute by attribute: a model dump would also drop the nulls inside metadata,
    # which are how a key is removed.
    names = set(UpdateArgs.model_fields) - {"id", "verbose"}
    fields = {k: getattr(a, k) for k in sorted(names) if getattr(a, k) is not None}
    return {"memory": views.memory_view(s.update(a.id, **fields), a.verbose)}


def _archive(s: Substrate, a: ArchiveArgs) -> dict[str, Any]:
    return {"memory": views.memory_view(s.archive(a.id, a.reason), a.verbose)}


def _forget(s: Substrate, a: ForgetArgs, requested_by: str = "agent") -> dict[str, Any]:
    ids = [*([a.id] if a.id else []), *(a.ids or [])]
    return s.forget(
        ids or None,
        namespace=a.namespace,
        project=a.project,
        document=a.document,
        interaction=a.interaction,
        before=a.before,
        reason=a.reason,
        requested_by=requested_by,
        dry_run=a.dry_run,
        expired=a.expired,
    )


def _restore(s: Substrate, a: ArchiveArgs) -> dict[str, Any]:
    return {"memory": views.memory_view(s.restore(a.id, a.reason), a.verbose)}


def _atomise(s: Substrate, a: AtomiseArgs) -> dict[str, Any]:
    res = s.atomise(a.id, force=a.force_re_atomise, max_atom_tokens=a.max_atom_tokens, curator=a.curator)
    return res.envelope()


def _stats(s: Substrate, a: NoArgs) -> dict[str, Any]:
    return {"stats": s.stats()}


def _history(s: Substrate, a: HistoryArgs) -> dict[str, Any]:
    from mnemolog.substrate.memory.history import memory_history

    h = memory_history(s, a.id)
    return {**h, "events": [views.event_view(e) for e in h["events"]]}


def _verify(s: Substrate, a: VerifyArgs) -> dict[str, Any]:
    from mnemolog.eventlog.verify.trust import PinnedKey, TrustPolicy
    from mnemolog.eventlog.verify.verifier import verify_log

    # The same anchors as `log verify`: a pinned key, else the home's own log id and keys.
    policy: TrustPolicy = (
        PinnedKey(client_key(s, a.trusted_key, "trusted_key")) if a.trusted_key else s.home.trust_anchor()
    )
    # One process: a server's threads must not fork a pool under them.
    return verify_log(
        s.home.log_dir,
        policy=policy,
        high_water=s.home.high_water_marks(),
        hashes_only=a.hashes_only,
        processes=1,
    ).to_json()


def export_bundle(s: Substrate, memory_id: str, include_chain: bool) -> Any:
    """The forensic bundle of a memory (bytes and summary), for every surface."""
    from mnemolog.substrate.forensics import service as forensics

    return forensics.export_bundle(s, memory_id, include_chain)


def _bundle_export(s: Substrate, a: BundleArgs) -> dict[str, Any]:
    from mnemolog.substrate.forensics import service as forensics

    ex = export_bundle(s, a.memory_id, a.include_atomisation_chain)
    if a.output:
        out = client_paths(s).resolve(a.output, "output")
    else:
        out = s.home.root / "bundles" / f"bundle-{a.memory_id}-{ex.tree_size}.tar"
        out.parent.mkdir(mode=0o700, exist_ok=True)
    forensics.write_output(out, ex.data)
    return {"path": str(out), **ex.summary()}


def _bundle_verify(s: Substrate, a: BundleVerifyArgs) -> dict[str, Any]:
    return verify_bundle_file(s, client_paths(s).resolve(a.path, "path"), a.trusted_key)


def verify_bundle_file(s: Substrate, path: Path, trusted_key: str | None) -> dict[str, Any]:
    """Verify the bundle at `path`, which the server chose or confined (`client_paths`)."""
    from mnemolog.eventlog.bundle import verifier as bundle
    from mnemolog.eventlog.verify.trust import TRUST_GENESIS, PinnedKey, TrustPolicy

    policy: TrustPolicy = TRUST_GENESIS
    if trusted_key is not None:
        policy = PinnedKey(client_key(s, trusted_key, "trusted_key"))
    report: dict[str, Any] = bundle.verify_bundle(path, policy=policy).to_json()
    return report


# -- paths and key files that clients name --------------------------------------------


def client_paths(s: Substrate) -> ClientPaths:
    """The directories MCP and HTTP clients may name files in (`[server] paths`)."""
    return ClientPaths.from_config(s.home.config.raw, s.home.root, str(s.home.config_path))


def client_key(s: Substrate, text: str, field: str) -> VerifierKey:
    """A pinned key a client gives: the key itself, or a key file inside the allowed directories.

    The command line's `--trusted-key` reads any file its user names; a
    server reads only files a client may name, so a key that does not parse
    as one is taken as a path and confined before anything is opened.
    """
    from mnemolog.eventlog.errors import SignerError
    from mnemolog.eventlog.format.keys import VerifierKey
    from mnemolog.eventlog.verify.trust import parse_key_arg

    try:
        return VerifierKey.from_vkey(text)
    except SignerError as exc:
        if text.count("+") >= 2:  # shaped as name+hash+key: say what is wrong with it
            raise UsageError(f"{field}: {exc.message}", field=field) from exc
    return parse_key_arg(str(client_paths(s).resolve(text, field)), field)


def _object(value: Any) -> dict[str, Any]:
    """A substrate result as the operation's result: an object as it is, else {"result": value}."""
    return dict(value) if isinstance(value, Mapping) else {"result": value}


def _capture(s: Substrate, a: CaptureArgs) -> dict[str, Any]:
    return _object(
        s.capture(
            a.prompt,
            a.response,
            project=a.project,
            client=a.client,
            session=a.session,
            context_id=a.context_id,
            namespace=a.namespace,
            reinforce=a.reinforce,
            occurred_at=a.occurred_at,
        )
    )


def _state_get(s: Substrate, a: StateGetArgs) -> dict[str, Any]:
    return {"project": a.project, "entries": s.get_state(a.project, category=a.category, history=a.history)}


def _state_set(s: Substrate, a: StateSetArgs) -> dict[str, Any]:
    return _object(s.set_state(a.project, a.category, a.key, a.value, source=a.source))


def _candidates(s: Substrate, a: CandidatesArgs) -> dict[str, Any]:
    queues = tuple(a.statuses) or ("pending", "needs_human")
    return {"candidates": s.candidates(queues=queues, project=a.project, limit=a.limit)}


def _promote(s: Substrate, a: PromoteArgs) -> dict[str, Any]:
    domains = list(a.domains) if a.domains is not None else None
    return _object(s.promote(a.id, project=a.project, domains=domains, reason=a.reason))


def _reject(s: Substrate, a: RejectArgs) -> dict[str, Any]:
    return _object(s.reject(a.id, reason=a.reason))


def _context_build(s: Substrate, a: ContextBuildArgs) -> dict[str, Any]:
    return _object(
        s.build_context(
            a.query, project=a.project, budget=a.budget, unit=a.unit, record=a.record, personal=a.personal
        )
    )


def _context_show(s: Substrate, a: ContextShowArgs) -> dict[str, Any]:
    return _object(s.show_context(a.pack_id))


_MEM = {"memory": MEMORY_SCHEMA}
OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in [
        Operation(
            "memory_store",
            "Store a memory",
            "Store a memory (a signed log entry) and return it. Store decisions, corrections, "
            "preferences and facts worth keeping; recall before storing to avoid duplicates.",
            StoreArgs,
            ok_schema(_MEM, ["memory"]),
            _store,
            Access("write", namespaces=("namespace",), projects=("project",)),
        ),
        Operation(
            "memory_recall",
            "Recall memories",
            "Natural-language recall: memories ranked by BM25 over title, tags and content (any term "
            "may match), by the cosine of their embeddings, or both fused (mode; the default is hybrid "
            "when the home embeds). Archived memories are hidden unless include_archived; only active "
            "ones unless statuses.",
            RecallArgs,
            ok_schema(
                {
                    "query": {"type": "string"},
                    "mode": {"enum": ["bm25", "vector", "hybrid"], "description": "The mode used."},
                    "fallback": {
                        "type": ["string", "null"],
                        "description": "Why the mode used is not the default asked for (else null).",
                    },
                    "matched": {"type": "boolean", "description": "False when no memory matched."},
                    "as_of": {
                        "type": "object",
                        "properties": {"seq": {"type": "integer"}, "ts": {"type": "string"}},
                        "description": "With as_of: the last log entry answered from, and its time.",
                    },
                    "results": MEMORIES_SCHEMA,
                },
                ["query", "mode", "results"],
            ),
            _recall,
            Access("read", namespaces=("namespace",), projects=("project",)),
            read_only=True,
            idempotent=True,
        ),
        Operation(
            "memory_search",
            "Search memories by keyword",
            "Keyword search: memories containing every keyword as a whole word (of the title, tags or "
            "content), ranked by BM25.",
            QueryArgs,
            ok_schema(
                {
                    "query": {"type": "string"},
                    "matched": {"type": "boolean", "description": "False when no memory matched."},
                    "results": MEMORIES_SCHEMA,
                },
                ["query", "results"],
            ),
            _search,
            Access("read", namespaces=("namespace",), projects=("project",)),
            read_only=True,
            idempotent=True,
        ),
        Operation(
            "memory_get",
            "Get a memory",
            "One memory with its links in and out.",
            IdArgs,
            ok_schema(_MEM, ["memory"]),
            _get,
            Access("read", ids=("id",)),
            read_only=True,
            idempotent=True,
        ),
        Operation(
            "memory_list",
            "List memories",
            "Memories, newest first, with the same filters as recall.",
            ListArgs,
            ok_schema({"memories": MEMORIES_SCHEMA}, ["memories"]),
            _list,
            Access("read", namespaces=("namespace",), projects=("project",)),
            read_only=True,
            idempotent=True,
        ),
        Operation(
            "memory_link",
            "Link two memories",
            "Draw a signed edge between two existing memories (related_to, supersedes, contradicts, "
            "derived_from, derives_from, reflects_on).",
            LinkArgs,
            ok_schema({"link": {"type": "object"}}, ["link"]),
            _link,
            Access("write", ids=("src",), read_ids=("dst",)),
        ),
        Operation(
            "memory_unlink",
            "Take back a link",
            "Remove the edge src -> dst of a relation (a signed link.removed; the edge stays in the "
            "log's history). Not found (exit 2) when there is no such edge.",
            UnlinkArgs,
            ok_schema({"unlinked": {"type": "object"}}, ["unlinked"]),
            _unlink,
            Access("write", ids=("src",), read_ids=("dst",)),
            destructive=True,
        ),
        Operation(
            "memory_update",
            "Update a memory",
            "Change fields of a memory (a signed memory.updated entry; the old values stay in the log). "
            "Metadata keys merge; a null value removes a key.",
            UpdateArgs,
            ok_schema(_MEM, ["memory"]),
            _update,
            Access("write", ids=("id",), namespaces=("namespace",), projects=("project",)),
            destructive=True,
        ),
        Operation(
            "memory_archive",
            "Archive a memory",
            "Hide a memory from recall (it stays in the log; memory_restore brings it back).",
            ArchiveArgs,
            ok_schema(_MEM, ["memory"]),
            _archive,
            Access("write", ids=("id",)),
            destructive=True,
            idempotent=True,
        ),
        Operation(
            "memory_forget",
            "Forget a memory",
            "Erase content for good, by memory id or in bulk (namespace, project, document, interaction, "
            "before): a signed memory.erased entry (ids, reason; never the content), the data keys "
            "destroyed, and what derives from it (atoms, candidates, chunks, vectors, packs) erased. "
            "dry_run lists it all and erases nothing.",
            ForgetArgs,
            ok_schema(
                {
                    "dry_run": {"type": "boolean"},
                    "erased": {"type": "integer"},
                    "memories": {"type": "array", "items": {"type": "string"}},
                    "seqs": {"type": "array", "items": {"type": "integer"}},
                },
                ["dry_run", "erased", "memories", "seqs"],
            ),
            _forget,
            # Erasure cascades past the memories named (atoms, a candidate's interaction,
            # packs that quoted it) and its bulk selectors reach the whole home: only a token
            # bound to nothing, at admin level, may run it.
            Access("admin", ids=("id",), namespaces=("namespace",), projects=("project",), tenant_wide=True),
            destructive=True,
        ),
        Operation(
            "memory_restore",
            "Restore a memory",
            "Undo an archive (an operator's or an atomisation's) or a supersession (decay's).",
            ArchiveArgs,
            ok_schema(_MEM, ["memory"]),
            _restore,
            Access("write", ids=("id",)),
            idempotent=True,
        ),
        Operation(
            "memory_atomise",
            "Atomise a long memory",
            "Split a long memory into 2-10 self-contained atoms; the parent is archived and the atoms "
            "recall in its place. A repeat returns the existing atoms (already_atomised) unless "
            "force_re_atomise.",
            AtomiseArgs,
            ok_schema(
                {
                    "source_id": {"type": "string"},
                    "atom_ids": {"type": "array", "items": {"type": "string"}},
                    "atom_count": {"type": "integer"},
                    "archived_at": _opt("string"),
                },
                ["source_id", "atom_ids", "atom_count"],
            ),
            _atomise,
            Access("write", ids=("id",)),
            destructive=True,
            idempotent=True,
        ),
        Operation(
            "memory_stats",
            "Memory statistics",
            "Counts of memories, links, atomisation requests and log events.",
            NoArgs,
            ok_schema({"stats": {"type": "object"}}, ["stats"]),
            _stats,
            Access("read"),
            read_only=True,
            idempotent=True,
        ),
        Operation(
            "memory_history",
            "A memory's signed history",
            "Every signed log entry about a memory (its store, updates, archives, links, atomisation), "
            "oldest first, each signature checked against the log's key history.",
            HistoryArgs,
            ok_schema(
                {
                    "memory_id": {"type": "string"},
                    "events": {"type": "array", "items": EVENT_SCHEMA},
                    "truncated": {"type": "boolean"},
                    "anchor": {"type": "string"},
                },
                ["memory_id", "events"],
            ),
            _history,
            Access("read", ids=("id",), histories=("id",)),
            read_only=True,
            idempotent=True,
        ),
        Operation(
            "log_verify",
            "Verify the log",
            "Check the whole log: canonical bytes, the hash chain, every signature against the key "
            "history, every checkpoint. A failure is an error naming the first bad seq and check.",
            VerifyArgs,
            ok_schema(
                {"entries": {"type": "integer"}, "root": {"type": "string"}, "checks": {"type": "array"}},
                ["entries", "root", "checks"],
            ),
            _verify,
            Access("read", tenant_wide=True),
            read_only=True,
            idempotent=True,
        ),
        Operation(
            "bundle_export",
            "Export a forensic bundle",
            "Write a signed, offline-verifiable bundle (a tar) of every entry about a memory, with "
            "Merkle proofs against a fresh checkpoint. Returns where it was written.",
            BundleArgs,
            ok_schema(
                {"path": {"type": "string"}, "entries": {"type": "integer"}, "bytes": {"type": "integer"}},
                ["path", "entries"],
            ),
            _bundle_export,
            Access("read", ids=("memory_id",), histories=("memory_id",)),
        ),
        Operation(
            "bundle_verify",
            "Verify a forensic bundle",
            "Verify a bundle offline: every file, the manifest and checkpoint signatures, every entry "
            "and proof. Pin the signer's public key with trusted_key.",
            BundleVerifyArgs,
            ok_schema({"checks": {"type": "array"}, "trust": {"type": "object"}}, ["checks", "trust"]),
            _bundle_verify,
            Access("read", tenant_wide=True),
            read_only=True,
            idempotent=True,
        ),
        Operation(
            "capture_interaction",
            "Capture an interaction",
            "Record one prompt and response (changes no memory). With reinforce, the active memories "
            "the response echoes gain confidence. Returns the interaction id.",
            CaptureArgs,
            ok_schema({}, []),
            _capture,
            Access("write", namespaces=("namespace",), projects=("project",)),
        ),
        Operation(
            "project_state_get",
            "A project's trusted state",
            "A project's trusted state entries (category/key = value), current ones by default.",
            StateGetArgs,
            ok_schema({}, []),
            _state_get,
            Access("read", project_data=("project",)),
            read_only=True,
            idempotent=True,
        ),
        Operation(
            "project_state_set",
            "Set a project state entry",
            "Set a trusted state entry of a project (upsert on project, category, key).",
            StateSetArgs,
            ok_schema({}, []),
            _state_set,
            Access("write", project_data=("project",)),
            destructive=True,
            idempotent=True,
        ),
        Operation(
            "candidates_list",
            "Candidate memories",
            "Candidate memories waiting for triage or a person (or decided ones, by status).",
            CandidatesArgs,
            ok_schema({}, []),
            _candidates,
            Access("read", projects=("project",)),
            read_only=True,
            idempotent=True,
        ),
        Operation(
            "candidate_promote",
            "Promote a candidate",
            "Promote a candidate to an active memory (optionally to a project, with domains).",
            PromoteArgs,
            ok_schema({}, []),
            _promote,
            Access("write", ids=("id",), projects=("project",)),
        ),
        Operation(
            "candidate_reject",
            "Reject a candidate",
            "Reject a candidate (it becomes invalid; the log keeps it).",
            RejectArgs,
            ok_schema({}, []),
            _reject,
            Access("write", ids=("id",)),
            destructive=True,
        ),
        Operation(
            "context_build",
            "Build a context pack",
            "Assemble the context for a prompt: trusted project state, identity and preferences, "
            "project memories, cross-project domain knowledge and document chunks, in that trust "
            "order under a budget. Returns the pack text, every entry (tier, id, score, size) and "
            "every trimmed one; unless record is false, the pack is a signed context.built event "
            "whose pack_id context_show re-renders.",
            ContextBuildArgs,
            ok_schema({}, []),
            _context_build,
            Access("read", projects=("project",)),
        ),
        Operation(
            "context_show",
            "Show a recorded context pack",
            "Re-render a recorded context pack from the log alone, checking its SHA-256 and every "
            "memory and chunk text it quoted against the log as it was then.",
            ContextShowArgs,
            ok_schema({}, []),
            _context_show,
            Access("read"),
            read_only=True,
            idempotent=True,
        ),
    ]
}


def _usage(op: Operation, where: str, msg: str, found: Any, missing: bool, count: int) -> UsageError:
    shown = repr(found)
    detail = "" if missing else f" (found {shown[:60]}{'...' if len(shown) > 60 else ''})"
    return UsageError(f"{op.name}: {where}: {msg}{detail}", field=where, errors=count)


def parse_args(op: Operation, arguments: Mapping[str, Any] | None) -> Any:
    """The validated arguments, or a UsageError naming the first bad field."""
    try:
        return op.args.model_validate(dict(arguments or {}))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "arguments"
        raise _usage(
            op, where, first.get("msg", ""), first.get("input"), first["type"] == "missing", len(exc.errors())
        ) from exc


def invoke(
    sub: Substrate, name: str, arguments: Mapping[str, Any] | None, scope: Scope | None = None
) -> dict[str, Any]:
    """Validate and run one operation; {"ok": true, ...} or a MnemologError.

    With a token's `scope`, the scope is checked first (`Substrate.authorise`:
    a refusal is recorded and nothing runs) and applied while it runs, so
    every read is confined to it and every write outside it refused.
    """
    op = OPERATIONS.get(name)
    if op is None:
        raise UsageError(f"unknown operation {name!r}", field="name")
    args = parse_args(op, arguments)
    if scope is not None:
        sub.authorise(scope, op.access, dict(args), op.name)
    try:
        with applied(scope):
            return {"ok": True, **op.run(sub, args)}
    except OSError as exc:
        # As the command line does: an I/O failure nothing below caught is a storage error
        # naming its path (exit 6), never an internal error with a traceback on a server.
        where = exc.filename
        raise StorageError(
            f"storage error: {exc.strerror or type(exc).__name__}"
            + (f": {where}" if where is not None else ""),
            file=None if where is None else str(where),
            errno=exc.errno,
        ) from exc
