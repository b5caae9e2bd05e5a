"""Knowledge-loop benchmarks: extractor quality, rules extract + triage throughput.

``python -m bench.knowledge_bench [--seconds S]`` prints one JSON object; each
section is a function returning a dict.

extraction_quality
    Precision, recall and domain accuracy of the rules extractor on the
    labelled set (the one its rules were tuned on) and on the held-out set
    (written afterwards, never tuned on: the honest figure). Scoring is
    tests/support/extraction_labels.py.

rules_throughput
    Interactions per second through the rules extractor and then the rules
    triager for every candidate, over the labelled set's interactions. The
    bound is splitting the same text into words with the reinforcement
    matcher's tokenizer (every extractor reads every word at least once), so
    ``ratio`` says what the rules cost over reading.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from mnemolog.curators.extract import InteractionText
from mnemolog.curators.extract_rules import RulesExtractor
from mnemolog.curators.triage import TriageItem
from mnemolog.curators.triage_rules import RulesTriager
from mnemolog.projections.knowledge_match import words
from tests.support.extraction_labels import DATA, load, score


def extraction_quality() -> dict[str, Any]:
    rules = RulesExtractor()
    out: dict[str, Any] = {}
    for name, path in (("labelled", DATA), ("heldout", DATA.with_name("extraction_heldout.json"))):
        items = load(path)
        result = score(items, lambda i: rules.extract(i).candidates).to_json()
        result["interactions_scored"] = len(items)
        out[name] = result
    return out


def _rate(fn: Callable[[InteractionText], object], items: Sequence[InteractionText], seconds: float) -> float:
    done = 0
    started = time.perf_counter()
    while True:
        for item in items:
            fn(item)
        done += len(items)
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return done / elapsed


def rules_throughput(seconds: float) -> dict[str, Any]:
    extractor, triager = RulesExtractor(), RulesTriager()
    items = [labelled.interaction for labelled in load()]

    def loop(interaction: InteractionText) -> int:
        result = extractor.extract(interaction)
        for index, c in enumerate(result.candidates):
            triager.triage(
                TriageItem(
                    f"c{index}",
                    c.content,
                    c.layer,
                    c.kind,
                    c.project,
                    c.domains,
                    c.confidence,
                    "rules",
                    c.rule,
                )
            )
        return len(result.candidates)

    def bound(interaction: InteractionText) -> int:
        return len(words(interaction.prompt)) + len(words(interaction.response))

    # Alternate, so a noisy neighbour slows both sides alike.
    rates: dict[str, list[float]] = {"loop": [], "bound": []}
    for _ in range(3):
        rates["loop"].append(_rate(loop, items, seconds / 6))
        rates["bound"].append(_rate(bound, items, seconds / 6))
    best_loop, best_bound = max(rates["loop"]), max(rates["bound"])
    return {
        "interactions": len(items),
        "extract_and_triage_per_s": round(best_loop, 1),
        "tokenize_only_per_s": round(best_bound, 1),
        "ratio": round(best_loop / best_bound, 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="time budget per throughput section")
    args = parser.parse_args(argv)
    result = {
        "benchmark": "knowledge",
        "python": platform.python_version(),
        "extraction_quality": extraction_quality(),
        "rules_throughput": rules_throughput(args.seconds),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
