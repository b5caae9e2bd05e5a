"""Slow segment writes for the crash and reader tests, installed in a child process by the test itself.

`install(chunk, pause)` replaces the writer's `write_all` (imported from fsio) so that each batch
reaches the segment in pieces of `chunk` bytes with `pause` seconds between
them: kills then land inside writes, and readers poll half-written entries.
Production code reads no test switch; the child opts in by calling this.
"""

from __future__ import annotations

import os
import time

from mnemolog.eventlog.store import writer


def install(chunk: int, pause: float) -> None:
    if chunk <= 0:
        return

    def slow_write_all(fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(fd, view[:chunk])
            view = view[n:]
            if view:
                time.sleep(pause)

    # Fail loudly if the writer stops calling a module-level write_all: a silent no-op here
    # is how the crash tests once stopped landing kills inside writes.
    if not callable(getattr(writer, "write_all", None)):
        raise RuntimeError("mnemolog.eventlog.store.writer has no write_all to slow down")
    writer.write_all = slow_write_all


def install_from_env() -> None:
    """For child scripts: the test passes the chunk and pause in TEST_WRITE_CHUNK / TEST_WRITE_PAUSE."""
    install(int(os.environ.get("TEST_WRITE_CHUNK") or 0), float(os.environ.get("TEST_WRITE_PAUSE") or 0))
