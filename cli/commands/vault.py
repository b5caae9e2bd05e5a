"""`mnemolog vault render|validate|import`: the Markdown vault of the Atomic Agents layout."""

from __future__ import annotations

from pathlib import Path

import click

from mnemolog.cli.app import Ctx, json_option
from mnemolog.cli.commands.memory import opened
from mnemolog.projections.vault.validate import ValidationFailed, errors
from mnemolog.substrate.vault import service as v


@click.group()
def vault() -> None:
    """Render the store as a vault, validate a vault, import one."""


@vault.command("render")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--agent", default=v.DEFAULT_AGENT, show_default=True, help="The agent directory name.")
@click.option("--namespace", "-n", default=None, help="Only this namespace (and below).")
@json_option
@click.pass_obj
def vault_render(ctx: Ctx, directory: Path, agent: str, namespace: str | None) -> None:
    """Write DIR/<agent>/: notes, INDEX.md, wiki/, persona files, journal/ and logs/.

    Only changed files are rewritten; in persona files and journal days only
    mnemolog's marked regions change, and a region a person edited is kept.
    """
    with opened(ctx) as s:
        r = v.render(s, directory, agent, namespace)
        folder = s.render_agent_folder(directory, agent, namespace)
    written = r.written + folder["written"]
    # INDEX.md's entry lists are managed regions too: its hand edits are reported alike.
    kept_edits = r.kept_edits + folder["kept_edits"]
    missing = r.missing_regions + folder["missing_regions"]
    conflicts = r.conflicts + folder["conflicts"]

    def text() -> str:
        lines = [f"kept a hand edit: {k}" for k in kept_edits]
        lines += [f"left alone: {c}" for c in conflicts]
        lines.append(
            f"{len(written)} file(s) written, {r.unchanged + folder['unchanged']} unchanged, "
            f"{len(r.removed)} removed under {directory / agent}"
        )
        return "\n".join(lines)

    ctx.emit(
        {
            "written": written,
            "unchanged": r.unchanged + folder["unchanged"],
            "removed": r.removed,
            "kept_edits": kept_edits,
            "missing_regions": missing,
            "conflicts": conflicts,
        },
        text,
    )


@vault.command("validate")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@json_option
@click.pass_obj
def vault_validate(ctx: Ctx, directory: Path) -> None:
    """Check every rule of the format; print every problem as `file: field: message` (exit 65)."""
    problems = v.validate(directory)
    if errors(problems):
        err = ValidationFailed(problems)
        if not ctx.json:
            for p in problems:
                click.echo(str(p))
            # The list is on stdout already; stderr only says how it ended.
            err.message = f"vault validation failed with {len(errors(problems))} error(s)"
        raise err
    ctx.emit(
        {"problems": [str(p) for p in problems]},
        "\n".join(str(p) for p in problems) + ("\n" if problems else "") + f"ok: {directory} is valid",
    )


@vault.command("import")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--agent", default=None, help="Only this agent (default: every agent in DIR).")
@json_option
@click.pass_obj
def vault_import(ctx: Ctx, directory: Path, agent: str | None) -> None:
    """Validate DIR, then store its notes as memories (re-importing unchanged files writes nothing)."""
    with opened(ctx) as s:
        r = v.import_vault(s, directory, agent)
    ctx.emit(
        r.to_json(),
        f"{r.files} file(s): {len(r.stored)} stored, {len(r.updated)} updated, {r.unchanged} unchanged, "
        f"{len(r.archived)} archived, {len(r.restored)} restored, {r.linked} link(s)",
    )


COMMANDS = [vault]
