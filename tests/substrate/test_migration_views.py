"""A log-backed migration and its rollback, seen by the projection, a rebuild and a forensic bundle."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from mnemolog.eventlog.bundle import verifier as bundle
from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.projections.recall import query as q
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.forensics.service import export_bundle
from mnemolog.substrate.home import init_home
from mnemolog.substrate.migrations.log_backend import LogMigrationBackend
from mnemolog.substrate.migrations.runner import run_migration
from tests.support.views import as_row

RENAME = """
FROM_VERSION = 1
TO_VERSION = 2

def applies_to(unit):
    return unit.read_frontmatter().get("schema_version") == 1

def migrate(unit):
    meta = unit.read_frontmatter()
    meta["schema_version"] = 2
    meta["name"] = meta["name"].upper()
    meta["tags"] = meta["tags"] + ["migrated"]
    meta["confidence"] = "low"
    unit.write_frontmatter(meta)
    return {"changes": ["renamed, tagged, lowered"]}
"""

PROJECTION_ONLY = {"links", "seqs", "atom_ids"}


def test_rollback_restores_rows_search_and_bundle_views(tmp_path: Path) -> None:
    home = tmp_path / "home"
    init_home(home)
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "v1_to_v2.py").write_text(RENAME)
    with Substrate.open(home, long_lived=False) as sub:
        a = sub.store(
            "Prefer pg_repack over ALTER TABLE.", title="Table rewrites", kind="decision", confidence=0.9
        )
        b = sub.store("Alice likes terse updates.", title="Alice", kind="user", tags=["team"])
        before = {m["id"]: m for m in sub.list(include_archived=True)}
        run = run_migration(
            LogMigrationBackend(sub, current_schema_version=2), 2, scripts, dry_run=False, out=io.StringIO()
        )
        assert run.ok and run.snapshot_ref is not None
        migrated = sub.get(a["id"])
        assert migrated["title"] == "TABLE REWRITES" and "migrated" in migrated["tags"]
        assert [r["id"] for r in sub.search("TABLE REWRITES")] == [a["id"]]
        LogMigrationBackend(sub, current_schema_version=2).restore_and_audit(run.snapshot_ref)
        after = {m["id"]: m for m in sub.list(include_archived=True)}
        assert after == before
        assert [r["id"] for r in sub.recall("table rewrites")] == [a["id"]]
        # a rebuild replays the migration and its rollback to the same rows
        sub.rebuild()
        assert {m["id"]: m for m in sub.list(include_archived=True)} == before
        # the bundle's views (a pure fold of its entries) agree with the projection
        ex = export_bundle(sub, b["id"])
        with tarfile.open(fileobj=io.BytesIO(ex.data)) as tar:
            f = tar.extractfile(bundle.MEMORIES)
            assert f is not None
            views = json.loads(f.read())["memories"]
        with sub.projections.session() as conn:
            row = q.get(conn, b["id"])
        assert as_row(views[b["id"]]) == row
        rolled = [e for e in sub.log.iter_entries(0) if e.type == "migration.rolled_back"]
        assert rolled and sorted(rolled[-1].data["memory_ids"]) == sorted([a["id"], b["id"]])
        assert rolled[-1].seq in ex.seqs
    path = tmp_path / "b.tar"
    path.write_bytes(ex.data)
    bundle.verify_bundle(path, policy=TRUST_GENESIS)  # raises on any failure
