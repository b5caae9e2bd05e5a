"""Memory commands: update, link, archive, restore, search, list, stats, import, rebuild; and
the in-process side of store, get and recall (parsed and printed by commands.memory_front)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from mnemolog.cli import handoff, tables
from mnemolog.cli.app import Ctx, json_option, parse_json_object
from mnemolog.cli.commands.memory_front import (
    Scope,
    as_of_option,
    filter_options,
    get,
    read_text_arg,
    recall,
    store,
    warn,
)
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.events import KINDS, RELATIONS
from mnemolog.substrate.importers import FORMATS as IMPORT_FORMATS
from mnemolog.substrate.memory.importer import ImportFailed


@contextmanager
def opened(ctx: Ctx) -> Iterator[Substrate]:
    with Substrate.open(ctx.home, long_lived=False) as s:
        # The writer (and with it key recovery and torn-tail repair) opens on the first
        # write, inside the command: report what it did afterwards, failure or not.
        try:
            yield s
        finally:
            for line in s.home.recovered_keys:
                ctx.info(f"mnemolog: key recovery: {line}")
            for t in s.recovered:
                ctx.info(f"mnemolog: recovery: {t.describe()}")
    for w in s.close_warnings:
        ctx.info(f"mnemolog: warning: {w}")


def in_process(ctx: Ctx, command: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run `store`, `get` or `recall` here, as a server runs a handed-off one (cli.handoff.run)."""
    with opened(ctx) as s:
        return handoff.run(s, command, args)


#: The edge's kind, for link and unlink alike.
relation_option = click.option(
    "--relation",
    "-r",
    type=click.Choice(RELATIONS),
    default="related_to",
    show_default=True,
    help="The edge's kind.",
)


@click.command()
@click.argument("memory_id")
@click.option("--content", help="New content ('-' for standard input).")
@click.option("--title", help="A new title.")
@click.option("--kind", type=click.Choice(KINDS), help="A new kind.")
@click.option("--namespace", help="Move it to this namespace.")
@click.option("--tag", "tags", multiple=True, help="Replace the tags (repeatable).")
@click.option("--meta", "meta_json", help="Metadata keys to set (JSON object; null removes a key).")
@click.option("--source", help="A new source (a URL, a file, a conversation id).")
@click.option("--confidence", type=float, default=None, help="A number in [0, 1].")
@click.option("--seen", is_flag=True, help="Mark as seen now (last_seen).")
@click.option("--project", default=None, help="Move it to this project ('' for none).")
@click.option("--domain", "domains", multiple=True, help="Replace the domains (repeatable).")
@click.option(
    "--occurred-at",
    "occurred_at",
    default=None,
    help="Put right when it happened (2023-05-08 or 2023-05-08T14:30Z, UTC unless an offset is given).",
)
@json_option
@click.pass_obj
def update(
    ctx: Ctx,
    memory_id: str,
    content: str | None,
    title: str | None,
    kind: str | None,
    namespace: str | None,
    tags: tuple[str, ...],
    meta_json: str | None,
    source: str | None,
    confidence: float | None,
    seen: bool,
    project: str | None,
    domains: tuple[str, ...],
    occurred_at: str | None,
) -> None:
    """Change fields of a memory (a memory.updated event)."""
    meta = parse_json_object(meta_json, "--meta") if meta_json is not None else None
    with opened(ctx) as s:
        m = s.update(
            memory_id,
            content=read_text_arg(content) if content is not None else None,
            title=title,
            kind=kind,
            namespace=namespace,
            tags=list(tags) if tags else None,
            metadata=meta,
            source=source,
            confidence=confidence,
            last_seen=s.clock() if seen else None,
            project=project,
            domains=list(domains) if domains else None,
            occurred_at=occurred_at,
        )
    warn(ctx, m)
    ctx.emit({"memory": m}, f"updated {m['id']}")


@click.command()
@click.argument("src")
@click.argument("dst")
@relation_option
@click.option("--meta", "meta_json", help="Edge metadata, a JSON object.")
@json_option
@click.pass_obj
def link(ctx: Ctx, src: str, dst: str, relation: str, meta_json: str | None) -> None:
    """Draw an edge SRC -> DST."""
    meta = parse_json_object(meta_json, "--meta") if meta_json is not None else None
    with opened(ctx) as s:
        e = s.link(src, dst, relation, meta)
    warn(ctx, e)
    if e.get("already_linked"):
        # Informational, like a repeated atomise: the edge exists, nothing was written.
        ctx.emit({"link": e}, f"already linked {src} -[{relation}]-> {dst} (seq {e['seq']})")
        sys.exit(1)
    ctx.emit({"link": e}, f"linked {src} -[{relation}]-> {dst} (seq {e['seq']})")


@click.command()
@click.argument("src")
@click.argument("dst")
@relation_option
@click.option("--reason", help="Why the edge is taken back (kept in the signed event).")
@json_option
@click.pass_obj
def unlink(ctx: Ctx, src: str, dst: str, relation: str, reason: str | None) -> None:
    """Take back the edge SRC -> DST (a signed link.removed; the edge stays in the log's history)."""
    with opened(ctx) as s:
        out = s.unlink(src, dst, relation, reason)
    ctx.emit(out, f"unlinked {src} -[{relation}]-> {dst} (seq {out['seq']})")


@click.command()
@click.argument("memory_id")
@click.option("--reason", help="Why (kept in the signed event).")
@json_option
@click.pass_obj
def archive(ctx: Ctx, memory_id: str, reason: str | None) -> None:
    """Hide a memory from recall (it stays in the log and with --include-archived)."""
    with opened(ctx) as s:
        m = s.archive(memory_id, reason)
    ctx.emit({"memory": m}, f"archived {memory_id}")


@click.command()
@click.argument("memory_id")
@click.option("--reason", help="Why (kept in the signed event).")
@json_option
@click.pass_obj
def restore(ctx: Ctx, memory_id: str, reason: str | None) -> None:
    """Undo an archive (operator's or atomisation's) or a supersession (decay's)."""
    with opened(ctx) as s:
        m = s.restore(memory_id, reason)
    ctx.emit({"memory": m}, f"restored {memory_id}")


@click.command()
@click.argument("memory_ids", nargs=-1)
@click.option("--namespace", help="Every memory and interaction in this namespace and below it.")
@click.option("--project", help="Every memory and interaction of this project.")
@click.option("--document", help="A document (its id, as `context` shows it) and its chunks.")
@click.option("--interaction", help="A captured interaction and the candidates extracted from it.")
@click.option("--before", metavar="TIME", help="Only what was created before TIME (ISO 8601 UTC).")
@click.option("--reason", help="Why (kept in the signed memory.erased event; never the content).")
@click.option("--dry-run", is_flag=True, help="List everything it would erase, and erase nothing.")
@click.option("--expired", is_flag=True, help="What the namespaces' retention_days policies let expire.")
@click.option(
    "--vault",
    "vaults",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="A vault rendered from this home: re-rendered after, so its notes and journal lines go too.",
)
@click.option(
    "--receipt",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the erasure receipt here (verify it offline with `verify-receipt`).",
)
@json_option
@click.pass_obj
def forget(
    ctx: Ctx,
    memory_ids: tuple[str, ...],
    namespace: str | None,
    project: str | None,
    document: str | None,
    interaction: str | None,
    before: str | None,
    reason: str | None,
    dry_run: bool,
    vaults: tuple[Path, ...],
    receipt: Path | None,
    expired: bool,
) -> None:
    """Erase content for good: a signed memory.erased, its data keys destroyed, every derived copy gone."""
    with opened(ctx) as s:
        out = s.forget(
            list(memory_ids) or None,
            namespace=namespace,
            project=project,
            document=document,
            interaction=interaction,
            before=before,
            reason=reason,
            requested_by=None if expired else f"cli:{os.environ.get('USER') or os.getuid()}",
            dry_run=dry_run,
            vaults=vaults,
            receipt=receipt,
            expired=expired,
        )

    def text() -> str:
        what = (
            f"{len(out['memories'])} memories ({len(out['atoms'])} atoms, {len(out['candidates'])} "
            f"candidates), {len(out['interactions'])} interactions, {len(out['documents'])} documents, "
            f"{len(out['packs'])} packs, {out['links']} links, {out['chunks']} chunks, "
            f"{out['vectors']} vectors"
        )
        if dry_run:
            return f"would erase {what}" + "".join(f"\n  {m}" for m in out["memories"])
        seqs = ", ".join(str(x) for x in out["seqs"]) or "none"
        receipts = "".join(f"\nreceipt: {p}" for p in out.get("receipts", []))
        return f"erased {what} (memory.erased at seq {seqs}){receipts}"

    ctx.emit(out, text)


@click.command("search")
@click.argument("query")
@filter_options
@as_of_option
@json_option
@click.pass_obj
def search(
    ctx: Ctx,
    query: str,
    scope: Scope,
    as_of: str | None,
) -> None:
    """Memories holding every keyword as a word (of title, tags or content), ranked by BM25."""
    with opened(ctx) as s:
        results = s.search(query, **scope, as_of=as_of)
    ctx.emit({"query": query, "results": results}, lambda: tables.memories(results, "(no matches)"))


@click.command("list")
@filter_options
@click.option("--offset", type=click.IntRange(min=0), default=0, help="Skip the first N (for paging).")
@as_of_option
@json_option
@click.pass_obj
def list_cmd(
    ctx: Ctx,
    scope: Scope,
    offset: int,
    as_of: str | None,
) -> None:
    """List memories, newest first."""
    with opened(ctx) as s:
        rows = s.list(offset=offset, **scope, as_of=as_of)
    ctx.emit({"memories": rows}, lambda: tables.memories(rows, "(none)"))


@click.command()
@json_option
@click.pass_obj
def stats(ctx: Ctx) -> None:
    """Counts of memories, links, events and the index."""
    with opened(ctx) as s:
        st = s.stats()

    ctx.emit({"stats": st}, lambda: tables.stats(st))


def _mapping(r: Mapping[str, Any]) -> str:
    """A dry run's mapping: one line per item (id, namespace, time, source, content), then the counts."""
    lines = [
        f"{'=' if m['exists'] else '+'} {m['id']}  {m['namespace']}  {tables.date(m['created_at'])}  "
        f"{m['source']}  {tables.one_line(m['content'], 60)}"
        for m in r["mapping"]
    ]
    lines.append(
        f"{r['items']} items from {r['file']} ({r['format']}): {r['new']} new ({r['status']}), "
        f"{r['skipped_existing']} stored already (=)"
        + (f", {len(r['links'])} relation link(s)" if r.get("links") else "")
        + "; nothing written (dry run)"
    )
    return "\n".join(lines)


@click.command("import")
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--from",
    "fmt",
    type=click.Choice(IMPORT_FORMATS),
    default=None,
    help="FILE is another tool's export (a folder of notes for basic-memory), not JSON Lines.",
)
@click.option("--trust", is_flag=True, help="With --from: store the items active, not as candidates.")
@click.option("--dry-run", is_flag=True, help="With --from: show the mapping, write nothing.")
@click.option("--skip-existing", is_flag=True, help="Skip lines whose id is stored already (resume a run).")
@click.option("--batch", type=click.IntRange(1, 100_000), default=2000, help="Memories per group commit.")
@json_option
@click.pass_obj
def import_cmd(
    ctx: Ctx, file: Path, fmt: str | None, trust: bool, dry_run: bool, skip_existing: bool, batch: int
) -> None:
    """Store the memories of a JSON Lines FILE: every line checked first, then written in batches.

    With --from, FILE is a mem0, Letta, basic-memory, Claude or ChatGPT export:
    its items become candidates (active with --trust), and a second import adds nothing.
    """
    if fmt is None and (trust or dry_run):
        raise click.UsageError("--trust and --dry-run go with --from")
    with opened(ctx) as s:
        try:
            if fmt is not None:
                r = s.import_from(fmt, file, trust=trust, dry_run=dry_run, batch=batch, progress=None)
            else:
                r = dict(s.import_jsonl(file, skip_existing=skip_existing, batch=batch, progress=None))
        except ImportFailed as exc:
            if not ctx.json:
                for b in exc.details["bad_lines"]:
                    # An item's message names its number and source already.
                    ctx.info(
                        f"mnemolog: {b['message']}"
                        if fmt
                        else f"mnemolog: {file}:{b['line']}: {b['message']}"
                    )
            raise
    warn(ctx, r)
    if r.get("dry_run"):
        ctx.emit({"import": r}, lambda: _mapping(r))
        return
    unit = f"{r['items']} items" if fmt else f"{r['lines']} lines"
    ctx.emit(
        {"import": r},
        f"imported {r['imported']} memories from {unit} in {r['batches']} batches"
        + ((" as candidates" if r["status"] == "candidate" else " as active memories") if fmt else "")
        + (f" ({r['skipped_existing']} already stored)" if r["skipped_existing"] else "")
        + (f"; {r['pending']} wait for their vectors" if r["pending"] else ""),
    )


@click.command()
@click.option(
    "--accept-rollback",
    is_flag=True,
    help="The log lost entries the home had recorded, and that is intended: record it in the log "
    "(a signed log.rollback_accepted) and rebuild over it.",
)
@json_option
@click.pass_obj
def rebuild(ctx: Ctx, accept_rollback: bool) -> None:
    """Drop every projection and replay the whole log (refused over a rolled-back log)."""
    with opened(ctx) as s:
        r = s.rebuild(accept_rollback=accept_rollback)

    def text() -> str:
        out = f"rebuilt projections from {r['replayed']} entries"
        acc = r.get("rollback_accepted")
        if acc:
            out = (
                f"accepted a rollback from {acc['old_size']} to {acc['new_size']} entries "
                f"(recorded at seq {acc['seq']}); " + out
            )
        return out

    ctx.emit(r, text)


COMMANDS = [
    store,
    get,
    update,
    link,
    unlink,
    archive,
    restore,
    recall,
    search,
    list_cmd,
    stats,
    import_cmd,
    rebuild,
]
