"""The projection store: the process lock, hand-off to waiters, idle release, stale announcements."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from mnemolog.eventlog.errors import LockTimeout, StorageError
from mnemolog.projections.db import WANT_PREFIX, ProcessLock, ProjectionStore


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
    assert not list(d.glob(WANT_PREFIX + "*"))


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


def test_stale_announcements_are_removed(d: Path, stores: list[ProjectionStore]) -> None:
    d.mkdir(parents=True)
    dead = d / f"{WANT_PREFIX}{2**22 + 12345}-0"  # beyond pid_max by default: no such process
    old = d / f"{WANT_PREFIX}{os.getpid()}-999999"
    dead.touch()
    old.touch()
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    s = make(d, hold=True, idle_release_ms=60_000)
    stores.append(s)
    t0 = time.monotonic()
    with s.session():
        pass
    assert time.monotonic() - t0 < 2.0  # it did not yield to announcements of nobody
    assert s.attached  # nor let go for them
    assert not dead.exists() and not old.exists()


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
