"""`mnemolog witness ...`: run a C2SP tlog-witness, and configure the witnesses of a home."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import click

from mnemolog.cli.app import Ctx, json_option


@click.group("witness")
def witness_group() -> None:
    """Witnesses: run one (serve), or send this home's checkpoints to some (add, list, remove, sync)."""


@witness_group.command("serve")
@click.option(
    "--dir",
    "wdir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The witness's directory: its key, the logs it witnesses, its state.",
)
@click.option(
    "--listen",
    default="127.0.0.1:7380",
    show_default=True,
    help="HOST:PORT to listen on (loopback by default; port 0 picks a free one).",
)
@click.option(
    "--log",
    "logs",
    multiple=True,
    metavar="ORIGIN=VKEY",
    help="A log to witness: its checkpoint origin and a public key of it (repeatable; adds to DIR/logs).",
)
@click.option("--name", default=None, help="The witness key's name, when the key is created (first run).")
@json_option
@click.pass_obj
def witness_serve(ctx: Ctx, wdir: Path, listen: str, logs: tuple[str, ...], name: str | None) -> None:
    """Serve the C2SP tlog-witness API (POST /add-checkpoint) until interrupted."""
    from mnemolog.substrate.witness import server as ws

    running = ws.prepare(wdir, listen=listen, logs=[ws.parse_log_spec(s) for s in logs], name=name)
    w = running.witness
    host = ws.parse_listen(listen)[0]
    data = {
        "url": running.url,
        "vkey": w.key.verifier.vkey(),
        "dir": str(wdir),
        "logs": sorted(w.logs),
        "loopback": ws.is_loopback(host),
    }
    if ctx.json:
        click.echo(json.dumps({"ok": True, **data}))
    else:
        click.echo(f"witness {w.key.name} listening on {running.url}")
        click.echo(f"vkey {data['vkey']}")
        click.echo(f"witnessing {len(w.logs)} log(s): {', '.join(sorted(w.logs)) or '(none configured)'}")
        if not data["loopback"]:
            click.echo(f"mnemolog: note: listening on {host}, not on loopback", err=True)
    sys.stdout.flush()
    with contextlib.suppress(KeyboardInterrupt):
        running.run()


@witness_group.command("add")
@click.argument("name")
@click.argument("url")
@click.argument("vkey")
@json_option
@click.pass_obj
def witness_add(ctx: Ctx, name: str, url: str, vkey: str) -> None:
    """Send this home's checkpoints to the witness NAME at URL, whose key is VKEY."""
    from mnemolog.substrate.witness import config as witness_config

    home = ctx.home.require()
    cfg = witness_config.add_witness(home.root, name, url, vkey)
    ctx.emit(cfg.to_json(), f"added witness {cfg.name} at {cfg.url}\nkey {cfg.key.vkey()}")


@witness_group.command("remove")
@click.argument("name")
@json_option
@click.pass_obj
def witness_remove(ctx: Ctx, name: str) -> None:
    """Stop sending checkpoints to the witness NAME (its cosignatures already kept stay)."""
    from mnemolog.substrate.witness import config as witness_config

    home = ctx.home.require()
    cfg = witness_config.remove_witness(home.root, name)
    ctx.emit(cfg.to_json(), f"removed witness {cfg.name}")


@witness_group.command("list")
@json_option
@click.pass_obj
def witness_list(ctx: Ctx) -> None:
    """The configured witnesses and the newest checkpoint each has cosigned here."""
    from mnemolog.substrate.witness import checks as witness_checks
    from mnemolog.substrate.witness import config as witness_config

    home = ctx.home.require()
    s = witness_config.load_settings(home.root)
    rows = [{**w.to_json(), "cosigned": witness_checks.newest_cosigned(home.log_dir, w)} for w in s.witnesses]

    def text() -> str:
        if not rows:
            return "(no witnesses configured: mnemolog witness add NAME URL VKEY)"
        return "\n".join(
            f"{r['name']:<16} {r['url']:<32} cosigned up to {r['cosigned']}  {r['vkey']}" for r in rows
        )

    ctx.emit(
        {"witnesses": rows, "timeout_s": s.timeout_s, "rotation_overlap_hours": s.rotation_overlap_hours},
        text,
    )


@witness_group.command("sync")
@json_option
@click.pass_obj
def witness_sync(ctx: Ctx) -> None:
    """Send the newest checkpoint to every witness now; exit 8 if one remembers a larger or other tree."""
    from mnemolog.eventlog.errors import Informational, VerificationError
    from mnemolog.substrate.witness import config as witness_config
    from mnemolog.substrate.witness import service as witnessing

    home = ctx.home.require()
    if not witness_config.load_settings(home.root).witnesses:
        raise Informational("no witnesses configured (mnemolog witness add NAME URL VKEY)")
    results = witnessing.publish_checkpoint(home.root, home.log_dir, home.keys_dir)
    alarms = [r for r in results if r.alarming]
    if alarms:
        raise VerificationError(
            "; ".join(r.describe() for r in alarms),
            check="witness.rollback",
            witnesses=[r.to_json() for r in results],
        )
    ctx.emit({"witnesses": [r.to_json() for r in results]}, lambda: "\n".join(r.describe() for r in results))


COMMANDS = [witness_group]
