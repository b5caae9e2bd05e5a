"""The layering beyond what import-linter's contracts name: eventlog's third-party imports, allow-listed.

`make lint` runs import-linter (pyproject.toml) for the layers and for the
packages eventlog must not import; this test turns the second rule around:
whatever eventlog imports is the standard library, cbor2, pynacl, or eventlog.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = set(sys.stdlib_module_names) | {"__future__", "cbor2", "nacl"}


def imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level}
    return names


def test_eventlog_imports_only_the_standard_library_cbor2_and_pynacl() -> None:
    offenders = {}
    for path in sorted((ROOT / "eventlog").rglob("*.py")):
        bad = {
            n
            for n in imported(path)
            if n.split(".")[0] not in ALLOWED and not n.startswith("mnemolog.eventlog")
        }
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}
