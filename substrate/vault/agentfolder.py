"""The agent folder beyond notes: persona files, journal and run logs, rendered from the log.

`render_agent_folder` gathers, in one projection session, the memories
promoted to persona (the vault's `promoted_to_persona` date, with an
optional `persona_file` / `persona_section` target), every curator call
(`projections.agentlog`) and, for every UTC day with captured
interactions, the day's interactions with what was promoted from them and
what still waits for a person (the journal); the home's configuration
fills model.md and tools.md. The pure planners in `projections.vault`
shape the files and `agentfiles.write_agent_files` merges them on disk,
keeping every hand edit.

`promote_to_persona` records a promotion as a signed `memory.updated` of
the memory's vault metadata (the date, and the target when one is given),
which is what INDEX's "Recently Promoted to Persona" section and the
persona files read.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

from mnemolog.curators.config import resolve_llm
from mnemolog.eventlog.errors import UsageError
from mnemolog.projections.memory.model import Memory
from mnemolog.projections.vault import agentlog
from mnemolog.projections.vault.agentfiles import AgentFilesReport, write_agent_files
from mnemolog.projections.vault.journal import plan_journal
from mnemolog.projections.vault.persona import (
    PERSONA_FILES,
    PersonaConfig,
    PersonaItem,
    plan_persona,
    sections_of,
)
from mnemolog.projections.vault.render import PROMOTED_KEY, NoteRecord, check_agent_name, note_paths
from mnemolog.projections.vault.runlog import plan_runlogs
from mnemolog.substrate.context.config import pack_config
from mnemolog.substrate.events import MemoryUpdated
from mnemolog.substrate.home import Config
from mnemolog.substrate.session import Sessions
from mnemolog.substrate.vault import service as vault

PERSONA_FILE_KEY = "persona_file"
PERSONA_SECTION_KEY = "persona_section"


def persona_items(records: list[NoteRecord]) -> list[PersonaItem]:
    paths = note_paths(records)
    out = []
    for r in records:
        promoted = r.extra_frontmatter.get(PROMOTED_KEY)
        if not isinstance(promoted, dt.date) or r.archived or r.superseded_by is not None:
            continue
        file = r.extra_frontmatter.get(PERSONA_FILE_KEY)
        section = r.extra_frontmatter.get(PERSONA_SECTION_KEY)
        out.append(
            PersonaItem(
                memory_id=r.memory_id,
                kind=r.kind,
                text=r.content,
                promoted=promoted,
                note=paths[r.memory_id].split("/", 1)[1],
                file=file if isinstance(file, str) else None,
                section=section if isinstance(section, str) else None,
            )
        )
    return out


def persona_config(config: Config, root: Path, agent: str) -> PersonaConfig:
    llm = resolve_llm(config.llm.host, config.llm.model)
    cfg = pack_config(config.raw)
    return PersonaConfig(
        model=llm.model if llm else None,
        model_note="the model mnemolog's curators, extractors and triagers call" if llm else None,
        context_budget=f"{cfg.budget} {cfg.unit} per context pack",
        write_paths=[str((root / agent).resolve())],
        apis=[f"Ollama at {llm.host}: curation, extraction, triage"] if llm else [],
    )


def render_agent_folder(
    sessions: Sessions, root: Path, agent: str, config: Config, namespace: str | None = None
) -> AgentFilesReport:
    """Write (merge) the persona files, journal days and run logs of `root/agent`."""
    check_agent_name(agent)
    with sessions.session() as s:
        recs = vault.records(s, namespace)
        runs = agentlog.run_records(s.conn)
        interactions, captured, questions = agentlog.journal_rows(s.conn, namespace)
    # A captured memory is named by the note it renders to, when this render holds it.
    notes = {mid: path.split("/", 1)[1] for mid, path in note_paths(recs).items()}
    captured = [dataclasses.replace(c, note=notes.get(c.memory_id)) for c in captured]
    merged = {
        **plan_persona(agent, persona_items(recs), persona_config(config, root, agent)),
        **plan_journal(agent, interactions, captured, questions),
    }
    return write_agent_files(root, agent, merged, plan_runlogs(runs))


def promote_to_persona(
    sessions: Sessions,
    memory_id: str,
    *,
    today: dt.date,
    file: str | None = None,
    section: str | None = None,
) -> Memory:
    """Mark a memory promoted to persona today (optionally into one file's section)."""
    if (file is None) != (section is None):
        raise UsageError("give both --file and --section, or neither", field="file")
    if file is not None and file not in PERSONA_FILES:
        raise UsageError(f"file must be one of {', '.join(PERSONA_FILES)}, found {file!r}", field="file")
    if file is not None and section not in sections_of(file):
        raise UsageError(
            f"section must be one of {'; '.join(sections_of(file))} of {file}, found {section!r}",
            field="section",
        )
    with sessions.session() as s:
        m = s.require(memory_id)
        meta = m.get("metadata") or {}
        v: dict[str, Any] = dict(meta.get(vault.VAULT_KEY) or {})
        extra = dict(v.get("extra") or {})
        extra[PROMOTED_KEY] = vault.encode_value(today)
        if file is not None:
            extra[PERSONA_FILE_KEY] = file
            extra[PERSONA_SECTION_KEY] = section
        v["extra"] = extra
        s.check_write(s.policy(m["namespace"]), m["namespace"])
        s.append(MemoryUpdated(id=memory_id, metadata={vault.VAULT_KEY: v}))
        return s.with_warnings(s.require(memory_id))
