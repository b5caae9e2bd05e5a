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
from mnemolog.eventlog.store.segments import list_segments
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


# -- a writer's knowledge of its heads (KnownHeads) -----------------------------------------------


def _known_outcome(k: touching.KnownHeads, log: Log, claimed: dict[str, int], below: int) -> str:
    try:
        k.check(log, claimed, below, touched)
    except Exception as exc:  # the outcome compared is the error itself
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def _true_heads(log: Log, below: int) -> dict[str, int]:
    newest: dict[str, int] = {}
    for e in log.iter_entries(0, below):
        for m in touched(e):
            newest[m] = e.seq
    return newest


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rounds=st.lists(
        st.tuples(
            st.lists(payloads(st.sampled_from(["a", "b", "ab", "c1", "é"])), min_size=1, max_size=6),
            st.booleans(),  # appended by the process that checks (its receipts handed over), or another
        ),
        min_size=1,
        max_size=8,
    ),
    copy_after=st.sampled_from([0, 1, 100]),
    data=st.data(),
)
def test_known_heads_decide_every_claim_as_the_full_check(
    tmp_path_factory: Any,
    rounds: list[tuple[list[tuple[str, dict[str, Any]]], bool]],
    copy_after: int,
    data: st.DataObject,
) -> None:
    # Round after round, entries are appended (by this process's writer, which hands its receipts
    # over, or by another one, which does not), and the projection's claims are the true heads or
    # (a table damaged or stale) any other entry: the check that remembers what it found gives
    # the very outcome of the check that reads everything again, error and message included.
    d = written(tmp_path_factory, [("note.added", {"text": "start"})])
    k = touching.KnownHeads()
    k.COPY_AFTER = copy_after
    before: dict[str, int] = {}
    with LogWriter(d, [seeded_key()], clock=StepClock(3_000_000_000_000_000), segment_bytes=4096) as w:
        for events, mine in rounds:
            receipts = [w.append(t, p) for t, p in events]
            if mine and k.learning:
                k.signed([memview.payload_touched_ids(t, 1, p) for t, p in events], receipts)
            with Log(d) as fresh:
                below = fresh.size
                heads = _true_heads(fresh, below)
            if not heads:
                continue
            # The true head; the one before this round's entries (stale: what the check may know);
            # or any entry.
            claimed = {
                m: data.draw(
                    st.one_of(st.just(h), st.just(before.get(m, h)), st.integers(0, below - 1)), label=m
                )
                for m, h in heads.items()
            }
            before = heads
            with Log(d) as fresh:
                expect = _outcome(fresh, claimed, below)
            with Log(d) as log:
                assert _known_outcome(k, log, claimed, below) == expect
                if expect == "ok":  # and again, from what it now knows
                    assert _known_outcome(k, log, claimed, below) == "ok"


def test_a_known_head_rewritten_on_disk_is_judged_again(tmp_path_factory: Any) -> None:
    # The head entry's bytes are read again and held to the leaf kept: rewritten in place (the id
    # it touches changed, the entry still decoding), the claim is refused as by the full check.
    d = written(
        tmp_path_factory, [("note.added", {"text": "y"}), ("memory.stored", {"id": "abc", "content": "x"})]
    )
    k = touching.KnownHeads()
    k.COPY_AFTER = 0
    with Log(d) as log:
        claim = {"abc": log.size - 1}
        k.check(log, claim, log.size, touched)  # learnt: the last entry is abc's head
        loc = log.location(claim["abc"])
    path = dict(list_segments(d))[loc.segment]
    raw = path.read_bytes()
    at = raw.index(b"abc", loc.offset)
    path.write_bytes(raw[:at] + b"abd" + raw[at + 3 :])
    with Log(d) as fresh:
        expect = _outcome(fresh, claim, fresh.size)
    assert expect != "ok"
    with Log(d) as log:
        assert _known_outcome(k, log, claim, log.size) == expect
