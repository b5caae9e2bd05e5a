"""The memory vocabulary: one table of touches, upcaster chains that end at each model's tv, stdlib only."""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import pytest

from mnemolog.eventlog.vocabulary import events as v
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.events import CURRENT_TV, REGISTRY, MemoryStored, MemoryUpdated


def test_the_module_imports_only_the_standard_library() -> None:
    # The offline bundle verifier imports it; it may not pull in anything installed.
    tree = ast.parse(Path(v.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert {n.split(".")[0] for n in names} <= set(sys.stdlib_module_names) | {"__future__"}


def test_every_payload_type_is_classified_and_upcast_to_its_written_tv() -> None:
    types = {t for t, _ in REGISTRY}
    assert types <= set(v.TOUCHES) | v.NO_TOUCHES
    assert not set(v.TOUCHES) & v.NO_TOUCHES
    for t in types:
        assert v.upcast_chain_end(t) == CURRENT_TV[t], t
        for tv in range(1, CURRENT_TV[t]):
            assert (t, tv) in v.UPCASTERS, (t, tv)


@pytest.mark.parametrize(
    ("type_", "data", "ids"),
    [
        ("memory.stored", {"id": "A", "atom_of": "P"}, ["A", "P"]),
        ("memory.stored", {"id": "A", "atom_of": ["P"]}, ["A"]),  # a list where one id belongs
        ("memory.updated", {"id": 7}, []),
        ("link.created", {"src": "A", "dst": "A"}, ["A"]),
        ("atomisation.completed", {"source_id": "P", "atom_ids": ["A", "B", "A", 3]}, ["P", "A", "B"]),
        ("atomisation.completed", {"source_id": "P", "atom_ids": "AB"}, ["P"]),
        ("atomisation.failed", {"source_id": "P", "atom_ids": ["A"]}, ["P"]),
        ("migration.rolled_back", {"memory_ids": ["B", "A"], "snapshot_size": 3}, ["B", "A"]),
        ("migration.rolled_back", {"memory_ids": "AB"}, []),
        ("policy.set", {"namespace": "A"}, []),
        ("something.else", {"id": "A"}, []),
    ],
)
def test_touched_ids(type_: str, data: dict[str, object], ids: list[str]) -> None:
    assert v.touched_ids(type_, data) == ids


def test_update_takes_exactly_the_fields_memory_updated_carries() -> None:
    params = set(inspect.signature(Substrate.update).parameters) - {"self", "memory_id"}
    assert (
        params
        == set(v.MUTABLE_FIELDS)
        == set(MemoryUpdated.model_fields) - {"id", "migration_run", v.TOUCH_PREV}
    )


def test_store_takes_exactly_the_fields_memory_stored_carries() -> None:
    """`store` names the model's fields and no others (the id is `memory_id`, given or new; the
    status is the writer's; the back-chain pointers the session's), and the payload's constructor
    takes every one of them under that name."""
    store = inspect.signature(Substrate.store).parameters
    assert set(store) - {"self"} == set(MemoryStored.model_fields) - {"id", "status", v.TOUCH_PREV} | {
        "memory_id"
    }
    given = {
        "namespace": "a/b",
        "kind": "decision",
        "title": "t",
        "tags": ["x"],
        "confidence": 0.5,
        "source": "s",
        "metadata": {"k": 1},
        "created_at": 1,
        "last_seen": 2,
        "atom_of": "01HZZZZZZZZZZZZZZZZZZZZZZZ",
        "source_span": (0, 1),
        "memory_id": "01HYYYYYYYYYYYYYYYYYYYYYYY",
        "project": "p",
        "domains": ("software",),
        "occurred_at": "2023-05-08",
    }
    assert set(given) == set(store) - {"self", "content"}
    p = MemoryStored.new("body", **given)
    assert p.id == given["memory_id"] and p.source_span == [0, 1] and p.domains == ["software"]
    assert p.namespace == "a/b" and p.status == "active"
    assert p.occurred_at == 1_683_504_000_000_000  # 2023-05-08T00:00Z
    assert MemoryStored.new("body").namespace == "default"  # store's default


def test_readers_are_total() -> None:
    assert v.read_float(2**1100) is None and v.read_float(True) is None and v.read_float(0.5) == 0.5
    assert v.read_int(2**63) is None and v.read_int(False) is None and v.read_int(-3) == -3
    assert v.read_span([1, "2"]) is None and v.read_span([1, 2]) == [1, 2] and v.read_span([]) is None
    assert v.read_tags("x") == [] and v.read_tags([1, "a"]) == ["1", "a"]
    assert v.merge_metadata({"a": 1, "b": 2}, {"a": None, "c": 3}) == {"b": 2, "c": 3}
    # A hostile tv 1 policy (not a map) upcasts to "clear" instead of failing the fold.
    assert v.upcast("policy.set", 1, {"namespace": "n", "policy": "x"})["changes"] == {}
