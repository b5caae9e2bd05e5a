"""The knowledge loop end to end: capture, extract, triage, promote, surface, and prove it.

The example of docs/knowledge.md ("earned on one project, used on another"): knowledge
earned on p04 yields a project candidate and a
[materials] domain candidate; a model (a real HTTP server on 127.0.0.1
speaking Ollama's API) extracts and triages them; the domain one is promoted
and is visible from project p06, while the p04 one waits for a person. Then
every verdict path, the thresholds, duplicates, failures and dry runs.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from mnemolog.eventlog.bundle import verifier as bundle
from mnemolog.eventlog.errors import Informational, NotFound, UsageError
from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.forensics.service import export_bundle
from mnemolog.substrate.knowledge.service import ExtractionFailedError, TriageFailedError
from tests.substrate.knowledge_kit import (
    P04_DOMAIN_CANDIDATE,
    P04_PROJECT_CANDIDATE,
    P04_PROMPT,
    P04_RESPONSE,
    knowledge_home,
    statuses,
)
from tests.support.fake_knowledge import (
    candidates_json,
    domain,
    project,
    triaged_content,
    verdict_by_content,
    verdict_json,
)
from tests.support.fake_ollama import FakeOllama, HttpError

SEED_REPLY = candidates_json(
    [project(P04_PROJECT_CANDIDATE, "p04-gigabit"), domain(P04_DOMAIN_CANDIDATE, "materials")]
)
SEED_VERDICTS = verdict_by_content(
    {
        "Zerodur": verdict_json(
            "promote", 0.9, "A measured effect that took a thermal study to find.", domains=["materials"]
        )
    },
    default=verdict_json("needs_human", 0.6, "Project-specific; the team lead should confirm it."),
)


def seed_candidates(sub: Substrate, server: FakeOllama) -> tuple[str, str, str]:
    """Capture the p04 interaction and extract it; (interaction, project candidate, domain candidate)."""
    iid = sub.capture(P04_PROMPT, P04_RESPONSE, project="p04")["id"]
    server.push(SEED_REPLY)
    out = sub.extract(interaction_ids=[iid], extractor="ollama")
    (result,) = out["results"]
    proj, dom = result["candidates"]
    return iid, proj["id"], dom["id"]


def test_the_seed_example_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with knowledge_home(tmp_path, monkeypatch) as (sub, server):
        iid, proj_id, dom_id = seed_candidates(sub, server)
        proj, dom = sub.get(proj_id), sub.get(dom_id)
        assert (proj["status"], proj["project"], proj["kind"]) == ("candidate", "p04-gigabit", "project")
        assert (dom["status"], dom["project"], dom["domains"]) == ("candidate", "", ["materials"])
        assert sub.interaction(iid)["candidates"] == [proj_id, dom_id]
        # Candidates are never recalled, searched or listed by default.
        assert sub.recall("Zerodur CTE gradient") == []
        assert sub.list() == []

        server.push(SEED_VERDICTS, SEED_VERDICTS)
        out = sub.triage(pending=True, triager="ollama")
        assert (out["promoted"], out["waiting"], out["rejected"], out["failed"]) == (1, 1, 0, 0)
        asked = sorted(triaged_content(r.json) for r in server.chat_requests[1:])
        assert asked == sorted([P04_PROJECT_CANDIDATE, P04_DOMAIN_CANDIDATE])

        dom = sub.get(dom_id)
        assert (dom["status"], dom["project"], dom["domains"]) == ("active", "", ["materials"])
        assert sub.get(proj_id)["status"] == "candidate"
        (waiting,) = sub.candidates(queues=["needs_human"])
        assert waiting["id"] == proj_id
        assert waiting["candidate"]["verdict"] == "needs_human"

        # Two weeks later, on p06: the domain knowledge is there, p04's project memory is not.
        found = sub.recall("thermal effects on polishing accuracy: CTE gradient")
        assert [m["id"] for m in found] == [dom_id]
        assert [m["id"] for m in sub.list(project="", domains=["materials"])] == [dom_id]
        assert sub.list(project="p06") == []

        # The bundle of the promoted memory carries its lineage, and verifies offline.
        ex = export_bundle(sub, dom_id)
        with tarfile.open(fileobj=io.BytesIO(ex.data)) as tar:
            f = tar.extractfile(bundle.ENTRIES)
            assert f is not None
        types = [e.type for e in sub.log.iter_entries(0) if e.seq in ex.seqs]
        for t in ("interaction.captured", "memory.stored", "candidate.extracted", "candidate.triaged"):
            assert t in types, t
        assert "memory.promoted" in types
        assert iid in ex.unstored  # the interaction: in the lineage, not a memory
        path = tmp_path / "dom.tar"
        path.write_bytes(ex.data)
        report = bundle.verify_bundle(path, policy=TRUST_GENESIS)
        assert dom_id in report.memories


def test_extraction_records_everything_replay_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with knowledge_home(tmp_path, monkeypatch) as (sub, server):
        iid, proj_id, dom_id = seed_candidates(sub, server)
        (e,) = [e for e in sub.log.iter_entries(0) if e.type == "candidate.extracted"]
        d = sub.keys.upcast(e.type, e.tv, e.data)
        assert d["interaction_id"] == iid and d["candidate_ids"] == [proj_id, dom_id]
        assert (d["extractor"], d["model"], d["responses"]) == ("ollama", "fake-model", [SEED_REPLY])
        assert len(d["prompt_sha256"]) == 64
        assert [c["layer"] for c in d["candidates"]] == ["project", "domain"]
        # The extraction happened once: a second request finds nothing pending.
        with pytest.raises(Informational):
            sub.extract(pending=True)
        assert sub.extract(interaction_ids=[iid])["results"][0]["outcome"] == "already_extracted"


def test_nothing_worth_keeping_is_recorded_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with knowledge_home(tmp_path, monkeypatch) as (sub, server):
        iid = sub.capture("thanks!", "You're welcome.")["id"]
        server.push(candidates_json([]))
        out = sub.extract(pending=True, extractor="ollama")
        assert out["candidates"] == 0 and out["results"][0]["outcome"] == "extracted"
        assert sub.interaction(iid)["extraction"] == "extracted"
        assert sub.stats()["events"]["candidate.extracted"] == 1


def test_a_failed_extraction_is_an_event_and_stays_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with knowledge_home(tmp_path, monkeypatch) as (sub, server):
        iid = sub.capture(P04_PROMPT, P04_RESPONSE, project="p04")["id"]
        server.push("not json at all", '{"candidates": "none"}')
        with pytest.raises(ExtractionFailedError) as info:
            sub.extract(interaction_ids=[iid], extractor="ollama", max_retries=1)
        assert info.value.exit_code == 4
        assert info.value.details["failed"] == 1
        (e,) = [e for e in sub.log.iter_entries(0) if e.type == "extraction.failed"]
        assert e.data["reason"] == "malformed_output"
        assert sub.keys.upcast(e.type, e.tv, e.data)["responses"] == [
            "not json at all",
            '{"candidates": "none"}',
        ]
        row = sub.interaction(iid)
        assert (row["extraction"], row["failures"]) == ("pending", 1)
        assert sub.stats()["knowledge"]["extraction_failures"] == 1
        # The server is down: that is a failure too, never an empty answer.
        server.push(HttpError(500, "model crashed"))
        with pytest.raises(ExtractionFailedError):
            sub.extract(pending=True, extractor="ollama")
        server.push(SEED_REPLY)
        assert sub.extract(pending=True, extractor="ollama")["candidates"] == 2


def triage_one(sub: Substrate, server: FakeOllama, reply: str, **kw: Any) -> tuple[str, dict[str, Any]]:
    """A fresh domain candidate, triaged by a model answering ``reply``."""
    iid = sub.capture("q", f"a response {len(sub.interactions())}")["id"]
    text = kw.pop(
        "text", f"Invar mounts drift 2 um per year unless annealed first (case {len(sub.interactions())})"
    )
    server.push(candidates_json([domain(text, "materials")]))
    (cand,) = sub.extract(interaction_ids=[iid], extractor="ollama")["results"][0]["candidates"]
    server.push(reply)
    (result,) = sub.triage(candidate_ids=[cand["id"]], triager="ollama", **kw)["results"]
    return cand["id"], result


@pytest.mark.parametrize(
    ("verdict", "confidence", "action", "status"),
    [
        ("promote", 0.8, "promote", "active"),
        ("promote", 0.95, "promote", "active"),
        ("promote", 0.79, "wait", "candidate"),
        ("reject", 0.3, "reject", "invalid"),
        ("reject", 0.99, "reject", "invalid"),
        ("needs_human", 0.99, "wait", "candidate"),
    ],
)
def test_verdict_paths(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    verdict: str,
    confidence: float,
    action: str,
    status: str,
) -> None:
    with knowledge_home(tmp_path, monkeypatch) as (sub, server):
        cid, result = triage_one(sub, server, verdict_json(verdict, confidence, "Because."))
        assert (result["verdict"], result["action"]) == (verdict, action)
        assert sub.get(cid)["status"] == status
        (e,) = [e for e in sub.log.iter_entries(0) if e.type == "candidate.triaged"]
        assert e.data["thresholds"] == {"promote_confidence": 0.8, "duplicate_similarity": 0.92}
        assert (e.data["verdict"], e.data["action"], e.data["model"]) == (verdict, action, "fake-model")
        queue = {"active": "promoted", "invalid": "rejected", "candidate": "needs_human"}[status]
        assert [m["id"] for m in sub.candidates(queues=[queue])] == [cid]


def test_contradicts_names_the_memory_and_waits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with knowledge_home(tmp_path, monkeypatch) as (sub, server):
        old = sub.store("Invar mounts drift 5 um per year unless annealed first", domains=["materials"])
        cid, result = triage_one(
            sub, server, verdict_json("contradicts", 0.9, "Other numbers.", conflicts_with=old["id"]),
            text="Invar mounts drift 2 um per year unless annealed first",
        )  # fmt: skip
        assert (result["action"], result["conflicts_with"]) == ("wait", old["id"])
        assert sub.get(cid)["status"] == "candidate"
        request = server.chat_requests[-1].json
        assert old["id"] in request["messages"][1]["content"]  # the model was shown the memory
        # The verdict is part of the older memory's story too (it touches it).
        ex = export_bundle(sub, old["id"])
        assert any(e.type == "candidate.triaged" for e in sub.log.iter_entries(0) if e.seq in ex.seqs)


def test_a_duplicate_is_never_auto_promoted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with knowledge_home(tmp_path, monkeypatch) as (sub, server):
        old = sub.store("Invar mounts drift 2 um per year, unless annealed first!")
        cid, result = triage_one(
            sub, server, verdict_json("promote", 0.99, "Earned."),
            text="invar mounts drift 2 um per year unless annealed first",
        )  # fmt: skip
        assert (result["action"], result["duplicate_of"]) == ("wait", old["id"])
        assert "duplicates" in result["why"]
        assert sub.get(cid)["status"] == "candidate"


def test_the_promotion_threshold_is_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with knowledge_home(tmp_path, monkeypatch, config="[knowledge]\npromote_confidence = 0.95\n") as (
        sub,
        server,
    ):
        _cid, result = triage_one(sub, server, verdict_json("promote", 0.9, "Earned."))
        assert result["action"] == "wait"
        (e,) = [e for e in sub.log.iter_entries(0) if e.type == "candidate.triaged"]
        assert e.data["thresholds"]["promote_confidence"] == 0.95


def test_a_dry_run_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with knowledge_home(tmp_path, monkeypatch) as (sub, server):
        iid = sub.capture("q", "r")["id"]
        server.push(
            candidates_json([domain("Invar mounts drift 2 um per year unless annealed", "materials")])
        )
        (cand,) = sub.extract(interaction_ids=[iid], extractor="ollama")["results"][0]["candidates"]
        size = sub.log.refresh()
        server.push(verdict_json("promote", 0.9, "Earned."))
        out = sub.triage(candidate_ids=[cand["id"]], triager="ollama", dry_run=True)
        assert out["dry_run"] and out["results"][0]["action"] == "promote"
        assert sub.log.refresh() == size
        assert sub.get(cand["id"])["status"] == "candidate"


def test_a_triage_without_verdict_is_counted_and_stays_queued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with knowledge_home(tmp_path, monkeypatch) as (sub, server):
        iid = sub.capture("q", "r")["id"]
        server.push(
            candidates_json([domain("Invar mounts drift 2 um per year unless annealed", "materials")])
        )
        (cand,) = sub.extract(interaction_ids=[iid], extractor="ollama")["results"][0]["candidates"]
        server.push('{"verdict": "perhaps"}', "I am not sure.")
        with pytest.raises(TriageFailedError) as info:
            sub.triage(pending=True, triager="ollama", max_retries=1)
        assert info.value.exit_code == 4
        (e,) = [e for e in sub.log.iter_entries(0) if e.type == "triage.failed"]
        assert sub.keys.upcast(e.type, e.tv, e.data)["responses"] == [
            '{"verdict": "perhaps"}',
            "I am not sure.",
        ]
        assert [m["id"] for m in sub.candidates(queues=["pending"])] == [cand["id"]]
        k = sub.stats()["knowledge"]
        assert (k["candidates"]["pending"], k["triage_failures"]) == (1, 1)


def test_the_rules_triager_needs_no_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with knowledge_home(tmp_path, monkeypatch) as (sub, _server):
        sub.capture(
            "What did we decide?",
            "Decision: we keep the 18-point whiffletree for the M1 mirror.\n\n"
            "It turns out the polishing removal rate breaks down below 5 N of load.",
            project="p04",
        )
        out = sub.extract(pending=True, extractor="rules")
        assert out["candidates"] == 2
        tri = sub.triage(pending=True, triager="rules")
        assert (tri["promoted"], tri["waiting"]) == (1, 1)
        (decision,) = sub.list(project="p04-gigabit")
        assert decision["kind"] == "decision" and decision["content"].startswith("we keep the 18-point")


def test_people_promote_and_reject(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with knowledge_home(tmp_path, monkeypatch) as (sub, server):
        _iid, proj_id, dom_id = seed_candidates(sub, server)
        promoted = sub.promote(proj_id, project="p06", domains=["Mechanics"], reason="applies to p06 too")
        assert (promoted["status"], promoted["project"], promoted["domains"]) == (
            "active",
            "p06-polisher",
            ["mechanics"],
        )
        rejected = sub.reject(dom_id, reason="common knowledge")
        assert rejected["status"] == "invalid"
        (e,) = [e for e in sub.log.iter_entries(0) if e.type == "memory.rejected"]
        assert {k: x for k, x in e.data.items() if k != "touch_prev"} == {
            "id": dom_id,
            "by": "person",
            "reason": "common knowledge",
        }
        with pytest.raises(Informational):
            sub.promote(proj_id)
        with pytest.raises(Informational):
            sub.reject(dom_id, reason="again")
        with pytest.raises(UsageError):
            sub.reject(proj_id, reason="it is active")
        with pytest.raises(UsageError):
            sub.promote(dom_id)
        with pytest.raises(NotFound):
            sub.promote("01NOPE")
        # Statuses filter what is shown; the default is active only.
        assert [m["id"] for m in sub.list(statuses=["invalid"])] == [dom_id]
        assert [m["id"] for m in sub.list()] == [proj_id]


def test_rebuild_gives_identical_statuses_and_confidences(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with knowledge_home(tmp_path, monkeypatch) as (sub, server):
        _iid, proj_id, _dom_id = seed_candidates(sub, server)
        server.push(SEED_VERDICTS, SEED_VERDICTS)
        sub.triage(pending=True, triager="ollama")
        sub.promote(proj_id)
        sub.capture("how is the layout?", P04_RESPONSE, project="p04", reinforce=True)
        before, stats_before = statuses(sub), sub.stats()["knowledge"]
        sub.rebuild()
        assert statuses(sub) == before
        assert sub.stats()["knowledge"] == stats_before
        assert json.dumps(before, sort_keys=True)  # plain values only


def test_duplicates_within_one_triage_run_are_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with knowledge_home(tmp_path, monkeypatch) as (sub, server):
        text = "Invar mounts drift 2 um per year unless annealed first"
        for _ in range(2):
            iid = sub.capture("q", f"r {len(sub.interactions())}")["id"]
            server.push(candidates_json([domain(text, "materials")]))
            sub.extract(interaction_ids=[iid], extractor="ollama")
        server.push(verdict_json("promote", 0.95, "Earned."), verdict_json("promote", 0.95, "Earned."))
        out = sub.triage(pending=True, triager="ollama")
        first, second = out["results"]
        assert (first["action"], second["action"]) == ("promote", "wait")
        assert second["duplicate_of"] == first["id"]
        assert [m["content"] for m in sub.list()] == [text]
