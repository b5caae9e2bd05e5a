"""The two folds agree: the bundle's pure fold (memview) and the projection fold (DuckDB).

A forensic bundle ships views an auditor recomputes from entries alone; the
home serves the same memories from its projection. For random event streams
(well-formed and hostile payloads, migrations and their rollbacks) both must
give the same rows, the same touched entries per memory, the same links and
the same archive-guard verdict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.bundle import memview
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.writer import Durability
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.eventlog.vocabulary import knowledge as vk
from mnemolog.eventlog.vocabulary.knowledge import STATUSES
from mnemolog.projections.memory import queries
from mnemolog.projections.recall import query as q
from mnemolog.substrate.home import Home
from tests.projections.kit import check_invariants, new_home, open_sub
from tests.support.views import as_row

PROJECTION_ONLY = {"links", "seqs", "atom_ids", "knowledge"}

IDS = st.sampled_from(["A", "B", "C", "D"])
text = st.text(max_size=12)
hostile = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=8),
        st.binary(max_size=4),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def field(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a well-formed value, sometimes anything the value model carries."""
    return st.one_of(good, good, good, hostile)


metadata = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.none() | st.integers(0, 9) | text, max_size=3)
memory_fields = {
    "namespace": field(st.sampled_from(["default", "team", "team/app"])),
    "kind": field(st.sampled_from(v.KINDS)),
    "title": field(text),
    "tags": field(st.lists(st.sampled_from(["x", "y", "z"]), max_size=3)),
    "confidence": field(st.floats(0, 1)),
    "source": field(text),
    "metadata": field(metadata),
    "last_seen": field(st.integers(0, 2**50)),
}
stored = st.fixed_dictionaries(
    {"id": IDS, "content": field(text)},
    optional={
        **memory_fields,
        "created_at": field(st.integers(0, 2**50)),
        "occurred_at": field(st.integers(0, 2**50)),
        "atom_of": field(IDS),
        "source_span": field(st.lists(st.integers(0, 99), min_size=2, max_size=2)),
    },
)
knowledge_fields = {
    "project": field(st.sampled_from(["", "p04", " p06 ", "P04"])),
    "domains": field(st.lists(st.sampled_from(["materials", "optics", "Software"]), max_size=2)),
}
stored_v2 = st.fixed_dictionaries(
    {"id": IDS, "content": field(text)},
    optional={
        **memory_fields,
        **knowledge_fields,
        "status": field(st.sampled_from(["candidate", "active"])),
        "atom_of": field(IDS),
    },
)
updated = st.fixed_dictionaries(
    {"id": IDS},
    optional={
        **memory_fields,
        "content": field(text),
        "occurred_at": field(st.integers(0, 2**50)),
        "migration_run": st.just("run-1"),
    },
)
updated_v2 = st.fixed_dictionaries(
    {"id": IDS},
    optional={**memory_fields, **knowledge_fields, "migration_run": st.just("run-1")},
)
knowledge_event = st.one_of(
    st.tuples(st.just("memory.stored@2"), stored_v2),
    st.tuples(st.just("memory.updated@2"), updated_v2),
    st.tuples(
        st.sampled_from([vk.MEMORY_PROMOTED, vk.MEMORY_REJECTED]),
        st.fixed_dictionaries({"id": field(IDS)}, optional={"by": st.just("person"), **knowledge_fields}),
    ),
    st.tuples(
        st.just(vk.MEMORY_SUPERSEDED),
        st.fixed_dictionaries(
            {"id": field(IDS)},
            optional={
                "by": field(st.sampled_from(["decay", "person"])),
                "confidence": field(st.floats(0, 1)),
            },
        ),
    ),
    st.tuples(
        st.just(vk.MEMORY_REINSTATED),
        st.fixed_dictionaries({"id": field(IDS)}, optional={"by": st.just("person"), "reason": text}),
    ),
    st.tuples(
        st.just(vk.MEMORY_REINFORCED),
        st.fixed_dictionaries(
            {"id": field(IDS), "confidence": field(st.floats(0, 1.5))}, optional={"interaction_id": text}
        ),
    ),
    st.tuples(
        st.just(vk.CANDIDATE_EXTRACTED),
        st.fixed_dictionaries(
            {"interaction_id": field(IDS), "candidate_ids": field(st.lists(IDS, max_size=2))}
        ),
    ),
)
event = st.one_of(
    st.tuples(st.just(v.MEMORY_STORED), stored),
    st.tuples(st.just(v.MEMORY_UPDATED), updated),
    st.tuples(st.just(v.MEMORY_UPDATED), updated),
    st.tuples(
        st.just(v.MEMORY_ARCHIVED),
        st.fixed_dictionaries(
            {"id": IDS},
            optional={"by": field(st.sampled_from(v.ARCHIVE_BY)), "reason": field(text)},
        ),
    ),
    st.tuples(st.just(v.MEMORY_RESTORED), st.fixed_dictionaries({"id": field(IDS)})),
    st.tuples(
        st.just(v.LINK_CREATED),
        st.fixed_dictionaries(
            {"src": field(IDS), "dst": field(IDS), "relation": field(st.sampled_from(v.RELATIONS))},
            optional={"metadata": field(metadata)},
        ),
    ),
    st.tuples(
        st.just(v.LINK_REMOVED),
        st.fixed_dictionaries(
            {"src": field(IDS), "dst": field(IDS), "relation": field(st.sampled_from(v.RELATIONS))}
        ),
    ),
    st.tuples(
        st.just(v.ATOMISATION_COMPLETED),
        st.fixed_dictionaries({"source_id": field(IDS), "atom_ids": field(st.lists(IDS, max_size=3))}),
    ),
    st.tuples(
        st.sampled_from([v.ATOMISATION_REQUESTED, v.ATOMISATION_FAILED]),
        st.fixed_dictionaries({"source_id": field(IDS)}),
    ),
    st.tuples(
        st.just(v.MIGRATION_ROLLED_BACK),
        st.fixed_dictionaries(
            {
                "snapshot_size": field(st.integers(0, 30)),
                "memory_ids": field(st.lists(IDS, max_size=3, unique=True)),
            }
        ),
    ),
    st.tuples(st.just(v.POLICY_SET), st.fixed_dictionaries({"namespace": text, "changes": field(metadata)})),
    knowledge_event,
    knowledge_event,
)


def guard_hides(view: dict[str, Any]) -> bool:
    """The archive guard over a view: the operator's archive, or atomisation's with atoms."""
    return view["archived_at"] is not None or (
        (view["atomised_into"] or 0) > 0 and view["atomisation_archived_at"] is not None
    )


def write(home: Home, events: list[tuple[str, dict[str, Any]]]) -> bool:
    """Write the events; a type "name@2" is written at tv 2 (others at tv 1, policy.set at 2)."""
    tv = {v.POLICY_SET: 2}

    def typed(t: str) -> tuple[str, int]:
        name, _, at = t.partition("@")
        return name, int(at) if at else tv.get(name, 1)

    try:
        with home.open_writer(durability=Durability("group")) as w:
            w.append_many([(typed(t)[0], d, typed(t)[1]) for t, d in events])
    except Exception:  # the codec refuses what CBOR's value model cannot carry: nothing written
        return False
    return True


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(event, min_size=1, max_size=25))
def test_bundle_fold_and_projection_fold_agree(
    tmp_path_factory: pytest.TempPathFactory, events: list[tuple[str, dict[str, Any]]]
) -> None:
    home = new_home(tmp_path_factory.mktemp("agree") / "home")
    if not write(home, events):
        return
    with Log(home.log_dir) as log:
        entries = list(log.iter_entries(0))
    ids = {"A", "B", "C", "D"}
    views = memview.fold_views(entries, ids)
    with open_sub(home) as sub, sub.projections.session() as conn:
        check_invariants(conn)
        every = q.Filters(include_archived=True, statuses=STATUSES)
        rows = {m["id"]: m for m in q.list_memories(conn, every, limit=100)}
        assert set(rows) == set(views) == memview.stored_ids(entries) & ids
        for mid, view in views.items():
            # The knowledge block is shown only once a memory has any of it; absent, it is the default.
            assert as_row(view) == rows[mid], mid
            assert view["links"] == q.links_of(conn, mid), mid
            assert queries.is_hidden(conn, mid) == guard_hides(view), mid
        # Every memory's touched entries, stored or not, by the one rule.
        for mid in ids:
            touched = sorted(queries.touching_seqs(conn, {mid}, len(entries)))
            assert touched == [e.seq for e in entries if mid in memview.entry_touched_ids(e)], mid
            if mid in views:
                assert views[mid]["seqs"] == touched, mid


def test_a_rollback_touches_the_memories_its_payload_names(tmp_path: Path) -> None:
    # The projection once added a touch per undone update; now both folds read memory_ids.
    home = new_home(tmp_path / "home")
    assert write(
        home,
        [
            (v.MEMORY_STORED, {"id": "A", "namespace": "default", "content": "alpha"}),
            (v.MEMORY_UPDATED, {"id": "A", "title": "one", "migration_run": "r"}),
            (v.MEMORY_UPDATED, {"id": "A", "title": "two", "migration_run": "r"}),
            (v.MIGRATION_ROLLED_BACK, {"run_id": "r", "snapshot_size": 2, "memory_ids": ["A"]}),
        ],
    )
    with open_sub(home) as sub, sub.projections.session() as conn:
        # Seq 0 is the log's genesis (its key); the rollback (seq 4) undoes both updates.
        assert sorted(queries.touching_seqs(conn, {"A"}, 10)) == [1, 2, 3, 4]
        assert conn.execute("SELECT count(*) FROM touches WHERE seq = 4").fetchone() == (1,)
        assert sub.get("A")["title"] is None


def test_a_rollback_takes_back_a_date_a_migration_gave(tmp_path: Path) -> None:
    # A memory without a date, dated by a migration's update, then the migration rolled back:
    # both folds show no date again, and the index holds the words of its created_at.
    home = new_home(tmp_path / "home")
    assert write(
        home,
        [
            (v.MEMORY_STORED, {"id": "A", "namespace": "default", "content": "alpha", "created_at": 0}),
            (v.MEMORY_UPDATED, {"id": "A", "occurred_at": 1_683_504_000_000_000, "migration_run": "r"}),
            (v.MIGRATION_ROLLED_BACK, {"run_id": "r", "snapshot_size": 2, "memory_ids": ["A"]}),
        ],
    )
    with Log(home.log_dir) as log:
        entries = list(log.iter_entries(0))
    views = memview.fold_views(entries, {"A"})
    assert "occurred_at" not in views["A"]
    with open_sub(home) as sub, sub.projections.session() as conn:
        check_invariants(conn)
        assert sub.get("A")["occurred_at"] is None
        assert as_row(views["A"]) == q.list_memories(conn, q.Filters(include_archived=True), limit=5)[0]
        assert [r["id"] for r in sub.recall("alpha 1970", mode="bm25")] == ["A"]
        assert sub.recall("May 2023", mode="bm25") == []
