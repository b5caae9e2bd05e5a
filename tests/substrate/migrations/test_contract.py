"""Runs requirements 1-8 contract suite (contract.py) against every registered backend."""

from .contract import MigrationBackendContract


class TestMigrationBackendContract(MigrationBackendContract):
    pass
