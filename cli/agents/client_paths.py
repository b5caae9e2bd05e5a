"""Paths that MCP and HTTP clients name are confined to directories the home's owner chose.

A server answers whoever reaches it; the command line answers the person who
typed it. A client's `path` (a bundle to verify), `output` (where to write a
bundle) or `trusted_key` file must therefore lie inside one of the
directories of `[server] paths` in config.toml; by default the home's own
exchange folder, `<home>/bundles/`, where `bundle_export` writes when no
output is given. `paths = []` lets clients name no file at all.

A path is resolved (symbolic links and `..` followed, a relative path taken
from the first directory) before it is compared, so a link inside a
directory that points out of it is refused too. What is then opened still
goes through the read guard (`fsio.open_regular`) or the write guard
(`fsio.check_replaceable`): special files are exit 6, never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from mnemolog.eventlog.errors import BadInput, UsageError

#: The exchange folder, relative to the home: the default and only directory without a setting.
EXCHANGE: Final = "bundles"
MAX_PATH_CHARS: Final = 4096


class PathNotAllowed(UsageError):
    """A client named a path outside the directories `[server] paths` allows (HTTP 403)."""

    slug = "path_not_allowed"


@dataclass(frozen=True)
class ClientPaths:
    roots: tuple[Path, ...]

    @classmethod
    def from_config(cls, raw: Mapping[str, Any], home_root: Path, where: str = "config.toml") -> ClientPaths:
        """`[server] paths`: absolute directories (default: `<home>/bundles`)."""
        table = raw.get("server", {})
        if not isinstance(table, dict):
            raise BadInput(f"{where}: [server] must be a table", file=where, field="server")
        unknown = sorted(set(table) - {"paths"})
        if unknown:
            raise BadInput(f"{where}: unknown [server] setting(s) {unknown}", file=where, field="server")
        if "paths" not in table:
            return cls((home_root / EXCHANGE,))
        paths = table["paths"]
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise BadInput(
                f"{where}: server.paths must be a list of directories, found {type(paths).__name__}",
                file=where,
                field="server.paths",
            )
        roots = []
        for p in paths:
            d = Path(p).expanduser()
            if not d.is_absolute() or "\0" in p:
                raise BadInput(
                    f"{where}: server.paths: expected an absolute directory, found {p!r}",
                    file=where,
                    field="server.paths",
                )
            roots.append(d)
        return cls(tuple(roots))

    def resolve(self, text: str, field: str) -> Path:
        """`text` as a resolved path inside one of the roots, else PathNotAllowed naming it."""
        if not text or "\0" in text or len(text) > MAX_PATH_CHARS:
            raise UsageError(
                f"{field}: expected a path of 1..{MAX_PATH_CHARS} characters without NUL", field=field
            )
        if not self.roots:
            raise PathNotAllowed(
                f"{field}: {text[:200]!r}: this server lets clients name no files "
                "([server] paths = [] in config.toml)",
                field=field,
                path=text[:200],
            )
        p = Path(text)
        if not p.is_absolute():
            p = self.roots[0] / p
        real = Path(os.path.realpath(p))
        for root in self.roots:
            r = Path(os.path.realpath(root))
            if real == r or real.is_relative_to(r):
                return real
        allowed = ", ".join(str(r) for r in self.roots)
        raise PathNotAllowed(
            f"{field}: {text[:200]!r} is outside the directories clients may name ({allowed}); "
            "the home's owner can add one to [server] paths in config.toml",
            field=field,
            path=text[:200],
            allowed=[str(r) for r in self.roots],
        )
