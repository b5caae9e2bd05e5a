"""`mnemolog migrate` over the store (log backend) and over a vault, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.cli import Cli

BUMP = """
FROM_VERSION = 1
TO_VERSION = 2

def applies_to(unit):
    return unit.read_frontmatter().get("schema_version") == 1

def migrate(unit):
    meta = unit.read_frontmatter()
    meta["schema_version"] = 2
    meta["provenance"] = "v1_migrated"
    unit.write_frontmatter(meta)
    return {"changes": ["schema_version 1 -> 2"]}
"""


def metadata(cli: Cli, home: Path) -> list[Any]:
    return [m["metadata"] for m in cli.json(home, "list", "--include-archived")[1]["memories"]]


def test_log_backend_run_status_rollback_and_rebuild(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli.json(home, "init")[0] == 0
    assert cli.json(home, "store", "Prefer pg_repack for big tables", "--kind", "decision")[0] == 0
    assert cli.json(home, "store", "Alice likes terse updates", "--kind", "user")[0] == 0
    (home / "migrations").mkdir()
    (home / "migrations" / "v1_to_v2.py").write_text(BUMP)
    before = metadata(cli, home)

    code, out = cli.json(home, "migrate", "--to", "v2", "--dry-run")
    assert code == 0 and out["event"]["dry_run"] and out["event"]["units_touched"] == 2
    assert metadata(cli, home) == before
    # This code's validators accept v1 only: the real run validates, rolls back, exits 65.
    code, out = cli.json(home, "migrate", "--to", "v2")
    assert code == 65 and out["error"] == "migration_failed" and out["details"]["rolled_back"]
    assert metadata(cli, home) == before
    code, out = cli.json(home, "migrate", "--to", "v2", "--current-schema-version", "2")
    assert code == 0 and out["event"]["outcome"] == "completed"
    ref = out["event"]["snapshot_ref"]["snapshot_id"]
    assert all(m["vault"]["schema_version"] == 2 for m in metadata(cli, home))
    code, out = cli.json(home, "migrate", "--status", "--current-schema-version", "2")
    assert out["status"]["schema_version"] == 2 and ref in out["status"]["snapshots"]
    assert ref in cli.json(home, "migrate", "--list-snapshots")[1]["snapshots"]
    code, out = cli.json(home, "migrate", "--rollback", ref)
    assert code == 0 and out["event"]["rolled_back"] and out["event"]["to_version"] == 1
    assert metadata(cli, home) == before
    assert cli.json(home, "rebuild")[0] == 0
    assert metadata(cli, home) == before  # the rollback is honoured on replay too
    # every run, refusal and rollback is in the log
    code, log = cli.json(home, "log", "show", "--type", "migration.completed", "--type", "migration.refused")
    assert [e["data"]["action"] for e in log["entries"]] == ["migrate", "migrate", "migrate", "rollback"]
    code, out = cli.json(home, "migrate", "--rollback", "999")
    assert code == 2
    assert cli.json(home, "log", "verify")[0] == 0


def test_vault_backend_and_usage_errors(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli.json(home, "init")[0] == 0
    assert cli.json(home, "store", "Alice likes terse updates", "--kind", "user")[0] == 0
    assert cli.json(home, "vault", "render", str(tmp_path / "v"), "--agent", "a")[0] == 0
    (tmp_path / "v" / "_migrations").mkdir()
    (tmp_path / "v" / "_migrations" / "v1_to_v2.py").write_text(BUMP)
    code, out = cli.json(
        home, "migrate", "--vault", str(tmp_path / "v"), "--to", "v2", "--current-schema-version", "2"
    )
    assert code == 0 and out["event"]["backend_id"] == "filesystem"
    code, out = cli.json(
        home, "migrate", "--vault", str(tmp_path / "v"), "--status", "--current-schema-version", "2"
    )
    assert out["status"]["schema_version"] == 2
    assert cli.json(home, "migrate")[0] == 64
    assert cli.json(home, "migrate", "--to", "two")[0] == 64
    assert cli.json(home, "migrate", "--to", "v2", "--status")[0] == 64
    code, out = cli.json(home, "migrate", "--to", "v1")
    assert code == 1 and out["error"] == "nothing_to_migrate"


def test_subcommands_do_what_the_old_flags_did(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli.json(home, "init")[0] == 0
    assert cli.json(home, "store", "Prefer pg_repack for big tables", "--kind", "decision")[0] == 0
    (home / "migrations").mkdir()
    (home / "migrations" / "v1_to_v2.py").write_text(BUMP)
    code, out = cli.json(home, "migrate", "run", "--to", "v2", "--dry-run")
    assert code == 0 and out["event"]["dry_run"]
    code, out = cli.json(home, "migrate", "run", "--to", "v2")  # validators accept v1 only: rolled back
    assert code == 65 and out["error"] == "migration_failed"
    assert out["details"]["cause"] == "migration_validation_failed"  # the class, not a parsed string
    code, out = cli.json(home, "migrate", "--current-schema-version", "2", "run", "--to", "v2")
    assert code == 0 and out["event"]["outcome"] == "completed"
    ref = out["event"]["snapshot_ref"]["snapshot_id"]
    assert cli.json(home, "migrate", "snapshots")[1]["snapshots"][0] == ref  # newest first
    assert (
        cli.json(home, "migrate", "status", "--current-schema-version", "2")[1]["status"]["schema_version"]
        == 2
    )
    code, out = cli.json(home, "migrate", "rollback", ref)
    assert code == 0 and out["event"]["rolled_back"]
    assert cli.json(home, "migrate", "rollback", "999")[0] == 2
    assert cli.json(home, "migrate", "--status", "status")[0] == 64  # an old flag and a subcommand
    assert cli.json(home, "migrate", "run")[0] == 64  # --to is required


def test_a_broken_script_exits_65_by_its_class(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli.json(home, "init")[0] == 0
    assert cli.json(home, "store", "Alice likes terse updates", "--kind", "user")[0] == 0
    (home / "migrations").mkdir()
    (home / "migrations" / "v1_to_v2.py").write_text(BUMP.replace('meta["schema_version"] = 2', "1 / 0"))
    code, out = cli.json(home, "migrate", "run", "--to", "v2", "--current-schema-version", "2")
    assert code == 65 and out["details"]["cause"] == "migration_script_invalid"
    assert "ZeroDivisionError" in out["message"]


def test_a_vault_run_from_a_home_is_signed_into_its_log(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli.json(home, "init")[0] == 0
    assert cli.json(home, "store", "Alice likes terse updates", "--kind", "user")[0] == 0
    vault = tmp_path / "v"
    assert cli.json(home, "vault", "render", str(vault), "--agent", "a")[0] == 0
    (vault / "_migrations").mkdir()
    (vault / "_migrations" / "v1_to_v2.py").write_text(BUMP)
    code, out = cli.json(
        home, "migrate", "--vault", str(vault), "run", "--to", "v2", "--current-schema-version", "2"
    )
    assert code == 0
    run_id = out["event"]["run_id"]
    code, log = cli.json(home, "log", "show", "--type", "migration.completed", "--type", "migration.refused")
    signed = [e["data"] for e in log["entries"]]
    assert [(d["run_id"], d["backend_id"], d["outcome"]) for d in signed] == [
        (run_id, "filesystem", "completed")
    ]
    audit = (vault / "_migrations" / "migration.jsonl").read_text().splitlines()
    assert [json.loads(line)["run_id"] for line in audit] == [run_id]
    assert cli.json(home, "log", "verify")[0] == 0
    # Without a home the vault run still works, recorded in the vault only.
    code, out = cli.json(
        tmp_path / "no-home", "migrate", "--vault", str(vault), "status", "--current-schema-version", "2"
    )
    assert code == 0 and out["status"]["schema_version"] == 2
