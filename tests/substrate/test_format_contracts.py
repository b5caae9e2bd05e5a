"""Contracts of the formats mnemolog shares with its peers: the legacy auto_atomise boolean, atom_of
as a foreign key, and a migration's snapshot ref on stdout under --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mnemolog.eventlog.errors import NotFound
from mnemolog.substrate.memory.governance import legacy_read, resolve
from tests.projections.kit import log_digest, new_home, open_sub
from tests.substrate.migrations.contract import BUMP
from tests.support.cli import Cli


@pytest.mark.parametrize(
    ("own", "mode"),
    [
        ({"auto_atomise": True}, "deferred"),
        ({"auto_atomise": False}, "off"),
        ({"auto_atomise": True, "auto_atomise_mode": "synchronous"}, "synchronous"),  # the mode wins
        ({"auto_atomise": "yes"}, "off"),  # not a boolean: means nothing
    ],
)
def test_a_legacy_auto_atomise_boolean_reads_as_a_mode(own: dict[str, object], mode: str) -> None:
    policy = resolve({"ops": own}, "ops/db")
    assert policy["auto_atomise_mode"] == mode
    assert "auto_atomise" not in policy.values
    assert "auto_atomise" not in legacy_read(own)


def test_store_refuses_an_atom_of_that_does_not_exist(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    with open_sub(home) as sub:
        before = log_digest(home)
        with pytest.raises(NotFound) as info:
            sub.store("an orphan atom", atom_of="01ARZ3NDEKTSV4RRFFQ69G5FAV")
        assert info.value.exit_code == 2
        assert "atom_of" in info.value.message and "01ARZ3NDEKTSV4RRFFQ69G5FAV" in info.value.message
        assert log_digest(home) == before
        parent = sub.store("a parent")
        assert sub.store("an atom", atom_of=parent["id"])["atom_of"] == parent["id"]


def test_migrate_json_puts_the_snapshot_ref_on_stdout_first(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli(home, "init").code == 0
    assert cli(home, "store", "a memory").code == 0
    (home / "migrations").mkdir()
    (home / "migrations" / "v1_to_v2.py").write_text(BUMP)
    r = cli(home, "migrate", "--to", "v2", "--current-schema-version", "2", json=True)
    assert r.code == 0, r.output
    first, last = (json.loads(line) for line in r.stdout.strip().splitlines())
    assert last["event"]["outcome"] == "completed"
    assert first["snapshot"]["snapshot_id"] == last["event"]["snapshot_ref"]["snapshot_id"]
    assert first["snapshot"]["backend_id"] == last["event"]["snapshot_ref"]["backend_id"]
    assert "Snapshot created" in r.stderr and "Snapshot created" not in r.stdout


def test_every_model_of_a_type_lives_in_one_module() -> None:
    """Session.append_many checks a payload's tv against CURRENT_TV with only its own module
    imported: that is the whole truth only while a type's models share a module."""
    from mnemolog.substrate import events

    modules: dict[str, set[str]] = {}
    for cls in events.REGISTRY.values():
        modules.setdefault(cls.TYPE, set()).add(cls.__module__)
    assert {t: m for t, m in modules.items() if len(m) > 1} == {}
