"""`mnemolog mcp`: the Model Context Protocol server, for agents.

stdio by default (one JSON-RPC message per line; diagnostics on stderr), or
streamable HTTP on a loopback address with `--http 127.0.0.1:PORT`. The
server holds one long-lived Substrate (with its deferred-atomisation worker)
for its whole life, beside any CLI commands in other processes. The server
itself is cli.mcp_server, on the official `mcp` SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from mnemolog.cli.agents.listen import parse_listen
from mnemolog.cli.app import Ctx, json_option

if TYPE_CHECKING:
    from mnemolog.substrate.home import Home


def served_home(ctx: Ctx, *, create: bool, who: str) -> Home:
    """The home a long-lived server serves, created first when it does not exist yet.

    An agent's client starts the server with a path and nothing else: refusing
    (and closing the connection) leaves the agent with an error it cannot act
    on, so a missing home, or an empty directory meant for one, is created, and
    where it is and its public key are said on stderr (stdout may be the MCP
    wire). ``create=False`` (`--no-create`) keeps the refusal; a directory
    holding something else is refused either way.
    """
    root = ctx.home.root
    missing = not root.exists() or (root.is_dir() and not root.is_symlink() and not any(root.iterdir()))
    if create and missing:
        from mnemolog.substrate.home import init_home

        report = init_home(root)
        ctx.info(f"{who}: created a new home at {report.home}")
        ctx.info(f"{who}: log id {report.log_id}")
        ctx.info(f"{who}: public key {report.vkey}")
    return ctx.home.require()


no_create_option = click.option(
    "--no-create",
    is_flag=True,
    help="Refuse a home that does not exist yet instead of creating it.",
)


@click.command("mcp")
@click.option(
    "--http",
    "http",
    metavar="HOST:PORT",
    default=None,
    help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (loopback addresses only).",
)
@click.option(
    "--token",
    envvar="MNEMOLOG_TOKEN",
    default=None,
    help="Serve as this token's holder (default $MNEMOLOG_TOKEN): every tool confined to its scope.",
)
@click.option(
    "--tenant",
    default=None,
    help="Serve only this tenant of --tenants ROOT (stdio or HTTP).",
)
@click.option(
    "--tenants",
    "tenants_root",
    default=None,
    type=click.Path(file_okay=False),
    help="A tenant root: with --http and no --tenant, serve all its tenants, each request's token "
    "naming its tenant.",
)
@no_create_option
@json_option
@click.pass_obj
def mcp(
    ctx: Ctx,
    http: str | None,
    token: str | None,
    tenant: str | None,
    tenants_root: str | None,
    no_create: bool,
) -> None:
    """Serve the Model Context Protocol (stdio, or streamable HTTP on loopback).

    A home that does not exist yet is created (where, and its public key, are
    said on stderr) unless --no-create.

    Example: mnemolog --home ~/.local/share/mnemolog mcp
    """
    listen = parse_listen(http, allow_remote=False, what="--http") if http is not None else None
    if tenants_root is not None and tenant is None:
        from pathlib import Path

        from mnemolog.cli.agents.mcp_server import run_tenants
        from mnemolog.eventlog.errors import UsageError
        from mnemolog.substrate.tenancy.tenants import TenantRoot

        if listen is None:
            raise UsageError("--tenants without --tenant serves many homes: give --http HOST:PORT")
        root = TenantRoot(Path(tenants_root)).require()
        ctx.info(
            f"mnemolog mcp: serving the tenants of {root.path} at http://{listen.url_host}:{listen.port}/mcp "
            "(tokens required)"
        )
        run_tenants(root, listen.host, listen.port)
        return
    if tenant is not None:
        from pathlib import Path

        from mnemolog.eventlog.errors import UsageError
        from mnemolog.substrate.tenancy.tenants import TenantRoot

        if tenants_root is None:
            raise UsageError("--tenant needs the tenant root: --tenants ROOT or $MNEMOLOG_TENANTS")
        home = TenantRoot(Path(tenants_root)).require().home(tenant).require()
    else:
        home = served_home(ctx, create=not no_create, who="mnemolog mcp")
    from mnemolog.cli.agents.mcp_server import run

    if listen is not None:
        ctx.info(f"mnemolog mcp: serving streamable HTTP at http://{listen.url_host}:{listen.port}/mcp")
        run(home, (listen.host, listen.port), token=token, tenant=tenant)
    else:
        run(home, token=token, tenant=tenant)
