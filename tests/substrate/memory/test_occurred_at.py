"""`occurred_at`: when what a memory says happened, given at store, import and capture, put right by update.

A memory is dated (its date indexed as words for recall) by `occurred_at` when
given, else by `created_at`; the field reaches every door and survives an
update, a rebuild, an export and an import, and bad values are refused with
nothing written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemolog.cli.agents import operations
from mnemolog.eventlog.errors import BadInput, UsageError
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.events import MemoryStored
from mnemolog.substrate.events.limits import MAX_TIMESTAMP_US, check_occurred_at
from mnemolog.substrate.memory.importer import ImportFailed
from tests.projections.kit import FakeClock, log_digest, logical_rows, new_home, open_sub

MAY_8_2023 = 1_683_504_000_000_000  # 2023-05-08T00:00Z, in µs
LATER = 4_000_000_000_000_000  # the session's clock: 2096, far from May 2023


@pytest.fixture
def sub(tmp_path: Path) -> Iterator[Substrate]:
    s = open_sub(new_home(tmp_path / "home"), clock=FakeClock(LATER))
    yield s
    s.close()


def ranked(sub: Substrate, query: str) -> list[str]:
    return [r["id"] for r in sub.recall(query, mode="bm25")]


@pytest.mark.parametrize(
    ("given", "micros"),
    [
        ("2023-05-08", MAY_8_2023),
        ("2023-05-08T00:00Z", MAY_8_2023),
        ("2023-05-08T02:00+02:00", MAY_8_2023),
        ("2023-05-08T00:00:00", MAY_8_2023),  # no zone: UTC
        (" 2023-05-08 ", MAY_8_2023),
        (MAY_8_2023, MAY_8_2023),
        (0, 0),
        (MAX_TIMESTAMP_US, MAX_TIMESTAMP_US),
        (None, None),
    ],
)
def test_a_date_is_iso_8601_or_microseconds(given: Any, micros: int | None) -> None:
    assert check_occurred_at(given) == micros


@pytest.mark.parametrize(
    "bad",
    [
        "yesterday",
        "2023-02-30",
        "2023-5-8",
        "",
        "1969-12-31",
        "2023-05-08T25:00",
        "9" * 65,
        "2023-05-08\x00",
        -1,
        MAX_TIMESTAMP_US + 1,
        2**64,
        True,
        1.5e15,
        ["2023-05-08"],
        {"at": "2023-05-08"},
    ],
)
def test_a_bad_date_is_refused_naming_the_field(bad: Any) -> None:
    with pytest.raises(BadInput) as info:
        check_occurred_at(bad)
    assert info.value.exit_code == 65 and info.value.details["field"] == "occurred_at"


def test_recall_finds_a_memory_by_when_it_happened_not_when_it_was_stored(sub: Substrate) -> None:
    may = sub.store("We shipped the billing rewrite to every region.", occurred_at="2023-05-08")
    now = sub.store("We shipped the search rewrite to every region.")
    assert may["occurred_at"] == MAY_8_2023 and now["occurred_at"] is None
    assert sub.get(may["id"])["occurred_at"] == MAY_8_2023
    assert ranked(sub, "what shipped in May 2023")[0] == may["id"]
    # The other is dated by when it was stored (the session's clock, 2096), so 2096 names it.
    assert ranked(sub, "what shipped in 2096")[0] == now["id"]
    # An update of the text alone leaves the date: the date words stay indexed.
    sub.update(may["id"], content="We shipped the billing rewrite, finally, to every region.")
    assert ranked(sub, "what shipped in May 2023")[0] == may["id"]
    with sub.projections.session() as conn:
        before = logical_rows(conn)
    sub.rebuild()
    with sub.projections.session() as conn:
        assert logical_rows(conn) == before  # a rebuild folds occurred_at exactly as the catch-up did
    assert ranked(sub, "what shipped in May 2023")[0] == may["id"]


def test_an_update_puts_a_date_right_and_its_words_follow(sub: Substrate) -> None:
    m = sub.store("The kiln was relined with new firebrick.", occurred_at="2023-05-08")
    other = sub.store("The kiln was fired for the first time.", occurred_at="2023-05-09")
    got = sub.update(m["id"], occurred_at="2024-02-10T09:00Z")
    assert got["occurred_at"] == sub.get(m["id"])["occurred_at"] == 1_707_555_600_000_000
    assert ranked(sub, "what happened in February 2024") == [m["id"]]
    assert ranked(sub, "what happened on 8 May 2023") == [other["id"]]  # 8 no longer names it
    # Text and date in one update; then an update without a date keeps the one it has.
    sub.update(m["id"], content="The kiln was relined again.", occurred_at=MAY_8_2023)
    sub.update(m["id"], title="Kiln relining")
    assert sub.get(m["id"])["occurred_at"] == MAY_8_2023
    assert ranked(sub, "relined 8 May 2023")[0] == m["id"]
    assert ranked(sub, "February 2024") == []
    with sub.projections.session() as conn:
        before = logical_rows(conn)
    sub.rebuild()
    with sub.projections.session() as conn:
        assert logical_rows(conn) == before  # the re-dating folds the same on a rebuild


def test_a_bad_date_at_update_writes_nothing(sub: Substrate) -> None:
    m = sub.store("a memory with no date")
    before = log_digest(sub.home)
    for bad in ("2023-13-01", "soon", -5, True, "9" * 65):
        with pytest.raises(BadInput) as info:
            sub.update(m["id"], occurred_at=bad)
        assert info.value.exit_code == 65 and info.value.details["field"] == "occurred_at"
        # An argument of the wrong JSON type is the schema's (a usage error); a bad date, the field's.
        with pytest.raises((BadInput, UsageError)) as err:
            operations.invoke(sub, "memory_update", {"id": m["id"], "occurred_at": bad})
        assert err.value.exit_code == (64 if isinstance(bad, bool) else 65)
    assert log_digest(sub.home) == before
    assert sub.get(m["id"])["occurred_at"] is None


def test_the_update_operation_takes_it(sub: Substrate) -> None:
    m = sub.store("The dome was resurfaced")
    out = operations.invoke(sub, "memory_update", {"id": m["id"], "occurred_at": "2023-05-08"})
    assert out["memory"]["occurred_at"] == "2023-05-08T00:00:00Z"
    assert ranked(sub, "May 2023") == [m["id"]]


def test_a_bad_date_at_store_writes_nothing(sub: Substrate) -> None:
    sub.store("a first memory, so the log has a writer")
    before = log_digest(sub.home)
    for bad in ("2023-13-01", "soon", -5):
        with pytest.raises(BadInput) as info:
            sub.store("when?", occurred_at=bad)
        assert info.value.details["field"] == "occurred_at"
    assert log_digest(sub.home) == before


def test_import_and_export_carry_it(sub: Substrate, tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    lines = [
        {"content": "The kiln was relined", "occurred_at": "2023-05-08"},
        {"content": "The kiln was fired", "occurred_at": MAY_8_2023 + 86_400_000_000},
        {"content": "The kiln cooled"},
    ]
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    sub.import_jsonl(src)
    got = {m["content"]: m["occurred_at"] for m in sub.list(limit=10)}
    assert got == {
        "The kiln was relined": MAY_8_2023,
        "The kiln was fired": MAY_8_2023 + 86_400_000_000,
        "The kiln cooled": None,
    }
    out = tmp_path / "out.jsonl"
    sub.export_memories("jsonl", out)
    exported = {x["content"]: x.get("occurred_at") for x in map(json.loads, out.read_text().splitlines())}
    assert exported == got
    # A bad date in a line refuses the file, naming the line; nothing is written.
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"content": "x"}) + "\n" + json.dumps({"content": "y", "occurred_at": "13/05"}) + "\n"
    )
    before = log_digest(sub.home)
    with pytest.raises(ImportFailed) as info:
        sub.import_jsonl(bad)
    assert (
        info.value.exit_code == 65 and "line 2" in info.value.message and "occurred_at" in info.value.message
    )
    assert log_digest(sub.home) == before


def test_candidates_extracted_from_an_interaction_are_dated_by_it(sub: Substrate) -> None:
    iid = sub.capture(
        "What did we decide?",
        "Decision: we keep the 18-point whiffletree for the M1 mirror.",
        occurred_at="2023-05-08T14:30Z",
    )["id"]
    assert sub.interaction(iid)["occurred_at"] == MAY_8_2023 + 14 * 3_600_000_000 + 30 * 60_000_000
    sub.extract(interaction_ids=[iid], extractor="rules")
    (cand,) = sub.candidates(queues=["pending", "promoted", "needs_human"])
    assert cand["occurred_at"] == MAY_8_2023 + 14 * 3_600_000_000 + 30 * 60_000_000
    # Without one, a candidate is dated by when its interaction was captured, not by the extraction.
    iid2 = sub.capture("And then?", "Decision: we polish with pitch laps.")["id"]
    captured = sub.interaction(iid2)["captured_at"]
    sub.extract(interaction_ids=[iid2], extractor="rules")
    dated = {
        c["content"]: c["occurred_at"] for c in sub.candidates(queues=["pending", "promoted", "needs_human"])
    }
    assert dated["we polish with pitch laps."] == captured


def test_the_agent_operations_take_it(sub: Substrate) -> None:
    out = operations.invoke(
        sub, "memory_store", {"content": "The dome was resurfaced", "occurred_at": "2023-05-08"}
    )
    assert out["memory"]["occurred_at"] == "2023-05-08T00:00:00Z"
    got = operations.invoke(sub, "capture_interaction", {"prompt": "p", "occurred_at": MAY_8_2023})
    assert sub.interaction(got["id"])["occurred_at"] == MAY_8_2023
    with pytest.raises(BadInput):
        operations.invoke(sub, "memory_store", {"content": "x", "occurred_at": "never"})


def test_payloads_before_occurred_at_read_without_it() -> None:
    from mnemolog.eventlog.vocabulary.events import upcast

    old = {"id": "01HYYYYYYYYYYYYYYYYYYYYYYY", "namespace": "a", "content": "c", "tags": [], "metadata": {}}
    assert "occurred_at" not in upcast("memory.stored", 4, dict(old))
    assert MemoryStored.model_validate(upcast("memory.stored", 4, dict(old))).occurred_at is None


def test_updates_before_occurred_at_read_without_it() -> None:
    from mnemolog.eventlog.vocabulary.events import upcast
    from mnemolog.substrate.events import MemoryUpdated

    old = {"id": "01HYYYYYYYYYYYYYYYYYYYYYYY", "title": "t"}
    assert MemoryUpdated.model_validate(upcast("memory.updated", 4, dict(old))).occurred_at is None
    assert MemoryUpdated.TV == 5
