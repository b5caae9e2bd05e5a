"""`mnemolog log publish` and `mnemolog monitor`: the log as C2SP tlog-tiles, and a follower of one."""

from __future__ import annotations

from pathlib import Path

import click

from mnemolog.cli.app import Ctx, json_option


@click.command("publish")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@json_option
@click.pass_obj
def log_publish(ctx: Ctx, out: Path) -> None:
    """Write the newest checkpoint, hash tiles and entry bundles into OUT (C2SP tlog-tiles), incrementally."""
    from mnemolog.substrate.publish import publish

    home = ctx.home.require()
    r = publish(home.log_dir, out)
    ctx.emit(
        r.to_json(),
        lambda: (
            f"published size {r.size} of {r.origin} to {r.dir}\n"
            f"root {r.root}\n"
            f"{r.files_written} file(s) written ({r.bytes_written:,} bytes), {r.files_kept} already there"
            + (f"; {r.large_entries} entry(ies) over 64 KiB at large-entry/" if r.large_entries else "")
        ),
    )
