"""The filesystem backend's harness for the contract suite."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemolog.projections.vault.frontmatter import Document, read_document, serialize_bytes
from mnemolog.substrate.migrations.filesystem import FilesystemMigrationBackend
from mnemolog.substrate.migrations.protocol import MigrationEvent

from .contract import UnitSpec, register_harness


class FilesystemHarness:
    name = "filesystem"

    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "agents"
        self.root.mkdir()
        self.scripts_dir = self.root / "_migrations"

    def _path(self, name: str) -> Path:
        sub = (
            "memory"
            if name.split("_", maxsplit=1)[0] in {"user", "feedback", "project", "decision", "reference"}
            else "wiki"
        )
        return self.root / "caldwell" / sub / name

    def backend(self, current_schema_version: int = 1) -> FilesystemMigrationBackend:
        return FilesystemMigrationBackend(self.root, current_schema_version=current_schema_version)

    def seed(self, units: Sequence[UnitSpec]) -> None:
        for name, _, meta in units:
            path = self._path(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(serialize_bytes(Document(meta, f"Body of {name}\n")))

    def corrupt(self, name: str) -> None:
        self._path(name).write_text("---\nname: [unclosed\n---\n")

    def add_alias(self, name: str) -> None:
        path = self._path(name)
        os.symlink(path.name, path.with_name("user_alias_link.md"))
        os.symlink(path.parent, path.parent.parent / "memory_link")
        other = self.root / "twin"
        other.mkdir()
        os.symlink(path.parent, other / "memory")

    def add_index(self) -> None:
        memory = self.root / "caldwell" / "memory"
        (memory / "INDEX.md").write_text("# index\n")
        (memory / "INDEX_user.md").write_text("# sub\n")
        (self.root / "caldwell" / "wiki" / "INDEX.md").write_text("# wiki\n")

    def state(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for path in sorted(self.root.rglob("*")):
            rel = path.relative_to(self.root)
            if rel.parts[0] == "_migrations":
                continue
            if path.is_symlink():
                out[str(rel)] = ("link", os.readlink(path))
            elif path.is_file():
                out[str(rel)] = path.read_bytes()
            else:
                out[str(rel)] = "dir"
        return out

    def meta(self, name: str) -> dict[str, Any]:
        return read_document(self._path(name)).meta

    def label(self, name: str) -> str:
        return name.removesuffix(".md")

    def events(self) -> list[MigrationEvent]:
        return self.backend().audit_events()

    def child_backend_code(self) -> str:
        return (
            "from pathlib import Path\n"
            "from mnemolog.substrate.migrations.filesystem import FilesystemMigrationBackend\n"
            f"backend = FilesystemMigrationBackend(Path({str(self.root)!r}), current_schema_version=2)\n"
        )


register_harness("filesystem", FilesystemHarness)
