"""`store`, `get` and `recall`: parsed and printed here, run by a server or in process.

These three commands are what agents' hooks call most, so this module imports
no more than click and the vocabulary: the arguments are parsed and checked
here, the call goes to a running `mnemolog serve` of the home when one is
announced (cli.handoff), and only otherwise is the substrate imported and the
call run in process (commands.memory.in_process). Either way the result is
printed here, by the same code, so the two print the same bytes.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import click

from mnemolog.cli import handoff, tables
from mnemolog.cli.app import Ctx, json_option, parse_json_object
from mnemolog.eventlog.errors import BadInput
from mnemolog.eventlog.vocabulary.events import KINDS
from mnemolog.eventlog.vocabulary.knowledge import STATUSES
from mnemolog.substrate.events.limits import MAX_CONTENT_BYTES


def run(ctx: Ctx, command: str, args: dict[str, Any]) -> dict[str, Any]:
    """The command's result: from the home's running server, else worked out in process."""
    out = handoff.call(ctx.home_arg, ctx.tenant, command, args)
    if out is None:
        from mnemolog.cli.commands.memory import in_process

        out = in_process(ctx, command, args)
    return out


def warn(ctx: Ctx, result: Any) -> None:
    """Print the warnings a write returned (post hooks that failed after the write)."""
    for w in result.get("warnings", ()):
        ctx.info(f"mnemolog: warning: {w}")


def read_text_arg(text: str) -> str:
    """TEXT, or standard input for '-', strictly UTF-8 and size-limited."""
    if text != "-":
        return text
    raw = sys.stdin.buffer.read(MAX_CONTENT_BYTES + 1)
    if len(raw) > MAX_CONTENT_BYTES:
        raise BadInput(
            f"standard input is larger than the {MAX_CONTENT_BYTES}-byte content limit",
            field="content",
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(
            f"standard input is not valid UTF-8 (byte {exc.start}: {raw[exc.start : exc.start + 1]!r})",
            field="content",
        ) from exc


def memory_text(m: Mapping[str, Any]) -> str:
    lines = [
        f"id         {m['id']}",
        f"namespace  {m['namespace']}",
        f"kind       {m['kind']}",
    ]
    if m.get("title"):
        lines.append(f"title      {m['title']}")
    if m.get("tags"):
        lines.append(f"tags       {', '.join(m['tags'])}")
    if m.get("confidence") is not None:
        lines.append(f"confidence {m['confidence']}")
    if m.get("source"):
        lines.append(f"source     {m['source']}")
    if m.get("status", "active") != "active":
        lines.append(f"status     {m['status']}")
    if m.get("project"):
        lines.append(f"project    {m['project']}")
    if m.get("domains"):
        lines.append(f"domains    {', '.join(m['domains'])}")
    if m.get("reference_count"):
        lines.append(
            f"referenced {m['reference_count']} time(s), last {tables.date(m.get('last_referenced_at'))}"
        )
    lines.append(f"created    {tables.date(m['created_at'])}   updated {tables.date(m['updated_at'])}")
    if m.get("occurred_at") is not None:
        lines.append(f"occurred   {tables.date(m['occurred_at'])}")
    for k in ("atom_of", "atomised_into", "archived_at", "atomisation_archived_at"):
        if m.get(k) is not None:
            lines.append(f"{k:<10} {m[k]}")
    if m.get("metadata"):
        import json

        lines.append(f"metadata   {json.dumps(m['metadata'], ensure_ascii=False, sort_keys=True)}")
    links = m.get("links") or {}
    for e in links.get("outgoing", []):
        lines.append(f"link       -> {e['dst']} ({e['relation']})")
    for e in links.get("incoming", []):
        lines.append(f"link       <- {e['src']} ({e['relation']})")
    lines += ["", m["content"]]
    return "\n".join(lines)


class Scope(TypedDict):
    """The filter options as the substrate's recall, search and list take them."""

    limit: int
    namespace: str | None
    descendants: bool
    kinds: tuple[str, ...]
    tags: tuple[str, ...]
    include_archived: bool
    include_expired: bool
    statuses: tuple[str, ...]
    project: str | None
    domains: tuple[str, ...]


#: --as-of, for recall, search and list alike.
as_of_option = click.option(
    "--as-of",
    "as_of",
    metavar="SEQ|TIME",
    default=None,
    help="Answer from the log as it stood then: a seq (entries 0..SEQ) or an ISO 8601 UTC time "
    "(the entries stamped at or before it), e.g. 2026-12-04T17:00:00Z.",
)


def filter_options(f: Any) -> Any:
    """The filter options, handed to the command as one ``scope`` (a Scope)."""

    @functools.wraps(f)
    def scoped(*args: Any, **kw: Any) -> Any:
        scope = Scope(
            limit=kw.pop("limit"),
            namespace=kw.pop("namespace"),
            descendants=not kw.pop("exact_namespace"),
            kinds=kw.pop("kinds"),
            tags=kw.pop("tags"),
            include_archived=kw.pop("include_archived"),
            include_expired=kw.pop("include_expired"),
            statuses=kw.pop("statuses") or ("active",),
            project=kw.pop("project"),
            domains=kw.pop("domains"),
        )
        return f(*args, scope=scope, **kw)

    g: Any = scoped
    g = click.option("--namespace", "-n", default=None, help="Only this namespace (and below).")(g)
    g = click.option("--exact-namespace", is_flag=True, help="Not the namespaces below --namespace.")(g)
    g = click.option("--kind", "kinds", multiple=True, type=click.Choice(KINDS), help="Only these kinds.")(g)
    g = click.option("--tag", "tags", multiple=True, help="Only memories with all these tags.")(g)
    g = click.option("--include-archived", is_flag=True, help="Show archived memories too.")(g)
    g = click.option(
        "--include-expired", is_flag=True, help="Show memories whose expires_at has passed too."
    )(g)
    g = click.option("--project", default=None, help="Only this project ('' for memories of no project).")(g)
    g = click.option("--domain", "domains", multiple=True, help="Only memories with all these domains.")(g)
    g = click.option(
        "--status",
        "statuses",
        multiple=True,
        type=click.Choice(STATUSES),
        help="Only memories of these statuses (repeatable; default: active).",
    )(g)
    return click.option("--limit", type=click.IntRange(1, 1000), default=10, help="At most N results.")(g)


@click.command()
@click.argument("text")
@click.option("--namespace", "-n", default="default", help="Namespace, e.g. team/project.")
@click.option(
    "--kind",
    type=click.Choice(KINDS),
    default="observation",
    show_default=True,
    help="What sort of memory it is.",
)
@click.option("--title", help="A short title (default: the content's first line, cut).")
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable).")
@click.option("--meta", "meta_json", help="Metadata, a JSON object.")
@click.option("--source", help="Where this came from (a URL, a file, a conversation id).")
@click.option("--confidence", type=float, default=None, help="A number in [0, 1].")
@click.option("--project", default="", help="The project it belongs to (default: none, every project).")
@click.option("--domain", "domains", multiple=True, help="A knowledge domain (repeatable).")
@click.option(
    "--occurred-at",
    "occurred_at",
    default=None,
    help="When it happened, if not now: 2023-05-08 or 2023-05-08T14:30Z (UTC unless an offset is given). "
    "Recall finds it by that date.",
)
@click.option(
    "--id",
    "memory_id",
    default=None,
    help="The memory's id (a ULID): stored at most once; a retry returns it with already_stored.",
)
@json_option
@click.pass_obj
def store(
    ctx: Ctx,
    text: str,
    namespace: str,
    kind: str,
    title: str | None,
    tags: tuple[str, ...],
    meta_json: str | None,
    source: str | None,
    confidence: float | None,
    project: str,
    domains: tuple[str, ...],
    occurred_at: str | None,
    memory_id: str | None,
) -> None:
    """Store TEXT (or standard input with '-') as a memory."""
    meta = parse_json_object(meta_json, "--meta") if meta_json is not None else None
    content = read_text_arg(text)
    m = run(
        ctx,
        "store",
        {
            "content": content,
            "namespace": namespace,
            "kind": kind,
            "title": title,
            "tags": list(tags),
            "metadata": meta,
            "source": source,
            "confidence": confidence,
            "project": project,
            "domains": list(domains),
            "memory_id": memory_id,
            **({"occurred_at": occurred_at} if occurred_at is not None else {}),
        },
    )
    warn(ctx, m)
    if m.get("already_stored"):
        ctx.emit({"memory": m}, f"already stored {m['id']}")
        return
    extra = ""
    if m.get("atomise_mode"):
        extra = f" (auto-atomise {m['atomise_mode']}: {m.get('atomise_outcome')})"
    if m.get("embedding") == "pending":
        extra += " (embedding pending: `mnemolog embeddings sync` when the embedder is back)"
    ctx.emit({"memory": m}, f"stored {m['id']}{extra}")


@click.command()
@click.argument("memory_id")
@json_option
@click.pass_obj
def get(ctx: Ctx, memory_id: str) -> None:
    """Show one memory with its links."""
    m = run(ctx, "get", {"memory_id": memory_id})
    ctx.emit({"memory": m}, lambda: memory_text(m))


def explain_line(e: Mapping[str, Any]) -> str:
    parts = []
    if e.get("bm25_rank") is not None:
        parts.append(f"bm25 #{e['bm25_rank']} ({e['bm25_score']:.3f})")
    if e.get("neighbour_contribution"):
        parts.append(f"neighbour +{e['neighbour_contribution']:.3f} ({e.get('neighbour_id')})")
    if e.get("vector_rank") is not None:
        parts.append(f"vector #{e['vector_rank']} (cosine {1.0 - e['cosine_distance']:.3f})")
    if e.get("mode") == "hybrid":
        parts.append(f"fused {e['fused_score']:.5f}")
    return "         " + "  ".join(parts)


def explained(results: Sequence[Mapping[str, Any]]) -> str:
    """The results with each one's explain line: under its line in plain text, after a table."""
    if not results or not tables.to_terminal():
        lines = []
        for m in results:
            lines.append(tables.memory_line(m))
            if "explain" in m:
                lines.append(explain_line(m["explain"]))
        return "\n".join(lines) or "(no matches)"
    notes = [f"{m['id']}{explain_line(m['explain'])}" for m in results if "explain" in m]
    return "\n".join([tables.memories(results, "(no matches)"), "", *notes])


@click.command("recall")
@click.argument("query")
@filter_options
@click.option(
    "--mode",
    type=click.Choice(["bm25", "vector", "hybrid"]),
    default=None,
    help="How to rank (default: hybrid when the home embeds, else bm25).",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Show each result's BM25 and vector ranks, its neighbour's contribution and the fused score.",
)
@click.option(
    "--min-score",
    type=click.FloatRange(min=0),
    default=None,
    help="Only results scoring at least this (the score shown; default: any above 0).",
)
@as_of_option
@json_option
@click.pass_obj
def recall(
    ctx: Ctx,
    query: str,
    scope: Scope,
    mode: str | None,
    explain: bool,
    min_score: float | None,
    as_of: str | None,
) -> None:
    """Rank memories for a question: BM25 over title, tags and content, vectors, or both fused."""
    args: dict[str, Any] = {k: list(v) if isinstance(v, tuple) else v for k, v in scope.items()}
    report = run(
        ctx,
        "recall",
        {"query": query, **args, "mode": mode, "explain": explain, "min_score": min_score, "as_of": as_of},
    )
    if "as_of" in report:
        ctx.info(f"mnemolog: as of seq {report['as_of']['seq']} ({report['as_of']['ts']})")
    if report["fallback"]:
        ctx.info(f"mnemolog: recall used {report['mode']}: {report['fallback']}")
    results = report["results"]

    def text() -> str:
        if explain:
            return explained(results)
        return tables.memories(results, "(no matches)")

    ctx.emit({"query": query, **report}, text)
