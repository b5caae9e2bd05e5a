"""Benchmark of forensic bundles: export and verify time and size for one memory as the log grows.

    python -m bench.bundle_bench [--sizes 10000,100000,1000000] [--repeat 3] [--dir D]

For each log size n it builds a log (group commit, `append_many`) of filler
entries with one memory touched at a handful of seqs spread across it
(stored, linked, updated, archived, restored), catches the projections up
(timed apart: that is the home's cost, not the bundle's), then exports the
memory's bundle and verifies it offline. A bundle should grow with
entries selected x log(n), not with n, so the figures that matter are the
ratios to the smallest log beside log2(n) ratios and n ratios. Verify time
is also given beside its bound measured in the same run: a loop doing only
the bundle's Ed25519 signature checks and inclusion proofs.

Prints one JSON object on stdout (progress on stderr when it is a TTY).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mnemolog.eventlog.bundle import verifier as bundle
from mnemolog.eventlog.bundle.offline import parse_entries
from mnemolog.eventlog.bundle.tarball import read_tar
from mnemolog.eventlog.format import codec, merkle
from mnemolog.eventlog.format.keys import verify_signature
from mnemolog.eventlog.progress import Progress
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.segments import list_segments
from mnemolog.eventlog.store.writer import Durability
from mnemolog.eventlog.verify.trust import TRUST_GENESIS
from mnemolog.eventlog.vocabulary import events as vocabulary
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.events import CURRENT_TV
from mnemolog.substrate.forensics import service as forensics
from mnemolog.substrate.home import Home, init_home

MEMORY = "01HBENCHBENCHBENCHBENCHBEN"
OTHER = "01HOTHEROTHEROTHEROTHEROTH"
CHUNK = 20_000


def touches_at(n: int) -> dict[int, tuple[str, dict[str, Any]]]:
    """The memory's events, at fractions of the log (a handful of seqs spread across it)."""

    def stored(mid: str, text: str) -> dict[str, Any]:
        return {"id": mid, "namespace": "bench", "kind": "observation", "content": text}

    events = {
        int(n * 0.02): ("memory.stored", stored(OTHER, "another memory the benchmark links to")),
        int(n * 0.05): ("memory.stored", stored(MEMORY, "the memory under audit")),
        int(n * 0.30): (
            "link.created",
            {"src": MEMORY, "dst": OTHER, "relation": "related_to", "metadata": {}},
        ),
        int(n * 0.50): ("memory.updated", {"id": MEMORY, "confidence": 0.9}),
        int(n * 0.51): ("memory.updated", {"id": MEMORY, "tags": ["audited"]}),
        int(n * 0.80): ("memory.archived", {"id": MEMORY, "by": "operator", "reason": "stale"}),
        int(n * 0.97): ("memory.restored", {"id": MEMORY}),
    }
    # Written as a session writes them: the current type version, with back-chain pointers.
    heads: dict[str, int] = {}
    for seq in sorted(events):
        type_, data = events[seq]
        ids = vocabulary.touched_ids(type_, data)
        data[vocabulary.TOUCH_PREV] = {m: heads.get(m, vocabulary.FIRST_TOUCH) for m in ids}
        heads.update(dict.fromkeys(ids, seq))
    return events


def build(root: Path, n: int) -> tuple[Home, float]:
    t0 = time.perf_counter()
    init_home(root, "bench-key")
    home = Home(root)
    events = touches_at(n)
    prog = Progress(f"building log of {n:,}", n)
    with home.open_writer(durability=Durability("group", max_entries=4096, max_ms=20)) as w:
        seq = w.size
        while seq < n:
            batch: list[tuple[str, dict[str, Any], int]] = []
            while seq < n and len(batch) < CHUNK:
                ev = events.get(seq)
                batch.append(
                    (ev[0], ev[1], CURRENT_TV[ev[0]])
                    if ev
                    else ("bench.filler", {"i": seq, "pad": "x" * 48}, 1)
                )
                seq += 1
            w.append_many(batch)
            prog.advance(len(batch))
    prog.close()
    return home, time.perf_counter() - t0


def bound_loop(data: bytes) -> float:
    """Only the cryptography a verifier cannot skip: every signature and every inclusion proof."""
    members = read_tar_bytes(data)
    entries = parse_entries(members[bundle.KEYS], bundle.KEYS) + parse_entries(members[bundle.ENTRIES], "e")
    keys = {e.kid: e.data["public_key"] for e in entries if "public_key" in e.data}
    proofs = {p[0]: p[1] for p in codec.decode(members[bundle.PROOFS])["proofs"]}
    size = codec.decode(members[bundle.PROOFS])["tree_size"]
    t0 = time.perf_counter()
    for e in entries:
        verify_signature(keys[e.kid], e.tbs(), e.sig)
        merkle.root_from_inclusion(e.seq, size, e.leaf, proofs[e.seq])
    return time.perf_counter() - t0


def read_tar_bytes(data: bytes) -> dict[str, bytes]:
    import io

    return read_tar(io.BytesIO(data), len(data))


def measure(base: Path, n: int, repeat: int) -> dict[str, Any]:
    home, build_s = build(base / f"home-{n}", n)
    t0 = time.perf_counter()
    with Substrate.open(home, long_lived=False) as sub:
        with sub.session():
            pass
        catch_up_s = time.perf_counter() - t0
        # The first export folds the whole log for the heads it commits; later ones reuse them.
        t = time.perf_counter()
        ex = forensics.export_bundle(sub, MEMORY)
        first_export_s = time.perf_counter() - t
        exports: list[float] = []
        for _ in range(repeat):
            t = time.perf_counter()
            ex = forensics.export_bundle(sub, MEMORY)
            exports.append(time.perf_counter() - t)
    assert ex is not None
    path = base / f"bundle-{n}.tar"
    path.write_bytes(ex.data)
    verifies: list[float] = []
    for _ in range(repeat):
        t = time.perf_counter()
        report = bundle.verify_bundle(path, policy=TRUST_GENESIS)
        verifies.append(time.perf_counter() - t)
    bound = min(bound_loop(ex.data) for _ in range(repeat))
    members = read_tar_bytes(ex.data)
    proofs = codec.decode(members[bundle.PROOFS])["proofs"]
    with Log(home.log_dir) as log:
        log_bytes = sum(p.stat().st_size for _, p in list_segments(home.log_dir))
        size = log.size
    verify_s = statistics.median(verifies)
    return {
        "log_entries": size,
        "log_bytes": log_bytes,
        "build_s": round(build_s, 2),
        "projection_catch_up_s": round(catch_up_s, 2),
        "selected_entries": len(report.seqs),
        "key_entries": report.key_entries,
        "proof_hashes": sum(len(p[1]) for p in proofs),
        "proofs_bytes": len(members[bundle.PROOFS]),
        "bundle_bytes": len(ex.data),
        "bundle_vs_log_bytes": round(len(ex.data) / log_bytes, 6),
        "first_export_s": round(first_export_s, 3),
        "export_s": round(statistics.median(exports), 4),
        "complete": bool(report.completeness and report.completeness["complete"]),
        "completeness_as_of": report.completeness["as_of_tree_size"] if report.completeness else None,
        "heads_bytes": len(members[bundle.HEADS]),
        "head_proof_hashes": sum(len(p[2]) for p in codec.decode(members[bundle.HEADS])["proofs"]),
        "verify_s": round(verify_s, 4),
        "verify_bound_s": round(bound, 5),
        "verify_vs_bound": round(verify_s / bound, 1) if bound > 0 else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bundle_bench")
    p.add_argument("--sizes", default="10000,100000,1000000", help="comma-separated log sizes")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dir", default=None, help="work directory (default: a temporary one, removed)")
    args = p.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bundle-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    try:
        runs = {str(n): measure(base, n, args.repeat) for n in sizes}
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    first = runs[str(sizes[0])]
    growth = {}
    for n in sizes[1:]:
        r = runs[str(n)]
        growth[f"{n}/{sizes[0]}"] = {
            "n_ratio": round(n / sizes[0], 2),
            "log2n_ratio": round(math.log2(n) / math.log2(sizes[0]), 3),
            "proof_hashes_ratio": round(r["proof_hashes"] / first["proof_hashes"], 3),
            "proofs_bytes_ratio": round(r["proofs_bytes"] / first["proofs_bytes"], 3),
            "heads_bytes_ratio": round(r["heads_bytes"] / first["heads_bytes"], 3),
            "bundle_bytes_ratio": round(r["bundle_bytes"] / first["bundle_bytes"], 3),
            "export_s_ratio": round(r["export_s"] / first["export_s"], 2),
            "verify_s_ratio": round(r["verify_s"] / first["verify_s"], 2),
        }
    out = {
        "benchmark": "bundle",
        "memory_touches": len(touches_at(sizes[0])) - 1,
        "runs": runs,
        "growth": growth,
        "notes": "bundle bytes include size-independent parts (views, VERIFY.md, parquet), so their ratio "
        "stays below the log2(n) ratio; proof hashes track it",
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
