"""The `mnemolog` command: global options and the command tree.

The tree is a table of names, not of imported modules: a command's module is
imported only when that command runs (or its own --help is asked for), so
`mnemolog --help` and every command pay only for what they use. Each entry
carries its one-line help, which `mnemolog --help` prints without importing
anything; tests/cli/test_lazy.py checks it matches the command's docstring.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import click

from mnemolog.cli.app import Ctx, MnemologGroup

#: name -> ("module:attribute", one-line help). Sub-groups that gather commands
#: from several modules list the extra ones in _EXTRA_SUBCOMMANDS.
COMMANDS: dict[str, tuple[str, str]] = {
    "candidates": ("commands.knowledge:candidates_group", "Candidate memories and their queues."),
    "capture": ("commands.knowledge:capture", "Record one interaction and print its id."),
    "decay": ("commands.knowledge:decay_group", "Confidence decay of memories nobody references."),
    "domains": (
        "commands.knowledge:domains_group",
        'Knowledge domains: the vocabulary and the old "[domain]" prefixes.',
    ),
    "extract": (
        "commands.knowledge:extract",
        "Turn interactions into candidate memories (never recalled until promoted).",
    ),
    "interactions": ("commands.knowledge:interactions_group", "Captured interactions."),
    "project": ("commands.knowledge:project_group", "Projects: names, aliases, and what each holds."),
    "promote": ("commands.knowledge:promote", "Promote candidate MEMORY_ID to an active memory."),
    "reject": (
        "commands.knowledge:reject",
        "Reject candidate MEMORY_ID (it becomes invalid and stays in the log).",
    ),
    "state": (
        "commands.knowledge:state_group",
        "Trusted project state: curated (project, category, key) = value entries.",
    ),
    "supersede": (
        "commands.knowledge:supersede",
        "Retire active memory MEMORY_ID (it stays in the log; --status superseded shows it).",
    ),
    "triage": (
        "commands.knowledge:triage",
        "Give candidates verdicts: promote, reject, needs_human or contradicts.",
    ),
    "context": (
        "commands.context:context",
        "Context packs: five trust-ordered tiers under a budget, recorded in the log.",
    ),
    "ingest": (
        "commands.context:ingest",
        "Read Markdown and text files into heading-aware chunks, as signed document events.",
    ),
    "monitor": (
        "commands.publish:monitor_cmd",
        "Follow a log published as C2SP tlog-tiles; exit 8 on a fork or a rollback.",
    ),
    "persona": (
        "commands.context:persona",
        "The agent's persona files (IDENTITY.md, SOUL.md, USER.md, tools.md, model.md).",
    ),
    "forget": (
        "commands.memory:forget",
        "Erase content for good: a signed memory.erased, its data keys destroyed, every derived copy gone.",
    ),
    "archive": (
        "commands.memory:archive",
        "Hide a memory from recall (it stays in the log and with --include-archived).",
    ),
    "atomise": (
        "commands.atomise:atomise",
        "Split a long memory into 2-10 atoms; the parent is archived, the atoms recall in its place.",
    ),
    "embeddings": ("commands.embedding:embeddings_group", "The home's embedding model and its vectors."),
    "export": (
        "commands.export:export_cmd",
        "Write the active memories to OUT as JSON Lines (what import reads) or basic-memory notes.",
    ),
    "export-forensic-bundle": (
        "commands.bundle:export_forensic_bundle",
        "Write a sparse, signed, offline-verifiable bundle of everything about one memory.",
    ),
    "get": ("commands.memory_front:get", "Show one memory with its links."),
    "import": (
        "commands.memory:import_cmd",
        "Store the memories of a JSON Lines FILE: every line checked first, then written in batches.",
    ),
    "init": ("commands.log:init", "Create a home: key, genesis entry, first checkpoint."),
    "key": ("commands.log:key_group", "The signing key and its history."),
    "link": ("commands.memory:link", "Draw an edge SRC -> DST."),
    "list": ("commands.memory:list_cmd", "List memories, newest first."),
    "log": ("commands.log:log_group", "The signed event log: show, verify, prove, append notes."),
    "mcp": ("commands.mcp:mcp", "Serve the Model Context Protocol (stdio, or streamable HTTP on loopback)."),
    "migrate": (
        "commands.migrate:migrate",
        "Run, inspect or roll back schema migrations of the store (default) or a vault (--vault DIR).",
    ),
    "policy": (
        "commands.atomise:policy",
        "Governance policies per namespace (inherited leaf-first: a/b/c, a/b, a, root).",
    ),
    "rebuild": (
        "commands.memory:rebuild",
        "Drop every projection and replay the whole log (refused over a rolled-back log).",
    ),
    "recall": (
        "commands.memory_front:recall",
        "Rank memories for a question: BM25 over title, tags and content, vectors, or both fused.",
    ),
    "replay": (
        "commands.bundle:replay",
        "Rebuild a home from a `log export` that starts at seq 0, verified on the way in.",
    ),
    "restore": (
        "commands.memory:restore",
        "Undo an archive (operator's or atomisation's) or a supersession (decay's).",
    ),
    "search": (
        "commands.memory:search",
        "Memories holding every keyword as a word (of title, tags or content), ranked by BM25.",
    ),
    "serve": ("commands.serve:serve", "Serve the local HTTP API (loopback unless [http] token is set)."),
    "stats": ("commands.memory:stats", "Counts of memories, links, events and the index."),
    "tenant": (
        "commands.tenant:tenant_group",
        "Tenants: one home each under a tenant root, served together by `serve --tenants`.",
    ),
    "token": (
        "commands.tenant:token_group",
        "Scoped tokens: made once, stored as a hash, issued and revoked as signed events.",
    ),
    "store": ("commands.memory_front:store", "Store TEXT (or standard input with '-') as a memory."),
    "unlink": (
        "commands.memory:unlink",
        "Take back the edge SRC -> DST (a signed link.removed; the edge stays in the log's history).",
    ),
    "update": ("commands.memory:update", "Change fields of a memory (a memory.updated event)."),
    "vault": ("commands.vault:vault", "Render the store as a vault, validate a vault, import one."),
    "verify": (
        "commands.log:verify",
        "Verify the home: the log, and the projections against the log (default: both); exit 8 on failure.",
    ),
    "verify-bundle": (
        "commands.bundle:verify_bundle",
        "Verify a forensic bundle offline; exit 8 naming the first failure.",
    ),
    "verify-receipt": (
        "commands.bundle:verify_receipt",
        "Check an erasure receipt offline: the memory.erased entry, signed and included.",
    ),
    "witness": (
        "commands.witness:witness_group",
        "Witnesses: run one (serve), or send this home's checkpoints to some (add, list, remove, sync).",
    ),
    "worker": ("commands.atomise:worker", "The deferred-atomisation worker."),
}

_EXTRA_SUBCOMMANDS: dict[str, list[str]] = {
    "log": ["commands.bundle:log_export", "commands.publish:log_publish"]
}

#: How `mnemolog --help` groups the commands; every command is in exactly one section.
SECTIONS: dict[str, tuple[str, ...]] = {
    "Memories": (
        "store", "get", "update", "archive", "restore", "forget", "link", "unlink", "import", "export",
        "atomise", "policy", "worker",
    ),
    "Recall": ("recall", "search", "list", "embeddings"),
    "Knowledge": (
        "capture", "interactions", "extract", "triage", "candidates", "promote", "reject", "supersede",
        "decay", "domains", "project", "state",
    ),
    "Context": ("context", "ingest", "persona", "vault"),
    "Audit": (
        "verify", "log", "export-forensic-bundle", "verify-bundle", "verify-receipt", "replay", "witness",
        "monitor",
    ),
    "Admin": ("init", "stats", "rebuild", "key", "migrate", "mcp", "serve", "tenant", "token"),
}  # fmt: skip


def _load(ref: str) -> click.Command:
    module, _, attr = ref.partition(":")
    cmd = getattr(importlib.import_module(f"mnemolog.cli.{module}"), attr)
    if not isinstance(cmd, click.Command):  # pragma: no cover - a wrong table entry
        raise TypeError(f"{ref} is not a click command")
    return cmd


def _write_rows(formatter: click.HelpFormatter, rows: list[tuple[str, str]]) -> None:
    """Name and help in two columns, the help wrapped at spaces only.

    click's own wrapping breaks at hyphens, which splits an option name
    (`--include-` / `archived`) across lines.
    """
    import textwrap

    first = max(len(name) for name, _ in rows) + 2
    width = max((formatter.width or 80) - formatter.current_indent - first, 30)
    pad = " " * (formatter.current_indent + first)
    for name, text in rows:
        lines = textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False) or [""]
        formatter.write(f"{' ' * formatter.current_indent}{name:<{first}}{lines[0]}\n")
        for line in lines[1:]:
            formatter.write(f"{pad}{line}\n")


def _with_examples(cmd: click.Command, path: str) -> None:
    """Give `cmd` and its subcommands their example (cli.examples) as the help's last lines."""
    from mnemolog.cli.examples import epilog

    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            _with_examples(sub, f"{path} {name}")
    elif cmd.epilog is None:
        cmd.epilog = epilog(path)


class LazyGroup(MnemologGroup):
    """A group whose commands are imported on first use, from the COMMANDS table."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        cmd = _load(entry[0])
        if isinstance(cmd, click.Group):
            for extra in _EXTRA_SUBCOMMANDS.get(cmd_name, []):
                sub = _load(extra)
                if sub.name not in cmd.commands:
                    cmd.add_command(sub)
        _with_examples(cmd, cmd_name)
        self.add_command(cmd, cmd_name)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The table's help lines, whole (wrapped, never cut), so that listing the commands
        # imports none of them.
        sections = {title: [(n, COMMANDS[n][1]) for n in names] for title, names in SECTIONS.items()}
        others = [n for n in self.list_commands(ctx) if n not in COMMANDS and not self.commands[n].hidden]
        if others:
            sections["Other"] = [(n, self.commands[n].get_short_help_str(10**6)) for n in others]
        for title, rows in sections.items():
            with formatter.section(title):
                _write_rows(formatter, rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--home",
    envvar="MNEMOLOG_HOME",
    default=None,
    help="Home directory (default $MNEMOLOG_HOME, $XDG_DATA_HOME/mnemolog, ~/.local/share/mnemolog).",
)
@click.option(
    "--tenant", default=None, help="Work on this tenant's home (of --tenants ROOT) instead of --home."
)
@click.option(
    "--tenants",
    "tenants_root",
    envvar="MNEMOLOG_TENANTS",
    default=None,
    help="The tenant root --tenant names a tenant of (default $MNEMOLOG_TENANTS).",
)
@click.option("--json", "json_flag", is_flag=True, help="Print one JSON object.")
@click.version_option(package_name="mnemolog")
@click.pass_context
def cli(
    ctx: click.Context, home: str | None, tenant: str | None, tenants_root: str | None, json_flag: bool
) -> None:
    """mnemolog: an auditable memory substrate for AI agents."""
    ctx.obj = Ctx(home_arg=home, json=json_flag, tenant=tenant, tenants_root=tenants_root)


def main() -> Any:
    # One BLAS thread unless the caller chose: a command ranks one question (a matrix-vector
    # product that two threads do not speed up on this scale), and starting OpenBLAS's thread
    # pool was about 40% of numpy's import (0.11 -> 0.065 s of CPU), which a `recall` pays.
    # Set here, in the command's process only: a program using the library keeps its own.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    return cli.main(prog_name="mnemolog")


if __name__ == "__main__":
    main()
