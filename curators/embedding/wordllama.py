"""The default embedder: WordLlama, offline, from the weights inside its wheel.

WordLlama's `l2_supercat` model is a table of 256-dimensional token vectors
(16 MB, shipped in the `wordllama` wheel with its tokenizer); a text's vector
is the mean of its tokens' vectors, normalised. It is loaded from the
package's own directory with downloads disabled, so nothing is fetched at
run time; if the files are missing the embedder is unavailable (exit 4), it
never reaches for the network.

The pooling is done here rather than by `WordLlamaInference.embed`: that one
pads a batch to its longest text, and summing a different number of padding
zeros can change a vector in its last bit, so the same text would embed
differently depending on its neighbours in a batch. `np.add.reduceat` sums
each text's token vectors on their own, in order: a text's vector depends on
the text alone.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Final

import numpy as np

from mnemolog.curators.embedding.embedder import EmbedderFailed, Vectors, check_vectors

CONFIG: Final = "l2_supercat"
DIM: Final = 256
MODEL: Final = f"{CONFIG}_{DIM}"
#: Characters per step: bounds the gathered (tokens, dim) float32 matrix (a token is
#: at least one character) at 256 MiB, and lets short texts share one tokenizer call.
CHARS_PER_STEP: Final = 262_144
#: Tokens gathered at once when pooling: small enough that the gathered rows stay in
#: the CPU cache (gathering a whole step's rows first was memory-bound and 10 times slower).
TOKENS_PER_POOL: Final = 4096


def _package_dir() -> Path:
    import wordllama

    return Path(wordllama.__file__).parent


class WordLlamaEmbedder:
    kind = "wordllama"
    _shared: ClassVar[WordLlamaEmbedder | None] = None
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, model: str | None = None) -> None:
        if model not in (None, MODEL, CONFIG):
            raise EmbedderFailed(
                f"the wordllama embedder has one offline model, {MODEL}; found {model!r}",
                reason="unavailable",
                expected=MODEL,
                found=model,
            )
        self.model = MODEL
        self.dim = DIM
        self._lock = threading.Lock()
        self._inference: Any = None

    @classmethod
    def shared(cls, model: str | None = None) -> WordLlamaEmbedder:
        """One instance per process: the weights and tokenizer load once (about a second)."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls(model)
            return cls._shared

    @cached_property
    def package_version(self) -> str:
        from importlib.metadata import version

        return version("wordllama")

    @property
    def model_id(self) -> str:
        return f"wordllama/{MODEL}@{self.package_version}"

    @cached_property
    def version(self) -> str:
        """The package version and the SHA-256 of the weights file (what decides the vectors)."""
        path = _package_dir() / "weights" / f"{MODEL}.safetensors"
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as exc:
            raise self._missing(exc) from exc
        return f"{self.package_version} sha256:{digest}"

    def _missing(self, exc: BaseException) -> EmbedderFailed:
        return EmbedderFailed(
            f"the WordLlama weights are not usable ({type(exc).__name__}: {exc}); reinstall the "
            "`wordllama` package, which ships them (nothing is downloaded at run time)",
            reason="unavailable",
        )

    def _load(self) -> Any:
        with self._lock:
            if self._inference is None:
                try:
                    from wordllama import WordLlama

                    wl = WordLlama.load(CONFIG, cache_dir=_package_dir(), dim=DIM, disable_download=True)
                except (ImportError, OSError, ValueError) as exc:
                    raise self._missing(exc) from exc
                # One text at a time, unpadded: see the module docstring.
                wl.tokenizer.no_padding()
                self._inference = wl
            return self._inference

    def embed(self, texts: Sequence[str]) -> Vectors:
        texts = list(texts)
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        wl = self._load()
        table: np.ndarray = wl.embedding
        out = np.empty((len(texts), DIM), dtype=np.float32)
        lo = 0
        while lo < len(texts):
            # A step: texts up to CHARS_PER_STEP characters (at least one), tokenised in one
            # batch (the tokenizer's own threads), each pooled on its own.
            hi, chars = lo, 0
            while hi < len(texts) and (hi == lo or chars + len(texts[hi]) <= CHARS_PER_STEP):
                chars += len(texts[hi])
                hi += 1
            encs = wl.tokenizer.encode_batch(texts[lo:hi], add_special_tokens=False)
            seqs = [e.ids or [0] for e in encs]
            counts = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
            starts = np.zeros(len(seqs), dtype=np.int64)
            np.cumsum(counts[:-1], out=starts[1:])
            flat = np.fromiter((i for s in seqs for i in s), dtype=np.int64, count=int(counts.sum()))
            np.clip(flat, 0, table.shape[0] - 1, out=flat)
            self._pool(table, flat, starts, counts, out[lo:hi])
            lo = hi
        return check_vectors(out, count=len(texts), dim=DIM, where=f"wordllama {MODEL}")

    @staticmethod
    def _pool(
        table: np.ndarray, flat: np.ndarray, starts: np.ndarray, counts: np.ndarray, out: Vectors
    ) -> None:
        """out[i] = the mean of table[flat[starts[i] : starts[i] + counts[i]]], a block of texts at a time."""
        n = len(starts)
        i = 0
        while i < n:
            j = i + 1
            base = int(starts[i])
            while j < n and int(starts[j]) + int(counts[j]) - base <= TOKENS_PER_POOL:
                j += 1
            end = int(starts[j - 1] + counts[j - 1])
            sums = np.add.reduceat(table[flat[base:end]], starts[i:j] - base, axis=0)
            out[i:j] = sums / counts[i:j, None].astype(np.float32)
            i = j
