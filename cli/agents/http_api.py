"""The local HTTP API: the agent operations over JSON, for agents in any language and capture hooks.

A Starlette app over one long-lived Substrate. The routes are one table
(ROUTES) from which the app and its OpenAPI document are both built; most
routes are an operation of cli.operations, so their request bodies are
validated by the same strict models as the MCP tools, and answered with
the same `{"ok": true, ...}` objects. A failure is the JSON object `--json`
prints; `status_for` maps it to an HTTP status, in this one place.

Guards, all here:
  * a bearer token (`[http] token` in config.toml) is required on every
    route when one is configured; without one the server only listens on
    loopback (cli.listen) and only answers requests whose Host is a loopback
    name, so a web page cannot reach it by DNS rebinding;
  * JSON bodies must say `Content-Type: application/json` (a browser cannot
    send that cross-site without a preflight, which is never granted), are
    read with a size bound and a time bound, decoded strictly as UTF-8 and
    parsed with a recursion limit;
  * a client too slow to send its request headers is disconnected
    (SlowClientH11, the uvicorn protocol the server runs with).
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import json
import logging
import os
import re
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pydantic_core
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from mnemolog.cli.agents import operations
from mnemolog.cli.agents.hostguard import refusal_message
from mnemolog.cli.agents.listen import loopback_host_header
from mnemolog.eventlog.errors import BadInput, MnemologError, NotFound, UsageError
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.tenancy import scope as scopes
from mnemolog.substrate.tenancy.scope import LEVELS, RateLimiter, TokenRefused, parse_token
from mnemolog.substrate.tenancy.tenants import TenantCache, TenantRoot

log = logging.getLogger("mnemolog.http")

MAX_JSON_BYTES = 2 * 1024 * 1024  # a 256 KiB memory, escaped at worst, and its metadata
MAX_BUNDLE_BYTES = 64 * 1024 * 1024
BODY_TIMEOUT_S = 30.0
HEADER_TIMEOUT_S = 10.0
#: Connections one client address may hold open at once (`[http] max_connections_per_peer`).
MAX_CONNECTIONS_PER_PEER = 32
#: Connections and requests the server takes at once, over all peers (uvicorn's limit).
MAX_CONNECTIONS = 256
MIN_TOKEN_CHARS = 16


# -- errors ------------------------------------------------------------------------------


class HttpError(MnemologError):
    """A request the HTTP layer refuses before any operation runs (the slug says which)."""

    exit_code = 64

    def __init__(self, slug: str, message: str, **details: Any) -> None:
        super().__init__(message, **details)
        self.slug = slug  # type: ignore[misc]


#: exit code -> HTTP status; the HTTP layer's own refusals by slug.
STATUS_BY_EXIT = {1: 409, 2: 404, 3: 503, 4: 502, 5: 403, 6: 500, 7: 422, 8: 422, 64: 400, 65: 422, 70: 500}
STATUS_BY_SLUG = {
    "unauthorized": 401,
    "forbidden_host": 421,
    "no_route": 404,
    "method_not_allowed": 405,
    "body_too_large": 413,
    "unsupported_media_type": 415,
    "request_timeout": 408,
    "lock_timeout": 503,
    "path_not_allowed": 403,
    "too_many_connections": 503,  # written by the protocol itself (slow_client_protocol)
    "scope_refused": 403,
    "rate_limited": 429,
    "tenant_busy": 503,
}


def status_for(err: MnemologError) -> int:
    """The HTTP status of an error object: the one place the two are mapped."""
    return STATUS_BY_SLUG.get(err.slug, STATUS_BY_EXIT.get(err.exit_code, 500))


def dumps(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False, default=str, allow_nan=False).encode("utf-8")


class JSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return dumps(content)


def error_response(err: MnemologError) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if err.slug == "unauthorized" else None
    return JSON(err.to_json(), status_code=status_for(err), headers=headers)


def internal_error() -> Response:
    body = {
        "ok": False,
        "error": "internal_error",
        "message": "mnemolog: internal error (please report)",
        "exit_code": 70,
        "details": {},
    }
    return JSON(body, status_code=500)


# -- settings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class HttpSettings:
    token: str | None = None
    max_json_bytes: int = MAX_JSON_BYTES
    max_bundle_bytes: int = MAX_BUNDLE_BYTES
    body_timeout_s: float = BODY_TIMEOUT_S
    header_timeout_s: float = HEADER_TIMEOUT_S
    max_connections_per_peer: int = MAX_CONNECTIONS_PER_PEER
    loopback_only: bool = True

    @classmethod
    def from_config(cls, raw: Mapping[str, Any], where: str = "config.toml") -> HttpSettings:
        """The `[http]` table: `token` (at least 16 characters; unset = loopback only),
        `header_timeout_s` and `body_timeout_s` (how long a client may take to send a request),
        `max_connections_per_peer` (how many connections one client address may hold open)."""
        table = raw.get("http", {})
        if not isinstance(table, dict):
            raise BadInput(f"{where}: [http] must be a table", file=where, field="http")
        unknown = sorted(
            set(table) - {"token", "header_timeout_s", "body_timeout_s", "max_connections_per_peer"}
        )
        if unknown:
            raise BadInput(f"{where}: unknown [http] setting(s) {unknown}", file=where, field="http")
        token = table.get("token")
        if token is not None and (
            not isinstance(token, str)
            or len(token) < MIN_TOKEN_CHARS
            or not token.isprintable()
            or any(c.isspace() for c in token)
        ):
            raise BadInput(
                f"{where}: http.token must be text of at least {MIN_TOKEN_CHARS} characters, no spaces",
                file=where,
                field="http.token",
            )

        def seconds(name: str, default: float) -> float:
            value = table.get(name, default)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0.1 <= value <= 3600:
                raise BadInput(f"{where}: http.{name} must be a number of seconds in [0.1, 3600]", file=where)
            return float(value)

        per_peer = table.get("max_connections_per_peer", MAX_CONNECTIONS_PER_PEER)
        if (
            isinstance(per_peer, bool)
            or not isinstance(per_peer, int)
            or not 1 <= per_peer <= MAX_CONNECTIONS
        ):
            raise BadInput(
                f"{where}: http.max_connections_per_peer must be an integer in [1, {MAX_CONNECTIONS}], "
                f"found {per_peer!r}",
                file=where,
                field="http.max_connections_per_peer",
            )
        # Without a token the server may only listen on loopback, and answers only loopback Hosts.
        return cls(
            max_connections_per_peer=per_peer,
            token=token or None,
            loopback_only=token is None,
            header_timeout_s=seconds("header_timeout_s", HEADER_TIMEOUT_S),
            body_timeout_s=seconds("body_timeout_s", BODY_TIMEOUT_S),
        )


# -- request reading -------------------------------------------------------------------------


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The request body, at most `limit` bytes, within `timeout` seconds (else 413 / 408)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise HttpError("bad_request", "Content-Length is not a number")
        if int(declared) > limit:
            raise HttpError("body_too_large", f"the body is larger than {limit} bytes", limit=limit)
    chunks: list[bytes] = []
    size = 0
    try:
        with anyio.fail_after(timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise HttpError("body_too_large", f"the body is larger than {limit} bytes", limit=limit)
                chunks.append(chunk)
    except TimeoutError as exc:
        raise HttpError("request_timeout", f"the body did not arrive within {timeout:g} s") from exc
    return b"".join(chunks)


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


async def read_json(request: Request, settings: HttpSettings) -> dict[str, Any]:
    """A JSON object body; an empty body is `{}`."""
    raw = await read_body(request, settings.max_json_bytes, settings.body_timeout_s)
    if not raw.strip():
        return {}
    if _media_type(request) != "application/json":
        raise HttpError(
            "unsupported_media_type",
            "send the body as Content-Type: application/json",
            found=request.headers.get("content-type"),
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"the body is not UTF-8 (byte {exc.start})", field="body") from exc
    try:
        value = pydantic_core.from_json(text, allow_inf_nan=False)
    except ValueError as exc:
        raise BadInput(f"the body is not JSON: {str(exc)[:200]}", field="body") from exc
    if not isinstance(value, dict):
        raise BadInput(f"the body must be a JSON object, found {type(value).__name__}", field="body")
    return value


def query_args(request: Request, schema: Mapping[str, Any]) -> dict[str, Any]:
    """Query parameters as arguments, typed by the operation's schema (a list repeats the name).

    Names the schema does not know are passed on as text, for the operation's
    validation to refuse with the field named.
    """
    props = schema.get("properties", {})
    out: dict[str, Any] = {}
    for name in dict.fromkeys(request.query_params.keys()):
        values = request.query_params.getlist(name)
        kind = _kind(props.get(name, {}))
        if kind == "array":
            out[name] = values
            continue
        if len(values) > 1:
            raise UsageError(f"query parameter {name} given {len(values)} times", field=name)
        value = values[0]
        if kind == "boolean":
            out[name] = _flag(value, name)
        elif kind == "integer":
            if not value.lstrip("-").isdigit() or len(value) > 20:
                raise UsageError(
                    f"query parameter {name}: expected an integer, found {value[:40]!r}", field=name
                )
            out[name] = int(value)
        else:
            out[name] = value
    return out


def _kind(prop: Mapping[str, Any]) -> str | None:
    if "type" in prop:
        t = prop["type"]
        return t if isinstance(t, str) else next((x for x in t if x != "null"), None)
    for alt in prop.get("anyOf", ()):  # pydantic's optional fields
        if alt.get("type") not in (None, "null"):
            return str(alt["type"])
    return None


def _flag(value: str, name: str) -> bool:
    if value.lower() in ("1", "true", "yes"):
        return True
    if value.lower() in ("0", "false", "no"):
        return False
    raise UsageError(f"query parameter {name}: expected true or false, found {value[:40]!r}", field=name)


# -- the routes --------------------------------------------------------------------------------

Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str
    summary: str
    operation: str | None = None  # an operation of cli.operations, else a handler of its own
    status: int = 200
    body: bool = True  # the operation's arguments come in a JSON body (else from the query)
    binary: str | None = None  # media type of a non-JSON response


ROUTES = [
    Endpoint("GET", "/health", "Version, log size and the last checkpoint.", body=False),
    Endpoint("POST", "/memory", "Store a memory.", "memory_store", status=201),
    Endpoint("GET", "/memory/{id}", "One memory with its links.", "memory_get", body=False),
    Endpoint("PUT", "/memory/{id}", "Change fields of a memory.", "memory_update"),
    Endpoint("POST", "/memory/{id}/archive", "Hide a memory from recall.", "memory_archive"),
    Endpoint(
        "DELETE", "/memory/{id}", "Forget a memory: its content erased for good.", "memory_forget", body=False
    ),
    Endpoint("POST", "/memory/{id}/restore", "Undo an archive or a supersession.", "memory_restore"),
    Endpoint("POST", "/memory/{id}/atomise", "Split a long memory into 2-10 atoms.", "memory_atomise"),
    Endpoint(
        "GET", "/memory/{id}/history", "Every signed entry about a memory.", "memory_history", body=False
    ),
    Endpoint("POST", "/links", "Link two memories.", "memory_link", status=201),
    Endpoint("POST", "/links/remove", "Take back a link (a signed link.removed).", "memory_unlink"),
    Endpoint("POST", "/recall", "Natural-language recall.", "memory_recall"),
    Endpoint("POST", "/search", "Keyword search.", "memory_search"),
    Endpoint("POST", "/list", "Memories, newest first.", "memory_list"),
    Endpoint("GET", "/stats", "Counts of memories, links, events.", "memory_stats", body=False),
    Endpoint(
        "POST",
        "/verify",
        "Verify the log (a JSON body, or none), or a forensic bundle sent as application/x-tar.",
        "log_verify",
    ),
    Endpoint(
        "POST",
        "/bundles",
        "A forensic bundle of a memory: the signed tar itself.",
        binary="application/x-tar",
    ),
    Endpoint("GET", "/openapi.json", "This document.", body=False),
    # The knowledge loop's and the context packs' operations.
    Endpoint(
        "POST",
        "/interactions",
        "Capture a prompt and its response.",
        "capture_interaction",
        201,
    ),
    Endpoint("GET", "/project/state", "A project's trusted state.", "project_state_get", body=False),
    Endpoint("POST", "/project/state", "Set a project state entry.", "project_state_set"),
    Endpoint("GET", "/candidates", "Candidate memories.", "candidates_list", body=False),
    Endpoint("POST", "/memory/{id}/promote", "Promote a candidate.", "candidate_promote"),
    Endpoint("POST", "/memory/{id}/reject", "Reject a candidate.", "candidate_reject"),
    Endpoint("POST", "/context/build", "Build a context pack.", "context_build"),
    Endpoint("GET", "/context/{pack_id}", "A recorded context pack.", "context_show", body=False),
]


def served() -> list[Endpoint]:
    """The routes served: every one (each operation a route names is in cli.operations)."""
    return list(ROUTES)


def bearer(request: Request) -> str | None:
    """The bearer token of a request, if it sent one."""
    got = request.headers.get("authorization", "")
    scheme, _, value = got.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


class Tenants:
    """The homes a server holds: one tenant per request, named by its token (substrate.tenants)."""

    def __init__(self, cache: TenantCache) -> None:
        self.cache = cache

    def close(self) -> None:
        self.cache.close()


class Api:
    """The routes' handlers. A request runs against one home: the server's own, or (with
    `tenants`) the tenant its token names, with the token's scope (substrate.scope) checked
    and applied by the operation layer, as MCP and the Python API do."""

    def __init__(
        self,
        sub: Substrate | None,
        settings: HttpSettings,
        tenants: Tenants | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        self.sub = sub
        self.settings = settings
        self.tenants = tenants
        self.limiter = limiter or RateLimiter(None)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args))

    @contextlib.asynccontextmanager
    async def target(self, request: Request) -> AsyncIterator[tuple[Substrate, scopes.Scope | None]]:
        """The home a request runs against and its token's scope (None: the whole home)."""
        token = bearer(request)
        if self.tenants is None:
            assert self.sub is not None
            if token is None or (
                self.settings.token is not None
                and hmac.compare_digest(token.encode(), self.settings.token.encode())
            ):
                yield self.sub, None  # the check_request guard let it through: the home's own token
                return
            sc = await self.run(self.sub.authenticate, token)
            self.limiter.take(sc)
            yield self.sub, sc
            return
        tenant, _, _ = parse_token(token or "")
        if tenant is None:
            raise TokenRefused("this server holds tenants: use a token made with `token create --tenant`")
        try:
            entry = await self.run(self.tenants.cache.acquire, tenant)
        except NotFound as exc:
            # Said as a bad token: a caller without one learns nothing of which tenants exist.
            raise TokenRefused("this token is unknown here or was revoked") from exc
        try:
            sc = await self.run(functools.partial(entry.value.authenticate, token, tenant=tenant))
            self.limiter.take(sc)
            yield entry.value, sc
        finally:
            self.tenants.cache.release(entry)

    async def operation(self, ep: Endpoint, request: Request) -> Response:
        assert ep.operation is not None
        op = operations.OPERATIONS[ep.operation]
        if ep.body:
            args = await read_json(request, self.settings)
        else:
            args = query_args(request, op.input_schema)
        for name, value in request.path_params.items():
            if name in args and args[name] != value:
                raise UsageError(f"the body's {name} differs from the {name} in the path", field=name)
            args[name] = value
        async with self.target(request) as (sub, sc):
            out = await self.run(operations.invoke, sub, ep.operation, args, sc)
        return JSON(out, status_code=ep.status)

    def _health(self, sub: Substrate, sc: scopes.Scope | None) -> dict[str, Any]:
        from mnemolog.cli.agents.mcp_server import server_version

        if sc is not None and sc.bound:
            # The log's size and root are the home's, not the token's to see.
            return {"version": server_version(), "scope": sc.to_json()}
        with sub.session():
            size = sub.log.size
            try:
                cp, _ = sub.log.latest_checkpoint()
                last: dict[str, Any] | None = {"size": cp.size, "root": cp.root.hex(), "origin": cp.origin}
            except NotFound:
                last = None
        out = {
            "version": server_version(),
            "log": {"size": size, "log_id": sub.log.log_id.hex()},
            "last_checkpoint": last,
        }
        if sc is not None:
            out["scope"] = sc.to_json()
        return out

    async def health(self, request: Request) -> Response:
        async with self.target(request) as (sub, sc):
            return JSON({"ok": True, **await self.run(self._health, sub, sc)})

    async def verify(self, ep: Endpoint, request: Request) -> Response:
        if _media_type(request) not in ("application/x-tar", "application/octet-stream"):
            return await self.operation(ep, request)
        trusted = request.query_params.get("trusted_key")
        extra = set(request.query_params) - {"trusted_key"}
        if extra:
            raise UsageError(f"unknown query parameter(s) {sorted(extra)}", field=sorted(extra)[0])
        data = await read_body(request, self.settings.max_bundle_bytes, self.settings.body_timeout_s)
        async with self.target(request) as (sub, sc):
            if sc is not None:
                op = operations.OPERATIONS["bundle_verify"]
                await self.run(sub.authorise, sc, op.access, {"trusted_key": trusted}, op.name)
            out = await self.run(self._verify_bundle, sub, data, trusted)
        return JSON(out)

    def _verify_bundle(self, sub: Substrate, data: bytes, trusted: str | None) -> dict[str, Any]:
        fd, name = tempfile.mkstemp(prefix="mnemolog-bundle-", suffix=".tar")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            # The server's own temp file, not a path a client named: no confinement to apply.
            out = {"ok": True, **operations.verify_bundle_file(sub, Path(name), trusted or None)}
            out["file"] = "(uploaded)"
            return out
        finally:
            Path(name).unlink(missing_ok=True)

    async def bundles(self, ep: Endpoint, request: Request) -> Response:
        body = await read_json(request, self.settings)
        args = operations.parse_args(operations.OPERATIONS["bundle_export"], body)
        assert isinstance(args, operations.BundleArgs)
        if args.output is not None:
            raise UsageError("output: the HTTP API returns the bundle; it writes no file", field="output")
        op = operations.OPERATIONS["bundle_export"]
        async with self.target(request) as (sub, sc):
            if sc is not None:
                await self.run(sub.authorise, sc, op.access, dict(args), op.name)
            ex = await self.run(operations.export_bundle, sub, args.memory_id, args.include_atomisation_chain)
        s = ex.summary()
        return Response(
            ex.data,
            media_type="application/x-tar",
            headers={
                "Content-Disposition": f'attachment; filename="bundle-{args.memory_id}-{ex.tree_size}.tar"',
                "X-Mnemolog-Entries": str(s["entries"]),
                "X-Mnemolog-Tree-Size": str(s["tree_size"]),
                "X-Mnemolog-Root": s["root"],
            },
        )

    async def openapi(self, request: Request) -> Response:
        async with self.target(request) as (_, sc):
            # A token's holder sees the routes its level can use, and no others.
            return JSON(openapi_document(sc.level if sc is not None else "admin"))

    def handler(self, ep: Endpoint) -> Handler:
        if ep.path == "/health":
            inner: Handler = self.health
        elif ep.path == "/openapi.json":
            inner = self.openapi
        elif ep.path == "/verify":
            inner = functools.partial(self.verify, ep)
        elif ep.path == "/bundles":
            inner = functools.partial(self.bundles, ep)
        else:
            inner = functools.partial(self.operation, ep)

        async def guarded(request: Request) -> Response:
            try:
                return await inner(request)
            except MnemologError as exc:
                return error_response(exc)
            except Exception:
                log.exception("%s %s failed", request.method, request.url.path)
                return internal_error()

        return guarded

    def check_request(self, request: Request) -> None:
        token = self.settings.token
        got = bearer(request)
        scoped = got is not None and got.startswith("mlt.")
        if self.tenants is not None and not scoped:
            # Every request to a tenant server names its tenant by its token.
            raise HttpError(
                "unauthorized", "a tenant's bearer token is required (Authorization: Bearer mlt....)"
            )
        if (
            token is not None
            and not scoped
            and (got is None or not hmac.compare_digest(got.encode(), token.encode()))
        ):
            raise HttpError("unauthorized", "a valid bearer token is required (Authorization: Bearer ...)")
        if self.settings.loopback_only:
            host = request.headers.get("host", "")
            if not loopback_host_header(host):
                raise HttpError("forbidden_host", refusal_message(host))


class Guard:
    """The token and Host checks, before routing: an unknown path or method is refused by
    the same guard as a known one, so nothing about the server answers an unguarded caller."""

    def __init__(self, app: ASGIApp, api: Api) -> None:
        self.app = app
        self.api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                self.api.check_request(Request(scope))
            except MnemologError as exc:
                await error_response(exc)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def app(
    sub: Substrate | None,
    settings: HttpSettings,
    tenants: Tenants | None = None,
    limiter: RateLimiter | None = None,
) -> Starlette:
    api = Api(sub, settings, tenants, limiter)
    routes = [Route(ep.path, api.handler(ep), methods=[ep.method]) for ep in served()]

    async def not_found(request: Request, exc: Exception) -> Response:
        code = exc.status_code if isinstance(exc, HTTPException) else 500
        if code == 405:
            return error_response(HttpError("method_not_allowed", f"{request.method} is not allowed here"))
        if code == 404:
            return error_response(
                HttpError("no_route", f"no route {request.url.path[:200]!r} (see /openapi.json)")
            )
        return error_response(HttpError("bad_request", str(getattr(exc, "detail", "bad request"))))

    return Starlette(
        routes=routes,
        exception_handlers={HTTPException: not_found},
        middleware=[Middleware(Guard, api=api)],
    )


# -- OpenAPI -----------------------------------------------------------------------------------

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ok": {"const": False},
        "error": {"type": "string"},
        "message": {"type": "string"},
        "exit_code": {"type": "integer"},
        "details": {"type": "object"},
    },
    "required": ["ok", "error", "message", "exit_code", "details"],
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


@functools.cache
def openapi_document(level: str = "admin") -> dict[str, Any]:
    """OpenAPI 3.1 for ROUTES, from the operations' own argument and result schemas.

    `level`: only the routes a token of that level may use (a read token sees no write routes).
    """
    from mnemolog.cli.agents.mcp_server import server_version

    paths: dict[str, dict[str, Any]] = {}
    errors = {
        str(code): {"description": desc, "content": _json({"$ref": "#/components/schemas/Error"})}
        for code, desc in [
            (400, "usage error (exit 64)"),
            (401, "bearer token missing or wrong"),
            (404, "not found (exit 2)"),
            (413, "body too large"),
            (422, "bad input data (exit 65) or verification failed (exit 8)"),
            (500, "storage error (exit 6)"),
        ]
    }
    allowed = scopes.Scope(level if level in LEVELS else "read")
    for ep in served():
        op = operations.OPERATIONS.get(ep.operation) if ep.operation else None
        if op is not None and not allowed.allows(op.access.level):
            continue
        item: dict[str, Any] = {"summary": ep.summary, "responses": dict(errors)}
        path_params = re.findall(r"\{(\w+)\}", ep.path)
        if op is not None:
            item["operationId"] = op.name
            item["description"] = op.description
            schema = op.input_schema
            props = {k: v for k, v in schema.get("properties", {}).items() if k not in path_params}
            required = [r for r in schema.get("required", []) if r not in path_params]
            if ep.body:
                body = {**schema, "properties": props, "required": required}
                item["requestBody"] = {"required": bool(required), "content": _json(body)}
            elif props:
                item["parameters"] = [
                    {"name": k, "in": "query", "required": k in required, "schema": v}
                    for k, v in props.items()
                ]
            item["responses"][str(ep.status)] = {"description": op.title, "content": _json(op.output)}
        elif ep.path == "/bundles":
            schema = operations.BundleArgs.model_json_schema()
            schema["properties"].pop("output", None)
            item["operationId"] = "bundle_export"
            item["requestBody"] = {"required": True, "content": _json(schema)}
            item["responses"]["200"] = {
                "description": "the bundle",
                "content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}},
            }
        else:
            item["responses"]["200"] = {"description": ep.summary, "content": _json({"type": "object"})}
        for name in reversed(path_params):
            item.setdefault("parameters", []).insert(
                0, {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            )
        if ep.path == "/verify":
            item["requestBody"]["content"]["application/x-tar"] = {
                "schema": {"type": "string", "format": "binary"}
            }
            item["parameters"] = [{"name": "trusted_key", "in": "query", "schema": {"type": "string"}}]
        paths.setdefault(ep.path, {})[ep.method.lower()] = item
    return {
        "openapi": "3.1.0",
        "info": {"title": "mnemolog", "version": server_version(), "description": __doc__.split("\n\n")[0]},
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR_SCHEMA, "Memory": operations.MEMORY_SCHEMA},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"bearer": []}],
    }


# -- serving -----------------------------------------------------------------------------------


def slow_client_protocol(header_timeout: float, per_peer: int = MAX_CONNECTIONS_PER_PEER) -> type:
    """uvicorn's h11 protocol, disconnecting a client that takes too long to send its headers,
    and refusing a client address more than `per_peer` open connections.

    uvicorn times out idle keep-alive connections but not a request whose
    headers trickle in (or never come); this arms a deadline whenever a
    connection waits for a request and disarms it once the request has begun.
    The body is bounded separately (read_body's time limit).

    uvicorn's own limit counts every connection together, so one peer holding
    hundreds of idle connections made everyone else's requests 503 until the
    header deadline cut them; a connection beyond a peer's share gets its own
    503 (`too_many_connections`) at once and is closed, and the others are
    served. The count lives in this class (one per server) and is touched only
    from the event loop.
    """
    from uvicorn.protocols.http.h11_impl import H11Protocol

    open_by_peer: dict[str, int] = {}
    refusal = dumps(
        {
            "ok": False,
            "error": "too_many_connections",
            "message": f"this client address has {per_peer} connections open already; "
            "reuse one (keep-alive) or close some",
            "exit_code": 6,  # transient, as a lock timeout is
            "details": {"limit": per_peer},
        }
    )
    refusal_response = (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\nRetry-After: 1\r\nContent-Length: "
        + str(len(refusal)).encode()
        + b"\r\n\r\n"
        + refusal
    )

    class SlowClientH11(H11Protocol):
        _deadline: Any = None
        _peer: str | None = None  # set while this connection counts against its peer
        _refused = False

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(header_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if self.cycle is None or self.cycle.response_complete:
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            peer = transport.get_extra_info("peername")
            host = str(peer[0]) if isinstance(peer, tuple) and peer else None
            if host is not None:
                if open_by_peer.get(host, 0) >= per_peer:
                    self._refused = True
                    transport.write(refusal_response)
                    transport.close()
                    return
                open_by_peer[host] = open_by_peer.get(host, 0) + 1
                self._peer = host
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return  # answered and closing: nothing it sends is read
            super().data_received(data)
            if self.cycle is not None and not self.cycle.response_complete:
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._peer is not None:
                left = open_by_peer.get(self._peer, 1) - 1
                if left > 0:
                    open_by_peer[self._peer] = left
                else:
                    open_by_peer.pop(self._peer, None)
                self._peer = None
            super().connection_lost(exc)

    return SlowClientH11


def serve(home: Any, host: str, port: int, settings: HttpSettings) -> None:
    """Serve until SIGINT or SIGTERM; the home is closed on the way out."""
    from mnemolog.substrate.tenancy.tenants import Lease, holder_text

    # One server writes a home at a time: a second is refused here, naming the first.
    lease = Lease(home, holder_text(f"{host}:{port}"))
    lease.take()
    try:
        with Substrate.open(home, long_lived=True) as sub:
            for t in sub.recovered:
                log.warning("recovery: %s", t.describe())
            # The command line's door (cli.handoff): a Unix socket in the home, never on the network.
            from mnemolog.cli.agents.handoff_server import announced

            with announced(sub, settings):
                _run(app(sub, settings, limiter=RateLimiter(None)), host, port, settings)
    finally:
        lease.release()


def serve_tenants(
    root: TenantRoot, host: str, port: int, settings: HttpSettings, cache: int | None = None
) -> None:
    """Serve every tenant of `root` until SIGINT or SIGTERM; open tenants are closed on the way out."""
    from mnemolog.substrate.tenancy.tenants import holder_text

    conf = root.require().settings()
    tenants = Tenants(
        TenantCache(
            root,
            cache or conf["cache"],
            opener=lambda h: Substrate.open(h, long_lived=True, idle_release_ms=conf["idle_release_ms"]),
            closer=lambda sub: sub.close(),
            holder=holder_text(f"{host}:{port}"),
        )
    )
    try:
        _run(app(None, settings, tenants, RateLimiter(conf["rate_per_minute"])), host, port, settings)
    finally:
        tenants.close()


def _run(application: Starlette, host: str, port: int, settings: HttpSettings) -> None:
    from mnemolog.cli.agents.mcp_server import serve_uvicorn

    serve_uvicorn(
        application,
        host,
        port,
        http=slow_client_protocol(settings.header_timeout_s, settings.max_connections_per_peer),
        lifespan="off",
        timeout_keep_alive=5,
        h11_max_incomplete_event_size=64 * 1024,
        limit_concurrency=MAX_CONNECTIONS,
    )


def describe(settings: HttpSettings, host: str, port: int) -> str:
    url_host = f"[{host}]" if ":" in host else host
    auth = "bearer token required" if settings.token else "no token: loopback only"
    return f"mnemolog serve: http://{url_host}:{port} ({auth}; OpenAPI at /openapi.json)"


__all__ = [
    "ROUTES",
    "HttpSettings",
    "Tenants",
    "app",
    "describe",
    "openapi_document",
    "serve",
    "serve_tenants",
    "status_for",
]
