"""`mnemolog mcp`: the Model Context Protocol server, for agents.

stdio by default (one JSON-RPC message per line; diagnostics on stderr), or
streamable HTTP on a loopback address with `--http 127.0.0.1:PORT`. The
server holds one long-lived Substrate (with its deferred-atomisation worker)
for its whole life, beside any CLI commands in other processes. The server
itself is cli.mcp_server, on the official `mcp` SDK.
"""

from __future__ import annotations

import click

from mnemolog.cli.app import Ctx, json_option
from mnemolog.cli.listen import parse_listen


@click.command("mcp")
@click.option(
    "--http",
    "http",
    metavar="HOST:PORT",
    default=None,
    help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (loopback addresses only).",
)
@json_option
@click.pass_obj
def mcp(ctx: Ctx, http: str | None) -> None:
    """Serve the Model Context Protocol (stdio, or streamable HTTP on loopback)."""
    listen = parse_listen(http, allow_remote=False, what="--http") if http is not None else None
    home = ctx.home.require()
    from mnemolog.cli.mcp_server import run

    if listen is not None:
        ctx.info(f"mnemolog mcp: serving streamable HTTP at http://{listen.url_host}:{listen.port}/mcp")
        run(home, (listen.host, listen.port))
    else:
        run(home)
