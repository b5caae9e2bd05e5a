"""The labelled extraction set and how an extractor is scored against it.

``tests/curators/data/extraction_labelled.json`` holds interactions with the
candidates a careful reviewer would keep (layer, content, and the domain of
domain knowledge). A proposed candidate matches an expected one of the same
layer when each holds at least half of the other's terms (the reinforcement
matcher's terms: stop words out, light stemming), so a verbatim sentence and
its standalone rewording meet; each expected candidate is matched at most
once, best overlap first. Precision is matched / proposed, recall is matched /
expected, over the whole set.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mnemolog.curators.knowledge.extract import Candidate, InteractionText
from mnemolog.projections.knowledge.match import terms

DATA = Path(__file__).resolve().parent.parent / "curators" / "data" / "extraction_labelled.json"
MIN_SHARE = 0.5


@dataclass(frozen=True)
class Expected:
    layer: str
    content: str
    domain: str | None


@dataclass(frozen=True)
class Labelled:
    id: str
    interaction: InteractionText
    expected: tuple[Expected, ...]


@dataclass
class Score:
    proposed: int = 0
    expected: int = 0
    matched: int = 0
    domain_right: int = 0
    domain_pairs: int = 0
    misses: list[tuple[str, str]] = field(default_factory=list)
    false_positives: list[tuple[str, str]] = field(default_factory=list)

    @property
    def precision(self) -> float:
        return self.matched / self.proposed if self.proposed else 1.0

    @property
    def recall(self) -> float:
        return self.matched / self.expected if self.expected else 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "interactions_scored": None,
            "proposed": self.proposed,
            "expected": self.expected,
            "matched": self.matched,
            "precision": round(self.precision, 3),
            "recall": round(self.recall, 3),
            "domain_accuracy": round(self.domain_right / self.domain_pairs, 3) if self.domain_pairs else None,
        }


def load(path: Path = DATA) -> list[Labelled]:
    raw = json.loads(path.read_text("utf-8"))
    out = []
    for item in raw["interactions"]:
        expected = tuple(Expected(e["layer"], e["content"], e.get("domain")) for e in item["expected"])
        interaction = InteractionText(item["prompt"], item["response"], item["project"])
        out.append(Labelled(item["id"], interaction, expected))
    return out


def _overlap(a: str, b: str) -> float:
    ta, tb = terms(a), terms(b)
    if not ta or not tb:
        return 0.0
    shared = len(ta & tb)
    return min(shared / len(ta), shared / len(tb))


def score(labelled: Iterable[Labelled], extract: Callable[[InteractionText], Iterable[Candidate]]) -> Score:
    """Score ``extract`` over the labelled interactions."""
    total = Score()
    for item in labelled:
        proposed = list(extract(item.interaction))
        total.proposed += len(proposed)
        total.expected += len(item.expected)
        pairs = sorted(
            (
                (_overlap(p.content, e.content), pi, ei)
                for pi, p in enumerate(proposed)
                for ei, e in enumerate(item.expected)
                if p.layer == e.layer
            ),
            reverse=True,
        )
        used_p: set[int] = set()
        used_e: set[int] = set()
        for share, pi, ei in pairs:
            if share < MIN_SHARE or pi in used_p or ei in used_e:
                continue
            used_p.add(pi)
            used_e.add(ei)
            total.matched += 1
            gold = item.expected[ei]
            if gold.layer == "domain":
                total.domain_pairs += 1
                total.domain_right += gold.domain in proposed[pi].domains
        total.misses += [(item.id, e.content) for ei, e in enumerate(item.expected) if ei not in used_e]
        total.false_positives += [(item.id, p.content) for pi, p in enumerate(proposed) if pi not in used_p]
    return total
