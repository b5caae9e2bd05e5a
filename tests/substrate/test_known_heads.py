"""A writer's knowledge of its memories' heads (`touching.KnownHeads`) never lets a bad claim through.

A long-lived process remembers the heads it has held to the log, and after a
few checks keeps a copy of every memory's newest touch, so a recorded context
pack does not read its members' head entries again. These attack that
memory from outside the process: the projection's `touches` table altered by
another process, and entries appended by another writer between two packs,
hidden from the projection or not. Each is refused (or accepted) exactly as
a process that knows nothing decides.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from mnemolog.eventlog.bundle import memview, touching
from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.substrate.api import Substrate
from tests.projections.kit import FakeClock, new_home, open_sub

QUERY = "spindle temperature drift"


def sql(home: Path, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Another process's statement on the projection file."""
    con = duckdb.connect(str(home / "projections" / "mnemolog.duckdb"))
    try:
        return con.execute(query, list(params)).fetchall()
    finally:
        con.close()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    new_home(h)
    return h


@pytest.fixture
def sub(home: Path) -> Iterator[Substrate]:
    s = open_sub(home, clock=FakeClock())
    yield s
    s.close()


def warm(sub: Substrate) -> list[str]:
    """Three memories every pack quotes, and enough recorded packs for the copy of all heads."""
    ids = [
        sub.store(f"the spindle temperature drift {i} needs a warm-up", kind="knowledge")["id"]
        for i in range(3)
    ]
    for _ in range(touching.KnownHeads.COPY_AFTER + 2):
        pack = sub.build_context(QUERY)
        assert pack["seq"] is not None
    known = touching.known_heads(sub.log)
    assert known._copy is not None and all(known._copy.get(m) is not None for m in ids)
    return ids


def newest(home: Path, mid: str) -> int:
    (row,) = sql(home, "SELECT max(seq) FROM touches WHERE memory_id = ?", mid)
    return int(row[0])


def refusal(exc: pytest.ExceptionInfo[VerificationError]) -> dict[str, Any]:
    return {"check": exc.value.details.get("check"), **exc.value.details}


def fresh_outcome(home: Path, claimed: dict[str, int]) -> str:
    """What a process that knows nothing says of these claims (the full check)."""
    with Log(home / "log") as log:
        try:
            touching.check_heads(log, claimed, log.size, memview.entry_touched_ids)
        except VerificationError as exc:
            return str(exc)
    return "ok"


def test_a_log_appended_by_another_writer_between_packs_is_read(sub: Substrate, home: Path) -> None:
    ids = warm(sub)
    with open_sub(home, clock=FakeClock()) as other:  # another writer, its own knowledge
        other.update(ids[0], title="warm-up")
    theirs = newest(home, ids[0])
    pack = sub.build_context(QUERY)
    # The pack's back-chain pointer for that memory names the other writer's entry.
    entry = sub.log.entry(pack["seq"])
    assert entry.data[v.TOUCH_PREV][ids[0]] == theirs


def test_an_entry_of_another_writer_hidden_from_the_projection_is_found(sub: Substrate, home: Path) -> None:
    ids = warm(sub)
    mine = newest(home, ids[0])  # a head this process signed and knows
    with open_sub(home, clock=FakeClock()) as other:
        other.update(ids[0], title="warm-up")
    theirs = newest(home, ids[0])
    # The attack: the projection forgets the other writer's touch, so it claims the head this
    # process knows; the log after what it knows is searched, and the claim is refused.
    sql(home, "DELETE FROM touches WHERE memory_id = ? AND seq = ?", ids[0], theirs)
    size = sub.log.refresh()
    with pytest.raises(VerificationError) as exc:
        sub.build_context(QUERY)
    assert refusal(exc)["check"] == "projection.head"
    assert exc.value.details["expected"] == theirs and exc.value.details["found"] == mine
    assert str(exc.value) == fresh_outcome(home, {ids[0]: mine})
    assert sub.log.refresh() == size  # nothing was signed


def test_a_head_altered_by_another_process_is_refused(sub: Substrate, home: Path) -> None:
    ids = warm(sub)
    # The projection now claims, as the memory's newest touch, a later entry that does not
    # touch it (another memory's store): a forged head, not the one this process knows.
    forged = newest(home, sub.store("an unrelated note on invoices")["id"])
    sql(home, "INSERT INTO touches (memory_id, seq, type) VALUES (?, ?, 'memory.stored')", ids[1], forged)
    with pytest.raises(VerificationError) as exc:
        sub.build_context(QUERY)
    assert refusal(exc)["check"] == "projection.head" and exc.value.details["seq"] == forged
    assert str(exc.value) == fresh_outcome(home, {ids[1]: forged})


def test_a_stale_head_kept_by_another_process_is_refused(sub: Substrate, home: Path) -> None:
    ids = warm(sub)
    # The projection loses this process's own newest touch (a row deleted behind its back): it
    # claims the head before it, which this process once knew, and which is stale now.
    mine = newest(home, ids[2])
    sql(home, "DELETE FROM touches WHERE memory_id = ? AND seq = ?", ids[2], mine)
    older = newest(home, ids[2])
    with pytest.raises(VerificationError) as exc:
        sub.build_context(QUERY)
    assert exc.value.details["check"] == "projection.head"
    assert exc.value.details["expected"] == mine and exc.value.details["found"] == older
    assert str(exc.value) == fresh_outcome(home, {ids[2]: older})
