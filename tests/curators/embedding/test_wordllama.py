"""The offline WordLlama embedder, for real: weights from the wheel, no network."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from mnemolog.curators.embedding.embedder import Embedder, EmbedderFailed, make_embedder
from mnemolog.curators.embedding.wordllama import DIM, MODEL, WordLlamaEmbedder


@pytest.fixture(scope="module")
def wl() -> WordLlamaEmbedder:
    return WordLlamaEmbedder.shared()


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any attempt to open a socket fails the test: loading must be offline."""

    def refuse(*a: Any, **kw: Any) -> None:
        raise AssertionError("the embedder tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield


def test_loads_offline_and_embeds(no_network: None) -> None:
    e = WordLlamaEmbedder()  # a fresh instance, so the load happens under no_network
    v = e.embed(["we chose Kafka as the event bus"])
    assert v.shape == (1, DIM)
    assert v.dtype == np.float32
    assert np.isclose(np.linalg.norm(v[0]), 1.0, atol=1e-5)
    assert isinstance(e, Embedder)


def test_meaning_is_closer_than_chance(wl: WordLlamaEmbedder) -> None:
    a, b, c = wl.embed(
        ["we chose Kafka as the message queue", "which message broker did we pick", "the cat sat on the mat"]
    )
    assert float(a @ b) > float(a @ c)
    assert float(a @ b) > float(b @ c)


def test_a_text_embeds_the_same_whatever_its_batch(wl: WordLlamaEmbedder) -> None:
    texts = ["short", "a much longer text " * 50, "ünïcödé 日本語 текст", "x" * 10, "tabs\tand\nnewlines"]
    together = wl.embed(texts)
    alone = np.vstack([wl.embed([t]) for t in texts])
    reordered = wl.embed(texts[::-1])[::-1]
    assert np.array_equal(together, alone)
    assert np.array_equal(together, reordered)


def test_agrees_with_the_library_pooling(wl: WordLlamaEmbedder) -> None:
    from pathlib import Path

    import wordllama

    ref = wordllama.WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)
    texts = ["the deploy failed on Monday", "rolled back to version 3"]
    assert np.allclose(wl.embed(texts), ref.embed(texts, norm=True), atol=1e-6)


def test_identity(wl: WordLlamaEmbedder) -> None:
    assert wl.kind == "wordllama"
    assert wl.model == MODEL
    assert wl.dim == 256
    assert wl.model_id.startswith(f"wordllama/{MODEL}@")
    assert "sha256:" in wl.version and len(wl.version.split("sha256:")[1]) == 64
    assert make_embedder("wordllama") is WordLlamaEmbedder.shared()


def test_edge_inputs(wl: WordLlamaEmbedder) -> None:
    assert wl.embed([]).shape == (0, DIM)
    # Text that tokenises to nothing still gets a finite unit vector.
    v = wl.embed(["\u200b", " ", "\x00"])
    assert np.isfinite(v).all()
    big = wl.embed(["word " * 60_000])  # about 256 KiB, the content limit
    assert big.shape == (1, DIM)


def test_unknown_model_is_refused() -> None:
    with pytest.raises(EmbedderFailed, match="one offline model"):
        WordLlamaEmbedder("l3_supercat_1024")


def test_missing_weights_are_reported_not_downloaded(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import mnemolog.curators.embedding.wordllama as mod

    monkeypatch.setattr(mod, "_package_dir", lambda: tmp_path)
    e = WordLlamaEmbedder()
    with pytest.raises(EmbedderFailed, match="reinstall") as ei:
        e.embed(["x"])
    assert ei.value.reason == "unavailable"
