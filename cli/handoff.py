"""The command line's hand-off: `store`, `recall` and `get` run by a `mnemolog serve` of the same home.

A short command spends most of its CPU starting up: importing DuckDB, numpy
and the models, opening the projections, loading the embedder to embed one
query. A running `mnemolog serve` holds all of that already, so when one
serves the home, these commands send it the call and print its answer, and
otherwise work in process as always.

How a server is found (the server's side is cli.agents.handoff_server):

    <home>/run/            a directory, mode 0700
    <home>/run/serve.sock  a Unix domain socket, mode 0600: the command line's door
    <home>/run/serve.json  the announcement: protocol, pid, home, socket, version, log id

Filesystem permissions are the access control: only the home's owner can
reach the socket, as only the home's owner can open the home; nothing of it
is on the network. When config.toml sets `[http] token`, the command line
sends it, so the socket asks no less than the HTTP API does.

This module is standard library only, and everything here happens before the
command imports the substrate: a command with no server to hand to pays one
`stat`. Any doubt (no announcement, a malformed or foreign one, a dead pid, a
refused connection, another protocol, a refusal before the call ran) means
falling back to work in process, never an error. A write is the exception
once sent: the server may have written it, so the command says so (exit 6)
rather than write it a second time.

Off with `MNEMOLOG_HANDOFF=0` or `[cli] handoff = false` in config.toml.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mnemolog.eventlog.errors import MnemologError, StorageError
from mnemolog.substrate.paths import default_home

if TYPE_CHECKING:
    from mnemolog.substrate.api import Substrate

#: The wire format's number: the announcement and every request carry it; any other is not ours.
PROTOCOL = 1
RUN_DIR = "run"
STATE_NAME = "serve.json"
SOCKET_NAME = "serve.sock"
ENV = "MNEMOLOG_HANDOFF"
#: An announcement is a few hundred bytes; anything bigger is not one.
MAX_STATE_BYTES = 4096
#: Connecting to a local socket takes microseconds or is refused at once; a full backlog waits.
CONNECT_TIMEOUT_S = 0.5
#: How long the answer may take (a store may wait for the log's lock, a recall for the embedder).
ANSWER_TIMEOUT_S = 120.0
#: Refusals the server makes before anything runs (the response says so in this header).
REFUSED_HEADER = "X-Mnemolog-Handoff"
#: Linux's sun_path holds 108 bytes and macOS's 104, each with its terminating NUL.
MAX_SOCKET_PATH = 103

#: command -> (the Substrate method, the arguments it takes, those sent as lists and taken as tuples).
COMMANDS: dict[str, tuple[str, frozenset[str], frozenset[str]]] = {
    "store": (
        "store",
        frozenset(
            {"content", "namespace", "kind", "title", "tags", "metadata", "source", "confidence",
             "project", "domains", "memory_id", "occurred_at"}
        ),
        frozenset({"tags", "domains"}),
    ),
    "get": ("get", frozenset({"memory_id"}), frozenset()),
    "recall": (
        "recall_report",
        frozenset(
            {"query", "limit", "namespace", "descendants", "kinds", "tags", "include_archived",
             "include_expired", "statuses", "project", "domains", "mode", "explain", "min_score", "as_of"}
        ),
        frozenset({"kinds", "tags", "statuses", "domains"}),
    ),
}  # fmt: skip
#: Commands that write: once such a request is sent, it is never run a second time in process.
WRITES = frozenset({"store"})


def run(sub: Substrate, command: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """Run one command's call on an open Substrate: what the command does in process, and what
    the server does for a handed-off one (the same function, so both answer alike)."""
    method, _, tuples = COMMANDS[command]
    kw: dict[str, Any] = {k: tuple(v) if k in tuples else v for k, v in args.items()}
    if command == "get":
        return dict(sub.get(kw["memory_id"]))
    if command == "store":
        content = kw.pop("content")
        return dict(sub.store(content, **kw))
    query = kw.pop("query")
    return dict(getattr(sub, method)(query, **kw))


def check_args(command: str, args: Any) -> str | None:
    """What is wrong with a request's arguments (unknown command or names, wrong shapes), or None."""
    if command not in COMMANDS:
        return f"unknown command {command!r}"
    _, names, tuples = COMMANDS[command]
    if not isinstance(args, dict):
        return "args must be an object"
    unknown = sorted(set(args) - names)
    if unknown:
        return f"unknown argument(s) {unknown}"
    required = {"store": "content", "get": "memory_id", "recall": "query"}[command]
    if not isinstance(args.get(required), str):
        return f"{required} must be text"
    for k in tuples & set(args):
        if not isinstance(args[k], list) or not all(isinstance(x, str) for x in args[k]):
            return f"{k} must be a list of text"
    return None


# -- the client ----------------------------------------------------------------------------------


class HandedOffError(MnemologError):
    """A failure the server reported, raised here as it would have been in process (same slug,
    exit code, message and details)."""

    def __init__(self, slug: str, exit_code: int, message: str, details: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.slug = slug  # type: ignore[misc]
        self.exit_code = exit_code  # type: ignore[misc]
        self.details = dict(details)


@dataclass(frozen=True)
class Announcement:
    pid: int
    socket: str
    token: str | None


def disabled_by_env() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("0", "false", "no", "off")


def home_root(home_arg: str | None, tenant: str | None) -> str | None:
    """The home a command works on, as substrate.home resolves it; None for a tenant's home
    (found through its tenant root; tenant servers do not announce) or an empty --home (an error
    the in-process command reports)."""
    if tenant is not None or home_arg == "":
        return None
    return home_arg or str(default_home())


def _ours(st: os.stat_result, kind: int) -> bool:
    return stat.S_IFMT(st.st_mode) == kind and st.st_uid == os.getuid()


def _read_small(path: str, limit: int) -> bytes | None:
    """A regular file of ours, at most `limit` bytes, read without following a link or blocking."""
    try:
        st = os.lstat(path)
        if not _ours(st, stat.S_IFREG) or st.st_size > limit:
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not _ours(os.fstat(fd), stat.S_IFREG):
            return None
        data = os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def _config(root: str) -> tuple[bool, str | None]:
    """`[cli] handoff` (default true) and `[http] token` of the home's config.toml.

    A config this cannot read is left to the in-process command, which reports it.
    """
    import tomllib

    raw = _read_small(os.path.join(root, "config.toml"), 1024 * 1024)
    if raw is None:
        return False, None
    try:
        conf = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False, None
    cli_table, http_table = conf.get("cli", {}), conf.get("http", {})
    if not isinstance(cli_table, dict) or not isinstance(http_table, dict):
        return False, None
    on = cli_table.get("handoff", True)
    token = http_table.get("token")
    return on is True, token if isinstance(token, str) and token else None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:  # none, or another user's process: not a server of this home
        return False
    return True


def find(root: str) -> Announcement | None:
    """The server announced for the home at `root`, if one plausibly runs; else None."""
    run_dir = os.path.join(root, RUN_DIR)
    state = _read_small(os.path.join(run_dir, STATE_NAME), MAX_STATE_BYTES)
    if state is None:
        return None
    try:
        real = os.path.realpath(root)
        st = os.lstat(run_dir)
        doc = json.loads(state.decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not _ours(st, stat.S_IFDIR) or st.st_mode & 0o077 or not isinstance(doc, dict):
        return None
    pid, sock, home = doc.get("pid"), doc.get("socket"), doc.get("home")
    expected = os.path.join(real, RUN_DIR, SOCKET_NAME)
    if (
        doc.get("protocol") != PROTOCOL
        or not isinstance(pid, int)
        or isinstance(pid, bool)
        or pid <= 0
        or home != real
        or sock != expected
    ):
        return None
    try:
        if not _ours(os.lstat(sock), stat.S_IFSOCK):
            return None
    except OSError:
        return None
    if not _pid_alive(pid):
        return None
    on, token = _config(root)
    return Announcement(pid, sock, token) if on else None


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=ANSWER_TIMEOUT_S)
        self.path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(CONNECT_TIMEOUT_S)
            s.connect(self.path)
            s.settimeout(ANSWER_TIMEOUT_S)
        except BaseException:
            s.close()
            raise
        self.sock = s


def _internal(type_name: str) -> Exception:
    """The server's internal error, as an exception of the same name (the CLI names the type)."""
    name = type_name if type_name.isidentifier() else "Exception"
    made: Exception = type(name, (Exception,), {})()
    return made


def call(
    home_arg: str | None, tenant: str | None, command: str, args: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The command's result from a running server of the home, or None: work in process.

    Raises the server's error as the command would have raised it in process.
    """
    if disabled_by_env():
        return None
    root = home_root(home_arg, tenant)
    if root is None:
        return None
    ann = find(root)
    if ann is None:
        return None
    body = json.dumps({"protocol": PROTOCOL, "command": command, "args": dict(args)}).encode("utf-8")
    headers = {"Content-Type": "application/json", "Host": "localhost"}
    if ann.token is not None:
        headers["Authorization"] = f"Bearer {ann.token}"
    conn = _UnixConnection(ann.socket)
    try:
        try:
            conn.request("POST", "/cli", body=body, headers=headers)
        except (OSError, http.client.HTTPException):
            # Not sent whole: the server cannot have run it (a cut body is refused).
            return None
        try:
            resp = conn.getresponse()
            raw = resp.read()
            # Refused before anything ran (a token, a protocol, a bound; or uvicorn's own 503
            # when every connection slot is taken, sent before the app is called): in process.
            refused = resp.getheader(REFUSED_HEADER) == "refused" or (
                resp.status == 503 and resp.getheader("content-type", "").startswith("text/plain")
            )
            if refused:
                return None
            doc = json.loads(raw.decode("utf-8"))
            if not isinstance(doc, dict):
                raise ValueError("not an object")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if command in WRITES:
                raise StorageError(
                    f"the running server (pid {ann.pid}) took the {command} but gave no answer "
                    f"({type(exc).__name__}); it may have been written: look before trying again "
                    f"(or set {ENV}=0 to work in process)",
                    pid=ann.pid,
                ) from exc
            return None
    finally:
        conn.close()
    return _answer(doc)


def _answer(doc: dict[str, Any]) -> dict[str, Any]:
    if doc.get("ok") is True and isinstance(doc.get("data"), dict):
        data: dict[str, Any] = doc["data"]
        return data
    details = doc.get("details")
    details = details if isinstance(details, dict) else {}
    if doc.get("error") == "internal_error":
        raise _internal(str(details.get("type", "Exception")))
    slug, code, message = doc.get("error"), doc.get("exit_code"), doc.get("message")
    if not isinstance(slug, str) or not isinstance(code, int) or not isinstance(message, str):
        raise _internal("BadHandoffAnswer")
    raise HandedOffError(slug, code, message, details)
