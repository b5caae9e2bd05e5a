"""Triage finds duplicates by embedding similarity at the recorded threshold, and records the score."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from mnemolog.curators.embedding.embedder import Vectors, check_vectors
from mnemolog.substrate.api import Substrate
from tests.projections.kit import new_home, open_sub
from tests.support.fake_embedder import FakeEmbedder, fake_vec

SCHEDULE = "The nightly export job retries every hour until six in the morning."
RESTATED = "Decision: the overnight export reruns hourly until 06:00."


class TopicEmbedder(FakeEmbedder):
    """Texts that mention the export land at one point (and one `tilt` away); others scatter."""

    def __init__(self, tilt: float) -> None:
        super().__init__()
        self.tilt = tilt

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls.append(list(texts))
        base, other = fake_vec("export"), fake_vec("other")
        rows = []
        for t in texts:
            if "export" not in t:
                rows.append(fake_vec(t))
            elif "overnight" in t:  # the restated one: cos = 1 - tilt-ish from the original
                v = base + self.tilt * other
                rows.append(v / np.linalg.norm(v))
            else:
                rows.append(base)
        raw = np.vstack(rows) if rows else np.zeros((0, self.dim))
        return check_vectors(raw, count=len(texts), dim=self.dim, where="topic")


def triage(tmp_path: Path, tilt: float, config: str = "") -> tuple[Substrate, dict[str, object], str]:
    home = new_home(tmp_path / "home")
    if config:
        with home.config_path.open("a") as f:
            f.write("\n" + config)
    sub = open_sub(home, embedder=TopicEmbedder(tilt))
    old = sub.store(SCHEDULE)
    sub.capture("When does the export retry?", RESTATED)
    sub.extract(pending=True, extractor="rules")
    (result,) = sub.triage(pending=True)["results"]
    return sub, result, old["id"]


def test_an_embedding_duplicate_waits_and_the_score_is_recorded(tmp_path: Path) -> None:
    sub, result, old = triage(tmp_path, tilt=0.1)
    try:
        assert result["duplicate_of"] == old and result["action"] == "wait"
        assert "embedding similarity" in str(result["why"])
        (e,) = [e for e in sub.log.iter_entries(0) if e.type == "candidate.triaged"]
        assert e.tv == 3  # tv 3 seals the model's answers; the scores stay in clear
        assert e.data["similar_to"] == old and e.data["duplicate_of"] == old
        assert e.data["similarity"] >= 0.92
        assert e.data["thresholds"]["duplicate_similarity"] == 0.92
    finally:
        sub.close()


def test_below_the_threshold_it_is_recorded_but_not_a_duplicate(tmp_path: Path) -> None:
    sub, result, old = triage(tmp_path, tilt=0.1, config="[knowledge]\nduplicate_similarity = 0.999\n")
    try:
        assert result["duplicate_of"] is None and result["action"] == "promote"
        (e,) = [e for e in sub.log.iter_entries(0) if e.type == "candidate.triaged"]
        assert e.data["similar_to"] == old
        assert 0.9 < e.data["similarity"] < 0.999
    finally:
        sub.close()


def test_a_memory_recall_would_not_return_is_no_duplicate_by_meaning(tmp_path: Path) -> None:
    """The neighbour by embedding is drawn from what recall could return: an expired memory, or one
    a link superseded, is never the duplicate, however near its vector."""
    for how in ("expired", "superseded"):
        with open_sub(new_home(tmp_path / how), embedder=TopicEmbedder(0.1)) as sub:
            meta = {"vault": {"expires_at": "2001-01-01"}} if how == "expired" else None
            old = sub.store(SCHEDULE, metadata=meta)
            if how == "superseded":
                newer = sub.store("A newer note on the export job schedule.")
                sub.link(newer["id"], old["id"], relation="supersedes")
            sub.capture("When does the export retry?", RESTATED)
            sub.extract(pending=True, extractor="rules")
            (result,) = sub.triage(pending=True)["results"]
            assert result["duplicate_of"] != old["id"], how
            (e,) = [e for e in sub.log.iter_entries(0) if e.type == "candidate.triaged"]
            assert e.data.get("similar_to") != old["id"], how


def test_without_vectors_nothing_is_claimed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemolog.projections.embedding import vectors

    monkeypatch.setattr(vectors, "read_meta", lambda conn: None)
    sub, result, _old = triage(tmp_path, tilt=0.1)
    try:
        (e,) = [e for e in sub.log.iter_entries(0) if e.type == "candidate.triaged"]
        assert (e.data.get("similarity"), e.data.get("similar_to")) == (None, None)  # None is not written
        assert result["duplicate_of"] is None
    finally:
        sub.close()


def test_a_newcomer_restating_known_schedules_gets_duplicates_not_contradictions(tmp_path: Path) -> None:
    with open_sub(new_home(tmp_path / "home"), embedder=FakeEmbedder()) as sub:
        known = [
            sub.store("Retry the export job hourly until 06:00."),
            sub.store("Keep the database backups for 30 days."),
            sub.store("The export job must finish before 07:00."),
        ]
        response = (
            "## Decisions\n"
            "- The nightly export job retries hourly until 06:00 UTC.\n"
            "- We keep the database backups for 30 days in eu-west-1.\n"
            "- The export job must finish before 08:30.\n"
        )
        sub.capture("What did we settle?", response)
        sub.extract(pending=True, extractor="rules")
        results = sub.triage(pending=True)["results"]
        content = {r["id"]: sub.get(str(r["id"]))["content"] for r in results}
        by_text = {content[str(r["id"])].split()[-1]: r for r in results}
        retry, backups, finish = by_text["UTC."], by_text["eu-west-1."], by_text["08:30."]
        # Agreement (its numbers included) is a duplicate: it waits, and nothing cries wolf.
        assert (retry["verdict"], retry["duplicate_of"], retry["action"]) == (
            "promote",
            known[0]["id"],
            "wait",
        )
        # The same figure with a detail added is neither a conflict nor a duplicate.
        assert (backups["verdict"], backups["conflicts_with"], backups["duplicate_of"]) == (
            "promote",
            None,
            None,
        )
        # A real disagreement on the same quantity is still called one.
        assert (finish["verdict"], finish["conflicts_with"]) == ("contradicts", known[2]["id"])
        assert "08:30" in str(finish["reason"]) and "07:00" in str(finish["reason"])
