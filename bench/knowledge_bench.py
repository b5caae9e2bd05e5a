"""Knowledge-loop benchmarks: extractor quality, capture latency, extract + triage throughput, decay.

``python -m bench.knowledge_bench [--seconds S] [--captures N] [--decay-memories N]``
prints one JSON object; each section is a function returning a dict.

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

capture
    Latency of ``Substrate.capture`` beside ``Substrate.store`` of the same
    text in the same home, alternating one of each (so a noisy neighbour slows
    both), fsync durability as configured by default: p50 and p99 of each and
    the ratio of the p50s (target: capture at most 1.2 times a store). Also a
    capture naming a registered project through an alias, and one with
    ``reinforce`` against a project of 200 memories.

loop_throughput
    Interactions per second through the substrate: capture the labelled
    interactions, then ``extract --pending`` and ``triage --pending`` with the
    rules, every outcome written as events. Beside it the pure rules loop on
    the same interactions (rules_throughput's figure), so the ratio is what
    the events and the projection cost.

decay
    A decay run over a home of N memories (default 100,000, appended in bulk
    with the clock set so that all of them are idle past the floor): the dry
    run (reading and computing) and the real run (superseding every one of
    them, one event each), beside the bound of reading the same rows with the
    same query and appending the same number of events in the same batches.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mnemolog.curators.knowledge.extract import InteractionText
from mnemolog.curators.knowledge.extract_rules import RulesExtractor
from mnemolog.curators.knowledge.triage import TriageItem
from mnemolog.curators.knowledge.triage_rules import RulesTriager
from mnemolog.eventlog.store.writer import Durability
from mnemolog.projections.knowledge import queries as kq
from mnemolog.projections.knowledge.match import words
from mnemolog.projections.knowledge.rules import DAY_US
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.events import MemoryStored
from mnemolog.substrate.events.knowledge import MemorySuperseded
from mnemolog.substrate.home import Home, init_home
from mnemolog.substrate.knowledge.service import DECAY_BATCH
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


def _pct(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(xs) * 1000, 3), "p99_ms": round(_pct(xs, 0.99) * 1000, 3)}


class Clock:
    """A settable clock in microseconds (the writer keeps time from going back)."""

    def __init__(self, start: int) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1
        return self.now


def capture(n: int, work: Path) -> dict[str, Any]:
    init_home(work / "capture", key_name="bench")
    text = "The nightly import times out once the staging table passes two million rows."
    response = "It does: without the composite index the upsert falls back to a full scan of the table."
    with Substrate.open(work / "capture", long_lived=True, worker=False) as sub:
        sub.register_project("p04-gigabit", aliases=["p04"])
        for i in range(200):
            sub.store(
                f"p04 memory {i}: the support pad layout follows the CTE map of blank {i}", project="p04"
            )
        for _ in range(5):  # warm caches and the projection
            sub.store(text)
            sub.capture(text, response)
        store_t: list[float] = []
        capture_t: list[float] = []
        alias_t: list[float] = []
        reinforce_t: list[float] = []
        for _ in range(n):
            t = time.perf_counter()
            sub.store(text)
            store_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            sub.capture(text, response)
            capture_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            sub.capture(text, response, project="P04")
            alias_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            sub.capture(text, "the support pad layout follows the CTE map", project="p04", reinforce=True)
            reinforce_t.append(time.perf_counter() - t)
    ratio = statistics.median(capture_t) / statistics.median(store_t)
    return {
        "n": n,
        "store": _ms(store_t),
        "capture": _ms(capture_t),
        "capture_with_alias": _ms(alias_t),
        "capture_reinforce_pool_200": _ms(reinforce_t),
        "capture_over_store_p50": round(ratio, 3),
        "capture_with_alias_over_store_p50": round(
            statistics.median(alias_t) / statistics.median(store_t), 3
        ),
        "target_ratio": 1.2,
        "within_target": ratio <= 1.2,
    }


def loop_throughput(work: Path, copies: int) -> dict[str, Any]:
    init_home(work / "loop", key_name="bench")
    items = [labelled.interaction for labelled in load()] * copies
    with Substrate.open(work / "loop", long_lived=True, worker=False, durability=Durability("group")) as sub:
        t = time.perf_counter()
        for it in items:
            sub.capture(it.prompt, it.response or "", project=it.project)
        captured = time.perf_counter() - t
        t = time.perf_counter()
        ex = sub.extract(pending=True, extractor="rules", limit=1000)
        extracted = time.perf_counter() - t
        t = time.perf_counter()
        tri = sub.triage(pending=True, triager="rules", limit=1000)
        triaged = time.perf_counter() - t
    loop_rate = len(items) / (extracted + triaged)
    pure = rules_throughput(2.0)["extract_and_triage_per_s"]
    return {
        "interactions": len(items),
        "candidates": ex["candidates"],
        "promoted": tri["promoted"],
        "waiting": tri["waiting"],
        "capture_per_s": round(len(items) / captured, 1),
        "extract_and_triage_per_s": round(loop_rate, 1),
        "candidates_triaged_per_s": round(ex["candidates"] / triaged, 1),
        "pure_rules_per_s": pure,
        "ratio_to_pure_rules": round(loop_rate / pure, 4),
    }


def decay(n: int, work: Path) -> dict[str, Any]:
    t0 = 4_000_000_000_000_000
    path = work / "decay"
    init_home(path, key_name="bench")
    home = Home(path)
    clock = Clock(t0)
    t = time.perf_counter()
    with home.open_writer(durability=Durability("group"), clock=clock) as w:
        batch: list[tuple[str, dict[str, Any], int]] = []
        for i in range(n):
            p = MemoryStored.new(f"memory {i} about blank {i % 977} and its CTE map", confidence=0.6)
            batch.append((MemoryStored.TYPE, p.to_data(), MemoryStored.TV))
            if len(batch) == 5000:
                w.append_many(batch)
                batch = []
        if batch:
            w.append_many(batch)
    built = time.perf_counter() - t
    now = t0 + 400 * DAY_US
    with Substrate.open(
        path, long_lived=True, worker=False, clock=clock, durability=Durability("group")
    ) as sub:
        t = time.perf_counter()
        sub.list(limit=1)  # the catch-up (a bulk fold of n stores), outside the timings
        caught_up = time.perf_counter() - t
        t = time.perf_counter()
        with sub.session() as s:
            rows = kq.decay_rows(s.conn, now).num_rows
        read_bound = time.perf_counter() - t
        t = time.perf_counter()
        plan = sub.decay(now=now, dry_run=True)
        dry = time.perf_counter() - t
        t = time.perf_counter()
        out = sub.decay(now=now)
        real = time.perf_counter() - t
        # The bound of the writes: the same number of events in the same batches, without decay's reads.
        ids = [f"BOUND{i:08d}" for i in range(out["superseded_count"])]
        bound_events = [
            MemorySuperseded(id=i, by="decay", confidence=0.1, now=now, policy={"bound": True}) for i in ids
        ]
        t = time.perf_counter()
        with sub.session() as s:
            for start in range(0, len(bound_events), DECAY_BATCH):
                s.append_many(bound_events[start : start + DECAY_BATCH])
        write_bound = time.perf_counter() - t
    return {
        "memories": n,
        "build_s": round(built, 2),
        "catch_up_s": round(caught_up, 2),
        "rows_read": rows,
        "dry_run_s": round(dry, 3),
        "read_bound_s": round(read_bound, 3),
        "dry_run_over_read": round(dry / read_bound, 2),
        "superseded": out["superseded_count"],
        "planned": plan["superseded_count"],
        "run_s": round(real, 2),
        "write_bound_s": round(write_bound, 2),
        "run_over_write_bound": round(real / write_bound, 3),
        "superseded_per_s": round(out["superseded_count"] / real, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="time budget per throughput section")
    parser.add_argument(
        "--captures", type=int, default=200, help="store/capture pairs for the latency section"
    )
    parser.add_argument("--copies", type=int, default=4, help="copies of the labelled set for the loop")
    parser.add_argument("--decay-memories", type=int, default=100_000, help="memories for the decay section")
    parser.add_argument("--only", nargs="*", default=None, help="run only these sections")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mnemolog-knowledge-bench-"))
    sections: dict[str, Callable[[], dict[str, Any]]] = {
        "extraction_quality": extraction_quality,
        "rules_throughput": lambda: rules_throughput(args.seconds),
        "capture": lambda: capture(args.captures, work),
        "loop_throughput": lambda: loop_throughput(work, args.copies),
        "decay": lambda: decay(args.decay_memories, work),
    }
    result: dict[str, Any] = {"benchmark": "knowledge", "python": platform.python_version()}
    try:
        for name, fn in sections.items():
            if args.only is None or name in args.only:
                print(f"knowledge_bench: {name} ...", file=sys.stderr, flush=True)
                result[name] = fn()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
