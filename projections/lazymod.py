"""numpy, imported on first use: a command that never ranks (`get`, `list`) never loads it.

Importing numpy (and starting OpenBLAS's threads) costs about as much CPU as
every other library a one-shot command needs together. The modules that rank
with it are imported by every command, so they take `np` from here: a module
object whose contents load the first time an attribute is read
(`importlib.util.LazyLoader`). After that it is the ordinary numpy module.

Python 3.11's lazy module is not safe to load from two threads at once, so a
process that serves threads loads it first (`load_now`).
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

__all__ = ["load_now", "numpy"]


def _lazy(name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module named {name!r}")
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


numpy = _lazy("numpy")


def load_now() -> None:
    """Load numpy now (before threads may race to load it)."""
    _ = numpy.ndarray
