"""The rest of the agent folder: persona files, the journal and run logs on disk, and their rules.

`write_agent_files` is the I/O edge of `persona`, `journal` and `runlog`:

- persona files and journal days are *merged*: a missing file is written
  from its skeleton; an existing one only has its managed regions brought
  up to date (`regions.merge`), so a person's text and any region they
  edited stay; a file whose markers do not pair up, that is not UTF-8 or
  not a regular file is left alone and reported as a conflict;
- run logs are mnemolog's alone: a file is rewritten only when its bytes
  are still the ones mnemolog last wrote (their SHA-256 is kept in
  `<agent>/.mnemolog-agentfiles.json`); a hand-edited log is left alone and
  reported, until it is deleted.

Writes are atomic and only happen when bytes change. `check_agent_files`
holds the validation rules `vault validate` applies to these files.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from mnemolog.eventlog.errors import StorageError
from mnemolog.eventlog.store.fsio import FileTooLarge, NotRegularFile, atomic_write, read_regular
from mnemolog.projections.vault import journal, persona, regions, runlog

MANIFEST_NAME: Final = ".mnemolog-agentfiles.json"
MANIFEST_FORMAT: Final = "mnemolog-agentfiles/1"
MAX_FILE_BYTES: Final = 8 << 20

Merged = Mapping[str, tuple[str, Mapping[str, str]]]


@dataclass
class AgentFilesReport:
    written: list[str] = field(default_factory=list)
    unchanged: int = 0
    kept_edits: list[str] = field(default_factory=list)  # "file: region"
    missing_regions: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)  # "file: why it was left alone"

    def to_json(self) -> dict[str, Any]:
        return {
            "written": self.written,
            "unchanged": self.unchanged,
            "kept_edits": self.kept_edits,
            "missing_regions": self.missing_regions,
            "conflicts": self.conflicts,
        }


def _read(path: Path) -> bytes | str | None:
    """The file's bytes; None when absent; a reason (str) when it cannot be taken as a text file."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise StorageError(f"cannot stat {path}: {exc.strerror}") from exc
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_size > MAX_FILE_BYTES:
        return f"larger than {MAX_FILE_BYTES} bytes"
    try:
        # Through the read guard: the lstat above cannot stop a FIFO swapped in after it.
        return read_regular(path, MAX_FILE_BYTES)
    except (NotRegularFile, FileTooLarge) as exc:
        return str(exc.strerror)
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc.strerror}") from exc


def _manifest(path: Path) -> dict[str, str]:
    data = _read(path)
    if not isinstance(data, bytes):
        return {}
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    files = doc.get("files") if isinstance(doc, dict) and doc.get("format") == MANIFEST_FORMAT else None
    if not isinstance(files, dict):
        return {}
    return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)}


def _write(path: Path, data: bytes) -> None:
    try:
        atomic_write(path, data)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc}") from exc


def write_agent_files(root: Path, agent: str, merged: Merged, whole: Mapping[str, bytes]) -> AgentFilesReport:
    """Bring `<root>/<agent>/` up to date with these files (paths relative to the agent)."""
    agent_dir = root / agent
    report = AgentFilesReport()
    for rel, (skeleton, contents) in sorted(merged.items()):
        path = agent_dir / rel
        current = _read(path)
        if isinstance(current, str):
            report.conflicts.append(f"{agent}/{rel}: {current}; left alone")
            continue
        if current is None:
            text = regions.merge(skeleton, contents).text
            _write(path, text.encode("utf-8"))
            report.written.append(f"{agent}/{rel}")
            continue
        try:
            existing = current.decode("utf-8")
            result = regions.merge(existing, contents)
        except UnicodeDecodeError:
            report.conflicts.append(f"{agent}/{rel}: not UTF-8; left alone")
            continue
        except regions.RegionError as exc:
            report.conflicts.append(f"{agent}/{rel}: {exc}; left alone")
            continue
        report.kept_edits += [f"{agent}/{rel}: {n}" for n in result.kept_edits]
        report.missing_regions += [f"{agent}/{rel}: {n}" for n in result.missing]
        if result.text != existing:
            _write(path, result.text.encode("utf-8"))
            report.written.append(f"{agent}/{rel}")
        else:
            report.unchanged += 1
    manifest_path = agent_dir / MANIFEST_NAME
    owned = _manifest(manifest_path)
    new_owned = dict(owned)
    for rel, data in sorted(whole.items()):
        path = agent_dir / rel
        current = _read(path)
        digest = hashlib.sha256(data).hexdigest()
        if current == data:
            report.unchanged += 1
            new_owned[rel] = digest
            continue
        if isinstance(current, str):
            report.conflicts.append(f"{agent}/{rel}: {current}; left alone")
            continue
        if current is not None and hashlib.sha256(current).hexdigest() != owned.get(rel):
            why = "edited by hand; left alone (delete it to have it rewritten)"
            report.conflicts.append(f"{agent}/{rel}: {why}")
            continue
        # Recorded before the write: a crash in between leaves a file whose bytes match neither,
        # which the next render reports instead of silently overwriting.
        new_owned[rel] = digest
        _write(manifest_path, _manifest_bytes(new_owned))
        _write(path, data)
        report.written.append(f"{agent}/{rel}")
    if new_owned != owned:
        _write(manifest_path, _manifest_bytes(new_owned))
    return report


def _manifest_bytes(files: Mapping[str, str]) -> bytes:
    doc = {"format": MANIFEST_FORMAT, "files": dict(sorted(files.items()))}
    return (json.dumps(doc, indent=0) + "\n").encode("utf-8")


# -- validation ---------------------------------------------------------------

Finding = tuple[str, str, str, str]  # (file relative to the vault root, field, message, severity)


def has_agent_files(agent_dir: Path) -> bool:
    return any((agent_dir / f).is_file() for f in persona.PERSONA_FILES) or any(
        (agent_dir / d).is_dir() for d in ("journal", "logs")
    )


def _text(path: Path, rel: str, out: list[Finding]) -> str | None:
    data = _read(path)
    if data is None:
        return None
    if isinstance(data, str):
        out.append((rel, "file", data, "error"))
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        out.append((rel, "file", f"expected UTF-8, found a bad byte at {exc.start}", "error"))
        return None


def _files_under(agent_dir: Path, sub: str) -> list[str]:
    base = agent_dir / sub
    if not base.is_dir():
        return []
    out = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in sorted(filenames):
            if not f.startswith("."):
                out.append(os.path.relpath(os.path.join(dirpath, f), agent_dir).replace(os.sep, "/"))
    return out


def check_agent_files(root: Path, agent: str, notes: set[str]) -> list[Finding]:
    """Every problem of an agent's persona files, journal and run logs.

    `notes` holds the .md names in memory/ and wiki/ (journals may name them).
    """
    agent_dir = root / agent
    out: list[Finding] = []
    for name in persona.PERSONA_FILES:
        rel = f"{agent}/{name}"
        text = _text(agent_dir / name, rel, out)
        if text is not None:
            out += [(rel, f, m, s) for f, m, s in persona.check_persona(name, text)]
    checks: list[tuple[str, str, Callable[[str, str], list[tuple[str, str, str]]]]] = [
        ("journal", ".md", lambda sub, text: journal.check_journal(sub, text, notes)),
        ("logs", ".jsonl", runlog.check_runlog),
    ]
    for folder, suffix, check in checks:
        for sub in _files_under(agent_dir, folder):
            rel = f"{agent}/{sub}"
            if not sub.endswith(suffix):
                out.append(
                    (rel, "filename", f"{folder}/ holds only YYYY-MM/YYYY-MM-DD{suffix} files", "warning")
                )
                continue
            text = _text(agent_dir / sub, rel, out)
            if text is not None:
                out += [(rel, f, m, s) for f, m, s in check(sub, text)]
    return out
