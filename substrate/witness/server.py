"""A C2SP tlog-witness: its directory (key, configured logs, per-log state) and its HTTP server.

    DIR/witness.key     the witness's private key: a Go note signer key
                        (PRIVATE+KEY+name+hash+base64(0x01 || seed)), mode 0600
    DIR/witness.vkey    its cosigner verifier key (type 0x04), what logs configure
    DIR/logs            the logs it witnesses, one `<origin> <log vkey>` a line
                        (an origin may appear on several lines: one per key it
                        trusts, e.g. across a key rotation); `#` comments
    DIR/state/<h>.json  per origin (h = SHA-256 of the origin, hex): the latest
                        checkpoint it cosigned, written atomically (temp file,
                        fsync, rename, fsync of the directory) before it answers
    DIR/evidence/       requests that prove misbehaviour of a log: a validly
                        signed checkpoint whose proof does not verify, or a
                        second root for a size it cosigned (at most 100 a log)
    DIR/.lock           held while a server runs: one server per directory

A state file that cannot be read makes the witness refuse to start: treating
it as "never cosigned" would let the log roll back past it. The decisions are
`eventlog.witness.step`; this module is the I/O around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import ipaddress
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemolog.eventlog.errors import BadInput, DecodeError, SignerError, StorageError, UsageError
from mnemolog.eventlog.format.keys import SigningKey, VerifierKey, load_private_key, write_private_key
from mnemolog.eventlog.format.note import parse_note
from mnemolog.eventlog.store.fsio import FileTooLarge, atomic_write, read_regular
from mnemolog.eventlog.witness.cosignature import CosignerKey
from mnemolog.eventlog.witness.protocol import (
    MAX_REQUEST_BYTES,
    Conflict,
    Inconsistent,
    LogState,
    TooLarge,
    WitnessedLog,
    WitnessRefusal,
    cosign_response,
    parse_add_checkpoint,
    parse_checkpoint_body,
    step,
)

KEY_FILE = "witness.key"
VKEY_FILE = "witness.vkey"
LOGS_FILE = "logs"
STATE_DIR = "state"
EVIDENCE_DIR = "evidence"
MAX_EVIDENCE = 100
MAX_LOGS_FILE = 1024 * 1024
MAX_STATE_FILE = 256 * 1024
DEFAULT_LISTEN = "127.0.0.1:7380"
REQUEST_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5
MAX_CONNECTIONS = 64


def _state_name(origin: str) -> str:
    return hashlib.sha256(origin.encode()).hexdigest() + ".json"


def parse_log_spec(spec: str) -> tuple[str, VerifierKey]:
    """`ORIGIN=VKEY` from the command line."""
    origin, sep, vkey = spec.partition("=")
    if not sep or not origin or any(c.isspace() for c in origin):
        raise UsageError(f"--log takes ORIGIN=VKEY, found {spec[:80]!r}")
    try:
        return origin, VerifierKey.from_vkey(vkey)
    except SignerError as exc:
        raise UsageError(f"--log {origin}: {exc.message}") from exc


def parse_logs_file(text: str, where: str) -> list[tuple[str, VerifierKey]]:
    out: list[tuple[str, VerifierKey]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise BadInput(f"{where}:{n}: expected '<origin> <vkey>'", file=where, line=n)
        try:
            out.append((parts[0], VerifierKey.from_vkey(parts[1])))
        except SignerError as exc:
            raise BadInput(f"{where}:{n}: {exc.message}", file=where, line=n) from exc
    return out


def group_logs(pairs: Iterable[tuple[str, VerifierKey]]) -> dict[str, WitnessedLog]:
    keys: dict[str, list[VerifierKey]] = {}
    for origin, key in pairs:
        have = keys.setdefault(origin, [])
        if key not in have:
            have.append(key)
    return {o: WitnessedLog(o, tuple(ks)) for o, ks in keys.items()}


class WitnessDir:
    """The files of one witness (layout in the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.key_path = root / KEY_FILE
        self.vkey_path = root / VKEY_FILE
        self.logs_path = root / LOGS_FILE
        self.state_dir = root / STATE_DIR
        self.evidence_dir = root / EVIDENCE_DIR

    def init_key(self, name: str | None) -> tuple[CosignerKey, bool]:
        """The witness key, created on first use (`name` names a new key); (key, created)."""
        if self.key_path.exists():
            key = CosignerKey.from_skey(load_private_key(self.key_path).skey())
            if name is not None and name != key.name:
                raise UsageError(
                    f"{self.key_path} holds the key of witness {key.name!r}, not {name!r}",
                    file=str(self.key_path),
                )
            return key, False
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        signer = SigningKey.generate(name or f"mnemolog-witness/{os.urandom(4).hex()}")
        write_private_key(self.key_path, signer)
        key = CosignerKey.from_skey(signer.skey())
        atomic_write(self.vkey_path, (key.verifier.vkey() + "\n").encode())
        return key, True

    def configured_logs(self, extra: Sequence[tuple[str, VerifierKey]] = ()) -> dict[str, WitnessedLog]:
        pairs: list[tuple[str, VerifierKey]] = []
        if self.logs_path.exists():
            try:
                text = read_regular(self.logs_path, MAX_LOGS_FILE).decode("utf-8")
            except FileTooLarge as exc:
                raise BadInput(f"{self.logs_path} is larger than {MAX_LOGS_FILE} bytes") from exc
            except (OSError, UnicodeDecodeError) as exc:
                raise BadInput(f"cannot read {self.logs_path}: {exc}", file=str(self.logs_path)) from exc
            pairs.extend(parse_logs_file(text, str(self.logs_path)))
        pairs.extend(extra)
        return group_logs(pairs)

    def load_states(self) -> dict[str, LogState]:
        states: dict[str, LogState] = {}
        if not self.state_dir.exists():
            return states
        for p in sorted(self.state_dir.iterdir()):
            if p.name.startswith("."):
                continue  # an interrupted atomic write: the old file is still there
            st = self._read_state(p)
            states[st.origin] = st
        return states

    def _read_state(self, p: Path) -> LogState:
        def bad(why: str) -> StorageError:
            return StorageError(
                f"witness state {p} is unreadable ({why}); refusing to start, since forgetting what "
                "was cosigned would let a log roll back past it",
                file=str(p),
            )

        try:
            d = json.loads(read_regular(p, MAX_STATE_FILE).decode("utf-8"))
            note = parse_note(d["checkpoint"].encode(), str(p))
            body = parse_checkpoint_body(note.text)
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise bad(str(exc)) from exc
        except (DecodeError, WitnessRefusal) as exc:
            raise bad(exc.message) from exc
        if d.get("origin") != body.origin or d.get("size") != body.size or p.name != _state_name(body.origin):
            raise bad("its fields disagree with its checkpoint or its name")
        return LogState(body.origin, body.size, body.root, d["checkpoint"].encode())

    def save_state(self, st: LogState, cosigned_at: int) -> None:
        doc = {
            "origin": st.origin,
            "size": st.size,
            "cosigned_at": cosigned_at,
            "checkpoint": st.checkpoint.decode(),
        }
        self.state_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self.state_dir / _state_name(st.origin), (json.dumps(doc, indent=1) + "\n").encode())

    def save_evidence(self, origin: str, status: int, request: bytes, now: int) -> None:
        d = self.evidence_dir / hashlib.sha256(origin.encode()).hexdigest()
        with contextlib.suppress(OSError):
            if d.exists() and sum(1 for _ in d.iterdir()) >= MAX_EVIDENCE:
                return
            atomic_write(d / f"{now}-{status}-{os.urandom(4).hex()}.req", request)


class Witness:
    """One witness's state machine with its durable state: `handle` answers one request body."""

    def __init__(
        self,
        wdir: WitnessDir,
        key: CosignerKey,
        logs: dict[str, WitnessedLog],
        clock: Callable[[], int] = lambda: int(time.time()),
    ) -> None:
        self.dir = wdir
        self.key = key
        self.logs = logs
        self.clock = clock
        self.states = wdir.load_states()
        # Check, persist and answer under one lock: two requests racing on one log
        # would otherwise let the smaller one overwrite the larger (a rollback).
        self._lock = threading.Lock()

    def handle(self, data: bytes) -> tuple[int, str, bytes]:
        """(HTTP status, content type, body) for one add-checkpoint request body."""
        parsed = None
        try:
            parsed = parse_add_checkpoint(data)
            with self._lock:
                acc = step(self.logs, self.states, parsed)
                now = self.clock()
                answer = cosign_response(self.key, acc.body, now)
                self.dir.save_state(acc.state, now)
                self.states[acc.state.origin] = acc.state
            return 200, "text/plain; charset=utf-8", answer
        except WitnessRefusal as r:
            if parsed is not None and _evidence(r, parsed.request.old_size, parsed.body.size):
                self.dir.save_evidence(parsed.body.origin, r.status, data, self.clock())
            return r.status, r.content_type, r.body
        except OSError as exc:
            print(f"mnemolog witness: cannot persist state: {exc}", file=sys.stderr)
            return 500, "text/plain; charset=utf-8", b"the witness could not persist its state\n"


def _evidence(r: WitnessRefusal, old: int, size: int) -> bool:
    """A refusal of a validly signed checkpoint that proves the log misbehaved (not a stale client)."""
    if isinstance(r, Inconsistent):
        return True
    # A 409 for the witness's own size with another root: two roots for one size, a fork.
    return isinstance(r, Conflict) and old == r.latest_size == size


# -- HTTP ----------------------------------------------------------------------


def make_app(witness: Witness, request_timeout: float = REQUEST_TIMEOUT_S) -> Any:
    """The Starlette application: POST /add-checkpoint, nothing else."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    def plain(status: int, text: str) -> Response:
        return Response(text + "\n", status, media_type="text/plain; charset=utf-8")

    async def read_body(request: Request) -> bytes:
        chunks: list[bytes] = []
        total = 0
        async for chunk in request.stream():
            total += len(chunk)
            if total > MAX_REQUEST_BYTES:
                raise TooLarge(f"request larger than {MAX_REQUEST_BYTES} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def add_checkpoint(request: Request) -> Response:
        length = request.headers.get("content-length")
        if length is not None:
            if not length.isdigit() or len(length) > 12:
                return plain(400, "malformed Content-Length")
            if int(length) > MAX_REQUEST_BYTES:
                return plain(413, f"request larger than {MAX_REQUEST_BYTES} bytes")
        try:
            async with asyncio.timeout(request_timeout):
                body = await read_body(request)
        except TimeoutError:
            return plain(408, f"the request body did not arrive within {request_timeout:.0f}s")
        except TooLarge as exc:
            return plain(413, exc.message)
        status, ctype, payload = await run_in_threadpool(witness.handle, body)
        # The header as given: Starlette would append "; charset=utf-8" to any text/ media type,
        # and C2SP clients require the 409's to be exactly text/x.tlog.size.
        return Response(payload, status, headers={"Content-Type": ctype})

    return Starlette(routes=[Route("/add-checkpoint", add_checkpoint, methods=["POST"])])


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 as [ADDR]:PORT)."""
    host, sep, port_s = text.rpartition(":")
    if not sep or not port_s.isdigit() or int(port_s) > 65535:
        raise UsageError(f"--listen takes HOST:PORT, found {text!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host:
        raise UsageError(f"--listen takes HOST:PORT, found {text!r}")
    return host, int(port_s)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise StorageError(f"cannot listen on {host}:{port}: {exc}") from exc
    sock.listen(128)
    return sock


@dataclass
class Running:
    """A bound witness server: its address, and how to run or stop it."""

    witness: Witness
    sock: socket.socket
    server: Any
    lock_fd: int

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def run(self) -> None:
        try:
            self.server.run(sockets=[self.sock])
        finally:
            self.close()

    def stop(self) -> None:
        self.server.should_exit = True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(OSError):
            os.close(self.lock_fd)


def lock_dir(wdir: WitnessDir) -> int:
    wdir.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(wdir.root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise StorageError(f"another witness server is running on {wdir.root}", file=str(wdir.root)) from exc
    return fd


def prepare(
    root: Path,
    *,
    listen: str = DEFAULT_LISTEN,
    logs: Sequence[tuple[str, VerifierKey]] = (),
    name: str | None = None,
    clock: Callable[[], int] | None = None,
    request_timeout: float = REQUEST_TIMEOUT_S,
) -> Running:
    """Load (or create) the witness in `root`, bind `listen`, and return the server ready to run."""
    import uvicorn

    wdir = WitnessDir(root)
    host, port = parse_listen(listen)
    fd = lock_dir(wdir)
    try:
        key, _ = wdir.init_key(name)
        configured = wdir.configured_logs(logs)
        witness = Witness(wdir, key, configured, **({"clock": clock} if clock else {}))
        sock = bind(host, port)
    except BaseException:
        os.close(fd)
        raise
    config = uvicorn.Config(
        make_app(witness, request_timeout),
        log_level="warning",
        access_log=False,
        lifespan="off",
        limit_concurrency=MAX_CONNECTIONS,
        timeout_keep_alive=KEEP_ALIVE_S,
        h11_max_incomplete_event_size=16 * 1024,
    )
    return Running(witness, sock, uvicorn.Server(config), fd)
