"""The periodic checkpointer: a long-lived writer publishes a checkpoint without being asked.

Cutting acknowledged entries off a log behind a live writer (at an entry
boundary, so the bytes still parse) is only visible against something
signed that covers them. A writer that checkpoints only at close leaves
every entry since its last checkpoint exposed for as long as it runs; this
thread bounds the window: once `max_entries` acknowledged entries, or
`max_seconds` since the oldest uncovered one, are not covered by a
checkpoint, it signs one. It runs beside the appends and never blocks them
beyond the writer lock the checkpoint itself takes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from mnemolog.eventlog.errors import MnemologError, VerificationError
from mnemolog.eventlog.store.checkpoints import CheckpointPolicy

RETRY_S = 1.0  # after a failed checkpoint (a full disk, a lock timeout), try again this much later


class PeriodicCheckpointer:
    def __init__(
        self,
        policy: CheckpointPolicy,
        checkpoint: Callable[[], int],
        warn: Callable[[str], None],
        covered: int,
    ) -> None:
        self.policy = policy
        self._checkpoint = checkpoint  # signs and stores one; returns its size
        self._warn = warn
        self._cond = threading.Condition()
        self._acked = covered
        self._covered = covered
        self._oldest: float | None = None  # when the oldest uncovered entry was acknowledged
        self._stop = False
        self._not_before = 0.0
        self._thread = threading.Thread(target=self._run, name="mnemolog-checkpointer", daemon=True)
        self._thread.start()

    def appended(self, size: int) -> None:
        """The log now holds `size` acknowledged entries."""
        with self._cond:
            if size <= self._acked:
                return
            self._acked = size
            if self._oldest is None:
                self._oldest = time.monotonic()
                self._cond.notify()
            elif size - self._covered >= self.policy.max_entries:
                self._cond.notify()

    def covered(self, size: int) -> None:
        """A checkpoint of `size` exists (made by this thread or anyone else)."""
        with self._cond:
            if size <= self._covered:
                return
            self._covered = size
            self._oldest = None if size >= self._acked else time.monotonic()

    def _due(self, now: float) -> float | None:
        """0 when a checkpoint is due, else how long until one may be; None: nothing uncovered."""
        if self._oldest is None or self._acked <= self._covered:
            return None
        wait = max(self._oldest + self.policy.max_seconds - now, self._not_before - now)
        if self._acked - self._covered >= self.policy.max_entries:
            wait = self._not_before - now
        return max(wait, 0.0)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stop:
                    due = self._due(time.monotonic())
                    if due == 0.0:
                        break
                    self._cond.wait(due)
                if self._stop:
                    return
            try:
                self.covered(self._checkpoint())
            except VerificationError as exc:
                # The log diverged from what this writer acknowledged: it never signs again.
                self._warn(f"periodic checkpoint refused: {exc.message}")
                return
            except MnemologError as exc:
                self._warn(f"periodic checkpoint failed (retrying in {RETRY_S:.0f}s): {exc.message}")
                with self._cond:
                    self._not_before = time.monotonic() + RETRY_S
            except Exception as exc:  # pragma: no cover - never let the thread die silently
                self._warn(f"periodic checkpoint failed: {exc!r}")
                with self._cond:
                    self._not_before = time.monotonic() + RETRY_S

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join()
