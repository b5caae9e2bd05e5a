"""Atomisation benchmarks: rules-curator throughput, and store latency under a deferred policy.

``python -m bench.atomise_bench [--texts N] [--seconds S]`` prints one JSON
object. Each section is a function returning a dict, so another section (store
latency of a whole atomisation, say) is one more function and one more key in
``main``.

rules_curator
    Atomisations per second of ``RulesCurator`` on English texts of about 2,000
    cl100k tokens, built from the prose paragraphs of ``pydoc_data.topics``
    (shipped with CPython, so the corpus is the same everywhere and offline).
    The bound is a loop of ``count_tokens`` over the same texts: the curator
    must tokenize every text at least once, so ``ratio`` (curator rate over
    bound rate) says what the heuristics cost on top of tokenization, a
    figure that survives a noisy machine better than either rate alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import pydoc_data.topics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from mnemolog.curators.atomise.rules import RulesCurator
from mnemolog.curators.base import CuratorFailed, SourceTooSmall
from mnemolog.curators.tokens import count_tokens

TARGET_TOKENS = 2000
#: 10 atoms x 250 tokens hold a 2,000-token text with room for uneven sentences.
BENCH_ATOM_TOKENS = 250


def prose_paragraphs() -> list[str]:
    """The prose paragraphs of the pydoc topics, in a fixed order.

    Indented paragraphs (grammar and code samples) and title underlines are
    left out: the benchmark is about English text.
    """
    out: list[str] = []
    for key in sorted(pydoc_data.topics.topics):
        for paragraph in pydoc_data.topics.topics[key].split("\n\n"):
            text = paragraph.strip("\n")
            if not text or text[0].isspace() or set(text.splitlines()[-1]) <= set("*=-"):
                continue
            if "." in text:
                out.append(text)
    return out


def corpus(n_texts: int, target_tokens: int = TARGET_TOKENS) -> list[str]:
    """``n_texts`` texts of about ``target_tokens`` tokens (within 10%), cycling the topics."""
    paragraphs = [(p, count_tokens(p)) for p in prose_paragraphs()]
    paragraphs = [(p, n) for p, n in paragraphs if n <= target_tokens]
    texts: list[str] = []
    current: list[str] = []
    size = 0
    index = 0
    while len(texts) < n_texts:
        paragraph, tokens = paragraphs[index % len(paragraphs)]
        index += 1
        if size + tokens > target_tokens * 1.1:
            continue
        current.append(paragraph)
        size += tokens
        if size >= target_tokens * 0.9:
            texts.append("\n\n".join(current))
            current, size = [], 0
    return texts


def _rate(fn: Callable[[str], object], texts: Sequence[str], min_seconds: float) -> float:
    """Texts per second of ``fn``, over whole passes lasting at least ``min_seconds``."""
    done = 0
    started = time.perf_counter()
    while True:
        for text in texts:
            fn(text)
        done += len(texts)
        elapsed = time.perf_counter() - started
        if elapsed >= min_seconds:
            return done / elapsed


def rules_curator_rate(
    n_texts: int, *, max_atom_tokens: int = BENCH_ATOM_TOKENS, min_seconds: float = 1.0
) -> dict[str, Any]:
    """Rules-curator atomisations per second beside a count_tokens loop on the same texts."""
    texts = corpus(n_texts)
    curator = RulesCurator()
    atoms: list[int] = []
    failures = {"envelope": 0, "too_small": 0}
    for text in texts:  # also warms the tokenizer and the caches
        try:
            atoms.append(len(curator.curate(text, max_atom_tokens=max_atom_tokens).atoms))
        except CuratorFailed:
            failures["envelope"] += 1
        except SourceTooSmall:
            failures["too_small"] += 1

    def atomise(text: str) -> None:
        # A refusal is timed all the same: it is work the curator did.
        with contextlib.suppress(CuratorFailed, SourceTooSmall):
            curator.curate(text, max_atom_tokens=max_atom_tokens)

    # Interleaved rounds, best of each: a burst of noise hits both sides.
    curator_rates: list[float] = []
    bound_rates: list[float] = []
    for _round in range(3):
        curator_rates.append(_rate(atomise, texts, min_seconds / 3))
        bound_rates.append(_rate(count_tokens, texts, min_seconds / 3))
    rate, bound = max(curator_rates), max(bound_rates)
    mean_tokens = sum(count_tokens(t) for t in texts) / len(texts)
    return {
        "texts": len(texts),
        "mean_tokens": round(mean_tokens, 1),
        "max_atom_tokens": max_atom_tokens,
        "mean_atoms": round(sum(atoms) / len(atoms), 2) if atoms else None,
        "failures": failures,
        "atomisations_per_s": round(rate, 1),
        "tokens_per_s": round(rate * mean_tokens),
        "bound": {
            "what": "count_tokens (tiktoken cl100k) over the same texts",
            "texts_per_s": round(bound, 1),
            "tokens_per_s": round(bound * mean_tokens),
        },
        "ratio": round(rate / bound, 3),
    }


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def store_latency(n_stores: int = 300) -> dict[str, Any]:
    """Store p50/p99 under a deferred auto-atomise policy beside the same stores with no policy.

    Both sides store the same long texts (above the threshold, so every store
    under the policy also writes its `atomisation.requested`) into fresh homes,
    alternating in small rounds so machine noise hits both; the worker thread is
    off, so what is timed is the store call alone — the promise of deferred mode.
    """
    import tempfile
    from pathlib import Path

    from mnemolog.substrate.api import Substrate
    from mnemolog.substrate.home import init_home

    texts = corpus(20, target_tokens=700)
    with tempfile.TemporaryDirectory(prefix="mnemolog-atomise-bench-") as tmp:
        subs: dict[str, Substrate] = {}
        for name in ("no_policy", "deferred"):
            init_home(Path(tmp) / name)
            subs[name] = Substrate.open(Path(tmp) / name, long_lived=True, worker=False)
        subs["deferred"].set_policy("bench", auto_atomise_mode="deferred", curator="rules")
        times: dict[str, list[float]] = {"no_policy": [], "deferred": []}
        try:
            for sub in subs.values():  # warm-up
                for t in texts[:5]:
                    sub.store(t, namespace="bench")
            for i in range(n_stores):
                for name in ("no_policy", "deferred") if i % 2 == 0 else ("deferred", "no_policy"):
                    t0 = time.perf_counter()
                    out = subs[name].store(texts[i % len(texts)], namespace="bench")
                    times[name].append(time.perf_counter() - t0)
                    if name == "deferred" and out.get("atomise_outcome") != "requested":
                        raise RuntimeError(f"expected a deferred request, got {out.get('atomise_outcome')}")
        finally:
            for sub in subs.values():
                sub.close()
    p50 = {k: _p(v, 0.5) for k, v in times.items()}
    p99 = {k: _p(v, 0.99) for k, v in times.items()}
    return {
        "stores_each": n_stores,
        "text_tokens": round(sum(count_tokens(t) for t in texts) / len(texts)),
        "durability": "fsync",
        "no_policy_ms": {"p50": round(p50["no_policy"] * 1000, 3), "p99": round(p99["no_policy"] * 1000, 3)},
        "deferred_ms": {"p50": round(p50["deferred"] * 1000, 3), "p99": round(p99["deferred"] * 1000, 3)},
        "p50_ratio": round(p50["deferred"] / p50["no_policy"], 3),
        "target_p50_ratio": 1.1,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.atomise_bench", description=__doc__)
    parser.add_argument("--texts", type=int, default=50, help="number of ~2k-token texts")
    parser.add_argument("--seconds", type=float, default=3.0, help="time per measured side")
    # bench.run hands the same extra arguments to every module: ignore others' flags.
    args, _others = parser.parse_known_args(argv)
    result = {
        "benchmark": "atomise",
        "python": platform.python_version(),
        "rules_curator": rules_curator_rate(args.texts, min_seconds=args.seconds),
        "store_deferred_vs_no_policy": store_latency(),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
