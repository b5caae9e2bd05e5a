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
from tests.support.fake_embedder import FakeEmbedder

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


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Home:
    """A home that embeds: every memory has its vector, from the embedding cache."""
    home = new_home(tmp_path_factory.mktemp("audit-vec") / "home")
    with open_sub(home, embedder=FakeEmbedder()) as s:
        for text in ("database failover: promote the replica", "lunch menu: soup", "deploy at 09:05"):
            s.store(text)
    return home


def test_an_honest_projection_with_vectors_passes(embedded: Home) -> None:
    r = verify(embedded)
    assert r["tables"]["vectors"] == 3 and r["tables"]["vector_docs"] == 3
    assert r["tables"]["vector_meta"] == r["tables"]["vector_rows"] == 1


RESPONSE = (
    "## Decisions\n- We keep the 18-point whiffletree for the M1 mirror.\n\n"
    "Lesson learned: Zerodur CTE gradient dominates WFE at fast focal ratios (3 nm at F/1.2)."
)
KNOWLEDGE_AND_CONTEXT = [
    "inactive", "projects", "project_aliases", "project_state", "interactions", "candidates",
    "ctx_documents", "ctx_document_versions", "ctx_chunks", "ctx_chunk_postings", "ctx_packs",
    "ctx_pack_members",
]  # fmt: skip


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Home:
    """A home with the knowledge loop's and the context packs' rows, folded over several sessions."""
    root = tmp_path_factory.mktemp("audit-loop")
    home = new_home(root / "home")
    docs = root / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "polisher.md").write_text(
        "# Polisher\n\n## Thermal\nPolishing accuracy drifts with tool temperature.\n\n"
        "## Vendors\nTwyman-Green.\n"
    )
    (docs / "sub" / "notes.txt").write_text("plain notes on thermal drift\n")
    with open_sub(home) as s:
        s.register_project("p04-gigabit", aliases=["p04"], description="1.2 m telescope")
        s.alias_project("p04", "gigabit")
        s.set_state("p04", "decision", "vendor_path", "Zygo", source="review")
        s.set_state("p04", "decision", "vendor_path", "Twyman-Green", source="review")  # replaces
        s.set_state("p04", "status", "phase", "design")
        s.invalidate_state("p04", "status", "phase", reason="superseded by the plan")
        s.ingest([docs], project="p04")
    with open_sub(home) as s:
        pack = s.build_context("thermal effects on polishing accuracy", project="p04")
        for i in range(2):
            s.capture(f"What did we decide? ({i})", RESPONSE, project="p04", context_id=pack["pack_id"])
        s.extract(pending=True, extractor="rules")
    with open_sub(home) as s:
        s.triage(pending=True, triager="rules")
        waiting = s.candidates(queues=["needs_human"])
        assert len(waiting) >= 2
        s.promote(waiting[0]["id"], domains=["materials"], reason="earned on p04")
        s.reject(waiting[1]["id"], reason="a duplicate")
        s.capture("the whiffletree again", "We keep the 18-point whiffletree for the M1 mirror.",
                  project="p04", reinforce=True)  # fmt: skip
        (docs / "polisher.md").write_text("# Polisher\n\n## Thermal\nNow about coolant flow instead.\n")
        (docs / "sub" / "notes.txt").unlink()
        s.ingest([docs], project="p04")  # a second version and a removal
    with open_sub(home) as s:
        s.build_context("coolant flow", project="p04", budget=200)
        s.store("A memory decay will retire", project="p04")
        s.decay(now=4_102_444_800_000_000)  # 2100-01-01: everything decays below the floor
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


def test_an_honest_projection_with_knowledge_and_context_passes(loop: Home) -> None:
    r = verify(loop)
    assert {t: n for t, n in r["tables"].items() if t in KNOWLEDGE_AND_CONTEXT and n == 0} == {}
    assert r["tables"]["ctx_document_versions"] > r["tables"]["ctx_documents"]  # a file changed
    assert r["tables"]["interactions"] == 3


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


def _inactive(h: Home) -> tuple[str, str | None]:
    forge(h, "DELETE FROM inactive WHERE id = ?", first_id(h, "inactive", "id"))  # a retired memory recalls
    return "inactive", None


def _project_alias(h: Home) -> tuple[str, str | None]:
    forge(h, "UPDATE project_aliases SET name = 'p09-other' WHERE alias_key = 'gigabit'")
    return "project_aliases", "name"


def _project_state(h: Home) -> tuple[str, str | None]:
    forge(h, "UPDATE project_state SET value = 'Forged' WHERE key = 'vendor_path' AND state = 'current'")
    return "project_state", "value"


def _interaction(h: Home) -> tuple[str, str | None]:
    forge(h, "UPDATE interactions SET response = 'forged' WHERE id = ?", first_id(h, "interactions", "id"))
    return "interactions", "response"


def _candidate(h: Home) -> tuple[str, str | None]:
    forge(h, "UPDATE candidates SET verdict = 'promote' WHERE verdict <> 'promote'")
    return "candidates", "verdict"


def _chunk_text(h: Home) -> tuple[str, str | None]:
    forge(h, "UPDATE ctx_chunks SET text = 'forged' WHERE doc = ?", first_id(h, "ctx_chunks", "doc"))
    return "ctx_chunks", "text"


def _chunk_posting(h: Home) -> tuple[str, str | None]:
    forge(h, "INSERT INTO ctx_chunk_postings SELECT 'forgedterm', doc, 1, dl FROM ctx_chunk_postings LIMIT 1")
    return "ctx_chunk_postings", None


def _document(h: Home) -> tuple[str, str | None]:
    forge(h, "UPDATE ctx_documents SET removed_seq = NULL WHERE removed_seq IS NOT NULL")
    return "ctx_documents", "removed_seq"


def _document_version(h: Home) -> tuple[str, str | None]:
    forge(h, "DELETE FROM ctx_document_versions WHERE version = 2")
    return "ctx_document_versions", None


def _pack(h: Home) -> tuple[str, str | None]:
    forge(h, "UPDATE ctx_packs SET sha256 = repeat('0', 64)")
    return "ctx_packs", "sha256"


def _pack_member(h: Home) -> tuple[str, str | None]:
    forge(h, "UPDATE ctx_pack_members SET included = NOT included")
    return "ctx_pack_members", None  # the key holds `included`: the row is missing and another extra


# Issue 23 item 11: the vector tables change recall's answers, and were not compared.
FIRST_VECTOR = "(SELECT min(doc) FROM vectors)"


def _vector_swapped(h: Home) -> tuple[str, str | None]:
    forge(
        h,
        "UPDATE vectors SET vec = "
        f"(SELECT vec FROM vectors WHERE doc <> {FIRST_VECTOR} ORDER BY doc LIMIT 1) "
        f"WHERE doc = {FIRST_VECTOR}",
    )
    return "vectors", "vec"


def _vector_removed(h: Home) -> tuple[str, str | None]:
    forge(h, f"DELETE FROM vectors WHERE doc = {FIRST_VECTOR}")
    return "vector_docs", None


def _vector_model(h: Home) -> tuple[str, str | None]:
    forge(h, "UPDATE vector_meta SET model_id = 'another/model'")
    return "vector_meta", None


def _vector_rows(h: Home) -> tuple[str, str | None]:
    forge(h, "UPDATE vector_meta SET rows = rows + 5")
    return "vector_rows", None


def _vector_tables_dropped(h: Home) -> tuple[str, str | None]:
    forge(h, "DROP TABLE vectors")
    forge(h, "DROP TABLE vector_pending")
    forge(h, "DROP TABLE vector_meta")
    return "vectors", None


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
VECTOR_FORGERIES: list[Forgery] = [
    _vector_swapped,
    _vector_removed,
    _vector_model,
    _vector_rows,
    _vector_tables_dropped,
]


LOOP_FORGERIES: list[Forgery] = [
    _inactive,
    _project_alias,
    _project_state,
    _interaction,
    _candidate,
    _chunk_text,
    _chunk_posting,
    _document,
    _document_version,
    _pack,
    _pack_member,
]


@pytest.mark.parametrize(
    ("fixture", "forgery"),
    [("populated", f) for f in FORGERIES]
    + [("loop", f) for f in LOOP_FORGERIES]
    + [("embedded", f) for f in VECTOR_FORGERIES],
    ids=lambda v: v.__name__.strip("_") if callable(v) else v,
)
def test_every_forgery_is_reported(
    request: pytest.FixtureRequest, fixture: str, tmp_path: Path, forgery: Forgery
) -> None:
    import shutil

    home = Home(tmp_path / "home")
    shutil.copytree(request.getfixturevalue(fixture).root, home.root)
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


@pytest.mark.parametrize("how", ["projections_missing", "proj_state_dropped"])
def test_a_projection_that_records_nothing_is_not_reported_ok(
    populated: Home, tmp_path: Path, how: str
) -> None:
    """Issue 23 item 11: with nothing to compare, verify said "ok ... first 0 entries"."""
    import shutil

    home = Home(tmp_path / "home")
    shutil.copytree(populated.root, home.root)
    if how == "projections_missing":
        shutil.rmtree(home.projections_dir)
    else:
        forge(home, "DROP TABLE proj_state")
    with pytest.raises(audit.NothingChecked) as info:
        verify(home)
    assert info.value.exit_code != 0 and "checked nothing" in info.value.message
    assert info.value.details["log_entries"] > 20
