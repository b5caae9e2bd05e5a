"""Embeddings as an operator meets them: the default offline embedder, recall modes, `embeddings ...`.

Real `mnemolog` processes with the environment of a new user (no
MNEMOLOG_* variables): a new home embeds with WordLlama, recall is hybrid.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.projections.kit import log_digest, new_home

EXE = Path(sys.executable).with_name("mnemolog")


def run(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOLOG_")}
    argv = [str(EXE), "--home", str(home), "--json", *args]
    return subprocess.run(argv, capture_output=True, timeout=300, env={**base, **(env or {})}, check=False)


def ok(home: Path, *args: str) -> dict[str, Any]:
    p = run(home, *args)
    assert p.returncode == 0, p.stderr.decode() + p.stdout.decode()
    out = json.loads(p.stdout)
    assert out["ok"] is True
    return out  # type: ignore[no-any-return]


def fails(home: Path, code: int, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    before = log_digest(home)
    p = run(home, *args, env=env)
    assert p.returncode == code, p.stderr.decode() + p.stdout.decode()
    out = json.loads(p.stdout)
    assert out["ok"] is False and out["exit_code"] == code
    assert log_digest(home) == before  # a refusal writes nothing
    return out  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_new_home_embeds_offline_and_recalls_by_meaning(tmp_path: Path) -> None:
    home = tmp_path / "home"
    new_home(home)
    kafka = ok(home, "store", "We chose Kafka as the event bus", "--tag", "flaky")["memory"]
    assert kafka["embedding"] == "embedded"
    ok(home, "store", "The disk on db-3 is full")
    status = ok(home, "embeddings", "status")["embeddings"]
    assert status["recorded"]["kind"] == "minilm" and status["recorded"]["dim"] == 384
    assert (status["vectors"], status["pending"]) == (2, 0)

    r = ok(home, "recall", "what message queue did we pick", "--explain")
    assert r["mode"] == "hybrid" and r["fallback"] is None
    top = r["results"][0]
    assert top["id"] == kafka["id"]
    assert top["explain"]["vector_rank"] == 1 and top["explain"]["bm25_rank"] is None
    assert ok(home, "recall", "what message queue did we pick", "--mode", "bm25")["results"] == []
    assert [m["id"] for m in ok(home, "search", "flaky")["results"]] == [kafka["id"]]
    assert ok(home, "search", "flak")["results"] == []  # search stays exact

    fails(home, 1, "embeddings", "set", "minilm")  # unchanged
    fails(home, 64, "embeddings", "set", "ollama")  # no model named
    down = {"MNEMOLOG_EMBED_HOST": "http://127.0.0.1:9"}
    assert (
        fails(home, 4, "embeddings", "set", "ollama", "nomic-embed-text", env=down)["error"]
        == "embedder_failed"
    )

    off = ok(home, "embeddings", "set", "off")
    assert off["embedder"]["kind"] == "off"
    assert ok(home, "recall", "kafka")["mode"] == "bm25"
    err = fails(home, 3, "recall", "kafka", "--mode", "vector")
    assert "embeddings set minilm" in err["message"]

    again = ok(home, "embeddings", "set", "minilm")
    assert again["sync"] == {"embedded": 0, "filled": 0, "pending": 0}  # all from the cache
    # log.created, the first write's embedder.configured, two stores, off, minilm again
    rebuilt = ok(home, "rebuild")
    assert rebuilt["replayed"] == rebuilt["log_size"] == 6
    assert ok(home, "embeddings", "status")["embeddings"]["vectors"] == 2
    hist = ok(home, "embeddings", "status")["embeddings"]["history"]
    assert [h["kind"] for h in hist] == ["minilm", "off", "minilm"]
