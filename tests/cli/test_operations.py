"""The operations table: strict argument models, and tools other modules describe as JSON Schema."""

from __future__ import annotations

from typing import Any

import pytest

from mnemolog.cli import operations
from mnemolog.eventlog.errors import UsageError

SPEC = [
    {
        "name": "thing_set",
        "description": "Set a thing.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "key": {"type": "string"},
                "n": {"type": "integer", "minimum": 1},
                "kinds": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
            },
            "required": ["key"],
            "additionalProperties": False,
        },
    }
]


def handlers(sub: Any) -> dict[str, Any]:
    return {"thing_set": lambda a: {"key": a["key"], "n": a.get("n", 1)}}


OP = operations.tool_operations(SPEC, handlers, {"thing_set": ("Set a thing", False, True, True)})[0]


def test_a_schema_tool_validates_and_runs() -> None:
    assert OP.input_schema == SPEC[0]["inputSchema"] and OP.destructive and OP.idempotent
    args = operations.parse_args(OP, {"key": "k", "n": 3})
    assert OP.run(None, args) == {"key": "k", "n": 3}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({}, "key"),
        ({"key": 5}, "key"),
        ({"key": "k", "n": 0}, "n"),
        ({"key": "k", "bogus": 1}, "bogus"),
        ({"key": "k", "kinds": "a"}, "kinds"),
        ({"key": "k", "kinds": ["c"]}, "kinds.0"),
    ],
)
def test_a_schema_tool_refuses_bad_arguments_naming_the_field(arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(UsageError) as e:
        operations.parse_args(OP, arguments)
    assert e.value.exit_code == 64 and e.value.details["field"] == field
    assert e.value.message.startswith("thing_set: ")


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
