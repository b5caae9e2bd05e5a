"""The fold: total over hostile payloads, first store wins, text updates re-index, compaction sorts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.store.writer import Durability
from mnemolog.projections import engine, fold
from mnemolog.projections.memory import fold as memory_fold
from mnemolog.projections.recall.text import doc_text_py
from mnemolog.substrate.home import Home
from tests.projections.kit import check_invariants, logical_rows, new_home, open_sub


def append(home: Home, events: list[tuple[str, dict[str, Any]]]) -> None:
    with home.open_writer(durability=Durability("group")) as w:
        w.append_many([(t, d, 1) for t, d in events])


def stored(mid: str, content: Any = "hello world", **extra: Any) -> tuple[str, dict[str, Any]]:
    return ("memory.stored", {"id": mid, "namespace": "default", "content": content, **extra})


@pytest.fixture(params=["single-row", "bulk"])
def path(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test through the store path (few rows per flush) and the Arrow path."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fold, "SMALL_FLUSH", 8 if request.param == "single-row" else 0)
        yield request.param


HOSTILE: list[tuple[str, dict[str, Any]]] = [
    stored("T1", tags="not-a-list", title={"a": 1}, confidence="high", metadata=["x"], source=5),
    stored("T2", content=12345, created_at="yesterday", last_seen=True, source_span=["a", 1], atom_of=7),
    stored("T3", created_at=-1, last_seen=2**63 - 1, source_span=[2**40, 1], confidence=True, tags=[1, None]),
    stored("T4", content="", title=""),
    stored("T5", content="nul \x00 inside and a 'quote' \"double\"", namespace={"n": 1}, kind=None),
    ("memory.stored", {"content": "no id at all"}),
    ("memory.stored", {"id": 42, "content": "id of the wrong type"}),
    ("memory.stored", {"id": "", "content": "empty id"}),
    ("memory.updated", {"id": "T1", "tags": "x", "metadata": "y", "confidence": "z", "last_seen": "w"}),
    ("memory.updated", {"id": "T2", "title": 9, "content": ["list"], "namespace": 3}),
    ("memory.updated", {"id": "nobody", "content": "ghost"}),
    ("memory.updated", {"content": "no id"}),
    ("memory.archived", {"id": "nobody"}),
    ("memory.archived", {"id": "T3", "by": "somebody", "reason": 5}),
    ("memory.restored", {"id": ["T3"]}),
    ("link.created", {"src": "T1"}),
    ("link.created", {"src": 1, "dst": None, "relation": {}, "metadata": 5}),
    ("atomisation.completed", {"source_id": "T4", "atom_ids": "T1,T2"}),
    ("atomisation.completed", {"source_id": "T4", "atom_ids": [1, None, "T1"]}),
    ("atomisation.failed", {"source_id": None, "request_seq": "x"}),
    ("policy.set", {"namespace": "default", "changes": "x", "unset": 5}),
    ("migration.rolled_back", {"snapshot_size": "x"}),
    ("something.else", {"whatever": [1, 2, {"b": b"\x00\xff"}]}),
    (
        "memory.stored",
        {"id": "T6", "namespace": "default", "content": "bytes inside", "metadata": {"b": b"\x01"}},
    ),
]


def test_hostile_payloads_never_break_the_fold(tmp_path: Path, path: str) -> None:
    home = new_home(tmp_path / "home")
    append(home, HOSTILE)
    with open_sub(home) as s:
        got = {m["id"] for m in s.list(limit=100, include_archived=True)}
        assert got == {"T1", "T2", "T3", "T4", "T5", "T6"}
        t1 = s.get("T1")
        assert (t1["tags"], t1["title"], t1["confidence"], t1["metadata"], t1["source"]) == (
            [],
            None,
            None,
            {},
            None,
        )
        t2 = s.get("T2")
        # memview's reading: what an update gives is str()-ed, whatever it is.
        assert t2["content"] == "['list']" and t2["source_span"] is None and t2["atom_of"] is None
        assert t2["title"] == "9"
        t3 = s.get("T3")
        assert t3["tags"] == ["1", "None"] and t3["confidence"] is None and t3["source_span"] is None
        assert t3["archived_at"] is not None  # an unknown `by` is the operator's archive
        assert s.get("T5")["content"].startswith("nul \x00 inside")
        assert s.get("T6")["metadata"] == {"b": "01"}  # bytes as hex, as to_jsonable renders them
        assert [r["id"] for r in s.recall("bytes")] == ["T6"]
        assert [r["id"] for r in s.recall("quote double")] == ["T5"]
        with s.projections.session() as conn:
            check_invariants(conn)
            incremental = logical_rows(conn)
        s.rebuild()
        with s.projections.session() as conn:
            assert logical_rows(conn) == incremental


payload_value = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=20),
        st.binary(max_size=8),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
fields = st.sampled_from(
    ["id", "content", "title", "tags", "namespace", "kind", "metadata", "confidence", "created_at",
     "last_seen", "atom_of", "source_span", "src", "dst", "relation", "source_id", "atom_ids", "by",
     "reason", "snapshot_size", "changes", "unset", "clear", "migration_run"]
)  # fmt: skip
event = st.tuples(
    st.sampled_from(
        [
            "memory.stored",
            "memory.updated",
            "memory.archived",
            "memory.restored",
            "link.created",
            "atomisation.completed",
            "atomisation.requested",
            "policy.set",
            "migration.rolled_back",
        ]
    ),
    st.dictionaries(fields, st.one_of(payload_value, st.sampled_from(["A", "B", "C"])), max_size=6),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(event, max_size=20))
def test_any_payload_folds_and_rebuilds_the_same(
    tmp_path_factory: pytest.TempPathFactory, events: list[tuple[str, dict[str, Any]]]
) -> None:
    home = new_home(tmp_path_factory.mktemp("any") / "home")
    try:
        append(home, [stored("A", "alpha text"), stored("B", "beta text"), *events])
    except Exception:  # the codec refuses what CBOR cannot carry; nothing to fold then
        return
    with open_sub(home) as s:
        first = s.recall("alpha beta text", include_archived=True, limit=100), s.list(include_archived=True)
        with s.projections.session() as conn:
            check_invariants(conn)
            incremental = logical_rows(conn)
        s.rebuild()
        assert (
            s.recall("alpha beta text", include_archived=True, limit=100),
            s.list(include_archived=True),
        ) == first
        with s.projections.session() as conn:
            assert logical_rows(conn) == incremental


def test_the_first_store_of_an_id_wins(tmp_path: Path, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "CATCH_UP_BATCH", 3)
    monkeypatch.setattr(engine, "REBUILD_BATCH", 3)
    home = new_home(tmp_path / "home")
    append(
        home,
        [
            stored("D", "original aardvark"),
            stored("D", "second badger"),
            stored("E", "other"),
            stored("F", "x"),
            stored("D", "fourth cheetah"),
            stored("E", "again dingo"),
        ],
    )
    with open_sub(home) as s:
        assert s.get("D")["content"] == "original aardvark" and s.get("E")["content"] == "other"
        assert [r["id"] for r in s.recall("aardvark")] == ["D"]
        assert s.recall("badger cheetah dingo") == []  # repeated stores are not indexed
        assert s.stats()["memories"] == 3
        with s.projections.session() as conn:
            check_invariants(conn)
    # And against a projection that already holds D: a later repeat, in its own catch-up.
    append(home, [stored("D", "fifth eel")])
    with open_sub(home) as s:
        assert s.recall("eel") == [] and s.get("D")["content"] == "original aardvark"
        with s.projections.session() as conn:
            check_invariants(conn)
            before = logical_rows(conn)
    # A rebuild in one batch, flushed through Arrow every few entries: a bulk insert meets a
    # repeat, the batch (which holds its postings back) is redone carefully, and the tables
    # are the catch-up's.
    monkeypatch.setattr(engine, "REBUILD_BATCH", 1000)
    monkeypatch.setattr(fold, "SMALL_FLUSH", 1)
    monkeypatch.setattr(fold, "FLUSH_ROWS", 4)
    passes: list[bool] = []
    real = fold.FoldPass.__init__

    def counting(self: fold.FoldPass, *a: Any, **k: Any) -> None:
        passes.append(bool(k.get("careful")) and bool(k.get("bulk")))
        real(self, *a, **k)

    monkeypatch.setattr(fold.FoldPass, "__init__", counting)
    with open_sub(home) as s:
        s.rebuild()
        assert passes[-2:] == [False, True]  # the bulk pass, then the careful bulk pass
        assert s.recall("eel badger") == [] and [r["id"] for r in s.recall("aardvark")] == ["D"]
        with s.projections.session() as conn:
            check_invariants(conn)
            assert logical_rows(conn) == before


def test_a_text_update_replaces_the_indexed_terms(tmp_path: Path) -> None:
    with open_sub(new_home(tmp_path / "home"), long_lived=True) as s:
        m = s.store("giraffe necks are long", title="Giraffes")
        other = s.store("giraffe spots")
        s.update(m["id"], title="Okapi", content="okapi stripes")
        assert [r["id"] for r in s.recall("giraffe")] == [other["id"]]
        assert [r["id"] for r in s.recall("okapi stripes")] == [m["id"]]
        s.update(m["id"], tags=["t"])  # no text change: no re-index
        with s.projections.session() as conn:
            check_invariants(conn)
            terms = {
                r[0]
                for r in conn.execute(
                    "SELECT term FROM postings_delta WHERE doc = ?", [m["stored_seq"]]
                ).fetchall()
            }
            # The text's terms, and its date's (created_at as words: docs/recall.md).
            row = conn.execute("SELECT ml_terms(?)", [doc_text_py(None, [], "", m["created_at"])]).fetchone()
            assert row is not None and len(row[0]) == 3
            assert terms == {"okapi", "stripe", *row[0]}


def test_compaction_sorts_the_index_and_changes_no_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory_fold, "COMPACT_MIN_ROWS", 20)
    monkeypatch.setattr(memory_fold, "COMPACT_FRACTION", 1000)
    home = new_home(tmp_path / "home")
    with open_sub(home, long_lived=True) as s:
        for i in range(12):
            s.store(f"zebra {i} stripes number{i} savanna")
        # Compaction ran at the end of some catch-up: the main table holds rows and is sorted.
        with s.projections.session() as conn:
            main = [r[0] for r in conn.execute("SELECT term FROM postings").fetchall()]
            delta = conn.execute("SELECT count(*) FROM postings_delta").fetchone()
        assert main and main == sorted(main)
        assert delta is not None and delta[0] < 20
        s.update(s.list(limit=1)[0]["id"], content="moved to the delta")  # deletes from the sorted main table
        before = [s.recall("zebra stripes savanna", limit=50), s.search("zebra savanna", limit=50)]
        with s.projections.session() as conn:
            check_invariants(conn)
            st = engine.read_state(conn)
            assert st is not None
            f = fold.FoldPass(conn, lambda t, v, d: d, st.stats, engine.FOLDS)
            f.fold(memory_fold.MemoryFold).compact()
            s.projections._save_state(conn, st.last_seq, st.last_leaf, st.last_root, f.stats)
            check_invariants(conn)
            assert conn.execute("SELECT count(*) FROM postings_delta").fetchone() == (0,)
        assert [s.recall("zebra stripes savanna", limit=50), s.search("zebra savanna", limit=50)] == before


@pytest.mark.parametrize("n", [0, 1, fold.SMALL_SET, fold.SMALL_SET + 1, 3 * fold.SMALL_SET])
def test_an_id_set_selects_the_same_rows_inline_or_registered(n: int) -> None:
    import duckdb

    from mnemolog.projections.db import Connection

    conn = Connection(duckdb.connect())
    conn.execute("CREATE TABLE t(id VARCHAR, doc BIGINT)")
    conn.execute("INSERT INTO t SELECT 'm' || i, i FROM range(500) r(i)")
    ids = [f"m{i}" for i in range(0, 2 * n, 2)] + ["absent", "it's"]
    with fold.id_set(conn, "ml_test", ids) as wanted:
        got = {r[0] for r in conn.execute(f"SELECT id FROM t WHERE id IN {wanted}").fetchall()}
    assert got == {f"m{i}" for i in range(0, min(2 * n, 500), 2)}
    with fold.id_set(conn, "ml_test", range(0, 2 * n, 2), ints=True) as docs:
        assert conn.execute(f"SELECT count(*) FROM t WHERE doc IN {docs}").fetchone() == (
            len(range(0, min(2 * n, 500), 2)),
        )


def test_an_id_set_refuses_text_that_is_not_unicode_whatever_its_size() -> None:
    import duckdb

    from mnemolog.eventlog.errors import BadInput
    from mnemolog.projections.db import Connection

    conn = Connection(duckdb.connect())
    for n in (1, fold.SMALL_SET + 1):
        with (
            pytest.raises(BadInput, match="lone surrogate"),
            fold.id_set(conn, "ml_test", ["a"] * n + ["\udcff"]),
        ):
            pass


def test_threads_are_set_inside_the_block_and_put_back_whatever_happens() -> None:
    import duckdb

    conn = duckdb.connect()
    conn.execute("SET threads = 3")

    def now() -> int:
        row = conn.execute("SELECT current_setting('threads')").fetchone()
        assert row is not None
        return int(row[0])

    with fold.threads(conn, 1):
        assert now() == 1
    assert now() == 3
    with pytest.raises(RuntimeError), fold.threads(conn, 1):
        raise RuntimeError("a failed statement")
    assert now() == 3
    # A statement that aborts the transaction: its error comes out, and the setting is put back.
    conn.execute("CREATE TABLE t (i INTEGER PRIMARY KEY)")
    conn.execute("BEGIN TRANSACTION")
    conn.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(duckdb.ConstraintException), fold.threads(conn, 1):
        conn.execute("INSERT INTO t VALUES (1)")
    conn.execute("ROLLBACK")
    assert now() == 3
    with fold.threads(conn, None):
        assert now() == 3
