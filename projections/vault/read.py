"""Reading a vault back: every note and wiki page with the NoteRecord it implies.

The inverse of `render` for files render wrote (they carry `mnemolog_id` and
the other `mnemolog_*` fields, so the record comes back exactly), and a best
effort for hand-written files: the id becomes `vault:<agent>/<dir>/<file>`
(stable, so re-importing the same file gives the same id), the kind is the
note type (wiki pages are knowledge), and a missing or unreadable required
field is reported in `problems` with `record` left None. An importer turns
each record into a memory.stored event; render(read(render(x))) == render(x).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Literal

from mnemolog.eventlog.errors import BadInput, NotFound
from mnemolog.eventlog.vocabulary.events import KINDS, RELATIONS
from mnemolog.projections.vault import naming, schema
from mnemolog.projections.vault.frontmatter import FrontmatterError, read_document
from mnemolog.projections.vault.render import (
    CONFIDENCE_VALUES,
    RESERVED_KEYS,
    RESERVED_PREFIX,
    NoteLink,
    NoteRecord,
    check_agent_name,
)


@dataclass(frozen=True)
class ParsedNote:
    """One file of the vault as read: where, what it says, and the record it implies."""

    path: Path
    rel: str  # relative to the vault root, e.g. "agent/memory/user_risk_tolerance.md"
    unit_type: Literal["memory", "wiki"]
    frontmatter: dict[str, Any]
    body: str
    record: NoteRecord | None
    problems: tuple[str, ...] = ()


def _files(directory: Path) -> list[str]:
    if not directory.is_dir():
        return []
    return sorted(
        e.name
        for e in os.scandir(directory)
        if e.name.endswith(".md")
        and not e.name.startswith(".")
        and not naming.is_index_filename(e.name)
        and not e.is_dir()
    )


def _date(meta: Mapping[str, Any], key: str, problems: list[str]) -> date | None:
    if key not in meta:
        return None
    d = schema.as_date(meta[key])
    if d is None and meta[key] is not None:
        problems.append(f"{key}: expected a YYYY-MM-DD date, found {meta[key]!r}")
    return d


def _instant(meta: Mapping[str, Any], key: str, problems: list[str]) -> int | None:
    if meta.get(key) is None:
        return None
    micros = schema.as_instant(meta[key])
    if micros is None:
        problems.append(f"{key}: expected a UTC time (2023-05-08T14:30:00Z) or a date, found {meta[key]!r}")
    return micros


def _strs(meta: Mapping[str, Any], key: str, problems: list[str]) -> tuple[str, ...]:
    value = meta.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        problems.append(f"{key}: expected a list of strings, found {type(value).__name__}")
        return ()
    kept = tuple(v for v in value if isinstance(v, str) and v.strip())
    if len(kept) != len(value):
        problems.append(f"{key}: dropped entries that are not non-empty strings")
    return kept


def _opt_str(meta: Mapping[str, Any], key: str) -> str | None:
    v = meta.get(key)
    return v if isinstance(v, str) and v.strip() else None


def _links(meta: Mapping[str, Any], problems: list[str]) -> tuple[NoteLink, ...]:
    """`mnemolog_links`: a list of {relation, to, metadata?}; malformed entries are problems."""
    value = meta.get("mnemolog_links", [])
    if not isinstance(value, list):
        problems.append(f"mnemolog_links: expected a list, found {type(value).__name__}")
        return ()
    out = []
    for i, item in enumerate(value):
        if (
            not isinstance(item, dict)
            or set(item) - {"relation", "to", "metadata"}
            or item.get("relation") not in RELATIONS
            or not isinstance(item.get("to"), str)
            or not item["to"].strip()
            or not isinstance(item.get("metadata", {}), dict)
        ):
            problems.append(
                f"mnemolog_links[{i}]: expected {{relation: one of {', '.join(RELATIONS)}, to: a memory id, "
                "metadata: a mapping (optional)}"
            )
            continue
        out.append(NoteLink(item["relation"], item["to"], dict(item.get("metadata", {}))))
    return tuple(out)


def _record(
    rel: str,
    unit_type: str,
    meta: dict[str, Any],
    body: str,
    ids_by_file: Mapping[tuple[str, str], str],
) -> tuple[NoteRecord | None, list[str]]:
    problems: list[str] = []
    directory, filename = rel.split("/")[-2:]
    memory_id = _opt_str(meta, "mnemolog_id") or f"vault:{rel}"
    kind = meta.get("mnemolog_kind")
    if kind not in KINDS:
        t = meta.get("type")
        kind = "knowledge" if unit_type == "wiki" else t if t in naming.NOTE_TYPES else None
    if kind is None:
        problems.append(f"type: cannot map {meta.get('type')!r} to a memory kind")
    title = meta.get("mnemolog_title", meta.get("name"))
    if not isinstance(title, str):
        problems.append("name: expected a string")
        title = filename.removesuffix(".md").replace("_", " ")
    description = meta.get("mnemolog_description", meta.get("description", ""))
    if not isinstance(description, str):
        problems.append("description: expected a string")
        description = ""
    confidence: Any = meta.get("mnemolog_confidence")
    if isinstance(confidence, bool) or not isinstance(confidence, int | float):
        level = meta.get("confidence")
        if level not in CONFIDENCE_VALUES:
            problems.append(f"confidence: expected high, medium or low, found {level!r}")
            level = "medium"
        confidence = CONFIDENCE_VALUES[str(level)]
    captured = _date(meta, "captured", problems)
    last_seen = _date(meta, "last_seen", problems)
    captured = captured or last_seen
    last_seen = last_seen or captured
    if captured is None or last_seen is None:
        problems.append("captured: no captured or last_seen date")
    sources = _strs(meta, "sources", problems)
    if sources == (f"mnemolog:{memory_id}",):
        sources = ()

    def pointer(key: str) -> str | None:
        by_id = _opt_str(meta, f"mnemolog_{key}")
        if by_id is not None:
            return by_id
        target = _opt_str(meta, key)
        if target is None:
            return None
        return ids_by_file.get((directory, target), f"vault:{rel.rsplit('/', 1)[0]}/{target}")

    extra = {k: v for k, v in meta.items() if k not in RESERVED_KEYS and not k.startswith(RESERVED_PREFIX)}
    if unit_type == "wiki":
        extra.pop("provenance", None)
    occurred_at = _instant(meta, "mnemolog_occurred_at", problems)
    if kind is None or captured is None or last_seen is None:
        return None, problems
    if occurred_at is None and meta.get("mnemolog_occurred_at") is not None:
        return None, problems  # dropped, it would leave the memory dated wrong without a word
    try:
        record = NoteRecord(
            memory_id=memory_id,
            kind=kind,
            title=title,
            description=description,
            content=body,
            tags=_strs(meta, "tags", problems),
            confidence=min(max(float(confidence), 0.0), 1.0),
            captured=captured,
            last_seen=last_seen,
            sources=sources,
            pinned=meta.get("pinned") is True,
            expires_at=_date(meta, "expires_at", problems),
            supersedes=pointer("supersedes"),
            superseded_by=pointer("superseded_by"),
            archived=meta.get("archived") is True,
            atom_of=_opt_str(meta, "mnemolog_atom_of"),
            namespace=_opt_str(meta, "mnemolog_namespace") or "default",
            extra_frontmatter=extra,
            links=_links(meta, problems),
            project=_opt_str(meta, "mnemolog_project") or "",
            domains=_strs(meta, "mnemolog_domains", problems),
            occurred_at=occurred_at,
        )
    except BadInput as exc:
        return None, [*problems, exc.message]
    return record, problems


def read_vault(root: Path, agent: str) -> list[ParsedNote]:
    """Every note (`memory/`) and wiki page (`wiki/`) of one agent, sorted by path."""
    check_agent_name(agent)
    agent_dir = root / agent
    if not agent_dir.is_dir():
        raise NotFound(f"no agent directory {agent_dir}", file=str(agent_dir))
    loaded: list[tuple[str, str, Path, dict[str, Any] | None, str, list[str]]] = []
    resolved_root = root.resolve()
    for directory, unit_type in (("memory", "memory"), ("wiki", "wiki")):
        for name in _files(agent_dir / directory):
            rel = f"{agent}/{directory}/{name}"
            path = agent_dir / directory / name
            if not path.resolve().is_relative_to(resolved_root):
                problem = f"file: symlink points outside the vault, to {path.resolve()}"
                loaded.append((rel, unit_type, path, None, "", [problem]))
                continue
            try:
                doc = read_document(path, source=rel)
            except FrontmatterError as exc:
                loaded.append((rel, unit_type, path, None, "", [f"{exc.field}: {exc.reason}"]))
                continue
            loaded.append((rel, unit_type, path, doc.meta, doc.body, []))
    ids_by_file: dict[tuple[str, str], str] = {}
    for rel, _, _, meta, _, _ in loaded:
        if meta is not None:
            directory, filename = rel.split("/")[-2:]
            ids_by_file[(directory, filename)] = _opt_str(meta, "mnemolog_id") or f"vault:{rel}"
    out = []
    for rel, unit_type, path, meta, body, load_problems in loaded:
        record, problems = None, load_problems
        if meta is not None:
            record, problems = _record(rel, unit_type, meta, body, ids_by_file)
        out.append(
            ParsedNote(
                path=path,
                rel=rel,
                unit_type="wiki" if unit_type == "wiki" else "memory",
                frontmatter=meta if meta is not None else {},
                body=body,
                record=record,
                problems=tuple(problems),
            )
        )
    return out
