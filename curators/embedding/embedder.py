"""Embedders: text in, unit vectors out, behind one small interface.

Owns the Embedder protocol the substrate and projections code against, the
check every embedder's output passes before anything is stored (count,
dimension, finite, non-zero), the error an embedder raises, and the
embeddings configuration (the `[embeddings]` table of a home's config.toml
and the MNEMOLOG_EMBED_* environment variables) with the factory that builds
an embedder from it. The embedders themselves live in `embed_minilm`
(offline, the default: all-MiniLM-L6-v2 as an int8 ONNX network),
`embed_wordllama` (offline, lighter and weaker) and `embed_ollama` (an
Ollama server).

Vectors are float32 arrays of shape (n, dim), L2-normalised, so cosine
similarity is a dot product and cosine distance is 1 - dot.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from mnemolog.eventlog.errors import BadInput, MnemologError, UsageError

Vectors = npt.NDArray[np.float32]

EmbedKind = Literal["wordllama", "minilm", "ollama", "off"]
EMBED_KINDS: Final[tuple[str, ...]] = ("wordllama", "minilm", "ollama", "off")

KIND_ENV: Final = "MNEMOLOG_EMBED"
MODEL_ENV: Final = "MNEMOLOG_EMBED_MODEL"
HOST_ENV: Final = "MNEMOLOG_EMBED_HOST"
#: The curator's host variable, used when no embedding host is named (one Ollama serves both).
FALLBACK_HOST_ENV: Final = "MNEMOLOG_OLLAMA_HOST"
DEFAULT_OLLAMA_HOST: Final = "http://127.0.0.1:11434"

DEFAULT_TIMEOUT_S: Final = 60.0
DEFAULT_BATCH: Final = 32
DEFAULT_RETRIES: Final = 2
MAX_BATCH: Final = 1024
MAX_DIM: Final = 8192

EmbedFailure = Literal["unreachable", "timeout", "server_error", "bad_vectors", "unavailable"]


class EmbedderFailed(MnemologError):
    """An embedder gave no usable vectors (exit 4). ``reason`` says why.

    ``bad_vectors`` (wrong count or dimension, NaN or infinity, a zero vector)
    is never retried: the same input gives the same wrong answer. Nothing is
    written when this is raised.
    """

    exit_code = 4
    slug = "embedder_failed"

    def __init__(self, message: str, *, reason: EmbedFailure, **details: Any) -> None:
        super().__init__(message, reason=reason, **details)
        self.reason: EmbedFailure = reason


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors of one fixed dimension."""

    @property
    def kind(self) -> str:
        """ "minilm", "wordllama" or "ollama"."""
        ...

    @property
    def model(self) -> str:
        """The model's name as the operator gives it."""
        ...

    @property
    def version(self) -> str:
        """What pins the model's weights: a package version and file digest, or a server digest."""
        ...

    @property
    def model_id(self) -> str:
        """The cache key of this model: the same id means the same vectors for the same text."""
        ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit vector per text, in order; raises EmbedderFailed."""
        ...


def check_vectors(raw: Any, *, count: int, dim: int | None, where: str) -> Vectors:
    """The embedder's output as an (count, dim) float32 array of unit vectors, or EmbedderFailed.

    ``dim=None`` accepts any dimension the rows agree on (a model probed for
    the first time). ``where`` names the embedder in the message.
    """
    try:
        arr = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise EmbedderFailed(
            f"{where} returned something that is not a list of number vectors ({exc})",
            reason="bad_vectors",
        ) from exc
    if arr.ndim != 2 or arr.shape[0] != count:
        found = list(arr.shape) if arr.ndim else "a scalar"
        raise EmbedderFailed(
            f"{where} returned vectors of shape {found} for {count} text(s); "
            f"expected {count} vectors of one dimension",
            reason="bad_vectors",
            expected=count,
            found=found,
        )
    got = int(arr.shape[1])
    if dim is not None and got != dim:
        raise EmbedderFailed(
            f"{where} returned {got}-dimensional vectors; the home's embedder is configured "
            f"for {dim} dimensions (a different model behind the same name? configure it again)",
            reason="bad_vectors",
            expected=dim,
            found=got,
        )
    if not 1 <= got <= MAX_DIM:
        raise EmbedderFailed(
            f"{where} returned {got}-dimensional vectors; expected 1..{MAX_DIM}",
            reason="bad_vectors",
            found=got,
        )
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        bad = int(np.flatnonzero(~finite)[0])
        raise EmbedderFailed(
            f"{where} returned NaN or infinity in the vector of text {bad}",
            reason="bad_vectors",
            index=bad,
        )
    norms = np.linalg.norm(arr, axis=1)
    zero = norms == 0.0
    if zero.any():
        bad = int(np.flatnonzero(zero)[0])
        raise EmbedderFailed(
            f"{where} returned an all-zero vector for text {bad}: it has no direction to compare",
            reason="bad_vectors",
            index=bad,
        )
    out: Vectors = (arr / norms[:, None]).astype(np.float32)
    return out


# -- configuration ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EmbedConfig:
    """Where and how to reach an embedder: the operational half of the choice.

    Which embedder a home uses is recorded in its log (`embedder.configured`);
    this says how to reach an Ollama server and how hard to try.
    """

    kind: EmbedKind = "minilm"
    model: str | None = None
    host: str = DEFAULT_OLLAMA_HOST
    timeout_s: float = DEFAULT_TIMEOUT_S
    batch_size: int = DEFAULT_BATCH
    max_retries: int = DEFAULT_RETRIES


def _kind(value: Any, where: str) -> EmbedKind:
    if value not in EMBED_KINDS:
        raise BadInput(f"{where} must be one of {', '.join(EMBED_KINDS)}; found {value!r}", field=where)
    return value  # type: ignore[no-any-return]


def _number(table: Mapping[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    if key not in table:
        return default
    v = table[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not lo <= v <= hi:
        raise BadInput(
            f"embeddings.{key} must be a number in [{lo:g}, {hi:g}]; found {v!r}", field=f"embeddings.{key}"
        )
    return float(v)


def parse_embed_config(
    table: Mapping[str, Any] | None, *, environ: Mapping[str, str] | None = None
) -> EmbedConfig:
    """The `[embeddings]` table of config.toml, with environment variables winning.

    Keys: kind ("wordllama" | "minilm" | "ollama" | "off"), model, host, timeout_s,
    batch_size, max_retries. Environment: MNEMOLOG_EMBED (kind),
    MNEMOLOG_EMBED_MODEL, MNEMOLOG_EMBED_HOST (else MNEMOLOG_OLLAMA_HOST).
    """
    env = os.environ if environ is None else environ
    t: Mapping[str, Any] = table or {}
    if not isinstance(t, Mapping):
        raise BadInput("[embeddings] must be a table", field="embeddings")
    unknown = sorted(set(t) - {"kind", "model", "host", "timeout_s", "batch_size", "max_retries"})
    if unknown:
        raise BadInput(f"unknown key(s) in [embeddings]: {unknown}", field="embeddings", found=unknown)
    kind = _kind(env.get(KIND_ENV) or t.get("kind", "minilm"), "embeddings.kind")
    model = env.get(MODEL_ENV) or t.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise BadInput("embeddings.model must be a model name", field="embeddings.model")
    host = env.get(HOST_ENV) or t.get("host") or env.get(FALLBACK_HOST_ENV) or DEFAULT_OLLAMA_HOST
    if not isinstance(host, str):
        raise BadInput("embeddings.host must be a URL", field="embeddings.host")
    return EmbedConfig(
        kind=kind,
        model=model,
        host=host.strip() or DEFAULT_OLLAMA_HOST,
        timeout_s=_number(t, "timeout_s", DEFAULT_TIMEOUT_S, 0.001, 3600),
        batch_size=int(_number(t, "batch_size", DEFAULT_BATCH, 1, MAX_BATCH)),
        max_retries=int(_number(t, "max_retries", DEFAULT_RETRIES, 0, 10)),
    )


def make_embedder(
    kind: str,
    model: str | None = None,
    config: EmbedConfig | None = None,
    *,
    dim: int | None = None,
    **kw: Any,
) -> Embedder | None:
    """Build the embedder of ``kind`` (None for "off").

    ``dim``, when known (a home's recorded choice), is enforced on every
    reply. ``kw`` go to the Ollama embedder (client, sleep).
    """
    cfg = config or EmbedConfig()
    if kind == "off":
        return None
    if kind == "wordllama":
        from mnemolog.curators.embedding.wordllama import WordLlamaEmbedder

        return WordLlamaEmbedder.shared(model)
    if kind == "minilm":
        from mnemolog.curators.embedding.minilm import MiniLMEmbedder

        return MiniLMEmbedder.shared(model)
    if kind == "ollama":
        name = model or cfg.model
        if not name:
            raise UsageError(
                f"the ollama embedder needs a model: give one (e.g. nomic-embed-text), or set {MODEL_ENV}",
                field="model",
            )
        from mnemolog.curators.embedding.ollama import OllamaEmbedder

        return OllamaEmbedder(
            cfg.host,
            name,
            timeout=cfg.timeout_s,
            batch_size=cfg.batch_size,
            max_retries=cfg.max_retries,
            dim=dim,
            **kw,
        )
    raise UsageError(f"unknown embedder {kind!r}; expected one of {list(EMBED_KINDS)}", found=kind)
