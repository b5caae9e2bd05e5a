"""The DNS-rebinding guard for servers that answer only on this machine.

A web page can point a name it controls (`127.evil.com`) at 127.0.0.1 and make
the browser send requests to a loopback server; the request then carries that
name in its Host header. A server without a bearer token therefore answers only
requests whose Host parses as a loopback name (cli.listen.loopback_host_header),
before any routing, and 421 (Misdirected Request) otherwise.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from mnemolog.cli.agents.listen import loopback_host_header


def host_of(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"host":
            return bytes(value).decode("latin-1")
    return ""


def refusal_message(host: str) -> str:
    return f"Host {host[:80]!r} is not a loopback name; this server answers only on this machine"


def refusal_body(host: str) -> bytes:
    return json.dumps(
        {
            "ok": False,
            "error": "forbidden_host",
            "message": refusal_message(host),
            "exit_code": 64,
            "details": {},
        }
    ).encode()


class LoopbackHostOnly:
    """An ASGI wrapper: HTTP requests whose Host is not a loopback name get 421 and reach nothing."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = host_of(scope)
            if not loopback_host_header(host):
                body = refusal_body(host)
                await send(
                    {
                        "type": "http.response.start",
                        "status": 421,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class TenantTokenOnly:
    """An ASGI wrapper: a request without a tenant's bearer token (`mlt.` ...) gets 401 and reaches
    nothing (a server of many tenants answers no one it cannot place)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            auth = dict(scope.get("headers") or []).get(b"authorization", b"")
            kind, _, token = auth.partition(b" ")
            if kind.lower() != b"bearer" or not token.strip().startswith(b"mlt."):
                body = json.dumps(
                    {
                        "ok": False,
                        "error": "unauthorized",
                        "message": "a tenant's bearer token is required (Authorization: Bearer mlt....)",
                        "exit_code": 5,
                        "details": {},
                    }
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
