"""`mnemolog serve`: the local HTTP API (cli.http_api) on a well-kept ASGI stack (Starlette, uvicorn)."""

from __future__ import annotations

import click

from mnemolog.cli.app import Ctx, json_option
from mnemolog.cli.listen import DEFAULT_PORT, parse_listen
from mnemolog.cli.mcp import no_create_option, served_home


@click.command("serve")
@click.option(
    "--listen",
    default=f"127.0.0.1:{DEFAULT_PORT}",
    show_default=True,
    metavar="HOST:PORT",
    help="Where to listen. Beyond loopback only with [http] token set in config.toml.",
)
@no_create_option
@json_option
@click.pass_obj
def serve(ctx: Ctx, listen: str, no_create: bool) -> None:
    """Serve the local HTTP API (loopback unless [http] token is set).

    A home that does not exist yet is created (where, and its public key, are
    said on stderr) unless --no-create.

    Example: mnemolog serve --listen 127.0.0.1:8765
    """
    from mnemolog.cli.http_api import HttpSettings, describe
    from mnemolog.cli.http_api import serve as run

    home = served_home(ctx, create=not no_create, who="mnemolog serve")
    settings = HttpSettings.from_config(home.config.raw, str(home.config_path))
    where = parse_listen(listen, allow_remote=settings.token is not None)
    ctx.info(describe(settings, where.host, where.port))
    run(home, where.host, where.port, settings)
