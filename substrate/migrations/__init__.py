"""Schema migrations of vault frontmatter: the migration-backend contract of docs/vault.md.

`protocol` holds the contract and its value types, `scripts` loads and chains
`vN_to_vM.py` scripts, `runner` is the backend-neutral `run_migration`, and
`filesystem` is the backend over a directory of agents. docs/vault.md explains
how each requirement is met.
"""

from mnemolog.substrate.migrations.protocol import (
    MigratableUnit,
    MigrationBackend,
    MigrationCapabilities,
    MigrationError,
    MigrationEvent,
    MigrationLocked,
    MigrationRollbackUnavailable,
    MigrationSnapshotRef,
)
from mnemolog.substrate.migrations.runner import audited_restore, run_migration

__all__ = [
    "MigratableUnit",
    "MigrationBackend",
    "MigrationCapabilities",
    "MigrationError",
    "MigrationEvent",
    "MigrationLocked",
    "MigrationRollbackUnavailable",
    "MigrationSnapshotRef",
    "audited_restore",
    "run_migration",
]
