"""What a person meets first: `mnemolog --help` grouped, an example under every command, every
option described, and a mistyped command answered with the nearest one."""

from __future__ import annotations

import shlex
from pathlib import Path

import click
import pytest

from mnemolog.cli import examples
from mnemolog.cli.main import COMMANDS, SECTIONS
from mnemolog.cli.main import cli as command
from tests.support.cli import Cli


def leaves() -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = []

    def walk(cmd: click.Command, path: str) -> None:
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub, f"{path} {name}")
        else:
            out.append((path, cmd))

    root = click.Context(command)
    for name in sorted(COMMANDS):
        cmd = command.get_command(root, name)
        assert cmd is not None
        walk(cmd, name)
    return out


LEAVES = leaves()


def test_every_command_is_in_exactly_one_section() -> None:
    listed = [n for names in SECTIONS.values() for n in names]
    assert sorted(listed) == sorted(COMMANDS)
    assert len(listed) == len(set(listed))
    assert set(SECTIONS) == {"Memories", "Recall", "Knowledge", "Context", "Audit", "Admin"}


def test_the_top_help_is_grouped_and_cuts_no_line(cli: Cli) -> None:
    out = cli(None, "--help", width=80).output
    for title in SECTIONS:
        assert f"\n{title}:\n" in out
    listing = out.split("\nMemories:\n", 1)[1]
    assert "..." not in listing
    # Every command's whole line is there, however it wrapped.
    flat = " ".join(out.split())
    for name, (_ref, line) in COMMANDS.items():
        assert f"{name} {' '.join(line.split())}" in flat, name


def test_every_command_has_an_example_and_it_parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "vault").mkdir()  # the vault commands check that their directory exists
    assert {path for path, _ in LEAVES} == set(examples.EXAMPLES)
    for path, _cmd in LEAVES:
        argv = shlex.split(examples.EXAMPLES[path])
        assert argv[0] == "mnemolog" and " ".join(argv[1 : 1 + len(path.split())]) == path, path
        # Parsed, not run: every option exists and every value has its type.
        parent = command.make_context("mnemolog", argv[1:], resilient_parsing=False)
        group: click.Command = command
        rest = argv[1:]
        ctx = parent
        while isinstance(group, click.Group):
            name, sub, rest = group.resolve_command(ctx, rest)
            assert sub is not None and name is not None
            ctx = sub.make_context(name, rest, parent=ctx)
            group, rest = sub, [*getattr(ctx, "_protected_args", []), *ctx.args]


@pytest.mark.parametrize("path", [p for p, _ in LEAVES])
def test_help_ends_with_the_example(cli: Cli, path: str) -> None:
    out = cli(None, *path.split(), "--help", width=200).output
    assert out.rstrip().endswith(examples.EXAMPLES[path]), out[-300:]


def test_every_option_is_described() -> None:
    missing = [
        f"{path} {p.opts[-1]}"
        for path, cmd in LEAVES
        for p in cmd.params
        if isinstance(p, click.Option) and p.name != "json_flag" and not p.help
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("argv", "suggested"),
    [(["recal", "x"], "'recall'"), (["stor", "x"], "'store'"), (["log", "verfy"], "'verify'")],
)
def test_a_mistyped_command_suggests_the_nearest(cli: Cli, argv: list[str], suggested: str) -> None:
    r = cli(None, *argv, json=True)
    assert r.code == 64
    assert f"Did you mean {suggested}" in r.output and r.output.count("Did you mean") == 1


def test_nothing_near_suggests_nothing(cli: Cli) -> None:
    r = cli(None, "zzzzqq", json=True)
    assert r.code == 64 and "Did you mean" not in r.output
