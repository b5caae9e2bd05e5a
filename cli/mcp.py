"""`mnemolog mcp`: a Model Context Protocol server on stdio, for agents.

JSON-RPC 2.0, one message per line on stdin/stdout (diagnostics on stderr).
It holds one long-lived Substrate (with its deferred-atomisation worker) for
the whole session, so it is the "long-running process" that CLI commands in
other processes share the home with. Tool failures are tool results with
`isError: true` and the same error object the CLI prints with --json;
protocol failures are JSON-RPC errors.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import IO, Any

from mnemolog.eventlog.errors import MnemologError, UsageError
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.events import KINDS, RELATIONS
from mnemolog.substrate.home import Home

SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
MAX_LINE = 4 * 1024 * 1024

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602

_FILTERS: dict[str, Any] = {
    "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 10},
    "namespace": {"type": "string", "description": "Only this namespace (and below)."},
    "descendants": {"type": "boolean", "default": True},
    "kinds": {"type": "array", "items": {"type": "string", "enum": list(KINDS)}},
    "tags": {"type": "array", "items": {"type": "string"}},
    "include_archived": {"type": "boolean", "default": False},
}


def _schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


TOOLS: list[dict[str, Any]] = [
    {
        "name": "memory_store",
        "description": "Store a memory. Returns it (and the auto-atomisation outcome under a policy).",
        "inputSchema": _schema(
            {
                "content": {"type": "string"},
                "namespace": {"type": "string", "default": "default"},
                "kind": {"type": "string", "enum": list(KINDS), "default": "observation"},
                "title": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                "source": {"type": "string"},
                "metadata": {"type": "object"},
                "id": {
                    "type": "string",
                    "description": "A ULID: stored at most once; a retry returns it with already_stored",
                },
            },
            ["content"],
        ),
    },
    {
        "name": "memory_recall",
        "description": "Natural-language recall (BM25, any term ranks). Archived memories are hidden.",
        "inputSchema": _schema({"query": {"type": "string"}, **_FILTERS}, ["query"]),
    },
    {
        "name": "memory_search",
        "description": "Keyword search: every keyword must appear as a word.",
        "inputSchema": _schema({"query": {"type": "string"}, **_FILTERS}, ["query"]),
    },
    {
        "name": "memory_get",
        "description": "One memory with its links.",
        "inputSchema": _schema({"id": {"type": "string"}}, ["id"]),
    },
    {
        "name": "memory_list",
        "description": "Memories, newest first.",
        "inputSchema": _schema({**_FILTERS, "offset": {"type": "integer", "minimum": 0}}, []),
    },
    {
        "name": "memory_link",
        "description": "Draw an edge between two existing memories.",
        "inputSchema": _schema(
            {
                "src": {"type": "string"},
                "dst": {"type": "string"},
                "relation": {"type": "string", "enum": list(RELATIONS), "default": "related_to"},
                "metadata": {"type": "object"},
            },
            ["src", "dst"],
        ),
    },
    {
        "name": "memory_unlink",
        "description": "Take back an edge (a signed link.removed; the edge stays in the log's history).",
        "inputSchema": _schema(
            {
                "src": {"type": "string"},
                "dst": {"type": "string"},
                "relation": {"type": "string", "enum": list(RELATIONS), "default": "related_to"},
                "reason": {"type": "string"},
            },
            ["src", "dst"],
        ),
    },
    {
        "name": "memory_update",
        "description": "Change fields of a memory (metadata keys merge; null removes).",
        "inputSchema": _schema(
            {
                "id": {"type": "string"},
                "title": {"type": "string"},
                "content": {"type": "string"},
                "kind": {"type": "string", "enum": list(KINDS)},
                "tags": {"type": "array", "items": {"type": "string"}},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                "source": {"type": "string"},
                "metadata": {"type": "object"},
            },
            ["id"],
        ),
    },
    {
        "name": "memory_archive",
        "description": "Hide a memory from recall (kept in the log).",
        "inputSchema": _schema({"id": {"type": "string"}, "reason": {"type": "string"}}, ["id"]),
    },
    {
        "name": "memory_restore",
        "description": "Undo an archive.",
        "inputSchema": _schema({"id": {"type": "string"}, "reason": {"type": "string"}}, ["id"]),
    },
    {
        "name": "memory_atomise",
        "description": (
            "Split a long memory into 2-10 atoms; returns {source_id, atom_ids, atom_count, archived_at}. "
            "A repeat returns the existing atoms with already_atomised: true unless force_re_atomise."
        ),
        "inputSchema": _schema(
            {
                "id": {"type": "string"},
                "force_re_atomise": {"type": "boolean", "default": False},
                "max_atom_tokens": {"type": "integer", "minimum": 50, "maximum": 1000},
                "curator": {"type": "string", "enum": ["ollama", "rules"]},
            },
            ["id"],
        ),
    },
    {
        "name": "memory_stats",
        "description": "Counts of memories, links, atomisation requests and events.",
        "inputSchema": _schema({}, []),
    },
]
_TOOL_NAMES = {t["name"] for t in TOOLS}


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _filters(a: dict[str, Any]) -> dict[str, Any]:
    return {
        "limit": a.get("limit", 10),
        "namespace": a.get("namespace"),
        "descendants": a.get("descendants", True),
        "kinds": a.get("kinds", []),
        "tags": a.get("tags", []),
        "include_archived": a.get("include_archived", False),
    }


class Server:
    def __init__(self, sub: Substrate) -> None:
        self.sub = sub
        self.version = SUPPORTED_VERSIONS[0]
        self.tools: dict[str, Callable[[dict[str, Any]], Any]] = {
            "memory_store": lambda a: self.sub.store(
                a["content"],
                **{k: a[k] for k in ("namespace", "kind", "title", "tags", "confidence", "source") if k in a},
                metadata=a.get("metadata"),
                memory_id=a.get("id"),
            ),
            "memory_recall": lambda a: {"results": self.sub.recall(a["query"], **_filters(a))},
            "memory_search": lambda a: {"results": self.sub.search(a["query"], **_filters(a))},
            "memory_get": lambda a: self.sub.get(a["id"]),
            "memory_list": lambda a: {
                "memories": self.sub.list(offset=a.get("offset", 0), **_filters({"limit": 50, **a}))
            },
            "memory_unlink": lambda a: self.sub.unlink(
                a["src"], a["dst"], a.get("relation", "related_to"), a.get("reason")
            ),
            "memory_link": lambda a: self.sub.link(
                a["src"], a["dst"], a.get("relation", "related_to"), a.get("metadata")
            ),
            "memory_update": lambda a: self.sub.update(a["id"], **{k: v for k, v in a.items() if k != "id"}),
            "memory_archive": lambda a: self.sub.archive(a["id"], a.get("reason")),
            "memory_restore": lambda a: self.sub.restore(a["id"], a.get("reason")),
            "memory_atomise": lambda a: self.sub.atomise(
                a["id"],
                force=bool(a.get("force_re_atomise", False)),
                max_atom_tokens=a.get("max_atom_tokens"),
                curator=a.get("curator"),
            ).envelope(),
            "memory_stats": lambda a: self.sub.stats(),
        }

    def handle(self, msg: Any) -> dict[str, Any] | None:
        """One JSON-RPC message in; the response (None for notifications)."""
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or not isinstance(msg.get("method"), str):
            return _error(
                msg.get("id") if isinstance(msg, dict) else None, INVALID_REQUEST, "invalid request"
            )
        mid = msg.get("id")
        is_notification = "id" not in msg
        try:
            result = self._dispatch(msg["method"], msg.get("params") or {})
        except RpcError as exc:
            return None if is_notification else _error(mid, exc.code, exc.message)
        return None if is_notification else {"jsonrpc": "2.0", "id": mid, "result": result}

    def _dispatch(self, method: str, params: Any) -> Any:
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "params must be an object")
        if method == "initialize":
            asked = params.get("protocolVersion")
            self.version = asked if asked in SUPPORTED_VERSIONS else SUPPORTED_VERSIONS[0]
            return {
                "protocolVersion": self.version,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "mnemolog", "version": _version()},
                "instructions": (
                    "An auditable memory: store memories, recall them by natural language, link them, "
                    "and atomise long ones. Every write is a signed, hash-chained log entry."
                ),
            }
        if method in ("notifications/initialized", "notifications/cancelled"):
            return {}
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": TOOLS}
        if method == "tools/call":
            return self._call(params)
        raise RpcError(METHOD_NOT_FOUND, f"method {method!r} not found")

    def _call(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        args = params.get("arguments") or {}
        if name not in _TOOL_NAMES:
            raise RpcError(INVALID_PARAMS, f"unknown tool {name!r}")
        if not isinstance(args, dict):
            raise RpcError(INVALID_PARAMS, "arguments must be an object")
        schema = next(t for t in TOOLS if t["name"] == name)["inputSchema"]
        missing = [k for k in schema["required"] if k not in args]
        unknown = [k for k in args if k not in schema["properties"]]
        try:
            if missing or unknown:
                raise UsageError(
                    f"{name}: missing {missing}, unknown {unknown}", missing=missing, unknown=unknown
                )
            data = self.tools[str(name)](args)
            body = data if isinstance(data, dict) else {"result": data}
            out: dict[str, Any] = {"ok": True, **body}
            is_error = False
        except MnemologError as exc:
            out = exc.to_json()
            is_error = True
        except (TypeError, ValueError, KeyError) as exc:
            out = UsageError(f"{name}: bad arguments: {exc}").to_json()
            is_error = True
        except Exception as exc:
            # A bug must not take the agent's memory server down with it: report, carry on.
            traceback.print_exc(file=sys.stderr)
            out = {"ok": False, "error": "internal_error", "message": f"{type(exc).__name__}: {exc}",
                   "exit_code": 70, "details": {}}  # fmt: skip
            is_error = True
        result: dict[str, Any] = {
            "content": [{"type": "text", "text": json.dumps(out, default=str, ensure_ascii=False)}],
            "isError": is_error,
        }
        if self.version >= "2025-06-18":
            result["structuredContent"] = json.loads(json.dumps(out, default=str))
        return result


def _error(mid: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": mid, "error": {"code": code, "message": message}}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mnemolog")
    except PackageNotFoundError:  # pragma: no cover
        return "0"


def serve(home: Home, stdin: IO[str] | None = None, stdout: IO[str] | None = None) -> int:
    """Serve until stdin closes."""
    inp = stdin or sys.stdin
    out = stdout or sys.stdout
    with Substrate.open(home, long_lived=True) as sub:
        for t in sub.recovered:
            print(f"mnemolog mcp: recovery: {t.describe()}", file=sys.stderr)
        server = Server(sub)
        for line in inp:
            if not line.strip():
                continue
            if len(line) > MAX_LINE:
                resp: dict[str, Any] | None = _error(None, INVALID_REQUEST, "message too large")
            else:
                try:
                    msg = json.loads(line)
                except json.JSONDecodeError as exc:
                    resp = _error(None, PARSE_ERROR, f"parse error: {exc.msg}")
                else:
                    resp = server.handle(msg)
            if resp is not None:
                out.write(json.dumps(resp, default=str, ensure_ascii=False) + "\n")
                out.flush()
    return 0


def mcp_command() -> Any:
    import click

    from mnemolog.cli.app import Ctx

    @click.command("mcp")
    @click.pass_obj
    def mcp(ctx: Ctx) -> None:
        """Serve the Model Context Protocol on stdio (JSON-RPC, one message per line)."""
        serve(ctx.home.require())

    return mcp
