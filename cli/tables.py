"""Output for people: aligned tables when stdout is a terminal, plain lines otherwise.

A person at a terminal gets tables (drawn by rich, imported only then, sized
to the terminal); a pipe gets the stable one-line-per-row text scripts have
always read, and `--json` is untouched by either. The cells are the same in
both: what a row shows is decided once, here.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def to_terminal() -> bool:
    """Tables only for a person: stdout a TTY (MNEMOLOG_PLAIN or TERM=dumb ask for plain lines)."""
    if os.environ.get("MNEMOLOG_PLAIN") or os.environ.get("TERM") == "dumb":
        return False
    return sys.stdout.isatty()


def date(us: int | None) -> str:
    if us is None:
        return "-"
    return dt.datetime.fromtimestamp(us / 1e6, dt.UTC).strftime("%Y-%m-%d %H:%M")


def flags(m: Mapping[str, Any]) -> list[str]:
    out = []
    if m.get("archived_at"):
        out.append("archived")
    if m.get("atomised_into"):
        out.append(f"atomised:{m['atomised_into']}")
    if m.get("atomisation_archived_at"):
        out.append("atomisation-archived")
    if m.get("atom_of"):
        out.append(f"atom-of:{m['atom_of']}")
    if m.get("status", "active") != "active":
        out.append(str(m["status"]))
    if m.get("project"):
        out.append(f"project:{m['project']}")
    out.extend(f"domain:{d}" for d in m.get("domains") or ())
    return out


def clip(text: str, width: int = 80) -> str:
    """``text`` cut to ``width`` characters, the cut marked with "..."."""
    return text if len(text) <= width else text[: width - 3] + "..."


def one_line(text: str, width: int = 80) -> str:
    """``text`` with its white space (line breaks too) folded to single spaces, clipped."""
    return clip(" ".join(text.split()), width)


def title_of(m: Mapping[str, Any], limit: int = 80) -> str:
    lines = str(m.get("content") or "").strip().splitlines()
    return clip(m.get("title") or (lines[0] if lines else ""), limit)


def memory_line(m: Mapping[str, Any]) -> str:
    score = f"{m['score']:7.3f}  " if "score" in m else ""
    fl = flags(m)
    tail = f" [{', '.join(fl)}]" if fl else ""
    return f"{score}{m['id']}  {m['namespace']:<16} {m['kind']:<11} {title_of(m)}{tail}"


def _render(draw: Callable[[Any], None]) -> str:
    """What rich draws, as text (with colour when the terminal has it)."""
    from rich.console import Console

    real = Console()  # the terminal's width and colours
    buf = io.StringIO()
    console = Console(
        file=buf, width=real.width, force_terminal=True, color_system="auto" if real.color_system else None
    )
    draw(console)
    return buf.getvalue().rstrip("\n")


def memories(rows: Sequence[Mapping[str, Any]], empty: str) -> str:
    if not rows:
        return empty
    if not to_terminal():
        return "\n".join(memory_line(m) for m in rows)
    from rich import box
    from rich.console import Console
    from rich.table import Table

    scored = any("score" in m for m in rows)
    wide = Console().width >= 120
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, expand=False)
    if scored:
        t.add_column("score", justify="right", style="cyan", no_wrap=True, min_width=6)
    t.add_column("id", no_wrap=True, style="dim", min_width=26)
    t.add_column("namespace", no_wrap=True, max_width=20, overflow="ellipsis")
    t.add_column("kind", no_wrap=True, min_width=11)
    t.add_column("title", overflow="ellipsis", no_wrap=True, ratio=1, min_width=12)
    if wide:
        t.add_column("created", no_wrap=True, style="dim")
    flagged = any(flags(m) for m in rows)
    if flagged:
        t.add_column("flags", style="yellow", no_wrap=True)
    for m in rows:
        cells = [m["id"], m["namespace"], m["kind"], title_of(m, 200)]
        if wide:
            cells.append(date(m.get("created_at")))
        if flagged:
            cells.append(", ".join(flags(m)))
        t.add_row(*([f"{m['score']:.3f}"] if scored else []), *cells)
    return _render(lambda c: c.print(t))


STAT_KEYS = (
    "memories",
    "visible",
    "archived_by_operator",
    "atomised_parents",
    "atoms",
    "links",
    "namespaces",
    "policies",
)


def stats(st: Mapping[str, Any]) -> str:
    rows: list[tuple[str, str]] = [("log", f"{st['log']['size']} entries (log id {st['log']['log_id']})")]
    rows += [(k, str(st[k])) for k in STAT_KEYS if k in st]
    if "atomisation" in st:
        a = st["atomisation"]
        rows.append(
            (
                "atomisation",
                f"requested {a['requested']}, completed {a['completed']}, failed {a['failed']}, "
                f"pending {a['pending']}",
            )
        )
    if "knowledge" in st:
        k = st["knowledge"]
        for name in ("statuses", "candidates", "interactions"):
            rows.append((name, ", ".join(f"{n} {c}" for n, c in k[name].items())))
    events = st.get("events", {})
    if not to_terminal():
        lines = [f"{k:<12} {v}" for k, v in rows]
        lines.append("events       " + ", ".join(f"{k} {v}" for k, v in events.items()))
        return "\n".join(lines)
    from rich import box
    from rich.table import Table

    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_header=False)
    t.add_column("", style="bold")
    t.add_column("", justify="right")
    for k, v in rows:
        t.add_row(k.replace("_", " "), v)
    e = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="events", title_justify="left")
    e.add_column("type")
    e.add_column("count", justify="right")
    for k, v in events.items():
        e.add_row(k, f"{v:,}")

    def draw(c: Any) -> None:
        c.print(t)
        c.print(e)

    return _render(draw)
