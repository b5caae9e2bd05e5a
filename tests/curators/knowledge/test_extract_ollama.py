"""The Ollama extractor against a real HTTP server speaking Ollama's API, via the real client."""

from __future__ import annotations

import json

from mnemolog.curators.base import BACKOFF
from mnemolog.curators.knowledge.extract import Extraction, Extractor, InteractionText
from mnemolog.curators.knowledge.extract_ollama import OllamaExtractor
from mnemolog.curators.knowledge.extract_prompt import extraction_schema, prompt_sha256, render_messages
from mnemolog.curators.outcome import ModelFailure
from mnemolog.eventlog.vocabulary.knowledge import DOMAINS, domain_vocabulary
from tests.curators.conftest import SleepRecorder
from tests.support.fake_knowledge import candidates_json, domain, project
from tests.support.fake_ollama import Delay, FakeOllama, Hangup, HttpError, Raw, Reply, unreachable_host

P04 = InteractionText(
    prompt="What did the thermal study show?",
    response="CTE gradient analysis drove the M1 support pad layout. Zerodur CTE gradient dominates WFE "
    "at fast focal ratios (about 3 nm at F/1.2).",
    project="p04-gigabit",
)
SEED = [
    project("CTE gradient analysis drove the M1 support pad layout", "p04-gigabit"),
    domain(
        "Zerodur CTE gradient dominates WFE contribution at fast focal ratios (F/1.2 = ~3nm)", "materials"
    ),
]


def extractor(server: FakeOllama, sleeps: SleepRecorder, **kw: object) -> OllamaExtractor:
    return OllamaExtractor(server.host, "fake-model", sleep=sleeps, timeout=5.0, **kw)  # type: ignore[arg-type]


def test_the_seed_example_yields_a_project_and_a_domain_candidate(
    server: FakeOllama, sleeps: SleepRecorder
) -> None:
    content = candidates_json(SEED)
    server.push(Reply(content, prompt_eval_count=900, eval_count=80))
    ex = extractor(server, sleeps)
    assert isinstance(ex, Extractor)
    result = ex.extract(P04)
    assert isinstance(result, Extraction)
    first, second = result.candidates
    assert (first.layer, first.project, first.domains) == ("project", "p04-gigabit", ())
    assert (second.layer, second.project, second.domains, second.kind) == (
        "domain",
        "",
        ("materials",),
        "knowledge",
    )
    assert (result.extractor, result.version, result.model) == ("ollama", "1", "fake-model")
    assert result.prompt_sha256 == prompt_sha256()
    assert result.responses == (content,)
    assert (result.attempts, result.input_tokens, result.output_tokens) == (1, 900, 80)
    assert sleeps.calls == []


def test_the_request_is_a_schema_constrained_chat_with_the_pinned_prompt(
    server: FakeOllama, sleeps: SleepRecorder
) -> None:
    server.push(candidates_json([]))
    extractor(server, sleeps).extract(P04)
    (request,) = server.chat_requests
    assert request.json["stream"] is False
    assert request.json["format"] == extraction_schema()
    assert request.json["messages"] == render_messages(P04.prompt, P04.response, P04.project)
    system = request.json["messages"][0]["content"]
    assert "could they find it in 30 seconds?" in system
    assert all(f"- {d}:" in system for d in DOMAINS)


def test_configured_domains_reach_the_prompt_schema_and_fingerprint(
    server: FakeOllama, sleeps: SleepRecorder
) -> None:
    vocabulary = domain_vocabulary(["nutrition"])
    server.push(
        candidates_json([domain("Protein intake above 2 g/kg shows no extra gain in trials", "nutrition")])
    )
    result = extractor(server, sleeps, domains=vocabulary).extract(P04)
    assert isinstance(result, Extraction)
    assert result.candidates[0].domains == ("nutrition",)
    assert result.prompt_sha256 == prompt_sha256(vocabulary) != prompt_sha256()
    assert (
        "nutrition"
        in server.chat_requests[0].json["format"]["properties"]["candidates"]["items"]["properties"][
            "domain"
        ]["enum"]
    )


def test_nothing_worth_keeping_is_an_answer(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push(candidates_json([]))
    result = extractor(server, sleeps).extract(P04)
    assert isinstance(result, Extraction) and result.candidates == ()


def test_malformed_output_is_retried_with_backoff_then_accepted(
    server: FakeOllama, sleeps: SleepRecorder
) -> None:
    server.push("sorry, I cannot", json.dumps({"atoms": ["x"]}), candidates_json(SEED))
    result = extractor(server, sleeps).extract(P04, max_retries=3)
    assert isinstance(result, Extraction)
    assert result.attempts == 3
    assert len(result.responses) == 3
    assert sleeps.calls == [BACKOFF[0], BACKOFF[1]]


def test_malformed_output_every_time_is_a_failure_with_every_reply(
    server: FakeOllama, sleeps: SleepRecorder
) -> None:
    server.push("nope", "still nope")
    result = extractor(server, sleeps).extract(P04, max_retries=1)
    assert isinstance(result, ModelFailure)
    assert result.reason == "malformed_output"
    assert result.responses == ("nope", "still nope")
    assert result.attempts == 2
    assert result.prompt_sha256 == prompt_sha256()
    assert "no JSON value" in result.message


def test_a_server_error_fails_at_once(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push(HttpError(500, "model crashed"))
    result = extractor(server, sleeps).extract(P04, max_retries=3)
    assert isinstance(result, ModelFailure)
    assert result.reason == "server_error"
    assert result.details["status_code"] == 500
    assert "model crashed" in result.message
    assert sleeps.calls == [] and len(server.chat_requests) == 1


def test_a_failure_after_a_malformed_reply_keeps_that_reply(
    server: FakeOllama, sleeps: SleepRecorder
) -> None:
    server.push("garbage", HttpError(503, "overloaded"))
    result = extractor(server, sleeps).extract(P04, max_retries=3)
    assert isinstance(result, ModelFailure)
    assert (result.reason, result.attempts, result.responses) == ("server_error", 2, ("garbage",))


def test_unreachable(sleeps: SleepRecorder) -> None:
    ex = OllamaExtractor(unreachable_host(), "fake-model", sleep=sleeps, timeout=2.0)
    result = ex.extract(P04)
    assert isinstance(result, ModelFailure)
    assert result.reason == "unreachable"


def test_timeout(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push(Delay(3.0, candidates_json(SEED)))
    ex = OllamaExtractor(server.host, "fake-model", sleep=sleeps, timeout=0.3)
    result = ex.extract(P04)
    assert isinstance(result, ModelFailure)
    assert result.reason == "timeout"


def test_hangup_and_non_chat_bodies(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push(Hangup())
    assert isinstance(extractor(server, sleeps).extract(P04), ModelFailure)
    server.push(Raw(b"<html>proxy error</html>", status=200, content_type="text/html"))
    result = extractor(server, sleeps).extract(P04)
    assert isinstance(result, ModelFailure) and result.reason == "server_error"


def test_an_oversized_interaction_is_shown_cut_and_marked(server: FakeOllama, sleeps: SleepRecorder) -> None:
    big = "x" * 200_000
    server.push(candidates_json([]))
    extractor(server, sleeps).extract(InteractionText("why?", big, ""))
    user = server.chat_requests[0].json["messages"][1]["content"]
    assert "characters omitted" in user
    assert len(user) < 70_000
