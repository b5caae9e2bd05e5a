"""Each operation's argument model against the click command that does the same thing.

The MCP tools and HTTP routes are generated from the models (cli.operations);
the commands are written by hand, so this test holds their options to the
model's fields: a field added to one and not the other fails here, unless the
difference is listed below as belonging to one surface.
"""

from __future__ import annotations

import click
import pytest

from mnemolog.cli.agents import operations
from mnemolog.cli.main import cli

#: The filters every query-like command and model shares, spelled the CLI's way.
_FILTERS = {"exact_namespace": "descendants"}

#: operation -> (command path, {click parameter: model field}, click-only, model-only).
COMMANDS: dict[str, tuple[str, dict[str, str], set[str], set[str]]] = {
    "memory_store": ("store", {"text": "content", "meta_json": "metadata", "memory_id": "id"}, set(), set()),
    "memory_recall": ("recall", _FILTERS, set(), set()),
    "memory_search": ("search", _FILTERS, set(), set()),
    "memory_get": ("get", {"memory_id": "id"}, set(), set()),
    "memory_list": ("list", _FILTERS, set(), set()),
    "memory_link": ("link", {"meta_json": "metadata"}, set(), set()),
    "memory_unlink": ("unlink", {}, set(), set()),
    # `--seen` records a sighting (a CLI convenience); the model's fields are the update's.
    "memory_update": ("update", {"memory_id": "id", "meta_json": "metadata"}, {"seen"}, set()),
    "memory_archive": ("archive", {"memory_id": "id"}, set(), set()),
    "memory_restore": ("restore", {"memory_id": "id"}, set(), set()),
    # Re-rendering vaults and writing a receipt name files of the caller's machine: the CLI's.
    "memory_forget": ("forget", {"memory_ids": "ids"}, {"vaults", "receipt"}, {"id"}),
    # `--pending` runs the deferred queue, which the worker does for a server.
    "memory_atomise": (
        "atomise",
        {"memory_id": "id", "force": "force_re_atomise"},
        {"pending"},
        set(),
    ),
    "memory_stats": ("stats", {}, set(), set()),
    # `verify` checks log and projections; the CLI's trust options are richer than the tool's.
    "log_verify": (
        "log verify",
        {},
        {"processes", "trust_genesis", "witness_keys", "min_witnesses"},
        set(),
    ),
    "bundle_export": (
        "export-forensic-bundle",
        {"include_chain": "include_atomisation_chain"},
        set(),
        set(),
    ),
    "bundle_verify": ("verify-bundle", {"file": "path"}, {"witness_keys", "min_witnesses"}, set()),
    "capture_interaction": ("capture", {"session_id": "session"}, set(), set()),
    "project_state_get": ("state get", {}, set(), set()),
    "project_state_set": ("state set", {}, set(), set()),
    "candidates_list": ("candidates list", {"queues": "statuses"}, set(), set()),
    "candidate_promote": ("promote", {"memory_id": "id"}, set(), set()),
    "candidate_reject": ("reject", {"memory_id": "id"}, set(), set()),
    "context_build": ("context build", {"no_record": "record"}, set(), set()),
    "context_show": ("context show", {}, set(), set()),
}

#: Fields no command has: the compact or full view is the CLI's --json output's choice.
SURFACE_ONLY = {"verbose"}
#: Operations with no command of their own (the CLI shows a memory's history in `log show`).
NO_COMMAND = {"memory_history"}


def _command(path: str) -> click.Command:
    ctx = click.Context(cli)
    cmd: click.Command | None = cli
    for name in path.split():
        assert isinstance(cmd, click.Group), path
        cmd = cmd.get_command(ctx, name)
    assert cmd is not None, path
    return cmd


def test_every_operation_is_listed() -> None:
    assert set(operations.OPERATIONS) == set(COMMANDS) | NO_COMMAND


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_options_match_the_model(name: str) -> None:
    path, renamed, cli_only, model_only = COMMANDS[name]
    model = operations.OPERATIONS[name].args
    params = {p.name for p in _command(path).params if p.name} - {"json_flag"}
    assert not (cli_only - params), f"{path}: listed CLI-only but absent: {cli_only - params}"
    as_fields = {renamed.get(p, p) for p in params - cli_only}
    fields = set(model.model_fields) - SURFACE_ONLY - model_only
    assert as_fields == fields, (
        f"`mnemolog {path}` and {model.__name__} differ: "
        f"command only {sorted(as_fields - fields)}, model only {sorted(fields - as_fields)}"
    )
