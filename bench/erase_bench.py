"""Benchmark: sealed content and forgetting, each against its bound in the same run.

    python -m bench.erase_bench [--entries N] [--memories M] [--rounds R] [--append-only]

1. append: N `memory.stored` payloads appended by the signed group-commit
   writer in batches of 100, plain and sealed (each payload's content fields
   sealed under its own fresh data key, the keys written and synced to a key
   store first). Target: sealed throughput >= 0.9x plain.
2. forget_one: in a home of M memories, one long memory atomised by the rules
   curator and quoted by two context packs; `forget` of it (event, keys,
   cascade, embedding cache, projection rewritten) against a `store` of the
   same text in the same home. Target: forget <= 2x store.
3. forget_bulk: `forget --namespace` of all M memories of a home against a
   `rebuild` of the same home. Target: forget <= 2x rebuild.

The embedder is off (MNEMOLOG_EMBED=off) so that model time colours none of
the ratios. Each comparison is a ratio per round, side by side; the median of
the rounds' ratios with their min-max. Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ["MNEMOLOG_EMBED"] = "off"

from mnemolog.eventlog.format import sealing
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.erasure.datakeys import DataKeys
from mnemolog.substrate.home import Home, init_home

TARGET_APPEND = 0.9  # sealed throughput / plain throughput, at least
TARGET_FORGET_ONE = 2.0  # forget / store, at most
TARGET_FORGET_BULK = 2.0  # forget --namespace / rebuild, at most
LONG = (Path(__file__).resolve().parents[1] / "examples" / "post-mortem.txt").read_text()


def payload(i: int) -> dict[str, Any]:
    return {
        "id": f"m-{i:016d}",
        "namespace": "agent/default",
        "kind": "observation",
        "content": f"observation {i}: " + "the user prefers concise answers with sources cited " * 2,
        "tags": ["preference", "style"],
        "metadata": {},
        "title": f"note {i}",
    }


def append_round(root: Path, n: int, sealed: bool) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process: the producer and the writer thread)."""
    init_home(root, key_name="bench")
    home = Home(root)
    keys = DataKeys(root)
    with home.open_writer(periodic_checkpoints=False) as w:
        t = time.perf_counter()
        c = time.process_time()
        for start in range(0, n, 100):
            batch = [payload(i) for i in range(start, min(n, start + 100))]
            if sealed:
                got = keys.ensure([p["id"] for p in batch])
                batch = [sealing.seal_payload("memory.stored", p, got.__getitem__) for p in batch]
            w.append_many([("memory.stored", p, 4) for p in batch])
        return time.perf_counter() - t, time.process_time() - c


def filled(root: Path, m: int, namespace: str = "bulk") -> Home:
    init_home(root, key_name="bench")
    src = root.parent / f"{root.name}.jsonl"
    src.write_text(
        "".join(
            json.dumps({"content": payload(i)["content"], "namespace": namespace}) + "\n" for i in range(m)
        )
    )
    with Substrate.open(root, long_lived=False, worker=False) as sub:
        sub.import_jsonl(src)
    return Home(root)


def forget_one_round(root: Path, m: int) -> tuple[float, float]:
    home = filled(root, m)
    with Substrate.open(home, long_lived=False, worker=False) as sub:
        t = time.perf_counter()
        sub.store(LONG, namespace="ops", title="a store like the one forgotten")
        store_s = time.perf_counter() - t
        parent = sub.store(LONG, namespace="ops", title="to forget")
        sub.atomise(parent["id"], curator="rules")
        sub.build_context("why did the workers time out")
        sub.build_context("what fixed checkout")
        t = time.perf_counter()
        sub.forget([parent["id"]])
        forget_s = time.perf_counter() - t
    return store_s, forget_s


def forget_bulk_round(root: Path, m: int) -> tuple[float, float]:
    home = filled(root, m)
    with Substrate.open(home, long_lived=False, worker=False) as sub:
        t = time.perf_counter()
        sub.rebuild()
        rebuild_s = time.perf_counter() - t
        t = time.perf_counter()
        out = sub.forget(namespace="bulk")
        forget_s = time.perf_counter() - t
        assert out["erased"] == m, out["erased"]
    return rebuild_s, forget_s


def append_json(
    n: int, plain: list[float], sealed: list[float], ratios: list[float], cpu_ratios: list[float]
) -> dict[str, Any]:
    """The append comparison: ratios taken round by round (the first side alternating), then the
    median; the CPU-time ratio beside it moves less with the machine's other load (it leaves out
    the key file's syncs, which the wall-clock ratio counts)."""
    ratio = statistics.median(ratios)
    return {
        "cpu_sealed_vs_plain": round(statistics.median(cpu_ratios), 3),
        "cpu_ratio_min_max": [round(min(cpu_ratios), 3), round(max(cpu_ratios), 3)],
        "entries": n,
        "rounds": len(ratios),
        "plain_s": med(plain),
        "sealed_s": med(sealed),
        "sealed_vs_plain_throughput": round(ratio, 3),
        "ratio_min_max": [round(min(ratios), 3), round(max(ratios), 3)],
        "target_min": TARGET_APPEND,
        "ok": ratio >= TARGET_APPEND,
    }


def med(xs: list[float]) -> float:
    return round(statistics.median(xs), 4)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--memories", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--append-only", action="store_true", help="only the append comparison")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="erase-bench-"))
    try:
        plain, sealed, ratios, cpu_ratios = [], [], [], []
        for r in range(args.rounds):
            print(f"append round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
            # The side that goes first alternates: a fixed order hands one side a warmer cache.
            got = {}
            for side in (False, True) if r % 2 == 0 else (True, False):
                got[side] = append_round(tmp / f"{side}{r}", args.entries, side)
            plain.append(got[False][0])
            sealed.append(got[True][0])
            ratios.append(got[False][0] / got[True][0])
            cpu_ratios.append(got[False][1] / got[True][1])
        if args.append_only:
            print(json.dumps(append_json(args.entries, plain, sealed, ratios, cpu_ratios)))
            return
        stores, forgets = [], []
        for r in range(args.rounds):
            print(f"forget-one round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
            s, f = forget_one_round(tmp / f"one{r}", args.memories)
            stores.append(s)
            forgets.append(f)
        rebuilds, bulks = [], []
        for r in range(args.rounds):
            print(f"forget-bulk round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
            rb, fb = forget_bulk_round(tmp / f"bulk{r}", args.memories)
            rebuilds.append(rb)
            bulks.append(fb)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # Each round's ratio is taken in that round's home, side by side; the median of them is the
    # figure, with their spread (the machine's other load moves single rounds a lot).
    one_ratios = [f / s for f, s in zip(forgets, stores, strict=True)]
    bulk_ratios = [f / r for f, r in zip(bulks, rebuilds, strict=True)]
    one_ratio = statistics.median(one_ratios)
    bulk_ratio = statistics.median(bulk_ratios)
    out = {
        "append": append_json(args.entries, plain, sealed, ratios, cpu_ratios),
        "forget_one": {
            "home_memories": args.memories,
            "store_s": med(stores),
            "forget_s": med(forgets),
            "forget_vs_store": round(one_ratio, 3),
            "ratio_min_max": [round(min(one_ratios), 3), round(max(one_ratios), 3)],
            "target_max": TARGET_FORGET_ONE,
            "ok": one_ratio <= TARGET_FORGET_ONE,
        },
        "forget_bulk": {
            "memories": args.memories,
            "rebuild_s": med(rebuilds),
            "forget_s": med(bulks),
            "forget_vs_rebuild": round(bulk_ratio, 3),
            "ratio_min_max": [round(min(bulk_ratios), 3), round(max(bulk_ratios), 3)],
            "target_max": TARGET_FORGET_BULK,
            "ok": bulk_ratio <= TARGET_FORGET_BULK,
        },
    }
    out["ok"] = all(v["ok"] for v in out.values() if isinstance(v, dict))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
