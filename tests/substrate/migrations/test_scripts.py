"""Script loading, chains and the shared apply step (applies_to gate, requirement 7, skip tallies)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mnemolog.substrate.migrations.protocol import (
    MigrationScriptError,
    MigrationTargetInvalid,
    MigrationVersionNotBumped,
    NothingToMigrate,
    UnitType,
)
from mnemolog.substrate.migrations.scripts import apply_script, build_chain, load_scripts

from .contract import BUMP


def write(d: Path, name: str, source: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(source)


def test_loads_sorted_and_ignores_other_files(tmp_path: Path) -> None:
    write(tmp_path, "v2_to_v3.py", BUMP.replace("= 1\nTO_VERSION = 2", "= 2\nTO_VERSION = 3"))
    write(tmp_path, "v1_to_v2.py", BUMP)
    write(tmp_path, "_helpers.py", "raise SystemExit")
    write(tmp_path, "README.md", "history")
    write(tmp_path, "notes.py", "raise SystemExit")
    (tmp_path / "snapshots").mkdir()
    scripts = load_scripts(tmp_path)
    assert [(s.name, s.from_version, s.to_version) for s in scripts] == [
        ("v1_to_v2.py", 1, 2),
        ("v2_to_v3.py", 2, 3),
    ]
    assert [s.name for s in build_chain(scripts, 1, 3)] == ["v1_to_v2.py", "v2_to_v3.py"]
    assert [s.name for s in build_chain(scripts, 2, 3)] == ["v2_to_v3.py"]
    assert load_scripts(tmp_path / "absent") == []


@pytest.mark.parametrize(
    ("name", "source", "fragment"),
    [
        ("v01_to_v2.py", BUMP, "leading zeros"),
        ("v1_to_v3.py", BUMP, "moves one version"),
        ("v1_to_v2.py", "FROM_VERSION = 1\nTO_VERSION = 2\n", "function applies_to"),
        (
            "v1_to_v2.py",
            "FROM_VERSION = 1\nTO_VERSION = 2\napplies_to = 3\ndef migrate(u): pass\n",
            "applies_to",
        ),
        ("v1_to_v2.py", BUMP.replace("FROM_VERSION = 1", "FROM_VERSION = '1'"), "integer FROM_VERSION"),
        ("v1_to_v2.py", BUMP.replace("FROM_VERSION = 1", "FROM_VERSION = True"), "integer FROM_VERSION"),
        ("v1_to_v2.py", BUMP.replace("TO_VERSION = 2", "TO_VERSION = 3"), "declares"),
        ("v1_to_v2.py", "def broken(:\n", "SyntaxError"),
        ("v1_to_v2.py", "import sys\nsys.exit(3)\n", "SystemExit"),
        ("v1_to_v2.py", "raise RuntimeError('boom')\n", "boom"),
    ],
)
def test_broken_scripts_are_refused(tmp_path: Path, name: str, source: str, fragment: str) -> None:
    write(tmp_path, name, source)
    with pytest.raises(MigrationScriptError, match=fragment) as info:
        load_scripts(tmp_path)
    assert info.value.exit_code == 65
    assert name in info.value.message


def test_chain_errors(tmp_path: Path) -> None:
    write(tmp_path, "v1_to_v2.py", BUMP)
    scripts = load_scripts(tmp_path)
    with pytest.raises(MigrationScriptError, match=r"no v2_to_v3.py .*found: v1_to_v2.py"):
        build_chain(scripts, 1, 3, tmp_path)
    with pytest.raises(MigrationScriptError, match="found: none"):
        build_chain([], 1, 2)
    with pytest.raises(MigrationTargetInvalid, match="forward-only"):
        build_chain(scripts, 2, 1)
    with pytest.raises(NothingToMigrate) as info:
        build_chain(scripts, 2, 2)
    assert info.value.exit_code == 1
    for bad in (-1, True, "2"):
        with pytest.raises(MigrationTargetInvalid):
            build_chain(scripts, 1, bad)  # type: ignore[arg-type]


class FakeUnit:
    def __init__(self, meta: dict[str, Any], dry_run: bool) -> None:
        self.meta = meta
        self.unit_id = "unit-1"
        self.unit_type: UnitType = "memory"
        self.dry_run = dry_run

    def read_frontmatter(self) -> dict[str, Any]:
        return dict(self.meta)

    def write_frontmatter(self, meta: dict[str, Any]) -> None:
        if not self.dry_run:
            self.meta = dict(meta)


def loaded(tmp_path: Path, body: str) -> Any:
    write(tmp_path, "v1_to_v2.py", "FROM_VERSION = 1\nTO_VERSION = 2\n" + body)
    return load_scripts(tmp_path)[0]


@pytest.mark.parametrize("falsy", ["None", "{}", "0", "''"])
def test_dry_run_skip_is_decided_on_the_raw_return(tmp_path: Path, falsy: str) -> None:
    s = loaded(tmp_path, f"def applies_to(u): return True\ndef migrate(u): return {falsy}\n")
    assert apply_script(FakeUnit({"schema_version": 1}, dry_run=True), s) == {}


def test_summary_gets_provenance_keys(tmp_path: Path) -> None:
    s = loaded(
        tmp_path,
        "def applies_to(u): return 1\n"
        "def migrate(u):\n    m = u.read_frontmatter(); m['schema_version'] = 2; u.write_frontmatter(m)\n"
        "    return {'changes': ['x']}\n",
    )
    unit = FakeUnit({"schema_version": 1}, dry_run=False)
    assert apply_script(unit, s) == {"changes": ["x"], "script": "v1_to_v2.py", "unit_id": "unit-1"}
    assert unit.meta["schema_version"] == 2


def test_applies_to_false_never_calls_migrate(tmp_path: Path) -> None:
    s = loaded(tmp_path, "def applies_to(u): return False\ndef migrate(u): raise AssertionError\n")
    assert apply_script(FakeUnit({"schema_version": 1}, dry_run=False), s) == {}


@pytest.mark.parametrize(
    ("body", "error", "fragment"),
    [
        (
            "def applies_to(u): return True\ndef migrate(u): return {}\n",
            MigrationVersionNotBumped,
            "schema_version is 1",
        ),
        (
            "def applies_to(u): return True\ndef migrate(u): return {'c': 1}\n",
            MigrationVersionNotBumped,
            "expected 2",
        ),
        (
            "def applies_to(u): raise ValueError('x')\ndef migrate(u): pass\n",
            MigrationScriptError,
            "applies_to",
        ),
        (
            "def applies_to(u): return True\ndef migrate(u): raise KeyError('k')\n",
            MigrationScriptError,
            "KeyError",
        ),
        (
            "def applies_to(u): return True\n"
            "def migrate(u):\n    m = u.read_frontmatter(); m['schema_version'] = 2; u.write_frontmatter(m)\n"
            "    return ['not', 'a', 'dict']\n",
            MigrationScriptError,
            "must return a dict",
        ),
    ],
)
def test_script_contract_violations(tmp_path: Path, body: str, error: type[Exception], fragment: str) -> None:
    s = loaded(tmp_path, body)
    with pytest.raises(error, match=fragment) as info:
        apply_script(FakeUnit({"schema_version": 1}, dry_run=False), s)
    assert "v1_to_v2.py" in str(info.value) and "unit-1" in str(info.value)


def test_must7_is_skipped_on_dry_runs(tmp_path: Path) -> None:
    s = loaded(tmp_path, "def applies_to(u): return True\ndef migrate(u): return {'would': 'bump'}\n")
    assert apply_script(FakeUnit({"schema_version": 1}, dry_run=True), s)["would"] == "bump"


# A v1 -> v2 script exactly as a vault written for the Atomic Agents runner keeps it: it imports
# its handle type from `atomic_agents.migration`, which mnemolog does not install.
ATOMIC_AGENTS_SCRIPT = '''"""Migrate atomic memory frontmatter from schema_version 1 → 2."""
from atomic_agents.migration import MigratableUnit

FROM_VERSION = 1
TO_VERSION = 2


def applies_to(unit: MigratableUnit) -> bool:
    meta = unit.read_frontmatter()
    return meta.get("schema_version") == FROM_VERSION


def migrate(unit: MigratableUnit) -> dict:
    meta = unit.read_frontmatter()
    changes = []
    meta["schema_version"] = TO_VERSION
    changes.append("schema_version 1 → 2")
    if "sources" in meta:
        meta["evidence"] = meta.pop("sources")
        changes.append("renamed sources → evidence")
    if "provenance" not in meta:
        meta["provenance"] = "v1_migrated"
        changes.append("added provenance: v1_migrated")
    unit.write_frontmatter(meta)
    return {"unit_id": unit.unit_id, "changes": changes}
'''


def test_a_script_written_for_atomic_agents_runs_unchanged(tmp_path: Path) -> None:
    import sys

    write(tmp_path, "v1_to_v2.py", ATOMIC_AGENTS_SCRIPT)
    (s,) = load_scripts(tmp_path)
    assert s.module.MigratableUnit.__module__ == "mnemolog.substrate.migrations.protocol"
    unit = FakeUnit({"schema_version": 1, "sources": ["a.md"]}, dry_run=False)
    out = apply_script(unit, s)
    assert unit.meta == {"schema_version": 2, "evidence": ["a.md"], "provenance": "v1_migrated"}
    assert out["changes"] == [
        "schema_version 1 → 2",
        "renamed sources → evidence",
        "added provenance: v1_migrated",
    ]
    # Only the script saw the name: the host's imports are untouched.
    assert "atomic_agents" not in sys.modules and "atomic_agents.migration" not in sys.modules
    for other in ("import atomic_agents.migration as m\nassert m.MigratableUnit\n",
                  "from atomic_agents import migration\nassert migration.MigratableUnit\n",
                  "import json, os.path\n"):  # fmt: skip
        write(tmp_path / "more", "v1_to_v2.py", other + BUMP)
        assert load_scripts(tmp_path / "more")[0].from_version == 1


def test_a_fifo_named_like_a_script_never_blocks(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "v1_to_v2.py")
    assert load_scripts(tmp_path) == []
