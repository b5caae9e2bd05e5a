"""The operations table: every tool and route takes a strict argument model."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from mnemolog.cli.agents import operations
from mnemolog.eventlog.errors import UsageError
from mnemolog.projections.knowledge.queries import CANDIDATE_QUEUES


def test_every_operation_validates_with_a_strict_model() -> None:
    for op in operations.OPERATIONS.values():
        assert issubclass(op.args, operations.Args), op.name
        assert op.input_schema == op.args.model_json_schema()
        assert op.input_schema.get("additionalProperties") is False, op.name


def test_the_candidate_queues_are_the_projection_s() -> None:
    assert get_args(operations.CandidateQueue) == CANDIDATE_QUEUES


@pytest.mark.parametrize(
    ("name", "arguments", "field"),
    [
        ("project_state_set", {}, "project"),
        ("project_state_set", {"project": 5, "category": "status", "key": "k", "value": "v"}, "project"),
        ("project_state_set", {"project": "p", "category": "mood", "key": "k", "value": "v"}, "category"),
        ("candidates_list", {"limit": 0}, "limit"),
        ("candidates_list", {"bogus": 1}, "bogus"),
        ("candidates_list", {"statuses": "pending"}, "statuses"),
        ("candidates_list", {"statuses": ["nope"]}, "statuses.0"),
        ("context_build", {"query": "q", "unit": "words"}, "unit"),
        ("context_show", {}, "pack_id"),
        ("capture_interaction", {"prompt": "p", "reinforce": "yes"}, "reinforce"),
    ],
)
def test_bad_arguments_are_refused_naming_the_field(name: str, arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(UsageError) as e:
        operations.parse_args(operations.OPERATIONS[name], arguments)
    assert e.value.exit_code == 64 and e.value.details["field"] == field
    assert e.value.message.startswith(f"{name}: ")


def test_model_operations_name_the_field_too() -> None:
    op = operations.OPERATIONS["memory_list"]
    with pytest.raises(UsageError) as e:
        operations.parse_args(op, {"kinds": "decision"})
    assert e.value.details["field"] == "kinds" and "'decision'" in e.value.message
    with pytest.raises(UsageError) as e:
        operations.parse_args(operations.OPERATIONS["memory_recall"], {})
    assert e.value.details["field"] == "query" and "found" not in e.value.message


def test_every_operation_has_an_object_output_schema_and_unique_name() -> None:
    names = [op.name for op in operations.OPERATIONS.values()]
    assert len(names) == len(set(names))
    for op in operations.OPERATIONS.values():
        assert op.output["type"] == "object" and "ok" in op.output["required"]
        assert op.input_schema["type"] == "object"
        assert not (op.read_only and op.destructive)
