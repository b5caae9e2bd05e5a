"""Rankings, context packs and projections on a fixed corpus equal the outputs recorded for it.

A guard for work on speed: whatever is made faster (row caches, vector
search, lazy imports, the fold), every ranking in each mode, every pack and
every projection row must stay exactly what it was. The corpus, the clock
and the embedder are deterministic; memory ids are random, so each is
replaced by its place in the order of storing before comparing. Scores are
compared to 9 decimals (a float summed in another order may differ in the
last bits, a ranking change would not hide there).

To record the expected outputs again, deliberately (a ranking change that an
issue asks for): `RECORD_FIXED_RESULTS=1 pytest tests/substrate/recall/test_results_fixed.py`.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from pathlib import Path
from typing import Any

import pytest

from mnemolog.substrate.api import Substrate
from tests.projections.kit import FakeClock, new_home, open_sub, table_rows
from tests.support.fake_embedder import FakeEmbedder

EXPECTED = Path(__file__).parents[1] / "data" / "results_fixed.json"
WORDS = re.findall(
    r"\w+",
    "deploy rollback database pool connection timeout worker queue cache python asyncio retry "
    "latency replica index vacuum migration schema lock deadlock checkout payment service "
    "incident alert dashboard metric trace span kafka consumer partition offset memory leak "
    "garbage collector thread socket certificate renewal nginx proxy upstream header token",
)
NAMESPACES = ["ops", "ops/db", "team", "team/web", "personal"]
KINDS = ["observation", "decision", "reference", "knowledge"]
QUERIES = [
    "database connection pool timeout",
    "why did the checkout payment service fail",
    "kafka consumer offset",
    "certificate renewal nginx",
    "memory leak in the worker",
    "deadlock during migration",
    "zzz unrelated words",
]
ID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")


def corpus(n: int) -> list[dict[str, Any]]:
    rng = random.Random(2121)
    out = []
    for i in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
        out.append(
            {
                "content": f"Note {i}: " + " ".join(words) + ".",
                "title": " ".join(rng.sample(WORDS, 2)) if i % 3 else None,
                "namespace": NAMESPACES[i % len(NAMESPACES)],
                "kind": KINDS[i % len(KINDS)],
                "tags": [f"t{i % 4}"] if i % 2 else [],
                "project": "shop" if i % 4 == 1 else "",
            }
        )
    return out


def build(root: Path) -> dict[str, Any]:
    """Every output the guard compares, from a home built afresh at `root`."""
    # The home's first entries are stamped by a fake clock too: each memory's date is indexed
    # as words, and a log's timestamps never go back, so the wall clock's day would otherwise
    # stamp them all (the outputs would change with the day the test runs).
    home = new_home(root, clock=FakeClock(1_699_000_000_000_000))
    out: dict[str, Any] = {}
    with open_sub(home, embedder=FakeEmbedder(), clock=FakeClock()) as s:
        s.register_project("shop", aliases=["store-front"])
        ids = [s.store(**m)["id"] for m in corpus(160)]
        s.update(ids[3], content="Note 3 rewritten: database pool exhausted at checkout")
        s.archive(ids[5], reason="obsolete")
        s.link(ids[7], ids[8])
        out["recall"] = recalls(s)
        out["packs"] = [
            s.build_context(q, project=p, record=rec)
            for q, p, rec in (
                ("checkout payment database", "shop", True),
                ("kafka consumer offset", None, False),
                ("memory leak", "shop", False),
            )
        ]
        with s.projections.session() as conn:
            # Bytes are the log's hashes and signatures: the home's key is new in every run.
            out["tables"] = {
                t: [["<bytes>" if isinstance(v, bytes) else repr(v) for v in r] for r in rows]
                for t, rows in table_rows(conn).items()
            }
        # A recall as of a point of the log plans and ranks in the as-of session.
        half = s.get(ids[80])["stored_seq"]
        out["recall_as_of"] = {
            f"{mode}|{q}": [[r["id"], r["explain"]] for r in s.recall(q, mode=mode, explain=True, as_of=half)]
            for mode in ("bm25", "vector", "hybrid")
            for q in QUERIES[:3]
        }
    with open_sub(home, embedder=FakeEmbedder(), clock=FakeClock(1_800_000_000_000_000)) as s:
        s.rebuild()
        out["recall_after_rebuild"] = recalls(s)
    return normalise(out, ids)


def recalls(s: Substrate) -> dict[str, Any]:
    got: dict[str, Any] = {}
    for mode in ("bm25", "vector", "hybrid"):
        for q in QUERIES:
            for kw in ({}, {"namespace": "ops"}, {"include_archived": True, "limit": 25}):
                rs = s.recall(q, mode=mode, explain=True, **kw)  # type: ignore[arg-type]
                key = f"{mode}|{q}|{json.dumps(kw, sort_keys=True)}"
                got[key] = [[r["id"], r["explain"]] for r in rs]
    return got


def normalise(out: dict[str, Any], ids: list[str]) -> Any:
    """Ids as their storing order ("#12"), other ULIDs (packs) by first appearance; floats to 9 places."""
    label = {m: f"#{i}" for i, m in enumerate(ids)}
    now = time.time() * 1e6  # a row stamped by the wall clock, not the session's (a pack's build time)

    def ulid(match: re.Match[str]) -> str:
        return label.setdefault(match.group(0), f"@{len(label)}")

    def walk(x: Any) -> Any:
        if isinstance(x, float):
            return round(x, 9)
        if isinstance(x, int) and abs(x - now) < 86_400e6:
            return "<wall clock>"
        if isinstance(x, str) and x.isdigit() and abs(int(x) - now) < 86_400e6:
            return "<wall clock>"
        if isinstance(x, str):
            return re.sub(r"\d\.\d{10,}", lambda m: f"{float(m.group(0)):.9f}", ID.sub(ulid, x))
        if isinstance(x, dict):
            return {walk(k): walk(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v) for v in x]
        return x

    return json.loads(json.dumps(walk(out), sort_keys=True, default=str))


def test_rankings_packs_and_projections_equal_the_recorded_outputs(tmp_path: Path) -> None:
    got = build(tmp_path / "h")
    if os.environ.get("RECORD_FIXED_RESULTS") == "1":
        EXPECTED.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.skip("recorded")
    expected = json.loads(EXPECTED.read_text())
    assert sorted(got) == sorted(expected)
    for part in sorted(expected):
        if isinstance(expected[part], dict):
            for key in sorted(expected[part]):
                assert got[part].get(key) == expected[part][key], f"{part}: {key}"
        else:
            assert got[part] == expected[part], part


def test_a_recalled_row_follows_an_event_that_rewrites_it_without_touching_it(tmp_path: Path) -> None:
    """Registering a project re-canonicalises old rows' `project`; a cached row must not hide that."""
    with open_sub(new_home(tmp_path / "h"), long_lived=True) as s:
        s.store("the payment pool ran dry at checkout", project="Shop")
        for _ in range(5):  # enough recalls for the connection's BM25 copy and its row cache
            assert [r["project"] for r in s.recall("payment pool", mode="bm25")] == ["Shop"]
        s.register_project("shop")
        assert [r["project"] for r in s.recall("payment pool", mode="bm25")] == ["shop"]


def test_a_memory_expires_at_midnight_though_the_recall_copy_is_warm(tmp_path: Path) -> None:
    """The expired set is kept per UTC day: a recall after midnight leaves the memory out."""
    clock = FakeClock(1_700_006_400_000_000 - 50_000)  # 50 ms before 2023-11-15T00:00Z
    with open_sub(new_home(tmp_path / "h"), long_lived=True, clock=clock) as s:
        m = s.store("pump seal spec", metadata={"vault": {"expires_at": "2023-11-14"}})
        clock.now -= 40_000  # still 2023-11-14 for the recalls below
        for _ in range(5):  # the copy is built and its excluded sets cached
            assert [r["id"] for r in s.recall("pump seal", mode="bm25")] == [m["id"]]
        clock.now = 1_700_006_400_000_000  # midnight: the day of expires_at has ended
        assert s.recall("pump seal", mode="bm25") == []
