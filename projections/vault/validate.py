"""Vault-wide validation: every rule of the Atomic Agents file formats, all problems at once.

`validate_vault(root)` checks each agent directory under `root`
(`<root>/<agent>/memory/*.md`, `memory/INDEX*.md`, `<root>/<agent>/wiki/*.md`)
and returns every problem it finds, sorted by (file, field, message). The
per-file rules are in `schema`; this module adds the rules that need the
whole vault: INDEX.md coverage through linked sub-indexes, links that
dangle, supersedes/superseded_by and wiki `related` entries resolving to
files that exist, and symlinks that leave the vault. docs/vault.md lists
every rule.

Directories whose name starts with `_` or `.` are not agents (`_migrations/`),
and files whose name starts with `.` are ignored (the render manifest
`.mnemolog-vault.json`, temp files of atomic writes).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mnemolog.eventlog.errors import BadInput, NotFound
from mnemolog.eventlog.store.fsio import FileTooLarge, read_regular
from mnemolog.projections.vault import agentfiles, naming, regions, schema
from mnemolog.projections.vault import index as index_format
from mnemolog.projections.vault.frontmatter import (
    MAX_FILE_BYTES,
    FrontmatterError,
    read_document,
)

Severity = Literal["error", "warning"]


@dataclass(frozen=True, order=True)
class Problem:
    """One broken rule: the file (relative to the vault root), the field, what is wrong."""

    file: str
    field: str
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        tail = " (warning)" if self.severity == "warning" else ""
        return f"{self.file}: {self.field}: {self.message}{tail}"


class ValidationFailed(BadInput):
    """A vault that breaks at least one rule (exit 65); `problems` holds all of them."""

    slug = "vault_invalid"

    def __init__(self, problems: Sequence[Problem]) -> None:
        errors = [p for p in problems if p.severity == "error"]
        shown = "\n".join(f"  {p}" for p in errors[:20])
        more = f"\n  ... and {len(errors) - 20} more" if len(errors) > 20 else ""
        super().__init__(
            f"vault validation failed with {len(errors)} error(s):\n{shown}{more}",
            problems=[str(p) for p in problems],
        )
        self.problems = list(problems)


def errors(problems: Iterable[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "error"]


def agent_names(root: Path) -> list[str]:
    """Agent directories under `root`, sorted: those with memory/, wiki/, persona files, journal/ or logs/."""
    out = []
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if entry.name.startswith(("_", ".")) or not entry.is_dir():
            continue
        d = Path(entry.path)
        if (d / "memory").is_dir() or (d / "wiki").is_dir() or agentfiles.has_agent_files(d):
            out.append(entry.name)
    return out


def validate_vault(root: Path) -> list[Problem]:
    """Every problem of every agent under `root`, sorted; [] for a valid vault."""
    if not root.is_dir():
        raise NotFound(f"vault root {root} is not a directory", file=str(root))
    problems: list[Problem] = []
    for agent in agent_names(root):
        problems += validate_agent(root, agent)
    return sorted(problems)


def check_vault(root: Path) -> list[Problem]:
    """Raise ValidationFailed when the vault has errors; return its warnings otherwise."""
    problems = validate_vault(root)
    if errors(problems):
        raise ValidationFailed(problems)
    return problems


@dataclass
class _File:
    name: str
    rel: str
    meta: dict[str, Any] | None


class _Agent:
    def __init__(self, root: Path, agent: str) -> None:
        self.root = root
        self.resolved_root = root.resolve()
        self.agent = agent
        self.problems: list[Problem] = []

    def add(self, rel: str, findings: Iterable[tuple[str, str, Severity]]) -> None:
        for field, message, severity in findings:
            self.problems.append(Problem(rel, field, message, severity))

    def listing(self, sub: str) -> tuple[list[str], list[str]]:
        """Content .md files and INDEX*.md files directly in <agent>/<sub>/."""
        d = self.root / self.agent / sub
        if not d.is_dir():
            return [], []
        content: list[str] = []
        indexes: list[str] = []
        for entry in sorted(os.scandir(d), key=lambda e: e.name):
            name = entry.name
            if name.startswith(".") or not name.endswith(".md"):
                continue
            if entry.is_dir():
                continue
            (indexes if name.startswith("INDEX") else content).append(name)
        return content, indexes

    def rel(self, sub: str, name: str) -> str:
        return f"{self.agent}/{sub}/{name}"

    def safe_path(self, sub: str, name: str) -> Path | None:
        path = self.root / self.agent / sub / name
        if path.is_symlink():
            target = path.resolve()
            if not target.is_relative_to(self.resolved_root):
                self.add(
                    self.rel(sub, name),
                    [("file", f"symlink points outside the vault, to {target}", "error")],
                )
                return None
        return path

    def load(self, sub: str, name: str) -> _File:
        rel = self.rel(sub, name)
        path = self.safe_path(sub, name)
        if path is None:
            return _File(name, rel, None)
        try:
            doc = read_document(path, source=rel)
        except FrontmatterError as exc:
            self.add(rel, [(exc.field, exc.reason, "error")])
            return _File(name, rel, None)
        return _File(name, rel, doc.meta)

    def read_text(self, sub: str, name: str) -> str | None:
        rel = self.rel(sub, name)
        path = self.safe_path(sub, name)
        if path is None:
            return None
        try:
            data = read_regular(path, MAX_FILE_BYTES)
        except FileTooLarge:
            self.add(rel, [("file", f"index exceeds {MAX_FILE_BYTES} bytes", "error")])
            return None
        except OSError as exc:
            self.add(rel, [("file", f"cannot read: {exc.strerror}", "error")])
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.add(rel, [("file", f"expected UTF-8, found a bad byte at {exc.start}", "error")])
            return None


def _check_pointers(
    a: _Agent, files: dict[str, _File], sub: str, keys: Sequence[str] = ("supersedes", "superseded_by")
) -> None:
    """supersedes/superseded_by name an existing file in the same directory."""
    for f in files.values():
        if f.meta is None:
            continue
        for key in keys:
            target = f.meta.get(key)
            if not isinstance(target, str):
                continue
            if "/" in target or target in (".", ".."):
                a.add(f.rel, [(key, f"expected a bare filename in {sub}/, found {target!r}", "error")])
            elif target == f.name:
                a.add(f.rel, [(key, "points at the file itself", "error")])
            elif target not in files:
                a.add(f.rel, [(key, f"points at {target}, which does not exist in {sub}/", "error")])
            else:
                back = "superseded_by" if key == "supersedes" else "supersedes"
                other = files[target].meta
                if other is not None and other.get(back) not in (None, f.name):
                    a.add(
                        f.rel,
                        [
                            (
                                key,
                                f"{target} has {back}: {other.get(back)!r}, not {f.name!r}",
                                "warning",
                            )
                        ],
                    )


def _check_index_coverage(a: _Agent, notes: dict[str, _File], indexes: list[str]) -> None:
    top = naming.INDEX_FILENAME
    index_rel = a.rel("memory", top)
    if top not in indexes:
        if notes:
            a.add(index_rel, [("file", "missing: memory/ holds notes but no INDEX.md", "error")])
        for name in indexes:
            a.add(a.rel("memory", name), [("file", "sub-index without an INDEX.md", "warning")])
        return
    for name in indexes:
        if naming.index_slice(name) is None:
            a.add(
                a.rel("memory", name),
                [("filename", "expected INDEX.md or INDEX_{slice}.md (snake_case slice)", "error")],
            )
    existing = set(notes) | set(indexes)
    linked: set[str] = set()
    spans: set[str] = set()
    reached, queue = {top}, [top]
    while queue:
        name = queue.pop()
        text = a.read_text("memory", name)
        if text is None:
            continue
        if name == top:
            # Its entry lists are managed regions: broken markers stop render, hand edits are noted.
            found = regions.check_regions(text)
            a.add(
                a.rel("memory", name),
                [(f, m, "error" if sev == "error" else "warning") for f, m, sev in found],
            )
        refs = index_format.references(text)
        spans.update(refs.code_spans)
        for target in refs.links:
            if "/" in target:
                continue
            if target.endswith(".md") and target not in existing:
                a.add(a.rel("memory", name), [("links", f"links to {target}, which does not exist", "error")])
            linked.add(target)
            if target in indexes and target not in reached:
                reached.add(target)
                queue.append(target)
    for name in indexes:
        if name not in reached and naming.index_slice(name) is not None:
            a.add(a.rel("memory", name), [("file", "sub-index not linked from INDEX.md", "warning")])
    for f in notes.values():
        title = f.meta.get("name") if f.meta else None
        titled = isinstance(title, str) and index_format.code_text(title) in spans
        if f.name in linked or f.name in spans or titled:
            continue
        a.add(f.rel, [("index", "not referenced from INDEX.md or a sub-index it links", "error")])


def _check_related(a: _Agent, pages: dict[str, _File], notes: dict[str, _File]) -> None:
    agent_dir = (a.root / a.agent).resolve()
    for f in pages.values():
        related = f.meta.get("related") if f.meta else None
        if not isinstance(related, list):
            continue
        for i, target in enumerate(related):
            if not isinstance(target, str) or not target.strip():
                continue
            if "/" not in target:
                if target in pages or target in notes:
                    continue
                a.add(f.rel, [(f"related[{i}]", f"{target} exists in neither wiki/ nor memory/", "error")])
                continue
            resolved = (a.root / a.agent / "wiki" / target).resolve()
            if not resolved.is_relative_to(agent_dir):
                a.add(f.rel, [(f"related[{i}]", f"{target!r} leaves the agent directory", "error")])
            elif not resolved.is_file():
                a.add(f.rel, [(f"related[{i}]", f"{target} does not exist", "error")])


def validate_agent(root: Path, agent: str) -> list[Problem]:
    """Every problem of one agent directory, sorted."""
    a = _Agent(root, agent)
    note_names, indexes = a.listing("memory")
    notes = {n: a.load("memory", n) for n in note_names}
    for f in notes.values():
        if f.meta is not None:
            a.add(f.rel, schema.check_note(f.meta, f.name))
    _check_pointers(a, notes, "memory")
    _check_index_coverage(a, notes, indexes)

    page_names, _ = a.listing("wiki")
    pages = {n: a.load("wiki", n) for n in page_names}
    for f in pages.values():
        if f.meta is not None:
            a.add(f.rel, schema.check_wiki(f.meta, f.name))
    _check_pointers(a, pages, "wiki")
    _check_related(a, pages, notes)
    for rel, fld, message, severity in agentfiles.check_agent_files(root, agent, set(notes) | set(pages)):
        a.problems.append(Problem(rel, fld, message, severity))  # type: ignore[arg-type]
    return sorted(a.problems)
