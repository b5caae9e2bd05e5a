"""The agent folder service (`Substrate.agent_folder`): persona files, journal days and run logs.

The planners live in `agentfolder`, imported when a render or a promotion
runs, so opening a home does not load them.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from mnemolog.eventlog.store.writer import Clock
from mnemolog.projections.memory.model import Memory
from mnemolog.substrate.home import Home
from mnemolog.substrate.session import Sessions

__all__ = ["AgentFolder"]


class AgentFolder:
    """The agent folder of an open home."""

    def __init__(self, sessions: Sessions, home: Home, clock: Clock) -> None:
        self.sessions = sessions
        self.home = home
        self.clock = clock

    def render(
        self, root: str | Path, agent: str = "mnemolog", namespace: str | None = None
    ) -> dict[str, Any]:
        """Write (merge) persona files, journal days and run logs under root/agent; hand edits kept."""
        from mnemolog.substrate.vault import agentfolder

        return agentfolder.render_agent_folder(
            self.sessions, Path(root), agent, self.home.config, namespace
        ).to_json()

    def promote(self, memory_id: str, *, file: str | None = None, section: str | None = None) -> Memory:
        """Record that a memory joins the agent's persona (today), optionally in one file's section."""
        from mnemolog.substrate.vault import agentfolder

        today = dt.datetime.fromtimestamp(self.clock() / 1e6, dt.UTC).date()
        return agentfolder.promote_to_persona(
            self.sessions, memory_id, today=today, file=file, section=section
        )
