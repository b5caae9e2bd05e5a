"""The log backend's harness for the contract suite: units are memories in a real home."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemolog.projections.vault.render import CONFIDENCE_VALUES
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.events import MemoryUpdated
from mnemolog.substrate.home import init_home
from mnemolog.substrate.migrations.log_backend import LogMigrationBackend
from mnemolog.substrate.migrations.protocol import MigrationEvent
from mnemolog.substrate.vault.service import VAULT_KEY, encode_value, midnight

from .contract import UnitSpec, register_harness

SEEDED = (
    "schema_version",
    "name",
    "description",
    "type",
    "captured",
    "last_seen",
    "sources",
    "confidence",
    "tags",
)


class LogHarness:
    name = "log"

    def __init__(self, tmp: Path) -> None:
        self.home = tmp / "home"
        init_home(self.home)
        self.scripts_dir = tmp / "scripts"
        # Short-lived sessions: a child process (the SIGKILL test) shares the home.
        self.sub = Substrate.open(self.home, long_lived=False, worker=False)

    def backend(self, current_schema_version: int = 1) -> LogMigrationBackend:
        return LogMigrationBackend(self.sub, current_schema_version=current_schema_version)

    def _id(self, name: str) -> str:
        with self.sub.projections.session() as conn:
            row = conn.execute("SELECT id FROM memories WHERE source = ?", [f"harness:{name}"]).fetchone()
        assert row is not None, name
        return str(row[0])

    def seed(self, units: Sequence[UnitSpec]) -> None:
        for name, _, meta in units:
            vault: dict[str, Any] = {
                "description": meta["description"],
                "sources": list(meta["sources"]),
                "schema_version": meta["schema_version"],
            }
            extra = {k: v for k, v in meta.items() if k not in SEEDED}
            if extra:
                vault["extra"] = encode_value(extra)
            self.sub.store(
                f"Body of {name}",
                kind="knowledge" if meta["type"] == "wiki_page" else meta["type"],
                title=meta["name"],
                confidence=CONFIDENCE_VALUES[meta["confidence"]],
                tags=meta.get("tags", []),
                source=f"harness:{name}",
                metadata={VAULT_KEY: vault},
                created_at=midnight(meta["captured"]),
                last_seen=midnight(meta["last_seen"]),
            )

    def corrupt(self, name: str) -> None:
        mid = self._id(name)
        m = self.sub.get(mid)
        vault = {**m["metadata"][VAULT_KEY], "schema_version": "not a number"}
        with self.sub.session() as s:
            s.append(MemoryUpdated(id=mid, metadata={VAULT_KEY: vault}))

    def add_alias(self, name: str) -> None:
        # Join rows that a naive enumeration would count twice: edges to and from the unit.
        mid = self._id(name)
        others = [m["id"] for m in self.sub.list(limit=100) if m["id"] != mid]
        self.sub.link(mid, others[0], "related_to")
        self.sub.link(others[0], mid, "related_to")
        self.sub.link(mid, others[-1], "reflects_on")

    def add_index(self) -> None:
        """The log keeps no INDEX sidecar among its units (its index is derived tables)."""

    def state(self) -> dict[str, Any]:
        rows = self.sub.list(limit=1000, include_archived=True)
        return {m["id"]: m for m in rows}

    def meta(self, name: str) -> dict[str, Any]:
        return self.backend().frontmatter(self._id(name))

    def label(self, name: str) -> str:
        return self._id(name)

    def events(self) -> list[MigrationEvent]:
        self.sub.log.refresh()
        return self.backend().audit_events()

    def child_backend_code(self) -> str:
        return (
            "from mnemolog.substrate.api import Substrate\n"
            "from mnemolog.substrate.migrations.log_backend import LogMigrationBackend\n"
            f"sub = Substrate.open({str(self.home)!r}, long_lived=False, worker=False)\n"
            "backend = LogMigrationBackend(sub, current_schema_version=2)\n"
        )


register_harness("log", LogHarness)
