"""Fixtures for curator tests: a fake Ollama server and a recording sleep."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_ollama import FakeOllama


class SleepRecorder:
    """Stands in for time.sleep: records every delay, waits for none."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def server() -> Iterator[FakeOllama]:
    with FakeOllama() as fake:
        yield fake


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()
