"""`mnemolog atomise`, `mnemolog policy set|get|clear`, `mnemolog worker run`."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from mnemolog.cli.app import Ctx, json_option
from mnemolog.cli.commands.memory import opened
from mnemolog.eventlog.errors import UsageError
from mnemolog.substrate.atomise.service import CURATORS, run_worker


@click.command()
@click.argument("memory_id", required=False)
@click.option("--force", is_flag=True, help="Re-atomise an atomised memory (old atoms are kept, archived).")
@click.option(
    "--max-atom-tokens", type=click.IntRange(50, 1000), default=None, help="Per-atom budget (cl100k)."
)
@click.option("--curator", type=click.Choice(CURATORS), default=None, help="Default: the namespace policy.")
@click.option("--pending", is_flag=True, help="Run every pending deferred atomisation instead.")
@json_option
@click.pass_obj
def atomise(
    ctx: Ctx,
    memory_id: str | None,
    force: bool,
    max_atom_tokens: int | None,
    curator: str | None,
    pending: bool,
) -> None:
    """Split a long memory into 2-10 atoms; the parent is archived, the atoms recall in its place.

    Exit codes: 0 atomised, 1 nothing to do (already atomised, source too small),
    2 not found, 3 tier locked (no LLM for --curator ollama), 4 curator failed,
    5 governance refused, 6 storage/signer error, 7 depth exceeded.
    """
    if pending:
        if memory_id or force or max_atom_tokens or curator:
            raise UsageError("--pending takes no MEMORY_ID and no other options")
        with opened(ctx) as s:
            done = s.drain_atomisations()
        ctx.emit(
            {"processed": done},
            lambda: "\n".join(f"{d['source_id']}: {d['outcome']}" for d in done) or "nothing pending",
        )
        return
    if not memory_id:
        raise UsageError("give a MEMORY_ID (or --pending)")
    with opened(ctx) as s:
        res = s.atomise(memory_id, force=force, max_atom_tokens=max_atom_tokens, curator=curator)
    env = res.envelope()

    def text() -> str:
        if res.already_atomised:
            head = f"{memory_id} is already atomised into {len(res.atom_ids)} atoms (use --force to redo)"
        elif res.skipped:
            head = f"{memory_id}: {res.skipped}"
        else:
            head = f"atomised {memory_id} into {len(res.atom_ids)} atoms (archived {res.archived_at})"
        lines = [head, *[f"  {a}" for a in res.atom_ids]]
        lines += [f"warning: {w}" for w in res.warnings]
        return "\n".join(lines)

    ctx.emit(env, text)
    if res.exit_code:
        sys.exit(res.exit_code)


@click.group()
def policy() -> None:
    """Governance policies per namespace (inherited leaf-first: a/b/c, a/b, a, root)."""


@policy.command("set")
@click.argument("namespace")
@click.option("--write", type=click.Choice(["any", "none"]), default=None, help="Accept writes or not.")
@click.option(
    "--auto-atomise-mode",
    type=click.Choice(["off", "deferred", "synchronous"]),
    default=None,
    help="Atomise long stores: not at all, by the worker later, or before store returns.",
)
@click.option(
    "--threshold",
    "auto_atomise_threshold_cl100k",
    type=click.IntRange(min=1),
    default=None,
    help="Auto-atomise memories of at least this many cl100k tokens (default 500).",
)
@click.option(
    "--max-atom-tokens",
    "auto_atomise_max_atom_tokens",
    type=click.IntRange(50, 1000),
    default=None,
    help="Per-atom budget (cl100k tokens).",
)
@click.option(
    "--max-retries",
    "auto_atomise_max_retries",
    type=click.IntRange(0, 10),
    default=None,
    help="Curator retries for synchronous runs (deferred always uses 3).",
)
@click.option("--curator", type=click.Choice(CURATORS), default=None, help="Who atomises: rules or ollama.")
@click.option(
    "--retention-days",
    "retention_days",
    type=click.IntRange(1, 36500),
    default=None,
    help="Erase memories older than this many days (forget --expired; long-lived processes).",
)
@click.option(
    "--unset", "unset_fields", multiple=True, metavar="FIELD",
    help="Drop a field of this namespace's own policy, so it inherits again (repeatable).",
)  # fmt: skip
@json_option
@click.pass_obj
def policy_set(ctx: Ctx, /, namespace: str, unset_fields: tuple[str, ...], **fields: Any) -> None:
    """Set fields of NAMESPACE's policy ('' or / for the root)."""
    fields = {k: v for k, v in fields.items() if v is not None}
    if not fields and not unset_fields:
        raise UsageError("give at least one policy field to set or --unset")
    ns = "" if namespace == "/" else namespace
    with opened(ctx) as s:
        out = s.set_policy(ns, unset=unset_fields, **fields)
    ctx.emit(out, lambda: _policy_text(out))


@policy.command("get")
@click.argument("namespace")
@json_option
@click.pass_obj
def policy_get(ctx: Ctx, namespace: str) -> None:
    """The effective policy of NAMESPACE and where each field comes from."""
    ns = "" if namespace == "/" else namespace
    with opened(ctx) as s:
        out = s.get_policy(ns)
    ctx.emit(out, lambda: _policy_text(out))


@policy.command("clear")
@click.argument("namespace")
@json_option
@click.pass_obj
def policy_clear(ctx: Ctx, namespace: str) -> None:
    """Remove NAMESPACE's own policy (it inherits again)."""
    ns = "" if namespace == "/" else namespace
    with opened(ctx) as s:
        out = s.clear_policy(ns)
    ctx.emit(out, lambda: _policy_text(out))


def _policy_text(out: dict[str, Any]) -> str:
    lines = [f"namespace {out['namespace'] or '(root)'}"]
    for k, v in out["policy"].items():
        src = out["sources"][k]
        origin = "default" if src == "(default)" else "from " + (src or "(root)")
        lines.append(f"  {k:<32} {json.dumps(v):<12} ({origin})")
    return "\n".join(lines)


@click.group()
def worker() -> None:
    """The deferred-atomisation worker."""


@worker.command("run")
@click.option("--once", is_flag=True, help="Drain what is pending, then exit.")
@click.option("--interval", type=click.FloatRange(0.05, 3600), default=2.0, help="Seconds between polls.")
@json_option
@click.pass_obj
def worker_run(ctx: Ctx, once: bool, interval: float) -> None:
    """Run pending atomisation requests (computed from the log, so none is ever lost)."""

    def out(r: dict[str, Any]) -> None:
        if ctx.json and not once:
            click.echo(json.dumps(r))
        elif not ctx.json:
            click.echo(f"{r.get('source_id')}: {r.get('outcome')}")

    with opened(ctx) as s:
        try:
            n = run_worker(s.atomiser, once=once, interval=interval, out=out)
        except KeyboardInterrupt:
            return
    if once:
        ctx.emit({"processed": n})


COMMANDS = [atomise, policy, worker]
