"""The fake Ollama server speaks enough of the API for the real client."""

from __future__ import annotations

import json
import time

import httpx
import ollama
import pytest

from tests.support.fake_ollama import (
    FAKE_VERSION,
    Delay,
    FakeOllama,
    Hangup,
    HttpError,
    Reply,
    atoms_json,
    unreachable_host,
)


def client(server: FakeOllama, timeout: float = 5.0) -> ollama.Client:
    return ollama.Client(host=server.host, timeout=timeout)


def test_discovery_endpoints(server: FakeOllama) -> None:
    c = client(server)
    assert [m.model for m in c.list().models] == ["fake-model"]
    assert [m.model for m in c.ps().models] == ["fake-model"]
    assert c.show("fake-model").modelfile == "FROM fake"
    assert httpx.get(server.host + "/api/version").json() == {"version": FAKE_VERSION}
    assert httpx.get(server.host + "/").text == "Ollama is running"
    assert httpx.get(server.host + "/api/nowhere").status_code == 404


def test_chat_reply_has_ollamas_shape(server: FakeOllama) -> None:
    server.push(Reply("hello", prompt_eval_count=7, eval_count=2))
    response = client(server).chat(model="m", messages=[{"role": "user", "content": "hi"}])
    assert response.message.role == "assistant"
    assert response.message.content == "hello"
    assert (response.prompt_eval_count, response.eval_count) == (7, 2)
    assert response.done is True
    assert response.done_reason == "stop"
    assert response.model == "m"
    assert response.created_at is not None and response.created_at.endswith("Z")


def test_default_counts_and_omitted_counts(server: FakeOllama) -> None:
    server.push("three word reply", Reply("x", omit_counts=True))
    c = client(server)
    first = c.chat(model="m", messages=[{"role": "user", "content": "one two"}])
    assert (first.prompt_eval_count, first.eval_count) == (2, 3)
    second = c.chat(model="m", messages=[])
    assert (second.prompt_eval_count, second.eval_count) == (None, None)


def test_streaming_chat_is_ndjson(server: FakeOllama) -> None:
    server.push("streamed")
    parts = list(client(server).chat(model="m", messages=[], stream=True))
    assert [p.message.content for p in parts] == ["streamed", ""]
    assert [p.done for p in parts] == [False, True]


def test_generate_is_scripted_too(server: FakeOllama) -> None:
    server.push("generated", path="/api/generate")
    assert client(server).generate(model="m", prompt="p").response == "generated"


def test_embeddings_are_deterministic(server: FakeOllama) -> None:
    c = client(server)
    first = c.embed(model="m", input=["alpha", "beta"]).embeddings
    again = c.embed(model="m", input="alpha").embeddings
    assert len(first) == 2
    assert len(first[0]) == server.embed_dim
    assert list(again[0]) == list(first[0])
    assert list(first[0]) != list(first[1])
    assert all(-1.0 <= x <= 1.0 for x in first[0])
    assert list(c.embeddings(model="m", prompt="alpha").embedding) == list(first[0])


def test_embed_errors_can_be_scripted(server: FakeOllama) -> None:
    server.push(HttpError(500, "embedder down"), path="/api/embed")
    with pytest.raises(ollama.ResponseError) as caught:
        client(server).embed(model="m", input="x")
    assert caught.value.status_code == 500
    with pytest.raises(ValueError, match="vectors"):
        server.push("text", path="/api/embed")


def test_unscripted_chat_is_an_error_not_a_pass(server: FakeOllama) -> None:
    with pytest.raises(ollama.ResponseError) as caught:
        client(server).chat(model="m", messages=[])
    assert caught.value.status_code == 500
    assert "no scripted reply" in caught.value.error


def test_default_reply_when_the_queue_is_empty() -> None:
    with FakeOllama(default=atoms_json(["a", "b"])) as server:
        c = client(server)
        for _ in range(3):
            content = c.chat(model="m", messages=[]).message.content
            assert content is not None
            assert json.loads(content) == {"atoms": ["a", "b"]}


def test_errors_delays_and_hangups(server: FakeOllama) -> None:
    server.push(HttpError(503, "busy"), Delay(5.0, "late"), Hangup(), "fine")
    c = client(server, timeout=0.3)
    with pytest.raises(ollama.ResponseError) as error:
        c.chat(model="m", messages=[])
    assert (error.value.status_code, error.value.error) == (503, "busy")
    with pytest.raises(httpx.TimeoutException):
        c.chat(model="m", messages=[])
    with pytest.raises(httpx.RemoteProtocolError):
        c.chat(model="m", messages=[])
    assert c.chat(model="m", messages=[]).message.content == "fine"
    assert server.pending() == 0


def test_requests_are_recorded_in_order(server: FakeOllama) -> None:
    server.push("a", "b")
    c = client(server)
    c.chat(model="m1", messages=[{"role": "user", "content": "first"}], format={"type": "object"})
    c.list()
    c.chat(model="m2", messages=[{"role": "user", "content": "second"}])
    assert [(r.method, r.path) for r in server.requests] == [
        ("POST", "/api/chat"),
        ("GET", "/api/tags"),
        ("POST", "/api/chat"),
    ]
    chats = server.chat_requests
    assert [r.json["model"] for r in chats] == ["m1", "m2"]
    assert chats[0].json["format"] == {"type": "object"}
    assert chats[0].json["stream"] is False
    assert chats[0].headers["content-type"] == "application/json"
    assert json.loads(chats[0].body) == chats[0].json
    assert chats[0].received_at <= chats[1].received_at


def test_strict_models_answer_404_for_unknown_models() -> None:
    with FakeOllama(models=["known"], strict_models=True) as server:
        server.push("ok")
        c = client(server)
        with pytest.raises(ollama.ResponseError) as caught:
            c.chat(model="unknown", messages=[])
        assert caught.value.status_code == 404
        assert c.chat(model="known", messages=[]).message.content == "ok"


def test_only_known_paths_can_be_scripted(server: FakeOllama) -> None:
    with pytest.raises(ValueError, match="cannot script"):
        server.push("x", path="/api/pull")


def test_close_is_prompt_even_with_a_pending_delay() -> None:
    server = FakeOllama()
    server.push(Delay(30.0, "never"))
    with pytest.raises(httpx.TimeoutException):
        client(server, timeout=0.2).chat(model="m", messages=[])
    started = time.monotonic()
    server.close()
    assert time.monotonic() - started < 2.0
    with pytest.raises(ConnectionError):
        client(server).list()


def test_unreachable_host_refuses_connections() -> None:
    with pytest.raises(ConnectionError):
        ollama.Client(host=unreachable_host(), timeout=2.0).list()
