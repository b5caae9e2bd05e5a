"""The context-pack tools of the MCP server: `context_build` and `context_show`.

Kept beside the server so the tool set grows by one import: TOOLS are the
tool descriptions, `handlers(sub)` the calls they make on a Substrate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mnemolog.substrate.api import Substrate


def _schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


TOOLS: list[dict[str, Any]] = [
    {
        "name": "context_build",
        "description": (
            "Assemble the context for a prompt: trusted project state, identity and preferences, "
            "project memories, cross-project domain knowledge and document chunks, in that trust "
            "order under a budget. Returns the pack text, every entry (tier, id, score, size) and "
            "every trimmed one; unless record is false, the pack is a signed context.built event "
            "whose pack_id context_show re-renders."
        ),
        "inputSchema": _schema(
            {
                "query": {"type": "string"},
                "project": {"type": "string"},
                "budget": {"type": "integer", "minimum": 1},
                "unit": {"type": "string", "enum": ["chars", "tokens"]},
                "record": {"type": "boolean", "default": True},
            },
            ["query"],
        ),
    },
    {
        "name": "context_show",
        "description": (
            "Re-render a recorded context pack from the log alone, checking its SHA-256 and every "
            "memory and chunk text it quoted against the log as it was then."
        ),
        "inputSchema": _schema({"pack_id": {"type": "string"}}, ["pack_id"]),
    },
]


def handlers(sub: Substrate) -> dict[str, Callable[[dict[str, Any]], Any]]:
    return {
        "context_build": lambda a: sub.build_context(
            a["query"],
            project=a.get("project"),
            budget=a.get("budget"),
            unit=a.get("unit"),
            record=bool(a.get("record", True)),
        ),
        "context_show": lambda a: sub.show_context(a["pack_id"]),
    }
