"""`mnemolog serve`: the local HTTP API (cli.http_api) on a well-kept ASGI stack (Starlette, uvicorn)."""

from __future__ import annotations

from pathlib import Path

import click

from mnemolog.cli.agents.listen import DEFAULT_PORT, parse_listen
from mnemolog.cli.app import Ctx, json_option
from mnemolog.cli.commands.mcp import no_create_option, served_home


@click.command("serve")
@click.option(
    "--listen",
    default=f"127.0.0.1:{DEFAULT_PORT}",
    show_default=True,
    metavar="HOST:PORT",
    help="Where to listen. Beyond loopback only with [http] token set in config.toml.",
)
@click.option(
    "--tenants",
    "tenants_root",
    envvar="MNEMOLOG_TENANTS",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Serve every tenant of this tenant root; each request's token names its tenant.",
)
@click.option(
    "--cache",
    type=click.IntRange(1, 100_000),
    default=None,
    help="With --tenants: how many tenants stay open at once (default [serve] cache, 32).",
)
@no_create_option
@json_option
@click.pass_obj
def serve(ctx: Ctx, listen: str, tenants_root: Path | None, cache: int | None, no_create: bool) -> None:
    """Serve the local HTTP API (loopback unless [http] token is set).

    A home that does not exist yet is created (where, and its public key, are
    said on stderr) unless --no-create. With --tenants, one server holds many
    homes: every request needs a token made by `token create --tenant`.

    Example: mnemolog serve --listen 127.0.0.1:8765
    """
    from mnemolog.cli.agents.http_api import HttpSettings, describe
    from mnemolog.cli.agents.http_api import serve as run

    if tenants_root is not None:
        from mnemolog.cli.agents.http_api import serve_tenants
        from mnemolog.substrate.tenancy.tenants import TenantRoot

        root = TenantRoot(tenants_root).require()
        # Every request carries a tenant's token, so the server may listen beyond loopback.
        settings = HttpSettings(loopback_only=False)
        where = parse_listen(listen, allow_remote=True)
        ctx.info(
            f"mnemolog serve: http://{where.url_host}:{where.port} (tenants of {root.path}; tokens required)"
        )
        serve_tenants(root, where.host, where.port, settings, cache)
        return
    home = served_home(ctx, create=not no_create, who="mnemolog serve")
    settings = HttpSettings.from_config(home.config.raw, str(home.config_path))
    where = parse_listen(listen, allow_remote=settings.token is not None)
    ctx.info(describe(settings, where.host, where.port))
    run(home, where.host, where.port, settings)
