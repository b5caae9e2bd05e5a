"""Benchmark of `verify --projections` beside the bound that limits it: a rebuild of the same home.

    python -m bench.audit_bench [--memories N] [--dir D]

The audit re-folds the log (what a rebuild does) into a scratch database and
compares every table with disk row for row, so its cost is a rebuild plus a
comparison; the target is at most 1.5x the rebuild, measured in the same run
on the same home (rebuild and audit alternated, best of each). Prints one JSON
object on stdout (progress on stderr).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.recall_bench import Corpus, fill
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import Home, init_home

TARGET = 1.5


def say(msg: str) -> None:
    print(f"audit_bench: {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.audit_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--memories", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temp dir)")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="mnemolog-audit-bench-", dir=args.dir))
    result: dict[str, Any] = {"ok": True, "memories": args.memories}
    try:
        init_home(root / "home", key_name="bench")
        home = Home(root / "home")
        say(f"writing {args.memories} memory.stored events")
        result["write_seconds"] = round(fill(home, Corpus(), args.memories), 2)
        rebuilds: list[float] = []
        audits: list[float] = []
        report: dict[str, Any] = {}
        with Substrate.open(home, long_lived=False, worker=False) as s:
            for r in range(args.rounds):
                say(f"round {r + 1}: rebuild")
                t0 = time.perf_counter()
                s.rebuild()
                rebuilds.append(time.perf_counter() - t0)
                say(f"round {r + 1}: verify --projections")
                t0 = time.perf_counter()
                report = s.verify_projections()
                audits.append(time.perf_counter() - t0)
        best_rebuild, best_audit = min(rebuilds), min(audits)
        ratio = round(best_audit / best_rebuild, 3)
        result.update(
            {
                "entries": report["entries"],
                "rows_compared": report["rows"],
                "rebuild_seconds": [round(x, 2) for x in rebuilds],
                "verify_projections_seconds": [round(x, 2) for x in audits],
                "refold_seconds": report["refold_seconds"],
                "compare_seconds": report["compare_seconds"],
                "verify_projections_vs_rebuild": ratio,
                "targets": {
                    "verify_projections_vs_rebuild": {
                        "value": ratio,
                        "target": f"<= {TARGET}",
                        "met": ratio <= TARGET,
                    }
                },
            }
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
