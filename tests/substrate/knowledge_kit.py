"""Shared set-up for the knowledge-loop tests: a home with a fake model, and docs/knowledge.md's example."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mnemolog.curators.config import HOST_ENV, MODEL_ENV
from mnemolog.substrate.api import Substrate
from tests.projections.kit import FakeClock, new_home, open_sub
from tests.support.fake_ollama import FakeOllama

P04_PROMPT = "Summarise what the thermal study told us about the M1 supports."
P04_RESPONSE = (
    "CTE gradient analysis drove the M1 support pad layout: it is the second largest WFE "
    "contributor after gravity. Zerodur CTE gradient dominates WFE contribution at fast focal "
    "ratios, about 3 nm at F/1.2."
)
P04_PROJECT_CANDIDATE = (
    "CTE gradient analysis drove the M1 support pad layout, 2nd largest WFE contributor after gravity"
)
P04_DOMAIN_CANDIDATE = "Zerodur CTE gradient dominates WFE contribution at fast focal ratios (F/1.2 = ~3nm)"


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@contextmanager
def knowledge_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, config: str = "", clock: FakeClock | None = None
) -> Iterator[tuple[Substrate, FakeOllama]]:
    """A home with two projects, a fake Ollama server configured as its LLM, and a Substrate on it."""
    home = new_home(tmp_path / "home")
    if config:
        with home.config_path.open("a", encoding="utf-8") as f:
            f.write("\n" + config)
    with FakeOllama() as server:
        monkeypatch.setenv(MODEL_ENV, "fake-model")
        monkeypatch.setenv(HOST_ENV, server.host)
        sub = open_sub(home, clock=clock or FakeClock(), curator_options={"sleep": Sleeps(), "timeout": 10.0})
        try:
            sub.register_project("p04-gigabit", aliases=["p04"], description="1.2 m telescope")
            sub.register_project("p06-polisher", aliases=["p06"])
            yield sub, server
        finally:
            sub.close()


def statuses(sub: Substrate) -> dict[str, tuple[Any, ...]]:
    """Every memory's status, project, domains, confidence and reference count, by id."""
    rows = sub.list(
        statuses=("candidate", "active", "superseded", "invalid"), include_archived=True, limit=1000
    )
    return {
        m["id"]: (m["status"], m["project"], tuple(m["domains"]), m["confidence"], m["reference_count"])
        for m in rows
    }
