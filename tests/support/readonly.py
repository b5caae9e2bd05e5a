"""Run a command as a process that cannot write where the file modes forbid it.

Tests run as root in some environments, and root ignores file modes. There
the command runs under `setpriv` with the two capabilities that let root
override permissions dropped, so a home made read-only with chmod really is
read-only to it. As any other user, chmod alone does it.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path


def make_read_only(root: Path) -> None:
    """Remove every write bit under `root` (files and directories)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*filenames, *dirnames]:
            p = Path(dirpath) / name
            if not p.is_symlink():
                p.chmod(stat.S_IMODE(p.stat().st_mode) & ~0o222)
    root.chmod(stat.S_IMODE(root.stat().st_mode) & ~0o222)


def make_writable(root: Path) -> None:
    """Give the owner back its write bits (so the test can clean up)."""
    root.chmod(stat.S_IMODE(root.stat().st_mode) | 0o200)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*filenames, *dirnames]:
            p = Path(dirpath) / name
            if not p.is_symlink():
                p.chmod(stat.S_IMODE(p.stat().st_mode) | 0o200)


def unprivileged(argv: list[str]) -> list[str] | None:
    """`argv` run so that file modes bind it; None when that cannot be arranged here."""
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}", "--", *argv]
