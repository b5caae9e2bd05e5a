"""The `harness` fixture: requirements 1-8 contract suite runs once per registered backend.

Every `harness_*.py` module in this directory registers a factory with
`contract.register_harness`; the filesystem backend's is harness_filesystem.py.
Another backend (the log's) joins the suite by adding its own harness module
here, without editing this file or the contract.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from . import contract

for _module in sorted(Path(__file__).parent.glob("harness_*.py")):
    importlib.import_module(f"{__package__}.{_module.stem}")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "harness_factory" in metafunc.fixturenames:
        names = sorted(contract.HARNESSES)
        metafunc.parametrize("harness_factory", [contract.HARNESSES[n] for n in names], ids=names)


@pytest.fixture
def harness(harness_factory: contract.HarnessFactory, tmp_path: Path) -> contract.Harness:
    return harness_factory(tmp_path)
