"""OllamaCurator against a real HTTP server speaking Ollama's API, via the real client."""

from __future__ import annotations

import json
import time

import pytest

from mnemolog.curators.atomise.choice import make_curator
from mnemolog.curators.atomise.ollama import OllamaCurator
from mnemolog.curators.atomise.prompt import ATOMS_SCHEMA, prompt_sha256, render_messages
from mnemolog.curators.base import Curator, CuratorFailed, SourceTooSmall
from mnemolog.curators.config import LlmConfig
from mnemolog.curators.tokens import count_tokens
from mnemolog.eventlog.errors import MnemologError, UsageError
from tests.curators.conftest import SleepRecorder
from tests.support.fake_ollama import (
    Delay,
    FakeOllama,
    Hangup,
    HttpError,
    Raw,
    Reply,
    atoms_json,
    unreachable_host,
)

MEMORY = (
    "The nightly backup of db1 failed on 3 May because the disk was full. "
    "The on-call engineer freed 40 GB and re-ran the job. "
    "The team decided to alert at 80% disk usage."
)
GOOD = [
    "The nightly backup of db1 failed on 3 May because the disk was full.",
    "The on-call engineer freed 40 GB on db1 and re-ran the backup job.",
    "The team decided to alert at 80% disk usage on db1.",
]


def words(n: int) -> str:
    """A string of exactly n cl100k tokens."""
    text = " ".join(["word"] * n)
    assert count_tokens(text) == n
    return text


def curator(server: FakeOllama, sleeps: SleepRecorder, timeout: float = 10.0) -> OllamaCurator:
    return OllamaCurator(server.host, "fake-model", sleep=sleeps, timeout=timeout)


def test_good_json_gives_atoms_and_provenance(server: FakeOllama, sleeps: SleepRecorder) -> None:
    content = atoms_json(GOOD)
    server.push(Reply(content, prompt_eval_count=321, eval_count=54))
    result = curator(server, sleeps).curate(MEMORY)
    assert [a.text for a in result.atoms] == GOOD
    assert [a.tokens for a in result.atoms] == [count_tokens(t) for t in GOOD]
    assert not any(a.over_budget for a in result.atoms)
    assert result.dropped == ()
    assert result.warnings == ()
    assert result.curator == "ollama"
    assert result.model == "fake-model"
    assert result.prompt_sha256 == prompt_sha256()
    assert (result.input_tokens, result.output_tokens) == (321, 54)
    assert result.attempts == 1
    assert result.responses == (content,)
    assert sleeps.calls == []


def test_request_is_a_non_streaming_schema_constrained_chat(
    server: FakeOllama, sleeps: SleepRecorder
) -> None:
    server.push(atoms_json(GOOD))
    curator(server, sleeps).curate(MEMORY, max_atom_tokens=300)
    (request,) = server.chat_requests
    assert request.json["model"] == "fake-model"
    assert request.json["stream"] is False
    assert request.json["format"] == ATOMS_SCHEMA
    assert request.json["messages"] == render_messages(MEMORY, 300)
    assert "300" in request.json["messages"][0]["content"]
    assert MEMORY in request.json["messages"][1]["content"]


@pytest.mark.parametrize(
    "content",
    [
        "```json\n" + atoms_json(GOOD) + "\n```",
        "```\n" + atoms_json(GOOD) + "\n```",
        "Sure! Here are the atoms:\n\n" + atoms_json(GOOD) + "\n\nLet me know if you need more.",
        "Reasoning {draft}: first I read it. " + atoms_json(GOOD) + " done",
        json.dumps(GOOD),
        "The atoms are " + json.dumps(GOOD) + ".",
    ],
    ids=["fenced-json", "fenced-bare", "prose-wrapped", "prose-with-braces", "bare-list", "list-in-prose"],
)
def test_tolerant_parsing(server: FakeOllama, sleeps: SleepRecorder, content: str) -> None:
    server.push(content)
    result = curator(server, sleeps).curate(MEMORY)
    assert [a.text for a in result.atoms] == GOOD
    assert result.attempts == 1
    assert result.responses == (content,)


def test_malformed_then_good_retries_with_backoff_and_the_same_prompt(
    server: FakeOllama, sleeps: SleepRecorder
) -> None:
    server.push("not json at all", '{"atoms": "one string"}', "[1, 2, 3]", atoms_json(GOOD))
    result = curator(server, sleeps).curate(MEMORY, max_retries=3)
    assert [a.text for a in result.atoms] == GOOD
    assert result.attempts == 4
    assert sleeps.calls == [0.1, 0.5, 2.5]
    assert len(result.responses) == 4
    assert result.responses[0] == "not json at all"
    bodies = [r.body for r in server.chat_requests]
    assert len(bodies) == 4
    assert all(body == bodies[0] for body in bodies), "the prompt must be re-sent verbatim"


def test_retry_budget_past_the_table_reuses_the_last_backoff(
    server: FakeOllama, sleeps: SleepRecorder
) -> None:
    server.push(*(["garbage"] * 5), atoms_json(GOOD))
    result = curator(server, sleeps).curate(MEMORY, max_retries=5)
    assert result.attempts == 6
    assert sleeps.calls == [0.1, 0.5, 2.5, 2.5, 2.5]


def test_malformed_beyond_the_budget_fails(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push("nope", "still nope", atoms_json(GOOD))
    with pytest.raises(CuratorFailed) as caught:
        curator(server, sleeps).curate(MEMORY, max_retries=1)
    failure = caught.value
    assert failure.reason == "malformed_output"
    assert failure.exit_code == 4
    assert failure.slug == "curator_failed"
    assert failure.attempts == 2
    assert failure.responses == ("nope", "still nope")
    assert failure.details["reason"] == "malformed_output"
    assert "no JSON value" in failure.message
    assert sleeps.calls == [0.1]
    assert len(server.chat_requests) == 2
    assert server.pending() == 1, "no attempt beyond the budget"
    envelope = failure.to_json()
    assert envelope["error"] == "curator_failed"
    assert envelope["exit_code"] == 4


def test_zero_retries_means_one_attempt(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push("nope", atoms_json(GOOD))
    with pytest.raises(CuratorFailed) as caught:
        curator(server, sleeps).curate(MEMORY, max_retries=0)
    assert caught.value.attempts == 1
    assert sleeps.calls == []
    assert len(server.chat_requests) == 1


def test_over_budget_atoms_kept_within_tolerance_dropped_beyond(
    server: FakeOllama, sleeps: SleepRecorder
) -> None:
    at_budget, slightly_over, at_limit, far_over = words(50), words(60), words(62), words(63)
    server.push(atoms_json([at_budget, slightly_over, at_limit, far_over]))
    result = curator(server, sleeps).curate(MEMORY, max_atom_tokens=50)
    assert [(a.tokens, a.over_budget) for a in result.atoms] == [
        (50, False),
        (60, True),
        (62, True),
    ]
    assert [(d.index, d.tokens, d.reason) for d in result.dropped] == [(3, 63, "over_budget")]
    assert len(result.warnings) == 3
    assert "atom 1 kept over budget" in result.warnings[0]
    assert "atom 3 dropped" in result.warnings[2]


def test_empty_atoms_are_dropped(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push(atoms_json(["", GOOD[0], "   \n", GOOD[1]]))
    result = curator(server, sleeps).curate(MEMORY)
    assert [a.text for a in result.atoms] == GOOD[:2]
    assert [(d.index, d.reason) for d in result.dropped] == [(0, "empty"), (2, "empty")]


def test_atom_text_is_stripped(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push(atoms_json(["  " + GOOD[0] + "\n", GOOD[1]]))
    result = curator(server, sleeps).curate(MEMORY)
    assert result.atoms[0].text == GOOD[0]


@pytest.mark.parametrize("count", [2, 10])
def test_envelope_bounds_are_inclusive(server: FakeOllama, sleeps: SleepRecorder, count: int) -> None:
    server.push(atoms_json([f"Fact number {i} is true." for i in range(count)]))
    assert len(curator(server, sleeps).curate(MEMORY).atoms) == count


@pytest.mark.parametrize("count", [0, 1, 11])
def test_atom_count_outside_the_envelope_is_retried_then_fails(
    server: FakeOllama, sleeps: SleepRecorder, count: int
) -> None:
    bad = atoms_json([f"Fact number {i} is true." for i in range(count)])
    server.push(bad, bad)
    with pytest.raises(CuratorFailed) as caught:
        curator(server, sleeps).curate(MEMORY, max_retries=1)
    assert caught.value.reason == "envelope"
    assert caught.value.attempts == 2
    assert f"found {count}" in caught.value.message
    assert sleeps.calls == [0.1]


def test_drops_that_leave_one_atom_are_an_envelope_failure(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push(atoms_json([GOOD[0], words(300)]))
    with pytest.raises(CuratorFailed) as caught:
        curator(server, sleeps).curate(MEMORY, max_retries=0)
    assert caught.value.reason == "envelope"
    assert "dropping 1 of 2" in caught.value.message


def test_envelope_failure_then_good_succeeds(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push(atoms_json([GOOD[0]]), atoms_json(GOOD))
    result = curator(server, sleeps).curate(MEMORY, max_retries=1)
    assert result.attempts == 2
    assert len(result.responses) == 2


def test_token_counts_are_summed_over_attempts(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push(
        Reply("garbage", prompt_eval_count=100, eval_count=3),
        Reply(atoms_json(GOOD), prompt_eval_count=100, eval_count=40),
    )
    result = curator(server, sleeps).curate(MEMORY, max_retries=1)
    assert (result.input_tokens, result.output_tokens) == (200, 43)


def test_token_counts_fall_back_to_tiktoken(server: FakeOllama, sleeps: SleepRecorder) -> None:
    content = atoms_json(GOOD)
    server.push(Reply(content, omit_counts=True))
    result = curator(server, sleeps).curate(MEMORY)
    messages = render_messages(MEMORY, 200)
    assert result.input_tokens == sum(count_tokens(m["content"]) for m in messages)
    assert result.output_tokens == count_tokens(content)


def test_server_down_is_unreachable_without_retries(sleeps: SleepRecorder) -> None:
    down = OllamaCurator(unreachable_host(), "fake-model", sleep=sleeps, timeout=5.0)
    with pytest.raises(CuratorFailed) as caught:
        down.curate(MEMORY, max_retries=3)
    assert caught.value.reason == "unreachable"
    assert caught.value.attempts == 1
    assert sleeps.calls == []
    assert "unreachable" in caught.value.message


def test_slow_server_beyond_the_client_timeout_is_a_timeout(
    server: FakeOllama, sleeps: SleepRecorder
) -> None:
    server.push(Delay(10.0, atoms_json(GOOD)), atoms_json(GOOD))
    started = time.monotonic()
    with pytest.raises(CuratorFailed) as caught:
        curator(server, sleeps, timeout=0.3).curate(MEMORY, max_retries=3)
    assert time.monotonic() - started < 5.0
    assert caught.value.reason == "timeout"
    assert caught.value.attempts == 1
    assert sleeps.calls == []
    assert len(server.chat_requests) == 1
    assert "0.3 s" in caught.value.message


def test_delay_within_the_timeout_still_succeeds(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push(Delay(0.2, atoms_json(GOOD)))
    result = curator(server, sleeps, timeout=5.0).curate(MEMORY)
    assert len(result.atoms) == 3


@pytest.mark.parametrize("status", [500, 503, 400])
def test_http_errors_are_server_errors(server: FakeOllama, sleeps: SleepRecorder, status: int) -> None:
    server.push(HttpError(status, "model runner crashed"), atoms_json(GOOD))
    with pytest.raises(CuratorFailed) as caught:
        curator(server, sleeps).curate(MEMORY)
    assert caught.value.reason == "server_error"
    assert caught.value.details["status_code"] == status
    assert "model runner crashed" in caught.value.message
    assert caught.value.attempts == 1
    assert sleeps.calls == []


def test_unknown_model_is_a_server_error(sleeps: SleepRecorder) -> None:
    with FakeOllama(models=["gemma-fake"], strict_models=True) as strict:
        missing = OllamaCurator(strict.host, "nonexistent", sleep=sleeps)
        with pytest.raises(CuratorFailed) as caught:
            missing.curate(MEMORY)
    assert caught.value.reason == "server_error"
    assert caught.value.details["status_code"] == 404
    assert "not found" in caught.value.message


def test_connection_dropped_mid_request_is_a_server_error(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push(Hangup())
    with pytest.raises(CuratorFailed) as caught:
        curator(server, sleeps).curate(MEMORY)
    assert caught.value.reason == "server_error"


@pytest.mark.parametrize(
    "raw",
    [Raw(b"<html>proxy error</html>", content_type="text/html"), Raw(b'{"unexpected": 1}')],
    ids=["not-json", "not-a-chat-response"],
)
def test_a_reply_that_is_not_a_chat_response_is_a_server_error(
    server: FakeOllama, sleeps: SleepRecorder, raw: Raw
) -> None:
    server.push(raw)
    with pytest.raises(CuratorFailed) as caught:
        curator(server, sleeps).curate(MEMORY)
    assert caught.value.reason == "server_error"
    assert "non-chat response" in caught.value.message


def test_failure_after_malformed_attempts_keeps_their_responses(
    server: FakeOllama, sleeps: SleepRecorder
) -> None:
    server.push("garbage", HttpError(500, "boom"))
    with pytest.raises(CuratorFailed) as caught:
        curator(server, sleeps).curate(MEMORY, max_retries=3)
    assert caught.value.reason == "server_error"
    assert caught.value.attempts == 2
    assert caught.value.responses == ("garbage",)


@pytest.mark.parametrize("text", ["", "   ", "\n\t\n"])
def test_empty_source_is_too_small_and_calls_no_model(
    server: FakeOllama, sleeps: SleepRecorder, text: str
) -> None:
    with pytest.raises(SourceTooSmall) as caught:
        curator(server, sleeps).curate(text)
    assert caught.value.exit_code == 1
    assert server.requests == []


@pytest.mark.parametrize("kw", [{"max_atom_tokens": 49}, {"max_retries": -1}])
def test_bad_arguments_are_usage_errors_before_any_request(
    server: FakeOllama, sleeps: SleepRecorder, kw: dict[str, int]
) -> None:
    with pytest.raises(UsageError):
        curator(server, sleeps).curate(MEMORY, **kw)
    assert server.requests == []


def test_factory_builds_a_working_ollama_curator(server: FakeOllama, sleeps: SleepRecorder) -> None:
    built = make_curator("ollama", LlmConfig(host=server.host, model="fake-model"), sleep=sleeps)
    assert isinstance(built, Curator)
    assert (built.name, built.model) == ("ollama", "fake-model")
    server.push("junk", atoms_json(GOOD))
    result = built.curate(MEMORY, max_retries=1)
    assert result.attempts == 2
    assert sleeps.calls == [0.1]


def test_every_failure_is_a_mnemolog_error(sleeps: SleepRecorder) -> None:
    down = OllamaCurator(unreachable_host(), "fake-model", sleep=sleeps)
    with pytest.raises(MnemologError):
        down.curate(MEMORY)


def test_model_is_required() -> None:
    with pytest.raises(ValueError, match="model"):
        OllamaCurator("http://127.0.0.1:1", "")
