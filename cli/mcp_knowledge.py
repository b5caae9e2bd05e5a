"""The knowledge loop's MCP tools: capture, trusted state, and the candidate queue.

Kept apart from the server so whichever server carries the tools (the
stdio JSON-RPC one, or one on the MCP SDK) adds them with two lines: the
schemas in KNOWLEDGE_TOOLS, the handlers from `knowledge_handlers(sub)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mnemolog.eventlog.vocabulary_knowledge import STATE_CATEGORIES
from mnemolog.projections.knowledge_queries import CANDIDATE_QUEUES
from mnemolog.substrate.api import Substrate


def _schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


_TEXT = {"type": "string"}

KNOWLEDGE_TOOLS: list[dict[str, Any]] = [
    {
        "name": "capture_interaction",
        "description": (
            "Record one prompt and response (changes no memory). With reinforce, the active memories "
            "the response echoes gain confidence. Returns the interaction id."
        ),
        "inputSchema": _schema(
            {
                "prompt": _TEXT,
                "response": _TEXT,
                "project": _TEXT,
                "client": _TEXT,
                "session": _TEXT,
                "context_id": _TEXT,
                "namespace": {"type": "string", "default": "default"},
                "reinforce": {"type": "boolean", "default": False},
            },
            ["prompt"],
        ),
    },
    {
        "name": "project_state_get",
        "description": "A project's trusted state entries (category/key = value), current ones by default.",
        "inputSchema": _schema(
            {
                "project": _TEXT,
                "category": {"type": "string", "enum": list(STATE_CATEGORIES)},
                "history": {"type": "boolean", "default": False},
            },
            ["project"],
        ),
    },
    {
        "name": "project_state_set",
        "description": "Set a trusted state entry of a project (upsert on project, category, key).",
        "inputSchema": _schema(
            {
                "project": _TEXT,
                "category": {"type": "string", "enum": list(STATE_CATEGORIES)},
                "key": _TEXT,
                "value": _TEXT,
                "source": _TEXT,
            },
            ["project", "category", "key", "value"],
        ),
    },
    {
        "name": "candidates_list",
        "description": "Candidate memories waiting for triage or a person (or decided ones, by status).",
        "inputSchema": _schema(
            {
                "statuses": {"type": "array", "items": {"type": "string", "enum": list(CANDIDATE_QUEUES)}},
                "project": _TEXT,
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50},
            },
            [],
        ),
    },
    {
        "name": "candidate_promote",
        "description": "Promote a candidate to an active memory (optionally to a project, with domains).",
        "inputSchema": _schema(
            {"id": _TEXT, "project": _TEXT, "domains": {"type": "array", "items": _TEXT}, "reason": _TEXT},
            ["id"],
        ),
    },
    {
        "name": "candidate_reject",
        "description": "Reject a candidate (it becomes invalid; the log keeps it).",
        "inputSchema": _schema({"id": _TEXT, "reason": _TEXT}, ["id", "reason"]),
    },
]


def knowledge_handlers(sub: Substrate) -> dict[str, Callable[[dict[str, Any]], Any]]:
    """Each tool's handler: validated arguments in, a JSON-ready object out."""
    return {
        "capture_interaction": lambda a: sub.capture(
            a["prompt"],
            a.get("response", ""),
            project=a.get("project", ""),
            client=a.get("client"),
            session=a.get("session"),
            context_id=a.get("context_id"),
            namespace=a.get("namespace", "default"),
            reinforce=bool(a.get("reinforce", False)),
        ),
        "project_state_get": lambda a: {
            "project": a["project"],
            "entries": sub.get_state(
                a["project"], category=a.get("category"), history=bool(a.get("history"))
            ),
        },
        "project_state_set": lambda a: sub.set_state(
            a["project"], a["category"], a["key"], a["value"], source=a.get("source")
        ),
        "candidates_list": lambda a: {
            "candidates": sub.candidates(
                queues=a.get("statuses") or ("pending", "needs_human"),
                project=a.get("project"),
                limit=a.get("limit", 50),
            )
        },
        "candidate_promote": lambda a: sub.promote(
            a["id"], project=a.get("project"), domains=a.get("domains"), reason=a.get("reason")
        ),
        "candidate_reject": lambda a: sub.reject(a["id"], reason=a["reason"]),
    }
