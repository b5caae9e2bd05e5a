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
    from mnemolog.substrate.witness.publish import publish

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


@click.command("monitor")
@click.argument("url")
@click.option(
    "--state",
    "state_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where the checkpoint seen last and the tree's right edge are kept between runs.",
)
@click.option(
    "--trusted-key",
    default=None,
    help="The log's public key (name+hash+base64, or a file); needed on a first run, then kept in --state.",
)
@click.option(
    "--witness",
    "witness_keys",
    multiple=True,
    help="A witness's cosigner key (or a file): the checkpoint must carry its cosignature (repeatable).",
)
@click.option(
    "--min-witnesses",
    type=click.IntRange(min=1),
    default=None,
    help="How many of the --witness witnesses must have cosigned (default: all).",
)
@click.option("--entries", "check_entries", is_flag=True, help="Also fetch the new entries and hash them.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1, max=600),
    default=10.0,
    show_default=True,
    help="Seconds of silence allowed per request (a whole response gets three times this).",
)
@json_option
@click.pass_obj
def monitor_cmd(
    ctx: Ctx,
    url: str,
    state_path: Path | None,
    trusted_key: str | None,
    witness_keys: tuple[str, ...],
    min_witnesses: int | None,
    check_entries: bool,
    timeout: float,
) -> None:
    """Follow a log published as C2SP tlog-tiles; exit 8 on a fork or a rollback.

    URL is an http(s):// prefix, a file:// URL or a directory.
    """
    from mnemolog.eventlog.progress import Progress
    from mnemolog.eventlog.witness.cosignature import WitnessPolicy
    from mnemolog.substrate.witness.monitor import HttpSource, monitor, open_source

    witnesses = WitnessPolicy.parse(witness_keys, min_witnesses)
    src = open_source(url, timeout)
    bar = Progress("monitoring")
    try:
        r = monitor(
            src,
            state_path,
            trusted_key=trusted_key,
            witnesses=witnesses,
            check_entries=check_entries,
            progress=bar.advance,
        )
    finally:
        bar.close()
        if isinstance(src, HttpSource):
            src.close()

    def text() -> str:
        lines = [f"ok: {r.origin} at {r.url}: size {r.size}, root {r.root}"]
        if r.previous_root is None:
            lines.append(f"first run: {r.size} entries verified from {r.tiles_fetched} tile(s)")
        else:
            lines.append(
                f"consistent with size {r.previous_size} seen before; {r.new_entries} new "
                f"entries verified from {r.tiles_fetched} tile(s)"
            )
        if check_entries:
            lines.append(f"{r.entries_checked} entries hash to their leaves ({r.large_entries} large)")
        if r.witnesses:
            lines.append("cosigned by " + ", ".join(w["name"] for w in r.witnesses))
        return "\n".join(lines)

    ctx.emit(r.to_json(), text)
