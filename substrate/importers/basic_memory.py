"""basic-memory: a folder of Markdown notes (or one note).

A note has YAML frontmatter (`title`, `permalink`, `tags`, `type`), then
Markdown in which list items of the form `- [category] text #tag (context)`
are observations and `- relation_type [[Target]]` are relations. Every
observation is a memory in `notes/basic-memory`, titled with the note,
tagged with the note's tags and its own, source `memory://<permalink>`
(basic-memory's own address for the note); a note without observations is
one memory holding its body. The note's relations are kept in
`metadata.basic_memory.relations` of each of its memories; those whose
both notes are imported together also become links (relation_links) between
the notes' first memories, since a mnemolog link joins memories and a
relation joins notes. Times: the frontmatter's
`created` (or `date`), else the file's modification time; `occurred` (what
`export --to basic-memory` writes for a memory's `occurred_at`) when the
note says when it happened.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any, Final

from mnemolog.substrate.events import KINDS
from mnemolog.substrate.importers._common import MapError, derived_id, micros, tag

FORMAT = "basic-memory"
NAMESPACE: Final = "notes/basic-memory"
MAX_FRONTMATTER: Final = 64 * 1024

# Linear patterns only: a note is hostile input, and a lazy group beside a run of spaces
# backtracks quadratically on a long line.
_OBSERVATION: Final = re.compile(r"^\s*[-*]\s+\[([^\]\n]+)\]\s+(.*)$")
_ITEM: Final = re.compile(r"^\s*[-*]\s+(.*)$")
_TAG: Final = re.compile(r"(?<![\w&])#([\w][\w\-/]*)")
_FENCE: Final = re.compile(r"^\s*(```|~~~)")
_CHECKBOX: Final = frozenset({" ", "x", "X", "-"})


def _relation(line: str) -> dict[str, str] | None:
    """`- relation_type [[Target]] (context)` as {type, target}; None for any other line."""
    m = _ITEM.match(line)
    if m is None:
        return None
    item = m.group(1)
    i = item.find("[[")
    j = item.find("]]", i + 2)
    kind, target = item[:i].strip(), item[i + 2 : j].strip()
    if i <= 0 or j < 0 or not kind or not target or any(c in kind + target for c in "[]"):
        return None
    return {"type": kind, "target": target}


def split_frontmatter(text: str, where: str) -> tuple[dict[str, Any], str]:
    """(frontmatter, body); a note without `---` frontmatter has an empty one."""
    if not text.startswith("---"):
        return {}, text
    lines = text.split("\n")
    if lines[0].strip() != "---":
        return {}, text
    for i in range(1, len(lines)):
        if lines[i].strip() in ("---", "..."):
            head = "\n".join(lines[1:i])
            break
    else:
        raise MapError(f"{where}: the frontmatter has no closing '---'", file=where, field="frontmatter")
    if len(head) > MAX_FRONTMATTER:
        raise MapError(
            f"{where}: frontmatter over {MAX_FRONTMATTER} characters", file=where, field="frontmatter"
        )
    import yaml  # here, not at the top: every command line process imports this module for its --help

    try:
        meta = yaml.safe_load(head) if head.strip() else {}
    except yaml.YAMLError as exc:
        raise MapError(
            f"{where}: the frontmatter is not YAML: {exc}", file=where, field="frontmatter"
        ) from exc
    if not isinstance(meta, dict):
        raise MapError(f"{where}: the frontmatter must be a mapping", file=where, field="frontmatter")
    return meta, "\n".join(lines[i + 1 :])


def _tags(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [t for t in re.split(r"[,\s]+", value) if t]
    if not isinstance(value, list):
        raise MapError(f"{where}: frontmatter `tags` must be a list or text", file=where, field="tags")
    return [t for t in (tag(str(v).lstrip("#")) for v in value if isinstance(v, str | int)) if t]


def _when(meta: dict[str, Any], mtime: float | None, where: str) -> int | None:
    for key in ("created", "date"):
        v = meta.get(key)
        if isinstance(v, datetime | date):
            v = v.isoformat()
        if v is not None:
            return micros(v, f"{where}: frontmatter `{key}`")
    return micros(mtime, f"{where}: modification time") if mtime is not None else None


def permalink_of(path: str) -> str:
    """basic-memory's permalink of a note without one: its path, lower case, words joined by '-'."""
    stem = path[:-3] if path.lower().endswith(".md") else path
    return "/".join(re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") or "_" for p in stem.split("/"))


def map_note(path: str, text: str, mtime: float | None) -> list[dict[str, Any]]:
    """The memories of one note; `path` is relative to the folder imported (it names the note in errors)."""
    meta, body = split_frontmatter(text, path)
    title = meta.get("title")
    title = (
        str(title)
        if isinstance(title, str | int | float) and str(title).strip()
        else path.rsplit("/", 1)[-1][:-3]
    )
    permalink = meta.get("permalink")
    permalink = (
        str(permalink).strip("/")
        if isinstance(permalink, str) and permalink.strip("/")
        else permalink_of(path)
    )
    note_tags = _tags(meta.get("tags"), path)
    when = _when(meta, mtime, path)
    occurred = meta.get("occurred")
    if isinstance(occurred, datetime | date):
        occurred = occurred.isoformat()
    observations: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    relations: list[dict[str, str]] = []
    fenced = False
    for line in body.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        if (m := _OBSERVATION.match(line)) and m.group(1) not in _CHECKBOX and m.group(2).strip():
            obs = (m.group(1).strip(), m.group(2).strip())
            if obs not in seen:  # a set: a note may hold a million lines
                seen.add(obs)
                observations.append(obs)
        elif r := _relation(line):
            relations.append(r)
    source = f"memory://{permalink}"
    info: dict[str, Any] = {"permalink": permalink, "file": path}
    if isinstance(meta.get("type"), str):
        info["type"] = meta["type"]
    if relations:
        info["relations"] = relations
    base = {
        "namespace": NAMESPACE,
        "title": title[:512],
        "source": source,
        "created_at": when,
        **(
            {"occurred_at": micros(occurred, f"{path}: frontmatter `occurred`")}
            if occurred is not None
            else {}
        ),
    }
    if not observations:
        # The heading that repeats the title (as `export --to basic-memory` writes it) is not content.
        lines = body.strip().split("\n")
        if lines and lines[0].startswith("# ") and " ".join(lines[0][2:].split()) == " ".join(title.split()):
            body = "\n".join(lines[1:])
        if not body.strip():
            return []
        kind = meta.get("type") if meta.get("type") in KINDS else "reference"
        return [
            {
                **base,
                "id": derived_id(FORMAT, permalink),
                "content": body.strip(),
                "kind": kind,
                "tags": note_tags,
                "metadata": {"basic_memory": info},
            }
        ]
    out = []
    for category, content in observations:
        own = [t for t in (tag(x) for x in _TAG.findall(content)) if t]
        cat = tag(category)
        tags = list(dict.fromkeys([*note_tags, *([cat] if cat else []), *own]))
        out.append(
            {
                **base,
                "id": derived_id(FORMAT, f"{permalink}\0{category}\0{content}"),
                "content": content,
                "kind": "observation",
                "tags": tags,
                "metadata": {"basic_memory": {**info, "category": category}},
            }
        )
    return out


def map_basic_memory(notes: list[tuple[str, str, float | None]]) -> list[dict[str, Any]]:
    """(relative path, text, modification time) of each note -> memories, notes in path order."""
    out: list[dict[str, Any]] = []
    for path, text, mtime in sorted(notes):
        try:
            out += map_note(path, text, mtime)
        except MapError as exc:
            if "file" in exc.details:
                raise
            raise MapError(exc.message, file=path, **exc.details) from exc
    return out


def relation_links(records: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(src id, dst id, relation type) for the relations whose both notes are among `records`.

    A note is represented by its first memory (its first observation, or its
    body). `[[Target]]` names a note by its title or its permalink, as in
    basic-memory; a target that is not among the records stays only in the
    memories' metadata.
    """
    anchor: dict[str, dict[str, Any]] = {}
    by_title: dict[str, str] = {}
    for r in records:
        info = r.get("metadata", {}).get("basic_memory", {})
        link = info.get("permalink")
        if isinstance(link, str) and link not in anchor:
            anchor[link] = r
            by_title.setdefault(str(r.get("title", "")).strip().lower(), link)
    out: list[tuple[str, str, str]] = []
    drawn: set[tuple[str, str, str]] = set()
    for link, r in anchor.items():
        for rel in r["metadata"]["basic_memory"].get("relations", ()):
            target = rel["target"].strip()
            hit = (
                by_title.get(target.lower())
                or (target.strip("/") if target.strip("/") in anchor else None)
                or (permalink_of(target) if permalink_of(target) in anchor else None)
            )
            edge = (r["id"], anchor[hit]["id"], rel["type"]) if hit is not None and hit != link else None
            if edge is not None and edge not in drawn:
                drawn.add(edge)
                out.append(edge)
    return out
