"""Story: the store as a Markdown vault a person shares with the agent, then migrated.

Memories come in through every door (CLI, MCP, HTTP, Python API). `vault
render` writes the Atomic Agents layout; the INDEX it writes is the one the
MCP resource serves, and `vault validate` passes. A person adds a line to
INDEX.md and it survives the next render, next to the new entry. A memory
promoted to persona shows in USER.md / SOUL.md, a captured interaction in
its journal day. Then a v1 -> v2 migration script runs over the vault: a dry
run changes nothing, the real run validates and prints its snapshot ref,
and a rollback to that ref restores every file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mnemolog.cli.agents import mcp_server
from mnemolog.projections.vault import regions
from mnemolog.substrate.vault.service import DEFAULT_AGENT
from tests.substrate.migrations.contract import BUMP

from .doors import Doors

HAND_LINE = "Ask Alice before archiving anything here.\n"


def tree(root: Path) -> dict[str, bytes]:
    """Every file under root but the migration machinery's own (snapshots, audit, lock)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not str(p.relative_to(root)).startswith("_migrations/")
    }


def cli_lines(d: Doors, *argv: str) -> list[dict[str, Any]]:
    """Every JSON line a CLI command prints on stdout (a migration prints its snapshot ref first)."""
    r = d.command(d.home, *argv, json=True)
    assert r.code == 0, (argv, r.output)
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def test_vault_rendered_shared_with_a_person_promoted_journaled_and_migrated(
    doors: Doors, tmp_path: Path
) -> None:
    d = doors
    vault = tmp_path / "vault"
    agent = vault / DEFAULT_AGENT
    # Stored through four doors.
    user = d.cli("store", "Alice prefers terse status updates", "--kind", "user", "--title", "Terse updates")
    uid = user["memory"]["id"]
    fid = d.mcp(
        "memory_store",
        content="Lead with the decision, then the reasons",
        kind="feedback",
        title="Decision first",
    )["memory"]["id"]
    decision = {"content": "We keep Postgres 16 until Q3", "kind": "decision", "title": "Postgres 16"}
    did = d.post("/memory", decision, 201)["memory"]["id"]
    rid = d.sub.store("The runbook lives in the ops wiki", kind="reference", title="Runbook location")["id"]

    # The CLI's render and the MCP resource give the same INDEX, listing all four.
    d.cli("vault", "render", str(vault))
    index = (agent / "memory" / "INDEX.md").read_text()
    served = mcp_server.read_resource(d.sub, mcp_server.INDEX_URI).contents[0]
    assert getattr(served, "text", None) == index
    notes = {mid: d.sub.get(mid)["title"] for mid in (uid, fid, did, rid)}
    assert all(f"[`{title}`](" in index for title in notes.values())
    assert d.cli("vault", "validate", str(vault))["problems"] == []

    # A person's line in INDEX.md survives a render that adds an entry.
    (agent / "memory" / "INDEX.md").write_text(index.replace("## Reference\n", "## Reference\n" + HAND_LINE))
    d.cli("store", "Staging resets every Monday", "--kind", "reference", "--title", "Staging resets")
    rendered = d.cli("vault", "render", str(vault))
    assert rendered["kept_edits"] == [] and rendered["conflicts"] == []
    index = (agent / "memory" / "INDEX.md").read_text()
    assert "## Reference\n" + HAND_LINE in index
    assert "[`Staging resets`](" in index and "[`Runbook location`](" in index
    assert regions.hand_edited(index) == []

    # Promotions reach the persona files; a captured interaction its journal day.
    d.cli("persona", "promote", uid)
    d.cli("persona", "promote", fid)
    d.post("/interactions", {"prompt": "How should I report the outage?", "response": "Tersely."}, 201)
    d.cli("vault", "render", str(vault))
    assert "Alice prefers terse status updates" in (agent / "USER.md").read_text()
    assert "Lead with the decision, then the reasons" in (agent / "SOUL.md").read_text()
    [day] = sorted((agent / "journal").rglob("*.md"))
    assert "How should I report the outage?" in day.read_text()
    promoted = (agent / "memory" / "INDEX.md").read_text().split("## Recently Promoted to Persona\n")[1]
    assert "[`Terse updates`](" in promoted.split("## ")[0]
    assert d.cli("vault", "validate", str(vault))["problems"] == []

    # A v1 -> v2 script over the vault: a dry run writes nothing, the run validates
    # every unit and prints its snapshot ref, a rollback restores every file.
    (vault / "_migrations").mkdir()
    (vault / "_migrations" / "v1_to_v2.py").write_text(BUMP)
    before = tree(vault)
    opts = ("migrate", "--vault", str(vault), "--current-schema-version", "2")
    dry = cli_lines(d, *opts, "run", "--to", "v2", "--dry-run")
    assert dry[-1]["event"]["dry_run"] and tree(vault) == before
    lines = cli_lines(d, *opts, "run", "--to", "v2")
    done = lines[-1]["event"]
    assert done["outcome"] == "completed"
    ref = done["snapshot_ref"]["snapshot_id"]
    # The ref is on stdout before the result, as a JSON line of its own.
    assert len(lines) == 2 and ref in json.dumps(lines[0])
    migrated = tree(vault)
    assert migrated != before
    assert all(
        b"schema_version: 2\n" in data
        for rel, data in migrated.items()
        if rel.startswith(f"{DEFAULT_AGENT}/memory/") and not rel.split("/")[-1].startswith("INDEX")
    )
    assert cli_lines(d, *opts, "status")[-1]["status"]["schema_version"] == 2
    rolled = cli_lines(d, *opts, "rollback", ref)[-1]
    assert rolled["event"]["rolled_back"]
    assert tree(vault) == before
    assert d.cli("vault", "validate", str(vault))["problems"] == []
