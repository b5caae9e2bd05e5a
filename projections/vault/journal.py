"""The journal: one Markdown file per day of interactions, `journal/YYYY-MM/YYYY-MM-DD.md`.

A day (UTC) with at least one captured interaction gets a file in the
Atomic Agents journal shape:

    # 2026-05-06 — mnemolog journal

    ## What happened
    - 09:14 UTC · p06-polisher · `01JX…`: how do we calibrate? → Preston kp from ...
    ## Decisions made
    - decision_vendor_path.md — Twyman-Green preferred
    ## Captured to memory
    - decision_vendor_path.md — Twyman-Green preferred
    ## Open questions
    - candidate 01JY… (needs a person): ...

"Captured to memory" is the bridge from the episodic journal to memory: the
memories promoted from that day's interactions, each by its note's file
name (or its id when it has no note) and a one-line summary. "Decisions
made" lists those of kind decision; "Open questions" the candidates from
that day still waiting for a person. Each section's list is a managed
region (`regions`), so a person's notes around them survive re-renders.
Pure: `plan_journal` returns each day's skeleton and region contents.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Final

from mnemolog.projections.vault import regions

SECTIONS: Final = ("What happened", "Decisions made", "Captured to memory", "Open questions")
PATH_RE: Final = re.compile(r"journal/(\d{4}-\d{2})/(\d{4}-\d{2}-\d{2})\.md")
_ONE_LINE = 160


def region_name(section: str) -> str:
    return "journal." + re.sub(r"[^a-z0-9]+", "_", section.lower()).strip("_")


@dataclass(frozen=True)
class InteractionRow:
    id: str
    ts: int  # µs since the epoch
    prompt: str
    response: str
    project: str = ""
    client: str = ""


@dataclass(frozen=True)
class CapturedRow:
    """A memory promoted from an interaction."""

    interaction_id: str
    memory_id: str
    kind: str
    summary: str
    note: str | None = None


@dataclass(frozen=True)
class OpenQuestion:
    """A candidate from an interaction that waits for a person."""

    interaction_id: str
    candidate_id: str
    summary: str


def day_of(ts_us: int) -> date:
    return datetime.fromtimestamp(ts_us / 1e6, UTC).date()


def path_of(day: date) -> str:
    return f"journal/{day:%Y-%m}/{day.isoformat()}.md"


def _one_line(text: str) -> str:
    return regions.one_line(text, _ONE_LINE)


def skeleton(day: date, agent: str) -> str:
    out = [f"# {day.isoformat()} — {agent} journal\n"]
    for s in SECTIONS:
        out.append(f"\n## {s}\n")
        out.append(regions.block(region_name(s), ""))
    return "".join(out)


def _captured_line(c: CapturedRow) -> str:
    name = c.note or f"memory {c.memory_id}"
    return f"- {name} — {_one_line(c.summary)}\n"


def plan_journal(
    agent: str,
    interactions: Sequence[InteractionRow],
    captured: Sequence[CapturedRow] = (),
    questions: Sequence[OpenQuestion] = (),
) -> dict[str, tuple[str, dict[str, str]]]:
    """For each day with interactions: its path -> (skeleton, {region: content})."""
    day_by_interaction = {i.id: day_of(i.ts) for i in interactions}
    days: dict[date, dict[str, str]] = {}
    for i in sorted(interactions, key=lambda i: (i.ts, i.id)):
        d = day_by_interaction[i.id]
        regs = days.setdefault(d, {region_name(s): "" for s in SECTIONS})
        when = datetime.fromtimestamp(i.ts / 1e6, UTC).strftime("%H:%M UTC")
        where = "".join(f" · {x}" for x in (i.project, i.client) if x)
        regs[region_name("What happened")] += (
            f"- {when}{where} · `{i.id}`: {_one_line(i.prompt)} → {_one_line(i.response)}\n"
        )
    for c in sorted(captured, key=lambda c: (c.note is None, c.note or "", c.memory_id)):
        cday = day_by_interaction.get(c.interaction_id)
        if cday is None:
            continue
        line = _captured_line(c)
        days[cday][region_name("Captured to memory")] += line
        if c.kind == "decision":
            days[cday][region_name("Decisions made")] += line
    for q in sorted(questions, key=lambda q: q.candidate_id):
        qday = day_by_interaction.get(q.interaction_id)
        if qday is not None:
            days[qday][region_name("Open questions")] += (
                f"- candidate `{q.candidate_id}` (needs a person): {_one_line(q.summary)}\n"
            )
    return {path_of(d): (skeleton(d, agent), regs) for d, regs in sorted(days.items())}


# -- validation ---------------------------------------------------------------

Finding = tuple[str, str, str]
_CAPTURED_ITEM = re.compile(r"- `?([^`\s]+\.md)`?\s+—")


def check_journal(rel: str, text: str, notes: set[str]) -> list[Finding]:
    """Rules for one journal file (`rel` relative to the agent directory; `notes`: existing .md names)."""
    out: list[Finding] = []
    m = PATH_RE.fullmatch(rel)
    if m is None:
        return [("filename", "expected journal/YYYY-MM/YYYY-MM-DD.md", "error")]
    try:
        day = date.fromisoformat(m.group(2))
    except ValueError:
        return [("filename", f"{m.group(2)} is not a real calendar date", "error")]
    if m.group(1) != f"{day:%Y-%m}":
        out.append(("filename", f"a {day:%Y-%m} day filed under {m.group(1)}/", "error"))
    first = text.split("\n", 1)[0]
    if not first.startswith(f"# {day.isoformat()}"):
        out.append(("title", f"expected a first line starting with '# {day.isoformat()}'", "error"))
    out += regions.check_regions(text)
    section = None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        elif section == "Captured to memory":
            cm = _CAPTURED_ITEM.match(line)
            if cm and cm.group(1) not in notes:
                what = f"names {cm.group(1)}, which is in neither memory/ nor wiki/"
                out.append(("captured", what, "warning"))
    return out
