"""Memories from other tools' exports: mem0, Letta, basic-memory, Claude and ChatGPT.

`read_source(format, path)` reads a tool's export (bounded, regular files
only) and maps every item to a record in the shape of a JSON Lines import
line (substrate.importer.FIELDS), with an id derived from the format and the
item's source pointer, so that a second import of the same export adds
nothing. The records are then checked and written by the JSON Lines
importer's own path (substrate.importer.check_records / write_checked): the
limits, write policies and hooks of an import are the same for every format.

Each format's module says what its unit is and how it is mapped.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from mnemolog.eventlog.errors import BadInput, UsageError
from mnemolog.eventlog.store.fsio import FileTooLarge, NotRegularFile, read_regular
from mnemolog.substrate.importers._common import MapError, derived_id
from mnemolog.substrate.importers.basic_memory import map_basic_memory, relation_links
from mnemolog.substrate.importers.chats import map_chatgpt, map_claude
from mnemolog.substrate.importers.letta import map_letta
from mnemolog.substrate.importers.mem0 import map_mem0
from mnemolog.substrate.memory.importer import MAX_IMPORT_BYTES

__all__ = ["FORMATS", "MapError", "derived_id", "read_source", "relation_links"]

FORMATS: Final = ("mem0", "letta", "basic-memory", "claude", "chatgpt")
_JSON: Final[dict[str, Callable[[Any], list[dict[str, Any]]]]] = {
    "mem0": map_mem0,
    "letta": map_letta,
    "claude": map_claude,
    "chatgpt": map_chatgpt,
}
#: Notes a basic-memory folder may hold, and the size of one note.
MAX_NOTES: Final = 100_000
MAX_NOTE_BYTES: Final = 8 * 1024 * 1024
_MAX_DEPTH: Final = 64


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _read(path: Path, limit: int) -> bytes:
    try:
        return read_regular(path, limit)
    except NotRegularFile as exc:
        raise UsageError(f"{path} is {exc.kind}: an import reads a regular file", file=str(path)) from exc
    except FileTooLarge as exc:
        raise UsageError(
            f"{path} is larger than {limit} bytes; an import reads at most that", file=str(path)
        ) from exc
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}", file=str(path)) from exc


def _text(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: not valid UTF-8 at byte {exc.start}", file=str(path)) from exc


def read_json(path: Path) -> Any:
    text = _text(_read(path, MAX_IMPORT_BYTES), path)
    try:
        return json.loads(text, parse_constant=_no_constants)
    except (json.JSONDecodeError, ValueError, RecursionError) as exc:
        raise BadInput(f"{path}: not valid JSON: {exc}", file=str(path)) from exc


def _notes(path: Path) -> list[tuple[str, str, float | None]]:
    """The Markdown notes under `path` (or the one note it is), relative paths with '/'.

    Hidden folders (.git, .obsidian) are skipped and symbolic links are not
    followed (a link could leave the folder or loop); FIFOs and devices are
    refused by the read guard.
    """
    if not path.is_dir():
        return [(path.name, _text(_read(path, MAX_NOTE_BYTES), path), path.stat().st_mtime)]
    out: list[tuple[str, str, float | None]] = []
    total = 0
    for root, dirs, files in os.walk(path, followlinks=False):
        rel = Path(root).relative_to(path)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if len(rel.parts) < _MAX_DEPTH else []
        for name in sorted(files):
            if not name.lower().endswith(".md") or name.startswith("."):
                continue
            f = Path(root) / name
            st = f.lstat()
            if not stat.S_ISREG(st.st_mode):
                continue  # a symbolic link (or a FIFO named .md) is not a note of this folder
            if len(out) >= MAX_NOTES:
                raise UsageError(f"{path} holds more than {MAX_NOTES} notes; import its folders one by one")
            raw = _read(f, MAX_NOTE_BYTES)
            total += len(raw)
            if total > MAX_IMPORT_BYTES:
                raise UsageError(
                    f"{path}: the notes are over {MAX_IMPORT_BYTES} bytes; import folders one by one"
                )
            out.append(((rel / name).as_posix(), _text(raw, f), st.st_mtime))
    return out


def read_source(fmt: str, path: Path) -> list[dict[str, Any]]:
    """The records of `path` in format `fmt` (see the module docstring); nothing is written.

    UsageError (64) for a path that cannot be read as that format's export,
    BadInput/MapError (65) naming the file and the item for content that
    does not have the format's shape.
    """
    if fmt not in FORMATS:
        raise UsageError(f"unknown import format {fmt!r}; one of {', '.join(FORMATS)}", field="from")
    try:
        if fmt == "basic-memory":
            return map_basic_memory(_notes(path))
        if path.is_dir():
            raise UsageError(f"{path} is a directory: a {fmt} import reads one JSON file", file=str(path))
        return _JSON[fmt](read_json(path))
    except MapError as exc:
        # Name the file read; a note of a folder names itself relative to the folder.
        details = dict(exc.details)
        rel = details.pop("file", None)
        file = str(path / rel) if rel and path.is_dir() else str(path)
        raise MapError(f"{path}: {exc.message}", file=file, **details) from exc
