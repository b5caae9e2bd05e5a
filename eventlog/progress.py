"""Progress on stderr for long work, shown only when a person is watching (a TTY)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        stream: TextIO | None = None,
        enabled: bool | None = None,
    ) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.label = label
        self.total = total
        self.done = 0
        self._start = time.monotonic()
        self._last = 0.0
        self._shown = False

    def advance(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < 0.1:
            return
        self._last = now
        rate = self.done / max(now - self._start, 1e-9)
        if self.total:
            pct = 100.0 * self.done / self.total
            msg = f"\r{self.label}: {self.done:,}/{self.total:,} ({pct:5.1f}%) {rate:,.0f}/s"
        else:
            msg = f"\r{self.label}: {self.done:,} {rate:,.0f}/s"
        self.stream.write(msg)
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
