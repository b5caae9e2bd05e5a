"""The Ollama triager against a real HTTP server speaking Ollama's API, via the real client."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mnemolog.curators.base import BACKOFF
from mnemolog.curators.knowledge.answer import parse_verdict
from mnemolog.curators.knowledge.triage import Neighbour, TriageItem, TriageVerdict
from mnemolog.curators.knowledge.triage_ollama import OllamaTriager
from mnemolog.curators.knowledge.triage_prompt import prompt_sha256, render_messages, triage_schema
from mnemolog.curators.outcome import ModelFailure
from mnemolog.curators.parse import MalformedOutput
from mnemolog.eventlog.vocabulary.knowledge import DOMAINS
from tests.curators.conftest import SleepRecorder
from tests.support.fake_knowledge import triaged_content, verdict_by_content, verdict_json
from tests.support.fake_ollama import FakeOllama, HttpError, Reply, unreachable_host

OLD = Neighbour("01OLD", "Zerodur CTE is 0.05 ppm/K across the blank.", "", share=0.5)
ITEM = TriageItem(
    candidate_id="01CAND",
    content="Zerodur CTE gradient dominates WFE contribution at fast focal ratios (F/1.2 = ~3nm).",
    layer="domain",
    kind="knowledge",
    project="",
    domains=("materials",),
    confidence=0.6,
    extractor="ollama",
    neighbours=(OLD,),
)


def triager(server: FakeOllama, sleeps: SleepRecorder) -> OllamaTriager:
    return OllamaTriager(server.host, "fake-model", sleep=sleeps, timeout=5.0)


def test_a_promote_verdict_with_provenance(server: FakeOllama, sleeps: SleepRecorder) -> None:
    content = verdict_json(
        "promote", 0.9, "A measured effect that took an experiment to find.", domains=["materials"]
    )
    server.push(Reply(content, prompt_eval_count=400, eval_count=30))
    out = triager(server, sleeps).triage(ITEM)
    assert isinstance(out, TriageVerdict)
    assert (out.verdict, out.confidence, out.domains, out.project) == ("promote", 0.9, ("materials",), "")
    assert out.reason == "A measured effect that took an experiment to find."
    assert (out.triager, out.model, out.prompt_sha256) == ("ollama", "fake-model", prompt_sha256())
    assert (out.responses, out.attempts, out.input_tokens, out.output_tokens) == ((content,), 1, 400, 30)
    (request,) = server.chat_requests
    assert request.json["format"] == triage_schema()
    assert request.json["stream"] is False
    assert request.json["messages"] == render_messages(
        content=ITEM.content,
        layer="domain",
        kind="knowledge",
        project="",
        domains=("materials",),
        confidence=0.6,
        neighbours=(OLD,),
    )
    assert triaged_content(request.json) == ITEM.content
    assert "01OLD" in request.json["messages"][1]["content"]


@pytest.mark.parametrize("kind", ["reject", "needs_human"])
def test_other_verdicts(server: FakeOllama, sleeps: SleepRecorder, kind: str) -> None:
    server.push(verdict_json(kind, 0.7, "Because."))
    out = triager(server, sleeps).triage(ITEM)
    assert isinstance(out, TriageVerdict) and out.verdict == kind


def test_contradicts_names_a_memory_it_was_shown(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push(verdict_json("contradicts", 0.8, "Says otherwise.", conflicts_with="01OLD"))
    out = triager(server, sleeps).triage(ITEM)
    assert isinstance(out, TriageVerdict)
    assert (out.verdict, out.conflicts_with) == ("contradicts", "01OLD")


def test_contradicts_with_an_unknown_memory_needs_a_person(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push(verdict_json("contradicts", 0.8, "Says otherwise.", conflicts_with="01MADEUP"))
    out = triager(server, sleeps).triage(ITEM)
    assert isinstance(out, TriageVerdict)
    assert (out.verdict, out.conflicts_with) == ("needs_human", None)
    assert any("01MADEUP" in w for w in out.warnings)


def test_computed_replies_answer_by_content(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push(
        verdict_by_content(
            {"Zerodur": verdict_json("promote", 0.9, "Earned.")},
            default=verdict_json("reject", 0.9, "Common."),
        ),
        verdict_by_content(
            {"Zerodur": verdict_json("promote", 0.9, "Earned.")},
            default=verdict_json("reject", 0.9, "Common."),
        ),
    )
    t = triager(server, sleeps)
    first = t.triage(ITEM)
    second = t.triage(TriageItem("01B", "Aluminium expands when heated a lot.", "domain", "knowledge"))
    assert isinstance(first, TriageVerdict) and isinstance(second, TriageVerdict)
    assert (first.verdict, second.verdict) == ("promote", "reject")


def test_malformed_then_good(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push('{"verdict": "maybe"}', verdict_json("promote", 0.9, "Fine."))
    out = triager(server, sleeps).triage(ITEM, max_retries=2)
    assert isinstance(out, TriageVerdict) and out.attempts == 2
    assert sleeps.calls == [BACKOFF[0]]


def test_failures_are_values_with_the_evidence(server: FakeOllama, sleeps: SleepRecorder) -> None:
    server.push("no idea", "still none")
    out = triager(server, sleeps).triage(ITEM, max_retries=1)
    assert isinstance(out, ModelFailure)
    assert (out.reason, out.responses) == ("malformed_output", ("no idea", "still none"))
    server.push(HttpError(404, "model 'fake-model' not found"))
    out = triager(server, sleeps).triage(ITEM)
    assert isinstance(out, ModelFailure) and out.reason == "server_error"
    out = OllamaTriager(unreachable_host(), "m", sleep=sleeps, timeout=2.0).triage(ITEM)
    assert isinstance(out, ModelFailure) and out.reason == "unreachable"


def parse(value: Any) -> Any:
    return parse_verdict(json.dumps(value), item=ITEM, domains=DOMAINS)


@pytest.mark.parametrize(
    ("raw", "verdict"),
    [
        ("Approve", "promote"),
        ("keep", "promote"),
        ("discard", "reject"),
        ("needs human", "needs_human"),
        ("review", "needs_human"),
        ("UNSURE", "needs_human"),
    ],
)
def test_verdict_synonyms(raw: str, verdict: str) -> None:
    assert parse({"verdict": raw, "confidence": 0.5, "reason": "r"}).verdict == verdict


def test_tolerant_reading_of_the_other_fields() -> None:
    parsed = parse(
        {
            "verdict": "promote",
            "confidence": "very",
            "project": "not a project!",
            "domains": ["Optics", "alchemy"],
            "reason": "First sentence here. Second one.",
        }
    )
    assert parsed.confidence == 0.5
    assert parsed.project == ""  # the candidate's own project kept
    assert parsed.domains == ("optics",)
    assert parsed.reason == "First sentence here."
    assert len(parsed.warnings) == 3
    bare = parse({"verdict": "promote"})
    assert bare.domains == ("materials",)  # no suggestion: the candidate's tags stand
    assert bare.reason == "(the model gave no reason)"
    moved = parse({"verdict": "promote", "confidence": 1, "project": "p06-polisher", "domains": []})
    assert (moved.project, moved.domains, moved.confidence) == ("p06-polisher", (), 1.0)


@pytest.mark.parametrize(
    ("content", "found"),
    [
        ("", "no JSON value"),
        ("[1, 2]", "a JSON list"),
        ('{"decision": "promote"}', "no 'verdict'"),
        ('{"verdict": 3}', "whose verdict is '3'"),
    ],
)
def test_malformed(content: str, found: str) -> None:
    with pytest.raises(MalformedOutput) as info:
        parse_verdict(content, item=ITEM, domains=DOMAINS)
    assert found in str(info.value)
