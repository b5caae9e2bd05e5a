"""Fixtures of the vault tests: the reference implementation's venv (built once, cached)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .aas_venv import ensure_aas_venv


@pytest.fixture(scope="session")
def aas_python() -> Path:
    """The python of `.venv-aas` with atomic-agents-stack installed, or a skip saying why not."""
    python, why = ensure_aas_venv()
    if python is None:
        pytest.skip(f"atomic-agents-stack is not installable here (no network?): {why}")
    return python
