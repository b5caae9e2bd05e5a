"""Progress on stderr: a bar with rate and ETA for a person, nothing for a pipe or for quick work."""

from __future__ import annotations

import io

import pytest

from mnemolog.eventlog import progress
from mnemolog.eventlog.progress import Progress, render


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_render_bar_rate_and_eta() -> None:
    line = render("verifying log", 500, 1000, 10.0)
    assert line.startswith("verifying log  [##########..........]")
    assert " 50.0%" in line and "500/1,000" in line and "50/s" in line and "ETA 0:10" in line
    assert "ETA 1:00:00" in render("x", 1, 3601, 1.0)
    assert "100.0%" in render("x", 7, 7, 1.0) and "ETA 0:00" in render("x", 7, 7, 1.0)
    assert render("indexing", 1234, None, 2.0) == "indexing  1,234  617/s  0:02"
    assert "ETA -" in render("x", 0, 10, 0.0)
    assert len(render("a very long label " * 20, 1, 2, 1.0, width=40)) <= 39


def test_quick_work_draws_nothing_and_long_work_draws_then_clears(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    out = Tty()
    p = Progress("rebuilding", 10, stream=out)
    p.advance(5)
    assert out.getvalue() == ""  # within SHOW_AFTER_S
    now[0] += progress.SHOW_AFTER_S + 0.01
    p.advance(1)
    drawn = out.getvalue()
    assert drawn.startswith("\rrebuilding  [") and "6/10" in drawn
    p.close()
    assert out.getvalue().endswith("\r\033[K")


def test_a_pipe_gets_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    p = Progress("exporting", 3, stream=out)
    now[0] = 60.0
    p.advance(3)
    p.close()
    assert out.getvalue() == "" and p.done == 3
