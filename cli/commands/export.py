"""The export command: the active memories in a form another tool reads (the way back out)."""

from __future__ import annotations

from pathlib import Path

import click

from mnemolog.cli.app import Ctx, json_option
from mnemolog.cli.commands.memory import opened
from mnemolog.substrate.importers.export import EXPORT_FORMATS


@click.command("export")
@click.argument("out", type=click.Path(path_type=Path))
@click.option(
    "--to",
    "fmt",
    type=click.Choice(EXPORT_FORMATS),
    required=True,
    help="jsonl: one file `import` reads back; basic-memory: a folder of Markdown notes.",
)
@click.option("--namespace", default=None, help="Only this namespace and those below it.")
@json_option
@click.pass_obj
def export_cmd(ctx: Ctx, out: Path, fmt: str, namespace: str | None) -> None:
    """Write the active memories to OUT as JSON Lines (what import reads) or basic-memory notes."""
    with opened(ctx) as s:
        r = s.export_memories(fmt, out, namespace=namespace)
    ctx.emit({"export": r}, f"exported {r['memories']} memories to {r['out']} ({fmt}, {r['files']} file(s))")
