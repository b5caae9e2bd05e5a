"""Finding the entries that touch a memory in the log's bytes selects exactly what the pure fold selects.

The premise (every id an entry touches occurs verbatim in its bytes) is a
property of the vocabulary, checked over random payloads of every memory
event type; the selection itself is checked against a plain fold of every
entry on random logs, including ids quoted in content (found, then judged
not touching) and entries that straddle segment boundaries.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.bundle import memview, touching
from mnemolog.eventlog.bundle.touching import entries_touching
from mnemolog.eventlog.format import codec
from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.writer import LogWriter
from tests.eventlog.logkit import StepClock, seeded_key

ID = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2FF), min_size=1, max_size=8)


def payloads(ids: st.SearchStrategy[str]) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    any_value = st.one_of(ids, st.integers(-(2**63), 2**63 - 1), st.none(), st.lists(ids, max_size=3))
    return st.one_of(
        st.tuples(
            st.just("memory.stored"),
            st.fixed_dictionaries({"id": ids, "content": ids}, optional={"atom_of": any_value}),
        ),
        st.tuples(
            st.sampled_from(["memory.updated", "memory.archived", "memory.restored"]),
            st.fixed_dictionaries({"id": any_value}),
        ),
        st.tuples(st.just("link.created"), st.fixed_dictionaries({"src": any_value, "dst": any_value})),
        st.tuples(
            st.just("migration.rolled_back"),
            st.fixed_dictionaries({"memory_ids": st.lists(any_value, max_size=4)}),
        ),
        st.tuples(
            st.sampled_from(["atomisation.requested", "atomisation.completed", "atomisation.failed"]),
            st.fixed_dictionaries(
                {"source_id": any_value}, optional={"atom_ids": st.lists(any_value, max_size=4)}
            ),
        ),
        st.tuples(st.just("note.added"), st.fixed_dictionaries({"text": ids})),
    )


@settings(max_examples=300, deadline=None)
@given(payloads(ID))
def test_touched_ids_occur_verbatim_in_the_payload_bytes(p: tuple[str, dict[str, Any]]) -> None:
    type_, data = p
    raw = codec.encode(data)
    for m in memview.touched_ids(type_, data):
        assert m.encode() in raw


def touched(e: Entry) -> list[str]:
    return memview.entry_touched_ids(e)


def written(tmp_path_factory: Any, events: list[tuple[str, dict[str, Any]]]) -> Path:
    """A new log of `events`, in segments small enough that a selection spans several."""
    d: Path = tmp_path_factory.mktemp("log")
    LogWriter.create(d, seeded_key(), clock=StepClock())
    with LogWriter(d, [seeded_key()], clock=StepClock(2_000_000_000_000_000), segment_bytes=4096) as w:
        for type_, payload in events:
            w.append(type_, payload)
    return d


@contextmanager
def one_pass() -> Iterator[None]:
    """Past `MANY_IDS` ids (or memories) the log is read in one sequential pass: force it."""
    many = touching.MANY_IDS
    touching.MANY_IDS = 0
    try:
        yield
    finally:
        touching.MANY_IDS = many


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    events=st.lists(payloads(st.sampled_from(["a", "b", "ab", "c1", "é"])), min_size=1, max_size=40),
    data=st.data(),
)
def test_selection_equals_the_plain_fold(
    tmp_path_factory: Any, events: list[tuple[str, dict[str, Any]]], data: st.DataObject
) -> None:
    d = written(tmp_path_factory, events)
    wanted = data.draw(st.sets(st.sampled_from(["a", "b", "ab", "c1", "é", "zz"]), min_size=1))
    with Log(d) as log:
        below = data.draw(st.integers(0, log.size))
        expect = {e.seq for e in log.iter_entries(0, below) if wanted.intersection(touched(e))}
        got = entries_touching(log, wanted, below, touched)
        with one_pass():  # the same entries
            assert set(entries_touching(log, wanted, below, touched)) == set(got)
    assert set(got) == expect
    assert all(e.seq == s for s, e in got.items())


def _outcome(log: Log, claimed: dict[str, int], below: int) -> str:
    try:
        touching.check_heads(log, claimed, below, touched)
    except Exception as exc:  # the outcome compared is the error itself
        return f"{type(exc).__name__}: {exc}"
    return "ok"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    events=st.lists(payloads(st.sampled_from(["a", "b", "ab", "c1", "é"])), min_size=1, max_size=30),
    data=st.data(),
)
def test_check_heads_of_many_memories_in_one_pass_decides_as_the_head_by_head_check(
    tmp_path_factory: Any, events: list[tuple[str, dict[str, Any]]], data: st.DataObject
) -> None:
    d = written(tmp_path_factory, events)
    with Log(d) as log:
        below = log.size
        newest: dict[str, int] = {}
        for e in log.iter_entries(0, below):
            for m in touched(e):
                newest[m] = e.seq
        # Each memory's claim is its true head, or (a damaged table) some other entry.
        claimed = {
            m: data.draw(st.one_of(st.just(h), st.integers(0, below - 1)), label=m) for m, h in newest.items()
        }
        if not claimed:
            return
        expect = _outcome(log, claimed, below)
        with one_pass():
            assert _outcome(log, claimed, below) == expect


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    events=st.lists(payloads(st.sampled_from(["a", "b", "ab", "c1", "é"])), min_size=1, max_size=40),
    data=st.data(),
)
def test_a_first_seq_per_id_selects_as_the_plain_fold(
    tmp_path_factory: Any, events: list[tuple[str, dict[str, Any]]], data: st.DataObject
) -> None:
    # What a writer's head check asks: for each memory, the entries after its own head.
    d = written(tmp_path_factory, events)
    wanted = sorted(data.draw(st.sets(st.sampled_from(["a", "b", "ab", "c1", "é", "zz"]), min_size=1)))
    with Log(d) as log:
        below = data.draw(st.integers(0, log.size))
        start = data.draw(st.integers(0, log.size))
        starts = {m: data.draw(st.integers(0, log.size + 1)) for m in wanted}
        first = {m: max(start, starts[m]) for m in wanted}
        expect = {
            e.seq
            for e in log.iter_entries(0, below)
            if any(m in first and e.seq >= first[m] for m in touched(e))
        }
        got = entries_touching(log, wanted, below, touched, start=start, starts=starts)
        with one_pass():
            assert set(entries_touching(log, wanted, below, touched, start=start, starts=starts)) == set(got)
    assert set(got) == expect
