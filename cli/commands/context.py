"""`mnemolog ingest` and `mnemolog context build|show|why`: documents and context packs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mnemolog.cli.app import Ctx, json_option
from mnemolog.cli.commands.memory import opened
from mnemolog.eventlog.progress import Progress
from mnemolog.projections.context.decode import DocumentRefused


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--project", "-p", default=None, help="The project the documents belong to.")
@click.option(
    "--glob",
    "globs",
    multiple=True,
    help="File name patterns taken from directories (repeatable; default *.md, *.markdown, *.txt).",
)
@json_option
@click.pass_obj
def ingest(ctx: Ctx, paths: tuple[Path, ...], project: str | None, globs: tuple[str, ...]) -> None:
    """Read Markdown and text files into heading-aware chunks, as signed document events.

    An unchanged file writes nothing, a changed one a new version; a file gone
    from a directory ingested again is removed. Files that are not regular,
    too large, or not text in a documented encoding are refused and listed:
    the rest is ingested, and the command exits 65.
    """
    bar = Progress("ingest")
    try:
        with opened(ctx) as s:

            def progress(done: int, total: int) -> None:
                bar.total = total
                bar.advance(done - bar.done)

            report = s.ingest(list(paths), project=project, globs=globs or None, progress=progress)
    finally:
        bar.close()

    def text() -> str:
        lines = [f"ingested {d['path']} (v{d['version']}, {d['chunks']} chunks)" for d in report["ingested"]]
        lines += [f"removed {d['path']}" for d in report["removed"]]
        lines += [f"skipped {d['path']}: {d['reason']}" for d in report["skipped"]]
        n_in, n_chunks = len(report["ingested"]), report["chunks"]
        lines.append(
            f"{n_in} ingested ({n_chunks} chunks), {report['unchanged']} unchanged, "
            f"{len(report['removed'])} removed, {len(report['refused'])} refused"
        )
        return "\n".join(lines)

    if report["refused"]:
        if not ctx.json:
            click.echo(text())
        first = report["refused"][0]
        raise DocumentRefused(
            f"{len(report['refused'])} file(s) refused, e.g. {first['message']}",
            **report,
        )
    ctx.emit(report, text)


@click.group()
def context() -> None:
    """Context packs: five trust-ordered tiers under a budget, recorded in the log."""


@context.command("build")
@click.argument("query")
@click.option(
    "--project", "-p", default=None, help="The project in scope, by name or alias (its state and memories)."
)
@click.option("--budget", type=int, default=None, help="The pack's size (default from config: 3000).")
@click.option("--unit", type=click.Choice(["chars", "tokens"]), default=None, help="chars, or cl100k tokens.")
@click.option("--no-record", is_flag=True, help="Do not write a context.built event.")
@click.option(
    "--personal",
    is_flag=True,
    help="The personal scope: memories of [context] personal_domains may enter; no project data does.",
)
@json_option
@click.pass_obj
def context_build(
    ctx: Ctx,
    query: str,
    project: str | None,
    budget: int | None,
    unit: str | None,
    no_record: bool,
    personal: bool,
) -> None:
    """Assemble the pack for QUERY: project state, identity, project memories, domain knowledge, chunks.

    The pack is printed on stdout; unless --no-record, a signed context.built
    event records every entry it holds and its SHA-256 (the pack id is
    printed on stderr).
    """
    with opened(ctx) as s:
        pack = s.build_context(
            query, project=project, budget=budget, unit=unit, record=not no_record, personal=personal
        )
    if not ctx.json and pack["pack_id"]:
        ctx.info(f"mnemolog: pack {pack['pack_id']} (seq {pack['seq']}), {pack['cost']} {pack['unit']}")
    ctx.emit(pack, lambda: pack["text"].rstrip("\n"))


@context.command("show")
@click.argument("pack_id")
@json_option
@click.pass_obj
def context_show(ctx: Ctx, pack_id: str) -> None:
    """Re-render a recorded pack from the log alone, checking its hash and every text it quotes (exit 8)."""
    with opened(ctx) as s:
        shown = s.show_context(pack_id)

    def text() -> str:
        out = str(shown["text"]).rstrip("\n")
        if shown["gaps"]:
            out += (
                f"\n(note: {len(shown['gaps'])} entries of this pack were erased since and show as gaps; "
                "its hash can no longer be checked)"
            )
        return out

    ctx.emit(shown, text)


@context.command("why")
@click.argument("entry_id")
@click.option("--limit", type=int, default=50, show_default=True, help="At most N packs.")
@json_option
@click.pass_obj
def context_why(ctx: Ctx, entry_id: str, limit: int) -> None:
    """The packs a memory, state entry or chunk went into (or was trimmed from), newest first."""
    with opened(ctx) as s:
        packs = s.context_why(entry_id, limit=limit)

    def line(p: dict[str, Any]) -> str:
        how = "included" if p["included"] else f"trimmed ({p['reason']})"
        where = f" [{p['project']}]" if p["project"] else ""
        return f"{p['pack_id']} seq {p['seq']} tier {p['tier']}: {how}{where} {p['query']!r}"

    ctx.emit(
        {"id": entry_id, "packs": packs}, lambda: "\n".join(map(line, packs)) or f"{entry_id}: in no pack"
    )


@click.group()
def persona() -> None:
    """The agent's persona files (IDENTITY.md, SOUL.md, USER.md, tools.md, model.md)."""


@persona.command("promote")
@click.argument("memory_id")
@click.option("--file", "file_", default=None, help="IDENTITY.md, SOUL.md, USER.md, tools.md or model.md.")
@click.option("--section", default=None, help="A section of that file (its heading text).")
@json_option
@click.pass_obj
def persona_promote(ctx: Ctx, memory_id: str, file_: str | None, section: str | None) -> None:
    """Promote a memory to the persona: `vault render` lists it there and in INDEX.md."""
    with opened(ctx) as s:
        m = s.promote_to_persona(memory_id, file=file_, section=section)
    ctx.emit({"memory": m}, f"{memory_id} promoted to persona")


COMMANDS = [ingest, context, persona]
