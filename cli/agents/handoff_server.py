"""The server's side of the command line's hand-off (cli.handoff): a Unix socket in the home.

`mnemolog serve` of one home (not `--tenants`) also listens on
`<home>/run/serve.sock` (the directory 0700, the socket 0600) and announces
it in `<home>/run/serve.json`, which it removes on a clean exit. The socket
serves one route, `POST /cli`, which runs `store`, `recall` or `get` exactly
as the command would in process (cli.handoff.run, on the server's open
Substrate) and answers with the command's own result, which the command
prints itself: the same bytes, whether handed off or not.

It is a separate app on a separate listener: nothing of it is reachable over
TCP, and the HTTP API's guards (bearer token, scopes, the Host check) are
untouched. On the socket the caller is the home's owner (the filesystem says
so), who may do in process everything `POST /cli` does; when `[http] token`
is set, the socket asks for it too.

Announcing never stops a server: a stale announcement (a server killed
without its clean exit) is replaced, and a socket that cannot be made (a
path too long for a Unix socket, a run directory that is not a directory)
is a warning, with the server running unannounced.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from mnemolog.cli import handoff
from mnemolog.cli.agents.http_api import HttpError, HttpSettings, bearer, read_body, status_for
from mnemolog.cli.app import _os_error
from mnemolog.eventlog.errors import MnemologError
from mnemolog.eventlog.store.fsio import atomic_write
from mnemolog.substrate.api import Substrate

log = logging.getLogger("mnemolog.handoff")


def _json(doc: Any, status: int = 200, refused: bool = False) -> Response:
    # default=str as the command's own --json prints: the command re-prints these values.
    body = json.dumps(doc, ensure_ascii=False, default=str).encode("utf-8")
    headers = {handoff.REFUSED_HEADER: "refused"} if refused else None
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def _refusal(slug: str, message: str, status: int) -> Response:
    err = {"ok": False, "error": slug, "message": message, "exit_code": 64, "details": {}}
    return _json(err, status, refused=True)


class Counter:
    """How many calls of each command the socket answered (GET /cli/served: what tests and the
    bench read to know a command was handed off rather than run in process)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.served: dict[str, int] = dict.fromkeys(handoff.COMMANDS, 0)

    def add(self, command: str) -> None:
        with self.lock:
            self.served[command] += 1


def app(sub: Substrate, settings: HttpSettings, counter: Counter | None = None) -> Starlette:
    count = counter or Counter()

    async def cli(request: Request) -> Response:
        token = settings.token
        got = bearer(request)
        if token is not None and (got is None or not hmac.compare_digest(got.encode(), token.encode())):
            return _refusal("unauthorized", "the bearer token of [http] token is required", 401)
        try:
            raw = await read_body(request, settings.max_json_bytes, settings.body_timeout_s)
        except HttpError as exc:
            return _refusal(exc.slug, exc.message, status_for(exc))
        except ClientDisconnect:
            return _refusal("bad_request", "the body was cut off", 400)  # nothing ran; nobody reads it
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return _refusal("bad_request", "the body is not a JSON object", 400)
        if not isinstance(doc, dict) or doc.get("protocol") != handoff.PROTOCOL:
            return _refusal("bad_request", f"expected protocol {handoff.PROTOCOL}", 400)
        command, args = doc.get("command"), doc.get("args")
        problem = handoff.check_args(str(command), args)
        if problem is not None:
            return _refusal("bad_request", problem, 400)
        assert isinstance(command, str) and isinstance(args, dict)
        count.add(command)  # ran (a failure it reports is served as much as a result)
        try:
            data = await anyio.to_thread.run_sync(handoff.run, sub, command, args)
        except MnemologError as exc:
            return _json(exc.to_json(), status_for(exc))
        except OSError as exc:
            # As the command line maps an I/O failure nothing below caught (cli.app).
            err = _os_error(exc)
            return _json(err.to_json(), status_for(err))
        except Exception as exc:
            log.exception("handed-off %s failed", command)
            doc = {
                "ok": False,
                "error": "internal_error",
                "message": "internal error (please report)",
                "exit_code": 70,
                "details": {"type": type(exc).__name__},
            }
            return _json(doc, 500)
        return _json({"ok": True, "data": data})

    async def served(request: Request) -> Response:
        with count.lock:
            return _json({"ok": True, "served": dict(count.served), "pid": os.getpid()})

    return Starlette(routes=[Route("/cli", cli, methods=["POST"]), Route("/cli/served", served)])


def _prepare(root: Path) -> tuple[Path, Path]:
    """The run directory (made 0700, ours) and the socket's path, with any stale socket gone."""
    run_dir = root / handoff.RUN_DIR
    with contextlib.suppress(FileExistsError):
        run_dir.mkdir(mode=0o700)
    st = os.lstat(run_dir)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise OSError(f"{run_dir} is not a directory of this user")
    os.chmod(run_dir, 0o700)
    sock = run_dir / handoff.SOCKET_NAME
    if len(os.fsencode(sock)) > handoff.MAX_SOCKET_PATH:
        raise OSError(f"{sock} is longer than a Unix socket's path may be")
    (run_dir / handoff.STATE_NAME).unlink(missing_ok=True)
    # A server of this home holds its lease, so a socket left here is a dead server's.
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(sock).st_mode):
            raise OSError(f"{sock} is a directory")
        sock.unlink()
    return run_dir, sock


class Announced:
    """The socket's server (uvicorn, in a thread of its own) and the announcement."""

    def __init__(self, sub: Substrate, settings: HttpSettings, counter: Counter | None = None) -> None:
        import socket

        import uvicorn

        from mnemolog.cli.agents.http_api import MAX_CONNECTIONS, slow_client_protocol
        from mnemolog.cli.agents.mcp_server import server_version

        root = Path(os.path.realpath(sub.home.root))
        self.run_dir, self.sock_path = _prepare(root)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.listener.bind(os.fspath(self.sock_path))
            os.chmod(self.sock_path, 0o600)
            self.listener.listen(64)
        except BaseException:
            self.listener.close()
            raise
        config = uvicorn.Config(
            app(sub, settings, counter),
            log_level="warning",
            lifespan="off",
            timeout_keep_alive=5,
            http=slow_client_protocol(settings.header_timeout_s, settings.max_connections_per_peer),
            limit_concurrency=MAX_CONNECTIONS,
        )
        self.server = uvicorn.Server(config)
        # Not the main thread: uvicorn leaves the signals to the HTTP server, which stops this one.
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.listener]}, name="mnemolog-handoff", daemon=True
        )
        self.thread.start()
        while not self.server.started and self.thread.is_alive():
            self.thread.join(0.02)
        if not self.server.started:
            self.close()
            raise OSError("the command line's socket server did not start")
        self.state = {
            "protocol": handoff.PROTOCOL,
            "pid": os.getpid(),
            "home": os.fspath(root),
            "socket": os.fspath(self.sock_path),
            "version": server_version(),
            "log_id": sub.log.log_id.hex(),
        }
        atomic_write(self.run_dir / handoff.STATE_NAME, json.dumps(self.state).encode(), 0o600)

    def close(self) -> None:
        state = self.run_dir / handoff.STATE_NAME
        with contextlib.suppress(OSError, ValueError):
            # Only our own announcement: never one a later server wrote.
            if json.loads(state.read_text()).get("pid") == os.getpid():
                state.unlink()
        self.server.should_exit = True
        self.thread.join(10)
        self.listener.close()
        with contextlib.suppress(OSError):
            self.sock_path.unlink()


@contextlib.contextmanager
def announced(sub: Substrate, settings: HttpSettings) -> Iterator[Announced | None]:
    """Announce the home's command-line socket while the block runs; a failure is a warning."""
    try:
        a: Announced | None = Announced(sub, settings)
    except Exception as exc:
        log.warning("the command line cannot hand calls to this server: %s", exc)
        a = None
    try:
        yield a
    finally:
        if a is not None:
            a.close()
