"""OllamaEmbedder against a real HTTP server on 127.0.0.1 speaking Ollama's embed API."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mnemolog.curators.embedding.embedder import EmbedConfig, Embedder, EmbedderFailed, make_embedder
from mnemolog.curators.embedding.ollama import OllamaEmbedder
from tests.curators.conftest import SleepRecorder
from tests.support.fake_ollama import (
    Delay,
    FakeOllama,
    Hangup,
    HttpError,
    Raw,
    embed_reply,
    unreachable_host,
)


def embedder(server: FakeOllama, sleeps: SleepRecorder, **kw: object) -> OllamaEmbedder:
    opts: dict[str, object] = {"timeout": 5.0, "batch_size": 3, "max_retries": 2, "sleep": sleeps}
    opts.update(kw)
    return OllamaEmbedder(server.host, "fake-model", **opts)  # type: ignore[arg-type]


def embed_calls(server: FakeOllama) -> list[list[str]]:
    return [r.json["input"] for r in server.requests if r.path == "/api/embed"]


def test_good_replies_in_batches(server: FakeOllama, sleeps: SleepRecorder) -> None:
    e = embedder(server, sleeps)
    texts = [f"text {i}" for i in range(7)]
    v = e.embed(texts)
    assert v.shape == (7, server.embed_dim)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert embed_calls(server) == [texts[0:3], texts[3:6], texts[6:7]]
    assert all(r.json["model"] == "fake-model" for r in server.requests if r.path == "/api/embed")
    # The same text gives the same vector (the server is deterministic; nothing is mixed up).
    assert np.array_equal(e.embed(["text 4"])[0], v[4])
    assert e.dim == server.embed_dim
    assert sleeps.calls == []
    assert isinstance(e, Embedder)


def test_identity_comes_from_the_servers_digest(server: FakeOllama, sleeps: SleepRecorder) -> None:
    e = embedder(server, sleeps)
    import hashlib

    digest = hashlib.sha256(b"fake-model").hexdigest()
    assert e.version == f"sha256:{digest}"
    assert e.model_id == f"ollama/fake-model@{digest[:16]}"


def test_unknown_model_is_reported(sleeps: SleepRecorder) -> None:
    with FakeOllama(models=["other"]) as server:
        e = embedder(server, sleeps)
        with pytest.raises(EmbedderFailed, match="no model 'fake-model'") as ei:
            _ = e.model_id
        assert ei.value.reason == "unavailable"


def test_probe_finds_the_dimension(sleeps: SleepRecorder) -> None:
    with FakeOllama(embed_dim=384) as server:
        assert embedder(server, sleeps).dim == 384


def test_wrong_dimension_is_refused(server: FakeOllama, sleeps: SleepRecorder) -> None:
    e = embedder(server, sleeps, dim=server.embed_dim)
    server.push(embed_reply([[0.1] * (server.embed_dim + 1)]), path="/api/embed")
    with pytest.raises(EmbedderFailed, match="configured for 8 dimensions") as ei:
        e.embed(["x"])
    assert ei.value.reason == "bad_vectors"
    assert ei.value.details == {"reason": "bad_vectors", "expected": 8, "found": 9}
    assert sleeps.calls == []  # a wrong answer is not retried


def test_dimension_changing_between_batches_is_refused(server: FakeOllama, sleeps: SleepRecorder) -> None:
    e = embedder(server, sleeps, batch_size=1)
    server.push(embed_reply([[1.0, 0.0]]), embed_reply([[1.0, 0.0, 0.0]]), path="/api/embed")
    with pytest.raises(EmbedderFailed, match="3-dimensional"):
        e.embed(["a", "b"])


def test_nan_and_short_replies_are_refused(server: FakeOllama, sleeps: SleepRecorder) -> None:
    e = embedder(server, sleeps)
    server.push(embed_reply([[1.0, math.nan]]), path="/api/embed")
    with pytest.raises(EmbedderFailed, match="NaN"):
        e.embed(["x"])
    server.push(embed_reply([[1.0, 0.5]]), path="/api/embed")
    with pytest.raises(EmbedderFailed, match="for 2 text"):
        e.embed(["x", "y"])


def test_server_down_fails_fast(sleeps: SleepRecorder) -> None:
    e = OllamaEmbedder(unreachable_host(), "m", sleep=sleeps, max_retries=3)
    with pytest.raises(EmbedderFailed, match="unreachable") as ei:
        e.embed(["x"])
    assert ei.value.reason == "unreachable"
    assert ei.value.exit_code == 4
    assert sleeps.calls == []


def test_slow_server_times_out_then_retries(server: FakeOllama, sleeps: SleepRecorder) -> None:
    e = embedder(server, sleeps, timeout=0.2, max_retries=1)
    server.push(Delay(3.0, HttpError(500)), path="/api/embed")
    v = e.embed(["x"])  # the retry gets the server's normal answer
    assert v.shape == (1, 8)
    assert len(sleeps.calls) == 1
    server.push(Delay(3.0, HttpError(500)), Delay(3.0, HttpError(500)), path="/api/embed")
    with pytest.raises(EmbedderFailed, match=r"did not answer within 0\.2 s") as ei:
        e.embed(["x"])
    assert ei.value.reason == "timeout"
    assert ei.value.details["attempts"] == 2


def test_slow_but_within_the_timeout_is_fine(server: FakeOllama, sleeps: SleepRecorder) -> None:
    e = embedder(server, sleeps, timeout=5.0)
    server.push(Delay(0.2, embed_reply([[0.0, 1.0]])), path="/api/embed")
    assert np.allclose(e.embed(["x"]), [[0.0, 1.0]])


def test_transient_errors_are_retried_then_reported(server: FakeOllama, sleeps: SleepRecorder) -> None:
    e = embedder(server, sleeps, max_retries=2)
    server.push(HttpError(503, "loading"), Hangup(), path="/api/embed")
    assert e.embed(["x"]).shape == (1, 8)
    assert sleeps.calls == [0.1, 0.5]
    server.push(HttpError(500), HttpError(500), HttpError(500, "model crashed"), path="/api/embed")
    with pytest.raises(EmbedderFailed, match=r"HTTP 500.*model crashed") as ei:
        e.embed(["x"])
    assert ei.value.reason == "server_error"


def test_client_errors_are_not_retried(server: FakeOllama, sleeps: SleepRecorder) -> None:
    e = embedder(server, sleeps)
    server.push(HttpError(400, "input too long"), path="/api/embed")
    with pytest.raises(EmbedderFailed, match="HTTP 400"):
        e.embed(["x"])
    assert sleeps.calls == []


def test_garbage_body_is_a_server_error(server: FakeOllama, sleeps: SleepRecorder) -> None:
    e = embedder(server, sleeps, max_retries=0)
    server.push(Raw(b"<html>proxy error</html>"), path="/api/embed")
    with pytest.raises(EmbedderFailed) as ei:
        e.embed(["x"])
    assert ei.value.reason == "server_error"


def test_factory_builds_it_from_config(server: FakeOllama) -> None:
    cfg = EmbedConfig(kind="ollama", model="fake-model", host=server.host, batch_size=2)
    e = make_embedder("ollama", None, cfg)
    assert isinstance(e, OllamaEmbedder)
    assert (e.host, e.model, e.batch_size) == (server.host, "fake-model", 2)
    assert e.embed(["a", "b", "c"]).shape == (3, 8)
