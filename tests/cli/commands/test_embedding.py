"""Embeddings as an operator meets them: the default offline embedder, recall modes, `embeddings ...`.

The `mnemolog` command with the environment of a new user (no
MNEMOLOG_* variables: tests/conftest.py strips them): a new home embeds with WordLlama, recall is hybrid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.projections.kit import log_digest, new_home
from tests.support.cli import Cli


def fails(cli: Cli, home: Path, code: int, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The document of a refusal with `code`, which must leave the log as it was."""
    before = log_digest(home)
    got, out = cli.json(home, *args, env=env)
    assert got == code, out
    assert out["ok"] is False and out["exit_code"] == code
    assert log_digest(home) == before
    return out  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_new_home_embeds_offline_and_recalls_by_meaning(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MNEMOLOG_EMBED")  # what a new user has: the default embedder
    home = tmp_path / "home"
    new_home(home)
    kafka = cli.ok(home, "store", "We chose Kafka as the event bus", "--tag", "flaky")["memory"]
    assert kafka["embedding"] == "embedded"
    cli.ok(home, "store", "The disk on db-3 is full")
    status = cli.ok(home, "embeddings", "status")["embeddings"]
    assert status["recorded"]["kind"] == "minilm" and status["recorded"]["dim"] == 384
    assert (status["vectors"], status["pending"]) == (2, 0)

    r = cli.ok(home, "recall", "what message queue did we pick", "--explain")
    assert r["mode"] == "hybrid" and r["fallback"] is None
    top = r["results"][0]
    assert top["id"] == kafka["id"]
    assert top["explain"]["vector_rank"] == 1 and top["explain"]["bm25_rank"] is None
    assert cli.ok(home, "recall", "what message queue did we pick", "--mode", "bm25")["results"] == []
    assert [m["id"] for m in cli.ok(home, "search", "flaky")["results"]] == [kafka["id"]]
    assert cli.ok(home, "search", "flak")["results"] == []  # search stays exact

    fails(cli, home, 1, "embeddings", "set", "minilm")  # unchanged
    fails(cli, home, 64, "embeddings", "set", "ollama")  # no model named
    down = {"MNEMOLOG_EMBED_HOST": "http://127.0.0.1:9"}
    assert (
        fails(cli, home, 4, "embeddings", "set", "ollama", "nomic-embed-text", env=down)["error"]
        == "embedder_failed"
    )

    off = cli.ok(home, "embeddings", "set", "off")
    assert off["embedder"]["kind"] == "off"
    assert cli.ok(home, "recall", "kafka")["mode"] == "bm25"
    err = fails(cli, home, 3, "recall", "kafka", "--mode", "vector")
    assert "embeddings set minilm" in err["message"]

    again = cli.ok(home, "embeddings", "set", "minilm")
    assert again["sync"] == {"embedded": 0, "filled": 0, "pending": 0}  # all from the cache
    # log.created, the first write's embedder.configured, two stores, off, minilm again
    rebuilt = cli.ok(home, "rebuild")
    assert rebuilt["replayed"] == rebuilt["log_size"] == 6
    assert cli.ok(home, "embeddings", "status")["embeddings"]["vectors"] == 2
    hist = cli.ok(home, "embeddings", "status")["embeddings"]["history"]
    assert [h["kind"] for h in hist] == ["minilm", "off", "minilm"]
