"""The `mnemolog` command: global options and the command tree."""

from __future__ import annotations

import click

from mnemolog.cli.app import Ctx, MnemologGroup
from mnemolog.cli.atomise_commands import COMMANDS as ATOMISE_COMMANDS
from mnemolog.cli.bundle_commands import COMMANDS as BUNDLE_COMMANDS
from mnemolog.cli.bundle_commands import log_export
from mnemolog.cli.log_commands import init, key_group, log_group
from mnemolog.cli.mcp import mcp_command
from mnemolog.cli.memory_commands import COMMANDS as MEMORY_COMMANDS
from mnemolog.cli.migrate_commands import COMMANDS as MIGRATE_COMMANDS
from mnemolog.cli.vault_commands import COMMANDS as VAULT_COMMANDS
from mnemolog.cli.witness_commands import COMMANDS as WITNESS_COMMANDS


@click.group(cls=MnemologGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--home",
    envvar="MNEMOLOG_HOME",
    default=None,
    help="Home directory (default $MNEMOLOG_HOME, $XDG_DATA_HOME/mnemolog, ~/.local/share/mnemolog).",
)
@click.option("--json", "json_flag", is_flag=True, help="Print one JSON object.")
@click.version_option(package_name="mnemolog")
@click.pass_context
def cli(ctx: click.Context, home: str | None, json_flag: bool) -> None:
    """mnemolog: an auditable memory substrate for AI agents."""
    ctx.obj = Ctx(home_arg=home, json=json_flag)


cli.add_command(init)
cli.add_command(log_group)
cli.add_command(key_group)
log_group.add_command(log_export)
for _cmd in BUNDLE_COMMANDS:
    cli.add_command(_cmd)
for _cmd in [
    *MEMORY_COMMANDS,
    *ATOMISE_COMMANDS,
    *VAULT_COMMANDS,
    *MIGRATE_COMMANDS,
    *WITNESS_COMMANDS,
    mcp_command(),
]:
    cli.add_command(_cmd)


def main() -> None:
    cli.main(prog_name="mnemolog")


if __name__ == "__main__":
    main()
