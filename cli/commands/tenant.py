"""`mnemolog tenant ...` and `mnemolog token ...`: tenant homes under one root, and scoped tokens."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import click

from mnemolog.cli.app import Ctx, json_option

tenants_option = click.option(
    "--tenants",
    "tenants_root",
    envvar="MNEMOLOG_TENANTS",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The tenant root (default $MNEMOLOG_TENANTS).",
)


def _root(tenants_root: Path | None) -> Any:
    from mnemolog.eventlog.errors import UsageError
    from mnemolog.substrate.tenancy.tenants import TenantRoot

    if tenants_root is None:
        raise UsageError("give the tenant root: --tenants ROOT or $MNEMOLOG_TENANTS", field="tenants")
    return TenantRoot(tenants_root)


@click.group("tenant")
def tenant_group() -> None:
    """Tenants: one home each under a tenant root, served together by `serve --tenants`."""


@tenant_group.command("add")
@click.argument("name")
@tenants_option
@json_option
@click.pass_obj
def tenant_add(ctx: Ctx, name: str, tenants_root: Path | None) -> None:
    """Create tenant NAME: a home of its own (key, log, projections) under the tenant root."""
    report = _root(tenants_root).add(name)
    data = {"tenant": name, "home": str(report.home), "log_id": report.log_id, "vkey": report.vkey}
    ctx.emit(data, f"tenant {name}: {report.home}\npublic key {report.vkey}")


@tenant_group.command("list")
@tenants_option
@json_option
@click.pass_obj
def tenant_list(ctx: Ctx, tenants_root: Path | None) -> None:
    """List the tenants of the root, and which server holds each one open."""
    rows = _root(tenants_root).describe()
    ctx.emit(
        {"tenants": rows},
        lambda: "\n".join(f"{r['tenant']}\t{r['served_by'] or '-'}" for r in rows),
    )


@tenant_group.command("remove")
@click.argument("name")
@tenants_option
@json_option
@click.pass_obj
def tenant_remove(ctx: Ctx, name: str, tenants_root: Path | None) -> None:
    """Set tenant NAME aside under ROOT/removed/ (its log is kept; refused while it is served)."""
    out = _root(tenants_root).remove(name)
    ctx.emit(out, f"tenant {name} moved to {out['moved_to']}")


# -- tokens ---------------------------------------------------------------------------------


def _home_of(ctx: Ctx, tenants_root: Path | None, tenant: str | None) -> tuple[Any, str | None]:
    if tenant is None and ctx.tenant is not None:  # `mnemolog --tenant T token ...`
        tenant = ctx.tenant
        tenants_root = tenants_root or (Path(ctx.tenants_root) if ctx.tenants_root else None)
    if tenant is None:
        return ctx.home, None
    return _root(tenants_root).require().home(tenant).require(), tenant


tenant_option = click.option(
    "--tenant", default=None, help="The tenant (with --tenants); without it, the home (--home)."
)


@click.group("token")
def token_group() -> None:
    """Scoped tokens: made once, stored as a hash, issued and revoked as signed events."""


@token_group.command("create")
@tenant_option
@tenants_option
@click.option(
    "--scope", "level", type=click.Choice(["read", "write", "admin"]), required=True, help="What it may do."
)
@click.option(
    "--namespace", "namespaces", multiple=True, help="Bind it to this namespace and below (repeatable)."
)
@click.option("--project", "projects", multiple=True, help="Bind it to this project (repeatable).")
@click.option("--expires", default=None, help="A duration (90m, 12h, 30d, 2w) or an ISO 8601 UTC time.")
@click.option("--rate", "rate", type=int, default=None, help="At most this many requests a minute.")
@click.option("--label", default=None, help="A note saying whose it is.")
@json_option
@click.pass_obj
def token_create(
    ctx: Ctx,
    tenant: str | None,
    tenants_root: Path | None,
    level: str,
    namespaces: tuple[str, ...],
    projects: tuple[str, ...],
    expires: str | None,
    rate: int | None,
    label: str | None,
) -> None:
    """Make a scoped token and print it, once (only its hash is kept)."""
    from mnemolog.substrate.api import Substrate

    home, name = _home_of(ctx, tenants_root, tenant)
    with Substrate.open(home, long_lived=False, worker=False) as sub:
        out = sub.issue_token(
            level,
            namespaces=list(namespaces),
            projects=list(projects),
            expires=expires,
            rate_per_minute=rate,
            label=label,
            tenant=name,
        )
    ctx.emit(out, out["token"])
    if not ctx.json:
        ctx.info(f"token {out['token_id']}: shown once; only its hash is kept")


@token_group.command("list")
@tenant_option
@tenants_option
@json_option
@click.pass_obj
def token_list(ctx: Ctx, tenant: str | None, tenants_root: Path | None) -> None:
    """List the tokens issued (ids, scopes, states; never a token)."""
    from mnemolog.substrate.api import Substrate

    home, _ = _home_of(ctx, tenants_root, tenant)
    with Substrate.open(home, long_lived=False, worker=False) as sub:
        rows = sub.tokens()

    def line(t: dict[str, Any]) -> str:
        bound = ",".join(t["namespaces"]) or "*"
        if t["projects"]:
            bound += " projects " + ",".join(t["projects"])
        exp = (
            dt.datetime.fromtimestamp(t["expires_at"] / 1e6, dt.UTC).isoformat(timespec="seconds")
            if t["expires_at"]
            else "never"
        )
        return (
            f"{t['token_id']}\t{t['level']}\t{bound}\t{t['state']}\texpires {exp}\trefusals {t['refusals']}"
        )

    ctx.emit({"tokens": rows}, lambda: "\n".join(line(t) for t in rows))


@token_group.command("revoke")
@click.argument("token_id")
@tenant_option
@tenants_option
@click.option("--reason", default=None, help="Why.")
@json_option
@click.pass_obj
def token_revoke(
    ctx: Ctx, token_id: str, tenant: str | None, tenants_root: Path | None, reason: str | None
) -> None:
    """Revoke token TOKEN_ID (a signed token.revoked; refused from then on)."""
    from mnemolog.substrate.api import Substrate

    home, _ = _home_of(ctx, tenants_root, tenant)
    with Substrate.open(home, long_lived=False, worker=False) as sub:
        out = sub.revoke_token(token_id, reason=reason)
    ctx.emit(out, f"revoked {token_id}")
