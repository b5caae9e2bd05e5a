"""Progress on stderr for long work, shown only when a person is watching (a TTY).

A bar with the count, the rate and, when the total is known, the time left:

    verifying log  [##########..........]  51.2%  512,000/1,000,000  48,211/s  ETA 0:10

Nothing is drawn for work that finishes within SHOW_AFTER_S (a store does
not flash a bar), nothing at all when stderr is not a terminal, and the
line is cleared when the work is done. Standard library only: the offline
verifier shows it too.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO

SHOW_AFTER_S = 0.5
REDRAW_S = 0.1
BAR = 20


def _clock(seconds: float) -> str:
    s = max(0, round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def render(label: str, done: int, total: int | None, elapsed: float, width: int = 100) -> str:
    """One progress line (pure: a function of the counts and the time taken)."""
    rate = done / elapsed if elapsed > 0 else 0.0
    if total:
        frac = min(1.0, done / total)
        filled = round(frac * BAR)
        bar = "#" * filled + "." * (BAR - filled)
        left = (total - done) / rate if rate > 0 and done < total else 0.0
        eta = f"ETA {_clock(left)}" if rate > 0 else "ETA -"
        line = f"{label}  [{bar}]  {100 * frac:5.1f}%  {done:,}/{total:,}  {rate:,.0f}/s  {eta}"
    else:
        line = f"{label}  {done:,}  {rate:,.0f}/s  {_clock(elapsed)}"
    return line[: max(10, width - 1)]


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
        elapsed = now - self._start
        if elapsed < SHOW_AFTER_S or now - self._last < REDRAW_S:
            return
        self._last = now
        width = shutil.get_terminal_size((100, 20)).columns
        self.stream.write("\r" + render(self.label, self.done, self.total, elapsed, width) + "\033[K")
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
