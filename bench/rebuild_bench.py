"""Benchmark of `rebuild` beside the bound that limits it, interleaved, at 10k and 100k memories.

    python -m bench.rebuild_bench [--sizes 10000,100000] [--rounds R] [--dir D] [--keep]

On a home of N `memory.stored` events (the recall bench's corpus), each
round runs, in fresh child processes and in an order that rotates:

  rebuild    `Substrate.rebuild()` (open the home, read and check the log, fold every entry,
             tokenise the memories into the inverted index, sort it, checkpoint)
  bound      a raw DuckDB insert of the same decoded rows: `pa.Table.from_pylist` of the memory
             rows the fold produces, CREATE TABLE AS into a fresh DuckDB file, CHECKPOINT
             (reading and decoding the log excluded: it is done before the clock starts)
  before     (--before DIR) the same rebuild by another version of mnemolog (its package in DIR)
  indexed    the bound plus the inverted index built set-wise from those rows (the same
             tokenizer statement the fold runs, `stage_postings`, and the postings written
             sorted by term): what the same rows cost with the index every rebuild must build

Each child reports wall-clock and CPU seconds (all its threads) of the timed
part. Printed: per size and side the median with min–max of both, the
ratios of the medians to the bound, and the load average before and after.
One JSON object on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from bench.recall_bench import Corpus, fill, rows_of
from mnemolog.projections.db import load_fts
from mnemolog.projections.recall.text import drop_staged, install_macros, stage_postings
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import Home, init_home

SIDES = ("rebuild", "bound", "indexed")
TARGET_RATIO = 3.0


def log(msg: str) -> None:
    print(f"rebuild_bench: {msg}", file=sys.stderr, flush=True)


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(t: tuple[float, float]) -> dict[str, Any]:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"wall": time.perf_counter() - t[0], "cpu": time.process_time() - t[1], "rss_mib": round(peak)}


def child_rebuild(home: str) -> dict[str, Any]:
    t = _clock()
    with Substrate.open(home, long_lived=False, worker=False) as s:
        r = s.rebuild()
    out = _since(t)
    out["replayed"] = r["replayed"]
    return out


def child_bound(log_dir: str, db_path: str, indexed: bool) -> dict[str, Any]:
    rows = list(rows_of(Path(log_dir)))  # decoding is not part of the bound
    Path(db_path).unlink(missing_ok=True)
    t = _clock()
    tbl = pa.Table.from_pylist(rows)
    conn = duckdb.connect(db_path)
    conn.register("rows", tbl)
    conn.execute("CREATE TABLE memories AS SELECT * FROM rows")
    if indexed:
        load_fts(conn)
        install_macros(conn)
        src = "(SELECT *, stored_seq AS doc, NULL::BIGINT AS occurred_at FROM memories)"
        stage_postings(conn, src, dated=True)
        conn.execute("CREATE TABLE postings AS SELECT term, doc, tf, dl FROM ml_post ORDER BY term")
        drop_staged(conn)
    conn.execute("CHECKPOINT")
    conn.close()
    out = _since(t)
    out["rows"] = len(rows)
    Path(db_path).unlink(missing_ok=True)
    return out


def in_child(*args: str, code: str | None = None) -> dict[str, Any]:
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = code  # a directory holding another version's `mnemolog` package
    p = subprocess.run(
        [sys.executable, "-m", "bench.rebuild_bench", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parent.parent,
        env=env,
    )
    if p.returncode != 0:
        raise RuntimeError(f"child {args[0]} failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def spread(xs: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3)}


def one_size(root: Path, corpus: Corpus, n: int, rounds: int, before: str | None) -> dict[str, Any]:
    home = Home(root)
    if not (root / "log").exists():
        init_home(root, key_name="bench")
        home = Home(root)
        log(f"{n} events written in {fill(home, corpus, n):.1f} s")
    sides = SIDES + (("before",) if before else ())
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
    db = str(root.parent / f"bound-{n}.duckdb")
    for r in range(rounds):
        k = r % len(sides)
        for side in sides[k:] + sides[:k]:
            if side == "rebuild":
                res = in_child("--child-rebuild", str(root))
            elif side == "before":
                res = in_child("--child-rebuild", str(root), code=before)
            else:
                res = in_child("--child-bound", str(home.log_dir), db, "1" if side == "indexed" else "0")
            runs[side].append(res)
            log(f"{n}: round {r + 1} {side} {res['wall']:.2f} s wall, {res['cpu']:.2f} s CPU")
    out: dict[str, Any] = {"memories": n, "rounds": rounds}
    for side in sides:
        out[side] = {
            "wall_s": spread([x["wall"] for x in runs[side]]),
            "cpu_s": spread([x["cpu"] for x in runs[side]]),
            "peak_rss_mib": max(x["rss_mib"] for x in runs[side]),
        }
    for side in [s for s in sides if s != "bound"]:
        for k in ("wall_s", "cpu_s"):
            out[f"{side}_to_bound_{k[:-2]}"] = round(out[side][k]["median"] / out["bound"][k]["median"], 2)
    out["met"] = out["rebuild_to_bound_wall"] <= TARGET_RATIO
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated home sizes")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per size (default 3)")
    ap.add_argument("--dir", help="work directory; homes found there are reused (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument(
        "--before",
        metavar="DIR",
        help="also rebuild with the `mnemolog` package found in DIR (another version, e.g. a "
        "`git archive` of main), interleaved with the rest",
    )
    ap.add_argument("--child-rebuild", help=argparse.SUPPRESS)
    ap.add_argument("--child-bound", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_rebuild:
        print(json.dumps(child_rebuild(args.child_rebuild)))
        return 0
    if args.child_bound:
        log_dir, db, indexed = args.child_bound
        print(json.dumps(child_bound(log_dir, db, indexed == "1")))
        return 0
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="rebuild_bench-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus = Corpus()
    out: dict[str, Any] = {
        "ok": True,
        "bench": "rebuild",
        "cpus": os.cpu_count(),
        "duckdb": duckdb.__version__,
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "target": f"rebuild <= {TARGET_RATIO} x bound (wall clock)",
    }
    try:
        for n in (int(x) for x in args.sizes.split(",")):
            out[f"at_{n}"] = one_size(work / f"home-{n}", corpus, n, args.rounds, args.before)
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
