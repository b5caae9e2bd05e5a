"""Where the default home is: the one rule, standard library only.

`substrate.home` resolves homes with it, and the command line's hand-off
(cli.handoff) finds a running server's home with it before it imports
anything heavier.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_home"]


def default_home() -> Path:
    """$MNEMOLOG_HOME, else $XDG_DATA_HOME/mnemolog, else ~/.local/share/mnemolog."""
    env = os.environ.get("MNEMOLOG_HOME")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_DATA_HOME")
    if xdg:
        return Path(xdg) / "mnemolog"
    return Path.home() / ".local" / "share" / "mnemolog"
