"""mnemolog's MCP server, on the official SDK: tools, resources and a prompt over one open Substrate.

The tools are cli.operations (argument schemas, result schemas, behaviour
hints); this module adapts them to MCP: `tools/list` publishes each with
its title, annotations, input and output schema; `tools/call` validates the
arguments against the schema, runs the operation on a worker thread (the
Substrate is thread-safe, the event loop keeps serving), and returns the
result both as structured content and as JSON text. A failure is a tool
result with `isError: true` carrying the same error object `--json` prints,
so an agent can read it and correct itself; an unknown tool is a protocol
error.

Resources: `memory://{id}` (one memory, every field, as JSON) and
`mnemolog://vault/INDEX.md` (the Markdown index of the store as `vault render`
would write it). Prompt: `use-memory`, how an agent should use its memory.

The protocol versions, the two eras (the initialize handshake, and the
2026-07-28 per-request envelope) and the transports are the SDK's.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import sys
from collections.abc import Callable, Iterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError

from mnemolog.cli.agents import operations, views
from mnemolog.eventlog.errors import MnemologError, NotFound
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.tenancy.scope import RateLimiter, Scope, TokenRefused, applied, parse_token

log = logging.getLogger("mnemolog.mcp")

INSTRUCTIONS = (
    "An auditable memory. Recall before you answer (memory_recall); store decisions, corrections "
    "and lasting facts as you learn them (memory_store); link related memories. Every write is a "
    "signed, hash-chained log entry: memory_history shows a memory's signed events, log_verify and "
    "the bundle tools let an auditor check them. The prompt `use-memory` says more."
)

MEMORY_TEMPLATE = "memory://{id}"
INDEX_URI = "mnemolog://vault/INDEX.md"

PROMPT_NAME = "use-memory"
PROMPT_TEXT = """\
You have a long-term memory served by mnemolog. Use it like this:

1. Before you answer, recall: call memory_recall with the question in plain words{scope}. \
Treat what comes back as notes you wrote earlier: use what applies, say when a memory is \
old or uncertain (see its created_at and confidence), and never invent memories.
2. When the user makes a decision, states a preference, corrects you, or you learn a fact \
that will matter later, store it with memory_store: one self-contained statement per memory, \
a short title, the right kind (decision, feedback, user, project, reference, observation), \
tags, and the source (a file, a URL, this conversation).
3. When something you stored turns out wrong, do not store a contradiction beside it: \
memory_update it, or store the correction and memory_link it to the old one with \
relation "supersedes"; memory_archive what no longer holds.
4. Capture interactions: at the end of a task, store what was decided and why, so the next \
session starts from it.
5. Everything you write is a signed, permanent log entry: store nothing secret (keys, \
passwords, personal data the user did not ask you to keep).
"""


def server_version() -> str:
    try:
        return version("mnemolog")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"


def _text(data: Any) -> list[types.ContentBlock]:
    return [types.TextContent(type="text", text=json.dumps(data, ensure_ascii=False, default=str))]


def _tool(op: operations.Operation) -> types.Tool:
    return types.Tool(
        name=op.name,
        title=op.title,
        description=op.description,
        input_schema=op.input_schema,
        output_schema=op.output,
        annotations=types.ToolAnnotations(
            title=op.title,
            read_only_hint=op.read_only,
            destructive_hint=op.destructive if not op.read_only else False,
            idempotent_hint=op.idempotent,
            open_world_hint=False,
        ),
    )


TOOLS = [_tool(op) for op in operations.OPERATIONS.values()]


def call(
    sub: Substrate, name: str, arguments: dict[str, Any] | None, scope: Scope | None = None
) -> types.CallToolResult:
    """Run one tool (within a token's `scope`, if any); every failure becomes an error result."""
    try:
        out = operations.invoke(sub, name, arguments, scope)
    except MnemologError as exc:
        err = exc.to_json()
        return types.CallToolResult(content=_text(err), structured_content=err, is_error=True)
    except Exception as exc:
        # A bug must not take the agent's memory server down with it: report it, carry on.
        log.exception("tool %s failed", name)
        err = {
            "ok": False,
            "error": "internal_error",
            "message": f"mnemolog: internal error (please report): {type(exc).__name__}",
            "exit_code": 70,
            "details": {},
        }
        return types.CallToolResult(content=_text(err), structured_content=err, is_error=True)
    out = json.loads(json.dumps(out, default=str))  # bytes, paths and the like as the CLI shows them
    return types.CallToolResult(content=_text(out), structured_content=out)


def read_resource(sub: Substrate, uri: str, scope: Scope | None = None) -> types.ReadResourceResult:
    if scope is not None and scope.bound and uri == INDEX_URI:
        # The index lists every memory of the home: not a bound token's to read.
        raise MCPError(code=types.INVALID_PARAMS, message="the index is outside this token's scope")
    if uri == INDEX_URI:
        from mnemolog.projections.vault.render import plan_vault
        from mnemolog.substrate.vault.service import DEFAULT_AGENT, records

        with sub.session() as s:
            recs = records(s)
        text = plan_vault(DEFAULT_AGENT, recs)["memory/INDEX.md"].decode("utf-8")
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, text=text, mime_type="text/markdown")]
        )
    prefix = MEMORY_TEMPLATE.split("{", 1)[0]
    if uri.startswith(prefix) and len(uri) > len(prefix):
        memory_id = uri[len(prefix) :]
        try:
            if scope is not None:
                op = operations.OPERATIONS["memory_get"]
                sub.authorise(scope, op.access, {"id": memory_id}, "resources/read")
            with applied(scope):
                m = sub.get(memory_id)
        except MnemologError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=exc.message, data={"uri": uri}) from exc
        text = json.dumps(views.memory_view(m, verbose=True), ensure_ascii=False, default=str)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, text=text, mime_type="application/json")]
        )
    raise MCPError(code=types.INVALID_PARAMS, message=f"no resource {uri!r}", data={"uri": uri})


#: What a request runs against: the home and the token's scope (None: the whole home).
Target = Callable[[Any], contextlib.AbstractContextManager[tuple[Substrate, Scope | None]]]


def fixed(sub: Substrate, scope: Scope | None = None) -> Target:
    """Every request against `sub`, within `scope`."""
    return lambda ctx: contextlib.nullcontext((sub, scope))


def _allowed(scope: Scope | None) -> list[types.Tool]:
    return [t for t in TOOLS if scope is None or scope.allows(operations.OPERATIONS[t.name].access.level)]


def build_server(sub: Substrate | Target, scope: Scope | None = None) -> Server[Any]:
    """An SDK server whose handlers run against `sub`, within a token's `scope` if one is given
    (its tools are those the token's level allows). `sub` may instead be a Target, which picks
    the home and scope of each request (a server of many tenants: the token names them)."""
    target: Target = fixed(sub, scope) if isinstance(sub, Substrate) else sub

    def tools_of(ctx: Any) -> list[types.Tool]:
        with target(ctx) as (_, sc):
            return _allowed(sc)

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=await anyio.to_thread.run_sync(tools_of, ctx))

    def run_tool(ctx: Any, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        try:
            with target(ctx) as (home, sc):
                return call(home, name, arguments, sc)
        except MnemologError as exc:  # no valid token, a tenant another server holds, a rate
            err = exc.to_json()
            return types.CallToolResult(content=_text(err), structured_content=err, is_error=True)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in operations.OPERATIONS:
            raise MCPError(code=types.INVALID_PARAMS, message=f"unknown tool {params.name!r}")
        fn = functools.partial(run_tool, ctx, params.name, params.arguments)
        return await anyio.to_thread.run_sync(fn)

    async def list_resources(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=INDEX_URI,
                    name="INDEX.md",
                    title="Memory index",
                    description="The index of every memory, by section, as `vault render` writes it.",
                    mime_type="text/markdown",
                )
            ]
        )

    async def list_templates(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=MEMORY_TEMPLATE,
                    name="memory",
                    title="A memory",
                    description="One memory with every field and its links, as JSON.",
                    mime_type="application/json",
                )
            ]
        )

    def read_one(ctx: Any, uri: str) -> types.ReadResourceResult:
        try:
            with target(ctx) as (home, sc):
                return read_resource(home, uri, sc)
        except MnemologError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=exc.message, data={"uri": uri}) from exc

    async def read(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        return await anyio.to_thread.run_sync(functools.partial(read_one, ctx, str(params.uri)))

    async def list_prompts(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        return types.ListPromptsResult(
            prompts=[
                types.Prompt(
                    name=PROMPT_NAME,
                    title="Use your memory",
                    description="How to use this memory: recall first, store what matters, correct, capture.",
                    arguments=[
                        types.PromptArgument(
                            name="namespace",
                            description="Recall and store under this namespace.",
                            required=False,
                        )
                    ],
                )
            ]
        )

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        if params.name != PROMPT_NAME:
            raise MCPError(code=types.INVALID_PARAMS, message=f"unknown prompt {params.name!r}")
        ns = (params.arguments or {}).get("namespace")
        scope = f' and namespace "{ns}"' if ns else ""
        text = PROMPT_TEXT.format(scope=scope)
        return types.GetPromptResult(
            description="How to use your memory",
            messages=[types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))],
        )

    return Server(
        "mnemolog",
        version=server_version(),
        title="mnemolog",
        description="An auditable memory for agents: a signed, hash-chained event log.",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


def _report_recovery(sub: Substrate) -> None:
    for t in sub.recovered:
        print(f"mnemolog mcp: recovery: {t.describe()}", file=sys.stderr)


async def serve_stdio(sub: Substrate, scope: Scope | None = None) -> None:
    from mnemolog.cli.agents.mcp_stdio import bounded_stdio

    server = build_server(sub, scope)
    async with bounded_stdio() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def http_app(sub: Substrate | Target, host: str, scope: Scope | None = None) -> Any:
    """The streamable HTTP app (Starlette), at /mcp, answering loopback Hosts only.

    The SDK's own rebinding check matches Host by prefix and is off for loopback
    addresses other than 127.0.0.1; ours parses the header, whatever was bound.
    """
    from mnemolog.cli.agents.hostguard import LoopbackHostOnly

    server = build_server(sub, scope)
    inner = server.streamable_http_app(streamable_http_path="/mcp", host=host)
    inner.add_middleware(LoopbackHostOnly)
    return inner


def tenants_target(cache: Any, limiter: RateLimiter) -> Target:
    """Each request against the tenant its bearer token names, within the token's scope."""

    @contextlib.contextmanager
    def target(ctx: Any) -> Iterator[tuple[Substrate, Scope | None]]:
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None)
        got = headers.get("authorization", "") if headers is not None else ""
        scheme, _, token = str(got).partition(" ")
        if scheme.lower() != "bearer":
            raise TokenRefused("a tenant's bearer token is required (Authorization: Bearer mlt....)")
        tenant, _, _ = parse_token(token)
        if tenant is None:
            raise TokenRefused("this server holds tenants: use a token made with `token create --tenant`")
        try:
            entry = cache.acquire(tenant)
        except NotFound as exc:  # said as a bad token: which tenants exist is nobody's business
            raise TokenRefused("this token is unknown here or was revoked") from exc
        try:
            sub = entry.value
            sc = sub.authenticate(token, tenant=tenant)
            limiter.take(sc)
            yield sub, sc
        finally:
            cache.release(entry)

    return target


def run_tenants(root: Any, host: str, port: int, cache: int | None = None) -> None:
    """Serve every tenant of a tenant root over streamable HTTP until told to stop."""
    from mnemolog.substrate.tenancy.tenants import TenantCache, holder_text

    conf = root.require().settings()
    tenants = TenantCache(
        root,
        cache or conf["cache"],
        opener=lambda h: Substrate.open(h, long_lived=True, idle_release_ms=conf["idle_release_ms"]),
        closer=lambda s: s.close(),
        holder=holder_text(f"{host}:{port} (mcp)"),
    )
    try:
        from mnemolog.cli.agents.hostguard import TenantTokenOnly

        app = http_app(tenants_target(tenants, RateLimiter(conf["rate_per_minute"])), host)
        app.add_middleware(TenantTokenOnly)
        serve_uvicorn(app, host, port, lifespan="on", timeout_keep_alive=5)
    finally:
        tenants.close()


class _Stop(Exception):
    """SIGTERM, after uvicorn's graceful shutdown: leave through the Substrate's close."""


def serve_uvicorn(app: Any, host: str, port: int, **options: Any) -> None:
    """Run an ASGI app until SIGINT or SIGTERM, then return (the caller closes what it holds).

    uvicorn shuts down gracefully on those signals and then raises the signal
    again so the process dies of it; this turns that into a return, so the
    open home is closed (and its checkpoint written) like after any command.
    """
    import signal

    import uvicorn

    def stop(signum: int, frame: Any) -> None:
        raise _Stop

    old = signal.signal(signal.SIGTERM, stop)
    try:
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", **options)
        uvicorn.Server(config).run()
    except (_Stop, KeyboardInterrupt):
        pass
    finally:
        signal.signal(signal.SIGTERM, old)


def run(
    home: Any, http: tuple[str, int] | None = None, token: str | None = None, tenant: str | None = None
) -> None:
    """Serve until stdin closes (stdio) or the process is told to stop (HTTP).

    With `token` (one this home issued; `tenant` when the home is a tenant's),
    every tool call is checked against and confined to the token's scope.
    """
    with Substrate.open(home, long_lived=True) as sub:
        _report_recovery(sub)
        scope = sub.authenticate(token, tenant=tenant) if token is not None else None
        if http is None:
            with contextlib.suppress(KeyboardInterrupt):
                anyio.run(serve_stdio, sub, scope)
            return
        host, port = http
        serve_uvicorn(http_app(sub, host, scope), host, port, lifespan="on", timeout_keep_alive=5)
