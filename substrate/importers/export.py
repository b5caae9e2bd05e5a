"""Memories out, in forms other tools read: JSON Lines (what `import` reads) and basic-memory notes.

Pure functions from memories to bytes and relative paths; the writing (one
atomic file, or a folder that appears whole) is the caller's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import yaml

from mnemolog.eventlog.vocabulary.events import iso_time
from mnemolog.substrate.memory.importer import FIELDS

EXPORT_FORMATS: Final = ("jsonl", "basic-memory")


def jsonl_record(m: Mapping[str, Any]) -> dict[str, Any]:
    """A memory as one import line: exactly the importer's FIELDS, empty ones left out."""
    out = {k: m.get(k) for k in FIELDS}
    return {k: v for k, v in out.items() if v not in (None, [], {}, "")}


def jsonl_bytes(memories: Iterable[Mapping[str, Any]]) -> bytes:
    return b"".join(
        json.dumps(jsonl_record(m), ensure_ascii=False, sort_keys=True).encode() + b"\n" for m in memories
    )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80].strip("-")


def _iso(us: int | None) -> str | None:
    return None if us is None else iso_time(us)


def basic_memory_notes(memories: Iterable[Mapping[str, Any]]) -> list[tuple[str, bytes]]:
    """(relative path, note) per memory: a folder per namespace, a note per memory.

    The frontmatter holds title, type (the memory's kind), permalink (the
    path without `.md`), tags, created and where the note came from; the body
    is a heading with the title and the memory's content. Two memories whose
    titles give the same name are told apart by their ids.
    """
    out: list[tuple[str, bytes]] = []
    taken: set[str] = set()
    for m in memories:
        title = m.get("title") or m["content"].strip().split("\n", 1)[0][:80]
        slug = _slug(title) or m["id"].lower()
        permalink = f"{m['namespace']}/{slug}"
        if permalink in taken:
            permalink = f"{permalink}-{m['id'].lower()}"
        taken.add(permalink)
        front: dict[str, Any] = {"title": title, "type": m.get("kind") or "note", "permalink": permalink}
        if m.get("tags"):
            front["tags"] = list(m["tags"])
        front["created"] = _iso(m.get("created_at"))
        if m.get("occurred_at") is not None:
            front["occurred"] = _iso(m["occurred_at"])
        front["mnemolog_id"] = m["id"]
        if m.get("source"):
            front["source"] = m["source"]
        head = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, width=1_000_000)
        text = f"---\n{head}---\n\n# {' '.join(title.split())}\n\n{m['content'].strip()}\n"
        out.append((f"{permalink}.md", text.encode()))
    return out
