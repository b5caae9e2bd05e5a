"""A real C2SP tlog-witness on 127.0.0.1 for tests: the production server, in a thread.

Usage::

    with WitnessServer(tmp_path / "w", logs=[(origin, log_vkey)]) as w:
        w.url, w.vkey          # where it listens, its cosigner key
        w.stop() / w.start()   # take it down and bring it back on the same port
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from mnemolog.eventlog.format.keys import VerifierKey
from mnemolog.substrate.witness import server as ws


class WitnessServer:
    def __init__(
        self,
        root: Path,
        logs: Sequence[tuple[str, VerifierKey]] = (),
        *,
        name: str = "witness.test/w1",
        port: int = 0,
        request_timeout: float = ws.REQUEST_TIMEOUT_S,
    ) -> None:
        self.root = root
        self.logs = list(logs)
        self.name = name
        self.port = port
        self.request_timeout = request_timeout
        self._running: ws.Running | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> WitnessServer:
        r = ws.prepare(
            self.root,
            listen=f"127.0.0.1:{self.port}",
            logs=self.logs,
            name=self.name,
            request_timeout=self.request_timeout,
        )
        self.port = r.sock.getsockname()[1]
        self._running = r
        self._thread = threading.Thread(target=r.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not r.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("witness server did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        if self._running is not None and self._thread is not None:
            self._running.stop()
            self._thread.join(10)
            self._running = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def vkey(self) -> str:
        return (self.root / ws.VKEY_FILE).read_text().strip()

    @property
    def witness(self) -> ws.Witness:
        assert self._running is not None
        return self._running.witness

    def __enter__(self) -> WitnessServer:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
