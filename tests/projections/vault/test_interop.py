"""Interop with the reference implementation (atomic-agents-stack, import atomic_agents).

The parts of it these tests run ship as test data in reference/ (see the README
there) and run in a child process with that directory first on its path, so
the tests need no network and no second venv. Every rendered note and wiki
page must pass its validators, parsed by its own frontmatter loader
(python-frontmatter), and its migration CLI must report the vault's status.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

from mnemolog.projections.vault.render import KINDS, NoteRecord, render_vault
from mnemolog.projections.vault.validate import validate_vault

REFERENCE = Path(__file__).resolve().parent / "reference"


def run_reference(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the project's python with the shipped reference implementation first on its path."""
    env = {**os.environ, "PYTHONPATH": str(REFERENCE)}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, check=False, timeout=300, cwd=cwd, env=env
    )


CHECK = r"""
import json, sys
from pathlib import Path
import frontmatter
from atomic_agents._schema import validate_atomic_note_frontmatter, validate_wiki_frontmatter
root = Path(sys.argv[1])
failures, checked = [], 0
for path in sorted(root.glob("*/memory/*.md")) + sorted(root.glob("*/wiki/*.md")):
    if path.name.startswith("INDEX"):
        continue
    meta, _ = frontmatter.parse(path.read_text(encoding="utf-8"))
    try:
        if path.parent.name == "wiki":
            validate_wiki_frontmatter(dict(meta), filename=path.name)
        else:
            validate_atomic_note_frontmatter(dict(meta), filename=path.name)
        checked += 1
    except Exception as exc:
        failures.append(f"{path.name}: {exc}")
print(json.dumps({"checked": checked, "failures": failures}))
"""

TRICKY = [
    "Debt: priority order",
    "Café naïve Über",
    "yes",
    "null",
    "2026-02-30",
    "- dash first",
    "# hash first",
    "multi\nline title",
    "`ticks` and 'quotes' and \"double\"",
    "x" * 120,
    "",
    "日本語のタイトル",
    "tab\tand \u2028 separator",
]


def sample_records(n: int, seed: int = 7) -> list[NoteRecord]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        captured = date(2025, 1, 1) + timedelta(days=rnd.randrange(700))
        raw = kind == "knowledge" and i % 2 == 0
        out.append(
            NoteRecord(
                memory_id=f"mem-{i:04d}",
                kind=kind,
                title=rnd.choice(TRICKY) if i % 3 == 0 else f"Topic {i} of {kind}",
                description=rnd.choice(TRICKY) * rnd.randrange(1, 4),
                content=f"Content {i}\n---\nnot frontmatter\n",
                tags=["t1", "2026"] if i % 4 == 0 else [],
                confidence=rnd.random(),
                captured=captured,
                last_seen=captured + timedelta(days=rnd.randrange(30)),
                sources=["raw/doc.pdf"] if raw else ([] if i % 5 == 0 else [f"conversation_{i}"]),
                pinned=i % 7 == 0,
                expires_at=date(2026, rnd.choice([3, 6, 9, 12]), 28) if i % 6 == 0 else None,
                supersedes=f"mem-{i - 1:04d}" if i % 11 == 0 and i else None,
                superseded_by=f"mem-{i + 1:04d}" if i % 11 == 10 else None,
                archived=i % 13 == 0,
                atom_of="mem-0000" if kind == "observation" and i % 2 else None,
                extra_frontmatter={"priority": i % 3, "owner": "ops"} if i % 9 == 0 else {},
            )
        )
    return out


def test_rendered_vault_passes_the_reference_validators(tmp_path: Path) -> None:
    root = tmp_path / "agents"
    records = sample_records(220)
    render_vault(root, "caldwell", records)
    render_vault(root, "second", records[:20])
    assert validate_vault(root) == []
    proc = run_reference(["-c", CHECK, str(root)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["failures"] == []
    assert result["checked"] == 240


def test_reference_migrate_status_reads_the_vault(tmp_path: Path) -> None:
    root = tmp_path / "agents"
    render_vault(root, "caldwell", sample_records(30))
    proc = run_reference(
        ["-m", "atomic_agents.migrate", "--agents-root", str(root), "--status"], cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Current schema version: v1" in proc.stdout
    assert "Content files: 30" in proc.stdout
