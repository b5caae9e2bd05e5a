"""Persona files: IDENTITY.md, SOUL.md, USER.md, tools.md and model.md of an agent folder.

Each file has the Atomic Agents section skeleton; under every section
mnemolog keeps one managed region (`regions`), filled from memories
promoted to persona and from the home's configuration. A new file is the
whole skeleton; an existing one only has its regions brought up to date,
so whatever a person wrote outside them (and any region they edited) stays.

Where a promoted memory goes: its own target when it names one
(`PersonaItem.file` and `section`), else by kind: `user` to USER.md's
"Role and context", `feedback` to SOUL.md's "Things I've learned about how
to advise / serve the operator", anything else to IDENTITY.md's "Operating
doctrine". Within a region items are ordered by promotion date, then id.
Configuration fills model.md (the model curators and extractors use, the
context budget) and tools.md (where the agent reads and writes, the Ollama
endpoint). Pure: `plan_persona` returns each file's skeleton text and the
content of every region; `agentfiles` does the I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Final

from mnemolog.projections.vault import regions

#: (file, title template, [(section, hint)]) in the format's order (docs/context.md §10);
#: {agent} is the agent's name.
SKELETONS: Final = (
    (
        "IDENTITY.md",
        "IDENTITY — {agent}",
        (
            ("Who I am", "one paragraph"),
            ("Mission", "one sentence: what the agent is optimized to do"),
            ("Scope", "bullets: what is in scope, what is out of scope"),
            ("Operating doctrine", "bullets: the principles that shape judgment"),
            ("Autonomy ladder", "Internal / External / Earned autonomy"),
            ("What I'm NOT", "bullets: explicit boundaries"),
        ),
    ),
    (
        "SOUL.md",
        "SOUL — {agent}",
        (
            ("Voice", "one paragraph: communication style"),
            ("Posture", "bullets: emotional and relational stance"),
            ("Evolution discipline", "bullets: meta-rules about how SOUL itself grows"),
            ("Things I've learned about how to advise / serve the operator", "accumulating list"),
        ),
    ),
    (
        "USER.md",
        "USER — the operator",
        (
            ("Role and context", "bullets"),
            ("Communication preferences", "bullets"),
            ("Domain-specific preferences", "bullets: the slice relevant to this agent's job"),
            ("Things to avoid", "bullets: hard nos"),
        ),
    ),
    (
        "tools.md",
        "TOOLS — {agent}",
        (
            ("Read paths", "absolute paths"),
            ("Write paths (own folder ONLY)", "absolute paths"),
            ("External APIs", "API name: what for, key location"),
            ("Hard NOs", "actions"),
        ),
    ),
    (
        "model.md",
        "MODEL — {agent}",
        (
            ("Default model", "full model id, and why"),
            ("Fallback", "full model id, and when it fires"),
            ("Token budget", "max system prompt, max output per turn, daily cap"),
            ("Prompt caching", "strategy notes"),
            ("Cost guardrail", "what happens when the daily cap is hit"),
        ),
    ),
)
PERSONA_FILES: Final = tuple(f for f, _, _ in SKELETONS)
DEFAULT_TARGETS: Final = {
    "user": ("USER.md", "Role and context"),
    "feedback": ("SOUL.md", "Things I've learned about how to advise / serve the operator"),
}
FALLBACK_TARGET: Final = ("IDENTITY.md", "Operating doctrine")


def region_name(file: str, section: str) -> str:
    """`user.role_and_context` for USER.md's "Role and context"."""
    stem = file.rsplit(".", 1)[0].lower()
    slug = ""
    for word in re.sub(r"[^a-z0-9]+", " ", section.lower()).split():
        if len(slug) + len(word) + 1 > 48:
            break
        slug = f"{slug}_{word}" if slug else word
    return f"{stem}.{slug}"


def sections_of(file: str) -> tuple[str, ...]:
    for f, _, secs in SKELETONS:
        if f == file:
            return tuple(s for s, _ in secs)
    raise KeyError(file)


@dataclass(frozen=True)
class PersonaItem:
    """A memory promoted to persona."""

    memory_id: str
    kind: str
    text: str
    promoted: date
    note: str | None = None  # the note's file name in memory/, when it has one
    file: str | None = None
    section: str | None = None

    def target(self) -> tuple[str, str]:
        if self.file in PERSONA_FILES and self.section in sections_of(self.file):
            return self.file, self.section
        return DEFAULT_TARGETS.get(self.kind, FALLBACK_TARGET)


@dataclass(frozen=True)
class PersonaConfig:
    """What the home's configuration says about the agent."""

    model: str | None = None
    model_note: str | None = None
    fallback_model: str | None = None
    context_budget: str | None = None
    read_paths: Sequence[str] = ()
    write_paths: Sequence[str] = ()
    apis: Sequence[str] = ()
    hard_nos: Sequence[str] = field(default_factory=tuple)


def _one_line(text: str) -> str:
    return regions.one_line(text, 300)


def _item_line(it: PersonaItem) -> str:
    where = f" from {it.note}" if it.note else f" from memory {it.memory_id}"
    return f"- {_one_line(it.text)} (promoted {it.promoted.isoformat()}{where})\n"


def skeleton(file: str, agent: str) -> str:
    """A new persona file: title, sections, a hint for the person and one empty region per section."""
    for f, title, secs in SKELETONS:
        if f == file:
            out = [f"# {title.format(agent=agent)}\n"]
            for section, hint in secs:
                out.append(f"\n## {section}\n<!-- {hint} -->\n")
                out.append(regions.block(region_name(file, section), ""))
            return "".join(out)
    raise KeyError(file)


def plan_persona(
    agent: str, items: Sequence[PersonaItem], config: PersonaConfig
) -> dict[str, tuple[str, dict[str, str]]]:
    """For each persona file: (its skeleton, {region name: content})."""
    contents: dict[str, dict[str, str]] = {
        f: {region_name(f, s): "" for s in sections_of(f)} for f in PERSONA_FILES
    }
    for it in sorted(items, key=lambda i: (i.promoted, i.memory_id)):
        f, s = it.target()
        contents[f][region_name(f, s)] += _item_line(it)

    def put(file: str, section: str, lines: Sequence[str]) -> None:
        contents[file][region_name(file, section)] += "".join(f"{line}\n" for line in lines)

    if config.model:
        note = config.model_note or "configured in the mnemolog home"
        put("model.md", "Default model", [config.model, f"({note})"])
    if config.fallback_model:
        put("model.md", "Fallback", [config.fallback_model])
    if config.context_budget:
        put("model.md", "Token budget", [f"- Context pack budget: {config.context_budget}"])
    put("tools.md", "Read paths", [f"- {p}" for p in config.read_paths])
    put("tools.md", "Write paths (own folder ONLY)", [f"- {p}" for p in config.write_paths])
    put("tools.md", "External APIs", [f"- {a}" for a in config.apis])
    put("tools.md", "Hard NOs", [f"- {a}" for a in config.hard_nos])
    return {f: (skeleton(f, agent), contents[f]) for f in PERSONA_FILES}


# -- validation ---------------------------------------------------------------

Finding = tuple[str, str, str]  # (field, message, severity)


def check_persona(file: str, text: str) -> list[Finding]:
    """Rules for one persona file: its title line, its sections, and well-formed regions."""
    out: list[Finding] = []
    lines = text.splitlines()
    title = next((f"# {t}" for f, t, _ in SKELETONS if f == file), None)
    if title is None:
        return [("file", f"not a persona file (one of {', '.join(PERSONA_FILES)})", "error")]
    prefix = title.split("{agent}")[0].rstrip()
    if not lines or not lines[0].startswith(prefix):
        out.append(("title", f"expected a first line starting with {prefix!r}", "error"))
    present = {line[3:].strip() for line in lines if line.startswith("## ")}
    for section in sections_of(file):
        if section not in present:
            out.append(("sections", f"missing the section '## {section}'", "warning"))
    out += regions.check_regions(text)
    return out
