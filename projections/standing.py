"""Reads that stand while no entry that can change a memory is folded, kept per process.

A context pack reads the project registry, the project's state entries and the
superseded memories on every build, though they change only when an entry of
another kind than NOT_MEMORY_EVENTS (recorded packs, documents) is folded:
project, state and link events are all counted in `memory_generation`. So a
read is kept under the projection's memory state, (the log's id, that
generation): counts only grow along one log, so an equal state means no such
entry was folded since, and the read would give the same rows. The state
comes from the connection's BM25 copy when it stands at the engine's
position (no statement), else from one statement. Reads are kept per
connection (a long-lived process keeps one per home).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import duckdb

from mnemolog.projections.recall import bm25
from mnemolog.projections.schema import memory_generation

__all__ = ["kept", "memory_state"]

_T = TypeVar("_T")

#: The most reads kept at once (past it they are all dropped and read again).
LIMIT = 64

_lock = threading.Lock()
_kept: dict[tuple[Hashable, ...], Any] = {}


def memory_state(conn: duckdb.DuckDBPyConnection) -> tuple[Any, ...]:
    """(the log's id, the memory generation) of the projection this connection reads."""
    copy = bm25.current_copy(conn)
    if copy is not None and copy.generation is not None:  # the copy read it at this position
        return (copy.position[1], copy.generation)
    position = bm25.known_position(conn)
    if position is not None:
        return (position[1], memory_generation(conn))
    row = conn.execute("SELECT log_id FROM proj_state").fetchone()
    return (bytes(row[0]) if row and row[0] is not None else b"", memory_generation(conn))


def kept(
    conn: duckdb.DuckDBPyConnection,
    name: str,
    arg: Hashable,
    read: Callable[[], _T],
) -> _T:
    """`read()`, or what it gave at this memory state before (the caller must not change it)."""
    # The connection too: two homes copied from one log could reach one generation apart.
    key = (id(conn), *memory_state(conn), name, arg)
    with _lock:
        if key in _kept:
            got: _T = _kept[key]
            return got
    value = read()
    with _lock:
        if len(_kept) >= LIMIT:
            _kept.clear()
        _kept[key] = value
    return value


def forget() -> None:
    """Drop every kept read (tests)."""
    with _lock:
        _kept.clear()
