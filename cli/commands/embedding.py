"""`mnemolog embeddings`: the home's embedder (set, status) and the vectors it owes (sync)."""

from __future__ import annotations

from typing import Any

import click

from mnemolog.cli.app import Ctx, json_option
from mnemolog.cli.commands.memory import opened
from mnemolog.curators.embedding.embedder import EMBED_KINDS


@click.group("embeddings")
def embeddings_group() -> None:
    """The home's embedding model and its vectors."""


@embeddings_group.command("set")
@click.argument("kind", type=click.Choice(EMBED_KINDS))
@click.argument("model", required=False)
@click.option("--no-sync", is_flag=True, help="Record the choice only; embed later (`embeddings sync`).")
@json_option
@click.pass_obj
def set_cmd(ctx: Ctx, kind: str, model: str | None, no_sync: bool) -> None:
    """Record KIND (minilm, wordllama, ollama MODEL, or off) as the home's embedder, then re-embed."""
    with opened(ctx) as s:
        record = s.set_embedder(kind, model)
        synced = None if no_sync or kind == "off" else s.embed_pending(progress=None)
    out: dict[str, Any] = {"embedder": record, "sync": synced}

    def text() -> str:
        line = f"embedder set to {record['model_id'] or 'off'}"
        if synced is not None:
            line += f"; embedded {synced['embedded']}, pending {synced['pending']}"
        return line

    ctx.emit(out, text)


@embeddings_group.command("status")
@json_option
@click.pass_obj
def status_cmd(ctx: Ctx) -> None:
    """The recorded embedder, the configured one, and how many vectors are there or owed."""
    with opened(ctx) as s:
        st = s.embedding_status()

    def text() -> str:
        rec = st["recorded"]
        lines = [
            "recorded    "
            + (
                f"{rec['model_id'] or 'off'} ({rec['dim']} dimensions, seq {rec['seq']})"
                if rec
                else "none yet"
            ),
            f"configured  {st['configured']['kind']} {st['configured']['model'] or ''}".rstrip(),
            f"vectors     {st['vectors']}   pending {st['pending']}   cached {st['cached']}",
        ]
        if st["differs"]:
            lines.append("note        the configuration differs from the recorded choice; "
                         "`mnemolog embeddings set` switches the home")  # fmt: skip
        return "\n".join(lines)

    ctx.emit({"embeddings": st}, text)


@embeddings_group.command("sync")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Embed at most N texts.")
@json_option
@click.pass_obj
def sync_cmd(ctx: Ctx, limit: int | None) -> None:
    """Embed the memories still waiting for a vector (progress on stderr when it is a terminal)."""
    with opened(ctx) as s:
        r = s.embed_pending(limit=limit, progress=None)
    ctx.emit({"sync": r}, f"embedded {r['embedded']}, pending {r['pending']}")


COMMANDS = [embeddings_group]
