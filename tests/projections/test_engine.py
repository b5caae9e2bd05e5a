"""The engine: refusing a log that lost what was applied, rebuilds, versions, interrupted catch-ups."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from mnemolog.eventlog.errors import StorageError, VerificationError
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.writer import Durability
from mnemolog.eventlog.verify.verifier import verify_log
from mnemolog.projections import engine, fold, schema
from mnemolog.projections.engine import ProjectionDiverged, RollbackRefused
from mnemolog.substrate.home import Home
from tests.projections.kit import check_invariants, logical_rows, new_home, open_sub, table_rows


def store_n(home: Home, n: int, word: str = "alpha") -> list[str]:
    with open_sub(home) as s:
        return [s.store(f"{word} memory {i}")["id"] for i in range(n)]


def answers(home: Home) -> list[Any]:
    with open_sub(home) as s:
        return [s.recall("alpha beta memory", limit=100), s.list(limit=100)]


def test_a_truncated_log_is_refused_and_a_rebuild_needs_an_accepted_rollback(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    store_n(home, 3)
    saved = tmp_path / "saved"
    shutil.copytree(home.log_dir, saved)
    store_n(home, 2)
    shutil.rmtree(home.log_dir)
    shutil.copytree(saved, home.log_dir)
    with open_sub(home) as s:
        with pytest.raises(ProjectionDiverged) as info:
            s.recall("alpha")
        e = info.value
        assert e.exit_code == 6 and e.slug == "projection_diverged"
        assert "--accept-rollback" in e.message and "log verify" in e.message
        assert e.details["seq"] == 5 and e.details["found"] == 4
        with pytest.raises(VerificationError) as winfo:
            s.store("writes refuse too: the writer holds the log to the high-water mark")
        assert winfo.value.check == "log_diverged"
        # The projection is the last witness of the lost entries: a plain rebuild is refused.
        with pytest.raises(RollbackRefused) as rinfo:
            s.rebuild()
        assert rinfo.value.exit_code == 8 and rinfo.value.details["expected"] == 6
        r = s.rebuild(accept_rollback=True)
        acc = r["rollback_accepted"]
        assert (acc["old_size"], acc["new_size"], acc["seq"]) == (6, 4, 4)
        assert r["replayed"] == 5 and len(s.list()) == 3
        check_invariants_of(s)
        s.store("and the home carries on")
    with Log(home.log_dir) as log:
        e = log.entry(4)
        assert e.type == "log.rollback_accepted" and e.data["old_size"] == 6 and e.data["new_size"] == 4
        assert e.data["source"] == "projection" and len(e.data["old_root"]) == 32
    verify_log(home.log_dir, policy=home.trust_anchor(), high_water=home.high_water_marks())


def test_a_forked_log_is_refused_until_the_rollback_is_accepted(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    store_n(home, 3)
    saved = tmp_path / "saved"
    shutil.copytree(home.log_dir, saved)
    store_n(home, 2)  # the projection has applied entry 5
    shutil.rmtree(home.log_dir)
    shutil.copytree(saved, home.log_dir)
    home.high_water_path.unlink()  # the attacker also removed the mark, so a writer will append
    with home.open_writer() as w:  # a different entry 4 and 5, same log id
        for i in range(3):
            w.append("memory.stored", {"id": f"FORK{i}", "namespace": "default", "content": f"beta fork {i}"})
    with open_sub(home) as s:
        with pytest.raises(ProjectionDiverged) as info:
            s.list()
        assert info.value.details["seq"] == 5 and "leaf hash differs" in info.value.message
        with pytest.raises(RollbackRefused):
            s.rebuild()
        acc = s.rebuild(accept_rollback=True)["rollback_accepted"]
        assert acc["source"] == "projection" and acc["old_size"] == 6 and acc["new_size"] == 7
        assert {m["id"] for m in s.list()} >= {"FORK0", "FORK1", "FORK2"}


def test_another_log_is_refused(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    other = new_home(tmp_path / "other")
    store_n(home, 2)
    store_n(other, 2, "beta")
    # Everything but the projection replaced: another home's log, keys, data keys and record of its log.
    for part in ("log", "keys", "state", "datakeys"):
        shutil.rmtree(home.root / part)
        shutil.copytree(other.root / part, home.root / part)
    shutil.copy(other.config_path, home.config_path)
    with open_sub(home) as s:
        with pytest.raises(ProjectionDiverged) as info:
            s.recall("beta")
        assert "replaced" in info.value.message
        assert info.value.details["found"] != info.value.details["expected"]
        s.rebuild()  # a projection of another log altogether: no rollback of this one
        assert s.recall("beta")[0]["content"].startswith("beta")


def test_a_new_schema_version_rebuilds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = new_home(tmp_path / "home")
    store_n(home, 5)
    before = answers(home)
    monkeypatch.setattr(schema, "SCHEMA_VERSION", schema.SCHEMA_VERSION + 1)
    replays: list[int] = []
    real = engine.Projections.catch_up

    def counting(self: engine.Projections, conn: duckdb.DuckDBPyConnection, **kw: Any) -> int:
        n = real(self, conn, **kw)
        replays.append(n)
        return n

    monkeypatch.setattr(engine.Projections, "catch_up", counting)
    assert answers(home) == before
    assert replays[0] == 6  # the whole log, from genesis
    with open_sub(home) as s, s.projections.session() as conn:
        assert conn.execute("SELECT version FROM proj_state").fetchone() == (schema.SCHEMA_VERSION,)


def test_a_database_of_an_older_layout_is_rebuilt(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    store_n(home, 3)
    before = answers(home)
    path = home.projections_dir / "mnemolog.duckdb"
    path.unlink()
    with duckdb.connect(str(path)) as c:  # what version 1 left behind
        c.execute("CREATE TABLE proj_state(name VARCHAR PRIMARY KEY, version INTEGER, last_seq BIGINT)")
        c.execute("INSERT INTO proj_state VALUES ('core', 1, 3)")
        c.execute("CREATE TABLE counters(name VARCHAR, value BIGINT)")
        c.execute("CREATE TABLE memories(id VARCHAR, doc INTEGER)")
    assert answers(home) == before


def test_a_corrupt_database_says_rebuild_and_rebuild_fixes_it(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    store_n(home, 3)
    before = answers(home)
    (home.projections_dir / "mnemolog.duckdb").write_bytes(b"\x00garbage" * 1000)
    with open_sub(home) as s:
        with pytest.raises(StorageError) as info:
            s.list()
        assert "mnemolog rebuild" in info.value.message
        s.rebuild()
    assert answers(home) == before


def test_a_missing_database_is_rebuilt_silently(tmp_path: Path) -> None:
    home = new_home(tmp_path / "home")
    store_n(home, 4)
    before = answers(home)
    for p in home.projections_dir.glob("mnemolog.duckdb*"):
        p.unlink()
    assert answers(home) == before


def test_an_interrupted_catch_up_keeps_a_consistent_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = new_home(tmp_path / "home")
    with home.open_writer(durability=Durability("group")) as w:
        w.append_many(
            [
                ("memory.stored", {"id": f"M{i:04d}", "namespace": "default", "content": f"alpha {i}"}, 1)
                for i in range(40)
            ]
        )
    monkeypatch.setattr(engine, "CATCH_UP_BATCH", 10)
    calls = [0]
    real = fold.FoldPass.apply

    def failing(self: fold.FoldPass, entries: Any) -> Any:
        calls[0] += 1
        if calls[0] == 3:
            raise RuntimeError("power cut")
        return real(self, entries)

    monkeypatch.setattr(fold.FoldPass, "apply", failing)
    with open_sub(home) as s:
        with pytest.raises(RuntimeError):
            s.list()
        with s.projections.raw_session() as conn:
            st = engine.read_state(conn)
            assert st is not None and st.last_seq == 19  # two batches committed, the third rolled back
            assert conn.execute("SELECT count(*) FROM memories").fetchone() == (19,)
            check_invariants(conn)
        assert len(s.list(limit=100)) == 40  # the next session finishes the job
        with s.projections.session() as conn:
            incremental = table_rows(conn)
        s.rebuild()
        with s.projections.session() as conn:
            rebuilt = table_rows(conn)
    for t in ("memories", "links", "touches", "event_counts", "hidden"):
        assert incremental[t] == rebuilt[t], t


def test_an_interrupted_rebuild_commits_complete_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild's last batch holds its postings back for the end; the batches before it commit
    theirs in the delta, and a rebuild cut short leaves a consistent prefix."""
    home = new_home(tmp_path / "home")
    with home.open_writer(durability=Durability("group")) as w:
        w.append_many(
            [
                ("memory.stored", {"id": f"M{i:04d}", "namespace": "default", "content": f"alpha w{i}"}, 1)
                for i in range(40)
            ]
        )
        w.append_many([("memory.updated", {"id": "M0003", "content": "beta gamma"}, 1)])
        w.append_many([("memory.erased", {"ids": ["M0005"], "reason": "test"}, 1)])
    monkeypatch.setattr(fold, "SMALL_FLUSH", 1)
    monkeypatch.setattr(fold, "FLUSH_ROWS", 4)
    with open_sub(home) as s:
        with s.projections.session() as conn:
            incremental = logical_rows(conn)
            check_invariants(conn)
        monkeypatch.setattr(engine, "REBUILD_BATCH", 10)
        s.rebuild()  # five batches: four commit their postings in the delta, the last holds its own
        with s.projections.session() as conn:
            check_invariants(conn)
            assert logical_rows(conn) == incremental
            assert [r["id"] for r in s.recall("beta gamma")] == ["M0003"]
        calls = [0]
        real = fold.FoldPass.apply

        def failing(self: fold.FoldPass, entries: Any) -> Any:
            calls[0] += 1
            if calls[0] == 3:
                raise RuntimeError("power cut")
            return real(self, entries)

        monkeypatch.setattr(fold.FoldPass, "apply", failing)
        with pytest.raises(RuntimeError):
            s.rebuild()
        with s.projections.raw_session() as conn:
            st = engine.read_state(conn)
            assert st is not None and st.last_seq == 19  # two batches committed, the third rolled back
            check_invariants(conn)  # their postings are in the delta
            assert (conn.execute("SELECT count(*) FROM postings_delta").fetchone() or (0,))[0] > 0
        with s.projections.session() as conn:
            check_invariants(conn)
            assert logical_rows(conn) == incremental


def check_invariants_of(s: Any) -> None:
    with s.projections.session() as conn:
        check_invariants(conn)


def test_rewrite_copies_the_live_rows_into_a_new_file_and_leaves_no_deleted_row(tmp_path: Path) -> None:
    """What forget does after an erasure: the same rows, in a file that never held the deleted ones."""
    home = new_home(tmp_path / "h")
    with open_sub(home) as sub:
        keep = sub.store("kept words", namespace="a")
        gone = sub.store("XQREWRITEMARK " * 50, namespace="b")
        with sub.session() as s:
            s.conn.execute("DELETE FROM memories WHERE id = ?", [gone["id"]])
            s.conn.execute("CHECKPOINT")
            before = table_rows(s.conn)
        path = sub.projections.store.path
        ino = path.stat().st_ino
        sub.projections.rewrite()
        assert path.stat().st_ino != ino and not Path(f"{path}.rewrite").exists()
        assert b"XQREWRITEMARK" not in path.read_bytes()
        with sub.session() as s:
            assert table_rows(s.conn) == before
        assert sub.get(keep["id"])["content"] == "kept words"
        sub.store("written after", namespace="a")
        with pytest.raises(StorageError):
            with sub.projections.store.session():
                sub.projections.store.rewrite()
