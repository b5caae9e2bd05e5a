"""The embedder contract: output checks and the [embeddings] configuration."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemolog.curators.embedding.embedder import (
    DEFAULT_OLLAMA_HOST,
    EmbedConfig,
    EmbedderFailed,
    check_vectors,
    make_embedder,
    parse_embed_config,
)
from mnemolog.eventlog.errors import BadInput, MnemologError, UsageError


def test_vectors_come_back_unit_length_float32() -> None:
    out = check_vectors([[3.0, 4.0], [0.0, -2.0]], count=2, dim=2, where="t")
    assert out.dtype == np.float32
    assert np.allclose(out, [[0.6, 0.8], [0.0, -1.0]])


@pytest.mark.parametrize(
    ("raw", "count", "dim", "found"),
    [
        ([[1.0, 2.0, 3.0]], 1, 2, 3),  # wrong dimension
        ([[1.0, 2.0]], 2, 2, [1, 2]),  # too few vectors
        ([[1.0, 2.0], [1.0, 2.0]], 1, 2, [2, 2]),  # too many
        ([1.0, 2.0], 1, 2, [2]),  # not a list of vectors
    ],
)
def test_wrong_shapes_are_refused(raw: object, count: int, dim: int, found: object) -> None:
    with pytest.raises(EmbedderFailed) as ei:
        check_vectors(raw, count=count, dim=dim, where="model m")
    assert ei.value.reason == "bad_vectors"
    assert ei.value.exit_code == 4
    assert ei.value.details["found"] == found
    assert "model m" in ei.value.message


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_are_refused_naming_the_text(bad: float) -> None:
    with pytest.raises(EmbedderFailed, match="text 1") as ei:
        check_vectors([[1.0, 0.0], [bad, 1.0]], count=2, dim=2, where="m")
    assert ei.value.details["index"] == 1


def test_zero_vector_and_garbage_are_refused() -> None:
    with pytest.raises(EmbedderFailed, match="all-zero"):
        check_vectors([[0.0, 0.0]], count=1, dim=2, where="m")
    with pytest.raises(EmbedderFailed):
        check_vectors([["a", "b"]], count=1, dim=2, where="m")
    with pytest.raises(EmbedderFailed):
        check_vectors([[1.0, [2.0]]], count=1, dim=2, where="m")


@given(
    st.lists(
        st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=3, max_size=3).filter(
            lambda v: any(abs(x) > 1e-3 for x in v)
        ),
        min_size=1,
        max_size=8,
    )
)
def test_any_finite_nonzero_batch_normalises(rows: list[list[float]]) -> None:
    out = check_vectors(rows, count=len(rows), dim=None, where="m")
    assert out.shape == (len(rows), 3)
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)


def test_config_defaults_to_offline_minilm() -> None:
    cfg = parse_embed_config(None, environ={})
    assert cfg == EmbedConfig()
    assert cfg.kind == "minilm"
    assert cfg.host == DEFAULT_OLLAMA_HOST


def test_config_table_and_environment() -> None:
    table = {"kind": "ollama", "model": "nomic-embed-text", "host": "http://h:1"}
    table |= {"timeout_s": 5, "batch_size": 8}
    cfg = parse_embed_config(table, environ={})
    assert (cfg.kind, cfg.model, cfg.host, cfg.timeout_s, cfg.batch_size) == (
        "ollama",
        "nomic-embed-text",
        "http://h:1",
        5.0,
        8,
    )
    env = {"MNEMOLOG_EMBED": "off", "MNEMOLOG_EMBED_MODEL": "all-minilm", "MNEMOLOG_EMBED_HOST": "http://e:2"}
    cfg = parse_embed_config(table, environ=env)
    assert (cfg.kind, cfg.model, cfg.host) == ("off", "all-minilm", "http://e:2")
    # The curator's host serves embeddings too when none is named for them.
    assert parse_embed_config({}, environ={"MNEMOLOG_OLLAMA_HOST": "http://o:3"}).host == "http://o:3"


@pytest.mark.parametrize(
    "table",
    [
        {"kind": "bert"},
        {"kind": 3},
        {"model": ""},
        {"model": 5},
        {"timeout_s": -1},
        {"timeout_s": True},
        {"timeout_s": math.nan},
        {"batch_size": 0},
        {"batch_size": 10**9},
        {"max_retries": 99},
        {"host": 7},
        {"nonsense": 1},
    ],
)
def test_bad_config_is_refused_naming_the_key(table: dict[str, object]) -> None:
    with pytest.raises(BadInput) as ei:
        parse_embed_config(table, environ={})
    assert "embeddings" in ei.value.message
    assert ei.value.exit_code == 65


def test_factory() -> None:
    assert make_embedder("off") is None
    with pytest.raises(UsageError, match="needs a model"):
        make_embedder("ollama", None, EmbedConfig(kind="ollama"))
    with pytest.raises(UsageError, match="unknown embedder"):
        make_embedder("bert")
    assert issubclass(EmbedderFailed, MnemologError)
