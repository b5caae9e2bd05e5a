"""The acceptance stories' home: a fresh one, opened through its four doors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import init_home

from .doors import Doors


@pytest.fixture
def doors(tmp_path: Path) -> Iterator[Doors]:
    home = tmp_path / "home"
    init_home(home)
    sub = Substrate.open(home, long_lived=False)
    yield Doors(home, sub)
    sub.close()
