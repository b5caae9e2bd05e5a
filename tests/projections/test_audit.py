"""Forged projections (issue: verification that cannot be fooled, attack 6).

Editing the DuckDB file makes `get` and `recall` serve forged rows; the
projection is a cache, but an auditor must be able to tell. `verify
--projections` re-folds the log and compares every table row for row with
disk, reporting the first difference (table, key, column, expected, found).
Every kind of forgery of every table is caught; an honest projection built
incrementally (compacted at other moments than a rebuild would) passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

from mnemolog.eventlog.errors import VerificationError
from mnemolog.projections import audit, schema
from mnemolog.projections.db import DB_NAME
from mnemolog.substrate.home import Home
from tests.projections.kit import new_home, open_sub

EXE = Path(sys.executable).with_name("mnemolog")


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory) -> Home:
    home = new_home(tmp_path_factory.mktemp("audit") / "home")
    for session in range(3):  # several processes' worth of incremental catch-ups
        with open_sub(home) as s:
            ids = [
                s.store(f"session {session} memory {i} about deploys and rollbacks", tags=["ops"])["id"]
                for i in range(4)
            ]
            s.link(ids[0], ids[1])
            s.update(ids[2], content=f"rewritten text {session} about databases", tags=["db"])
            s.archive(ids[3], reason="obsolete")
            s.set_policy(f"team{session}", write="any")
    with open_sub(home) as s:
        long = " ".join(f"Paragraph {i}: the checkout service timed out under load." for i in range(40))
        m = s.store(long, title="Post-mortem")
        s.atomise(m["id"], curator="rules")
    return home


def verify(home: Home) -> dict[str, Any]:
    with open_sub(home, worker=False) as s:
        return s.verify_projections()


def test_every_table_is_compared() -> None:
    assert set(schema.TABLES) == audit.COVERED_TABLES


def test_an_honest_projection_passes(populated: Home) -> None:
    r = verify(populated)
    assert r["entries"] > 20 and r["tables"]["memories"] >= 13 and r["tables"]["postings"] > 100
    assert all(r["tables"][t] > 0 for t in ("links", "touches", "event_counts", "policies", "proj_state"))


def forge(home: Home, sql: str, *params: Any) -> None:
    conn = duckdb.connect(str(home.projections_dir / DB_NAME))
    try:
        conn.execute(sql, list(params))
        conn.execute("CHECKPOINT")
    finally:
        conn.close()


def first_id(home: Home, table: str, col: str) -> Any:
    conn = duckdb.connect(str(home.projections_dir / DB_NAME), read_only=True)
    try:
        row = conn.execute(f"SELECT {col} FROM {table} ORDER BY {col} LIMIT 1").fetchone()
        assert row is not None
        return row[0]
    finally:
        conn.close()


Forgery = Callable[[Home], tuple[str, str | None]]  # applies a forgery; returns (table, column)


def _content(h: Home) -> tuple[str, str | None]:
    forge(h, "UPDATE memories SET content = 'forged' WHERE id = ?", first_id(h, "memories", "id"))
    return "memories", "content"


def _unarchive(h: Home) -> tuple[str, str | None]:
    forge(h, "UPDATE memories SET archived_at = NULL WHERE archived_at IS NOT NULL")
    return "memories", "archived_at"


def _tags(h: Home) -> tuple[str, str | None]:
    forge(h, "UPDATE memories SET tags = ['forged'] WHERE id = ?", first_id(h, "memories", "id"))
    return "memories", "tags"


def _extra_memory(h: Home) -> tuple[str, str | None]:
    forge(
        h,
        "INSERT INTO memories SELECT * REPLACE ('ZZZZ' AS id) FROM memories WHERE id = ?",
        first_id(h, "memories", "id"),
    )
    return "memories", None


def _drop_link(h: Home) -> tuple[str, str | None]:
    forge(h, "DELETE FROM links")
    return "links", None


def _posting(h: Home) -> tuple[str, str | None]:
    for part in ("postings", "postings_delta"):  # wherever compaction left the first document
        forge(h, f"UPDATE {part} SET tf = tf + 1 WHERE doc = (SELECT min(doc) FROM {part})")
    return "postings", "tf"


def _posting_moved(h: Home) -> tuple[str, str | None]:
    # A recall-boosting forgery in the delta part of the index: a word the memory never held.
    forge(
        h,
        "INSERT INTO postings_delta SELECT 'forgedterm', doc, 1, dl FROM "
        "(SELECT * FROM postings UNION ALL SELECT * FROM postings_delta) LIMIT 1",
    )
    return "postings", None


def _hidden(h: Home) -> tuple[str, str | None]:
    forge(h, "DELETE FROM hidden")
    return "hidden", None


def _policy(h: Home) -> tuple[str, str | None]:
    forge(h, 'UPDATE policies SET policy = \'{"write": "none"}\'')
    return "policies", "policy"


def _touches(h: Home) -> tuple[str, str | None]:
    forge(h, "DELETE FROM touches WHERE seq = (SELECT max(seq) FROM touches)")
    return "touches", None


def _counts(h: Home) -> tuple[str, str | None]:
    forge(h, "UPDATE event_counts SET n = n + 5 WHERE type = 'memory.stored'")
    return "event_counts", "n"


def _atomisation(h: Home) -> tuple[str, str | None]:
    forge(h, "UPDATE atomisations SET status = 'failed'")
    return "atomisations", "status"


def _duplicate_touch(h: Home) -> tuple[str, str | None]:
    forge(h, "INSERT INTO touches SELECT * FROM touches LIMIT 1")
    return "touches", None


def _state(h: Home) -> tuple[str, str | None]:
    forge(h, "UPDATE proj_state SET docs = docs + 1")
    return "proj_state", "docs"


FORGERIES: list[Forgery] = [
    _content,
    _unarchive,
    _tags,
    _extra_memory,
    _drop_link,
    _posting,
    _posting_moved,
    _hidden,
    _policy,
    _touches,
    _counts,
    _atomisation,
    _duplicate_touch,
    _state,
]


@pytest.mark.parametrize("forgery", FORGERIES, ids=lambda f: f.__name__.strip("_"))
def test_every_forgery_is_reported(populated: Home, tmp_path: Path, forgery: Forgery) -> None:
    import shutil

    home = Home(tmp_path / "home")
    shutil.copytree(populated.root, home.root)
    table, column = forgery(home)
    with pytest.raises(VerificationError) as info:
        verify(home)
    e = info.value
    assert e.exit_code == 8 and e.check == "projection.row"
    assert e.details["table"] == table, e.message
    if column is not None:
        assert e.details["column"] == column, e.details
        assert e.expected != e.found
    assert e.details["key"]


def test_the_cli_reports_the_first_difference(populated: Home, tmp_path: Path) -> None:
    import shutil

    home = Home(tmp_path / "home")
    shutil.copytree(populated.root, home.root)
    mid = first_id(home, "memories", "id")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOLOG_")}

    def run(*args: str) -> tuple[int, dict[str, Any]]:
        p = subprocess.run(
            [str(EXE), "--home", str(home.root), "--json", *args],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            check=False,
        )
        assert "Traceback" not in p.stderr
        return p.returncode, json.loads(p.stdout.strip().splitlines()[-1])

    code, doc = run("verify", "--projections")
    assert code == 0 and doc["projections"]["rows"] > 0
    original = run("get", mid)[1]["memory"]["content"]
    forge(home, "UPDATE memories SET content = 'all is well' WHERE id = ?", mid)
    assert run("get", mid)[1]["memory"]["content"] == "all is well"  # the forgery is served...
    code, doc = run("verify", "--projections")  # ...and caught
    assert code == 8
    d = doc["details"]
    assert (d["table"], d["key"], d["column"]) == ("memories", {"id": mid}, "content")
    assert (d["expected"], d["found"]) == (original, "all is well")
    code, doc = run("verify")
    assert code == 8 and doc["details"]["check"] == "projection.row"
