"""The wheel's package list is the source tree's: a feature room left out would be missing when installed."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_directory_is_listed_for_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    tops = config["package-dir"]
    on_disk = {
        ".".join((name, *init.parent.relative_to(ROOT / folder).parts))
        for name, folder in tops.items()
        for init in (ROOT / folder).rglob("__init__.py")
    }
    assert sorted(config["packages"]) == sorted(on_disk)
