"""The README against the code: every command documented with its help, and the exit-code table.

The README's command tables are the operator's reference; a command added
without a row, or an error class with an exit code the table does not list
(or a row for a code nothing exits with), fails here.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path

import click

import mnemolog
from mnemolog.cli.app import INTERNAL_ERROR_EXIT
from mnemolog.cli.main import cli
from mnemolog.eventlog.errors import MnemologError

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        path = f"{prefix}{name}"
        yield path, cmd
        if isinstance(cmd, click.Group):
            yield from commands(cmd, path + " ")


def table_cells() -> list[str]:
    """The first cell of every table row, split at ' / ' (rows that document two commands)."""
    cells = []
    for line in README.splitlines():
        if line.startswith("| `"):
            first = re.split(r"(?<!\\)\|", line)[1].strip()
            cells += [c.strip() for c in first.split(" / ")]
    return cells


def test_every_command_has_help_and_a_readme_row() -> None:
    cells = table_cells()
    missing, no_help = [], []
    for path, cmd in commands(cli):
        if not (cmd.help or "").strip():
            no_help.append(path)
        if isinstance(cmd, click.Group) and not cmd.invoke_without_command:
            continue  # a group that only dispatches: its subcommands have the rows
        if not any(c == f"`{path}`" or c.startswith(f"`{path} ") for c in cells):
            missing.append(path)
    assert no_help == [] and missing == []


def error_classes() -> set[type[MnemologError]]:
    for m in pkgutil.walk_packages(mnemolog.__path__, "mnemolog."):
        if not m.name.endswith("__main__"):
            importlib.import_module(m.name)
    out: set[type[MnemologError]] = set()
    todo: list[type[MnemologError]] = [MnemologError]
    while todo:
        cls = todo.pop()
        out.add(cls)
        todo += cls.__subclasses__()
    return out


def test_the_exit_code_table_is_the_codes_errors_carry() -> None:
    section = README.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    table = {int(m) for m in re.findall(r"^\| (\d+) \|", section, re.MULTILINE)}
    carried = {cls.exit_code for cls in error_classes()}
    # 0 is success; the internal-error code is what the CLI's one error map gives an exception
    # that is not a MnemologError (a bug), so no error class carries it.
    assert table == carried | {0, INTERNAL_ERROR_EXIT}
