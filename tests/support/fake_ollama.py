"""A real HTTP server on 127.0.0.1 that speaks enough of Ollama's API for tests.

The real ``ollama`` client (and so the real httpx transport) talks to it over a
socket, so a test exercises exactly what production does, minus the model.

Usage::

    from tests.support.fake_ollama import FakeOllama, HttpError, Delay, atoms_json

    with FakeOllama() as server:
        server.push(atoms_json(["The deploy failed.", "The team rolled back."]))
        server.push(HttpError(500, "model crashed"), Delay(5.0, atoms_json([...])))
        curator = OllamaCurator(server.host, "fake-model")
        ...
        assert len(server.chat_requests) == 1
        assert server.chat_requests[0].json["messages"][1]["role"] == "user"

Scripted replies
    ``push(*replies, path="/api/chat")`` queues replies for a POST endpoint;
    each request to it takes the next one. A reply is a ``str`` (the assistant's
    content; for /api/generate the ``response``), a ``Reply`` (content plus token
    counts), an ``HttpError`` (status and error message, sent as Ollama does:
    ``{"error": ...}``), a ``Delay`` (wait, then send another reply; a client
    timeout fires during the wait), ``Hangup`` (close the connection without
    answering), ``Raw`` (any status and body, sent verbatim) or ``Computed``
    (a function of the request's JSON that returns one of these). When a queue
    is empty, /api/chat and /api/generate answer with ``default`` if one was
    given, else HTTP 500 naming the unscripted request, so a test never passes
    on a reply it did not script.
    /api/embed and /api/embeddings answer with deterministic vectors derived
    from SHA-256 of each input (``embed_dim`` floats in [-1, 1]) unless a
    scripted HttpError, Delay, Hangup or Raw is queued for them;
    ``embed_reply(vectors)`` builds a Raw carrying chosen vectors.

Recorded requests
    ``requests`` lists every request received (method, path, headers, raw
    body, parsed JSON), in arrival order; ``chat_requests`` just the chats.

Other endpoints
    ``GET /`` ("Ollama is running"), ``GET /api/version``, ``GET /api/tags``,
    ``GET /api/ps`` and ``POST /api/show`` describe the ``models`` given (the
    default is one model named ``fake-model``). With ``strict_models=True`` a
    chat, generate or embed request for a model not in ``models`` gets the
    404 Ollama sends for an unknown model. ``stream: true`` (Ollama's default
    when the field is absent) is answered as NDJSON: one content chunk and a
    final ``done`` chunk.

``unused_port()`` / ``unreachable_host()`` give an address where nothing
listens, for connection-refused tests.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, TypeAlias

__all__ = [
    "Computed",
    "Delay",
    "FakeOllama",
    "Hangup",
    "HttpError",
    "Raw",
    "RecordedRequest",
    "Reply",
    "Script",
    "atoms_json",
    "embed_reply",
    "unreachable_host",
    "unused_port",
]

FAKE_VERSION = "0.0.0-fake"
DEFAULT_MODEL = "fake-model"


@dataclass(frozen=True)
class Reply:
    """A successful reply. Token counts default to whitespace-word counts;
    ``omit_counts`` leaves ``prompt_eval_count``/``eval_count`` out entirely."""

    content: str
    prompt_eval_count: int | None = None
    eval_count: int | None = None
    omit_counts: bool = False
    done_reason: str = "stop"


@dataclass(frozen=True)
class HttpError:
    """An HTTP error status with Ollama's error body ``{"error": message}``."""

    status: int
    message: str = "fake_ollama: scripted error"


@dataclass(frozen=True)
class Delay:
    """Wait ``seconds`` (cut short when the server closes), then send ``then``."""

    seconds: float
    then: Script


@dataclass(frozen=True)
class Hangup:
    """Close the connection without sending a response."""


@dataclass(frozen=True)
class Raw:
    """Send ``body`` as is: for replies that are not Ollama's shape at all."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"


@dataclass(frozen=True)
class Computed:
    """A reply computed from the request's parsed JSON body when it arrives (returns a Script)."""

    reply: Callable[[dict[str, Any]], Script]


Script: TypeAlias = str | Reply | HttpError | Delay | Hangup | Raw | Computed


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any
    received_at: float = field(default=0.0)


def atoms_json(atoms: Sequence[Any]) -> str:
    """The content a well-behaved model returns: ``{"atoms": [...]}``."""
    return json.dumps({"atoms": list(atoms)})


def embed_reply(vectors: Sequence[Sequence[float]], model: str = DEFAULT_MODEL) -> Raw:
    """An /api/embed reply carrying exactly ``vectors`` (any shape, NaN included), for
    scripting replies a real model should never give: a wrong dimension or count, NaN."""
    body = {"model": model, "embeddings": [list(v) for v in vectors], "total_duration": 1}
    return Raw(json.dumps(body).encode())  # json.dumps writes NaN as NaN, as a broken server might


def unused_port() -> int:
    """A loopback port nothing listens on (bound once, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def unreachable_host() -> str:
    """An Ollama host URL on 127.0.0.1 where connections are refused."""
    return f"http://127.0.0.1:{unused_port()}"


_SCRIPTED_PATHS = ("/api/chat", "/api/generate", "/api/embed", "/api/embeddings")
_EMBED_PATHS = ("/api/embed", "/api/embeddings")


class FakeOllama:
    """The server; use as a context manager (or call ``close()``)."""

    def __init__(
        self,
        *,
        models: Sequence[str] = (DEFAULT_MODEL,),
        default: Script | None = None,
        strict_models: bool = False,
        embed_dim: int = 8,
    ) -> None:
        self.models = tuple(models)
        self.default = default
        self.strict_models = strict_models
        self.embed_dim = embed_dim
        self._lock = threading.Lock()
        self._queues: dict[str, deque[Script]] = {p: deque() for p in _SCRIPTED_PATHS}
        self._requests: list[RecordedRequest] = []
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self.host = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-ollama-{self.port}",
            daemon=True,
        )
        self._thread.start()

    # -- scripting ---------------------------------------------------------------------

    def push(self, *replies: Script, path: str = "/api/chat") -> None:
        """Queue ``replies`` for POST ``path`` (one per request, in order)."""
        if path not in self._queues:
            raise ValueError(f"cannot script {path}; scriptable paths: {_SCRIPTED_PATHS}")
        if path in _EMBED_PATHS:
            for reply in replies:
                final = _final(reply)
                if isinstance(final, (str, Reply)):
                    raise ValueError(f"{path} answers with vectors; script only errors for it")
        with self._lock:
            self._queues[path].extend(replies)

    def pending(self, path: str = "/api/chat") -> int:
        """Scripted replies not yet consumed for ``path``."""
        with self._lock:
            return len(self._queues[path])

    # -- inspection --------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == "POST" and r.path == "/api/chat"]

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOllama:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- used by the handler -----------------------------------------------------------

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next(self, path: str) -> Script | None:
        with self._lock:
            queue = self._queues.get(path)
            if queue:
                return queue.popleft()
        return None

    def _wait(self, seconds: float) -> None:
        self._closing.wait(seconds)


def _final(reply: Script) -> Script:
    while isinstance(reply, Delay):
        reply = reply.then
    return reply


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_words(v) for v in value)
    if isinstance(value, dict):
        return sum(_words(v) for v in value.values())
    return 0


def _vector(text: str, dim: int) -> list[float]:
    out: list[float] = []
    counter = 0
    while len(out) < dim:
        digest = hashlib.sha256(f"{counter}\x00{text}".encode()).digest()
        for (word,) in struct.iter_unpack(">I", digest):
            out.append(word / 0xFFFFFFFF * 2.0 - 1.0)
        counter += 1
    return out[:dim]


def _handler_for(server: FakeOllama) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.1 so httpx keeps its connection alive as it does with Ollama.
        protocol_version = "HTTP/1.1"
        server_version = "fake-ollama"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # tests read server.requests, not stderr

        def do_GET(self) -> None:
            self._handle("GET")

        def do_HEAD(self) -> None:
            self._handle("HEAD")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_DELETE(self) -> None:
            self._handle("DELETE")

        def _handle(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            parsed: Any = None
            if body:
                with contextlib.suppress(ValueError):
                    parsed = json.loads(body)
            path = self.path.split("?", 1)[0]
            server._record(
                RecordedRequest(
                    method=method,
                    path=path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                    json=parsed,
                    received_at=time.monotonic(),
                )
            )
            try:
                self._route(method, path, parsed)
            except (BrokenPipeError, ConnectionResetError):
                # The client gave up (its timeout fired during a Delay).
                self.close_connection = True

        def _route(self, method: str, path: str, body: Any) -> None:
            request = body if isinstance(body, dict) else {}
            if method in ("GET", "HEAD") and path == "/":
                self._send_text(200, "Ollama is running", head=method == "HEAD")
            elif method == "GET" and path == "/api/version":
                self._send_json(200, {"version": FAKE_VERSION})
            elif method == "GET" and path in ("/api/tags", "/api/ps"):
                self._send_json(200, {"models": [self._model_entry(m) for m in server.models]})
            elif method == "POST" and path == "/api/show":
                self._show(request)
            elif method == "POST" and path in ("/api/chat", "/api/generate"):
                self._generate(path, request)
            elif method == "POST" and path in _EMBED_PATHS:
                self._embed(path, request)
            else:
                self._send_json(404, {"error": f"fake_ollama: no route for {method} {path}"})

        # -- endpoints ---------------------------------------------------------------

        def _model_entry(self, name: str) -> dict[str, Any]:
            return {
                "name": name,
                "model": name,
                "modified_at": "2024-01-01T00:00:00Z",
                "size": 1,
                "digest": hashlib.sha256(name.encode()).hexdigest(),
                "details": {"format": "gguf", "family": "fake", "parameter_size": "0B"},
            }

        def _unknown_model(self, request: dict[str, Any]) -> bool:
            model = request.get("model")
            if server.strict_models and model not in server.models:
                self._send_json(404, {"error": f"model '{model}' not found"})
                return True
            return False

        def _show(self, request: dict[str, Any]) -> None:
            if self._unknown_model(request):
                return
            self._send_json(
                200,
                {
                    "modelfile": "FROM fake",
                    "parameters": "",
                    "template": "{{ .Prompt }}",
                    "details": {"format": "gguf", "family": "fake"},
                    "model_info": {},
                    "capabilities": ["completion"],
                },
            )

        def _generate(self, path: str, request: dict[str, Any]) -> None:
            if self._unknown_model(request):
                return
            script = server._next(path)
            if script is None:
                script = server.default
            if script is None:
                self._send_json(
                    500,
                    {"error": f"fake_ollama: no scripted reply left for POST {path}"},
                )
                return
            reply = self._settle(script, request)
            if reply is None:
                return
            if isinstance(reply, str):
                reply = Reply(reply)
            messages = request.get("messages") or []
            prompt_words = _words([m.get("content", "") for m in messages if isinstance(m, dict)])
            prompt_words += _words(request.get("prompt", ""))
            counts: dict[str, Any] = {}
            if not reply.omit_counts:
                counts = {
                    "prompt_eval_count": reply.prompt_eval_count
                    if reply.prompt_eval_count is not None
                    else prompt_words,
                    "eval_count": reply.eval_count
                    if reply.eval_count is not None
                    else len(reply.content.split()),
                }
            model = request.get("model", "")
            payload: dict[str, Any]
            empty: dict[str, Any]
            if path == "/api/chat":
                payload = {"message": {"role": "assistant", "content": reply.content}}
                empty = {"message": {"role": "assistant", "content": ""}}
            else:
                payload = {"response": reply.content}
                empty = {"response": ""}
            final = {
                "model": model,
                "created_at": _now(),
                "done": True,
                "done_reason": reply.done_reason,
                "total_duration": 1_000_000,
                "load_duration": 1_000,
                "prompt_eval_duration": 10_000,
                "eval_duration": 100_000,
                **counts,
            }
            if request.get("stream", True):
                chunk = {"model": model, "created_at": _now(), "done": False, **payload}
                self._send_ndjson(200, [chunk, {**final, **empty}])
            else:
                self._send_json(200, {**final, **payload})

        def _embed(self, path: str, request: dict[str, Any]) -> None:
            if self._unknown_model(request):
                return
            script = server._next(path)
            if script is not None and self._settle(script) is None:
                return
            model = request.get("model", "")
            if path == "/api/embeddings":
                prompt = str(request.get("prompt", ""))
                self._send_json(200, {"embedding": _vector(prompt, server.embed_dim)})
                return
            raw = request.get("input", "")
            inputs = [raw] if isinstance(raw, str) else [str(x) for x in raw]
            self._send_json(
                200,
                {
                    "model": model,
                    "embeddings": [_vector(x, server.embed_dim) for x in inputs],
                    "total_duration": 1_000_000,
                    "load_duration": 1_000,
                    "prompt_eval_count": _words(inputs),
                },
            )

        def _settle(self, script: Script, request: dict[str, Any] | None = None) -> str | Reply | None:
            """Play delays, errors and hangups; return the content reply, or None if handled."""
            while isinstance(script, Delay | Computed):
                if isinstance(script, Computed):
                    script = script.reply(request or {})
                    continue
                server._wait(script.seconds)
                script = script.then
            if isinstance(script, HttpError):
                self._send_json(script.status, {"error": script.message})
                return None
            if isinstance(script, Raw):
                self._send(script.status, script.content_type, script.body)
                return None
            if isinstance(script, Hangup):
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return None
            return script

        # -- wire --------------------------------------------------------------------

        def _send(self, status: int, content_type: str, data: bytes, *, head: bool = False) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not head:
                self.wfile.write(data)
            self.wfile.flush()

        def _send_json(self, status: int, payload: Any) -> None:
            self._send(status, "application/json; charset=utf-8", json.dumps(payload).encode())

        def _send_ndjson(self, status: int, lines: Iterable[Any]) -> None:
            data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
            self._send(status, "application/x-ndjson", data)

        def _send_text(self, status: int, text: str, *, head: bool = False) -> None:
            self._send(status, "text/plain; charset=utf-8", text.encode(), head=head)

    return Handler
