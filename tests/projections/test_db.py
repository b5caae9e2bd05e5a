"""The projection store: the process-owned lock, hand-off to waiters, idle release, killed waiters."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from mnemolog.eventlog.errors import LockTimeout, StorageError
from mnemolog.eventlog.store.lock import FileLock
from mnemolog.projections.db import ProjectionStore


def ProcessLock(path: Path, timeout: float) -> FileLock:
    return FileLock(path, timeout, "projection lock", announce=True, per_thread=False)


def make(directory: Path, **kw: object) -> ProjectionStore:
    def on_attach(conn: duckdb.DuckDBPyConnection) -> None:
        conn.execute("CREATE TABLE IF NOT EXISTS t(i INTEGER)")

    return ProjectionStore(directory, on_attach=on_attach, **kw)  # type: ignore[arg-type]


@pytest.fixture
def d(tmp_path: Path) -> Path:
    return tmp_path / "projections"


@pytest.fixture
def stores() -> Iterator[list[ProjectionStore]]:
    made: list[ProjectionStore] = []
    yield made
    for s in made:
        s.close()


def test_the_lock_may_be_released_by_another_thread(tmp_path: Path) -> None:
    a = ProcessLock(tmp_path / "lock", 5.0)
    b = ProcessLock(tmp_path / "lock", 5.0)
    t = threading.Thread(target=a.acquire)
    t.start()
    t.join()
    assert a.held
    with pytest.raises(LockTimeout):
        b.acquire(timeout=0.05)
    a.release()  # from the main thread, which never took it
    b.acquire(timeout=1.0)
    assert b.held and not a.held
    b.release()
    with pytest.raises(StorageError):
        b.acquire()
        b.acquire()  # a store never takes its own lock twice
    b.release()


def test_a_session_sees_what_the_last_one_wrote(d: Path, stores: list[ProjectionStore]) -> None:
    s = make(d)
    stores.append(s)
    with s.session() as conn:
        conn.execute("INSERT INTO t VALUES (1)")
    assert not s.attached  # a short-lived store lets go after every session
    with s.session() as conn:
        assert conn.execute("SELECT i FROM t").fetchall() == [(1,)]
    assert s.attachments == 2


def test_a_holder_lets_go_when_another_store_waits(d: Path, stores: list[ProjectionStore]) -> None:
    holder = make(d, hold=True, idle_release_ms=60_000)
    other = make(d, lock_timeout=10.0)
    stores += [holder, other]
    with holder.session():
        pass
    assert holder.attached  # held between sessions
    t0 = time.monotonic()
    with other.session() as conn:  # announces itself; the holder's timer sees it and detaches
        conn.execute("INSERT INTO t VALUES (2)")
    assert time.monotonic() - t0 < 2.0  # far below the 60 s idle release
    assert not holder.attached
    with holder.session() as conn:
        assert conn.execute("SELECT i FROM t").fetchall() == [(2,)]
    assert not holder._lock.others_waiting()  # the waiter's announcement ended with its wait


def test_a_busy_holder_does_not_starve_a_waiter(d: Path, stores: list[ProjectionStore]) -> None:
    holder = make(d, hold=True, idle_release_ms=60_000)
    other = make(d, lock_timeout=20.0)
    stores += [holder, other]
    stop = threading.Event()
    rounds = [0]

    def busy() -> None:
        while not stop.is_set():
            with holder.session() as conn:
                conn.execute("INSERT INTO t VALUES (0)")
                time.sleep(0.002)
            rounds[0] += 1

    t = threading.Thread(target=busy)
    t.start()
    try:
        time.sleep(0.1)
        waits = []
        for _ in range(5):
            t0 = time.monotonic()
            with other.session() as conn:
                conn.execute("INSERT INTO t VALUES (1)")
            waits.append(time.monotonic() - t0)
            time.sleep(0.02)
    finally:
        stop.set()
        t.join()
    assert max(waits) < 3.0
    assert rounds[0] > 5  # the holder kept working in between
    with other.session() as conn:
        assert conn.execute("SELECT count(*) FROM t WHERE i = 1").fetchone() == (5,)


def test_idle_release(d: Path, stores: list[ProjectionStore]) -> None:
    s = make(d, hold=True, idle_release_ms=50)
    stores.append(s)
    with s.session():
        pass
    deadline = time.monotonic() + 5
    while s.attached and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not s.attached
    # And the lock is free for anyone.
    lock = ProcessLock(d / ".lock", 1.0)
    lock.acquire(timeout=0.5)
    lock.release()


WAITER = """
import sys, time
from pathlib import Path
from mnemolog.eventlog.store.lock import FileLock
lock = FileLock(Path(sys.argv[1]), 600, announce=True, per_thread=False)
print("waiting", flush=True)
lock.acquire()
print("holding", flush=True)
time.sleep(600)
"""


def test_a_killed_waiter_announces_nobody(d: Path) -> None:
    import subprocess
    import sys

    d.mkdir(parents=True)
    holder = ProcessLock(d / ".lock", 1.0)
    holder.acquire()
    p = subprocess.Popen([sys.executable, "-c", WAITER, str(d / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "waiting"
        deadline = time.monotonic() + 60
        while not holder.others_waiting():  # the waiter announces itself while it waits
            assert time.monotonic() < deadline, "the waiter never announced itself"
            time.sleep(0.01)
    finally:
        p.kill()
        p.wait()
    assert not holder.others_waiting()  # killed while waiting: the OS ended its announcement
    holder.release()
    holder.close()


def test_a_holder_hands_over_to_a_waiting_process(d: Path, stores: list[ProjectionStore]) -> None:
    import subprocess
    import sys

    s = make(d, hold=True, idle_release_ms=60_000)
    stores.append(s)
    with s.session():
        pass
    p = subprocess.Popen([sys.executable, "-c", WAITER, str(d / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "waiting"
        assert p.stdout.readline().strip() == "holding"  # far below the 60 s idle release
        assert not s.attached
    finally:
        p.kill()
        p.wait()
    with s.session():  # the lock died with its holder
        pass
    assert s.attached


def test_fresh_starts_from_an_empty_file_and_closed_refuses(d: Path) -> None:
    s = make(d)
    with s.session() as conn:
        conn.execute("INSERT INTO t VALUES (7)")
    with s.session(fresh=True) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)
    with s.session() as conn, pytest.raises(StorageError):
        with s.session(fresh=True):
            pass
    s.close()
    with pytest.raises(StorageError), s.session():
        pass


def test_a_corrupt_file_is_a_storage_error_naming_rebuild(d: Path) -> None:
    d.mkdir(parents=True)
    (d / "mnemolog.duckdb").write_bytes(b"not a database" * 100)
    s = make(d)
    try:
        with pytest.raises(StorageError) as info, s.session():
            pass
        assert "mnemolog rebuild" in info.value.message
        assert not s.attached
        lock = ProcessLock(d / ".lock", 1.0)
        lock.acquire(timeout=0.5)  # the failed open let go of the lock
        lock.release()
    finally:
        s.close()


def _vss_loaded(conn: duckdb.DuckDBPyConnection) -> bool:
    row = conn.execute("SELECT loaded FROM duckdb_extensions() WHERE extension_name = 'vss'").fetchone()
    return bool(row and row[0])


def test_vss_loads_only_for_hnsw_and_with_a_file_holding_an_index(d: Path) -> None:
    """A read of a file without an HNSW index never loads vss; building one loads it first,
    and a later process attaching that file loads it before any statement."""
    s = make(d)
    try:
        with s.session() as conn:
            conn.execute("CREATE TABLE v(id INTEGER, e FLOAT[3])")
            conn.execute("INSERT INTO v VALUES (1, [1, 2, 3]), (2, [3, 2, 1])")
            assert not _vss_loaded(conn)
            conn.execute("CREATE INDEX v_hnsw ON v USING HNSW (e) WITH (metric = 'cosine')")
            assert _vss_loaded(conn)
            conn.execute("CHECKPOINT")
    finally:
        s.close()
    again = make(d)
    try:
        with again.session() as conn:
            assert _vss_loaded(conn)
            conn.execute("INSERT INTO v VALUES (3, [1, 1, 1])")  # writable: the index type is known
            assert conn.execute("SELECT count(*) FROM v").fetchone() == (3,)
    finally:
        again.close()


def test_a_file_without_an_index_is_read_without_vss(d: Path) -> None:
    s = make(d)
    try:
        with s.session() as conn:
            conn.execute("INSERT INTO t VALUES (1)")
            conn.execute("CHECKPOINT")
    finally:
        s.close()
    again = make(d)
    try:
        with again.session() as conn:
            assert conn.execute("SELECT count(*) FROM t").fetchone() == (1,)
            assert not _vss_loaded(conn)
    finally:
        again.close()
