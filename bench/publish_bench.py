"""Benchmark: `log publish` of a whole log into an empty directory, beside writing the same bytes raw.

    python -m bench.publish_bench [--entries N] [--rounds R]

A home with N memory.stored-like entries is built once. Each round, in
alternation: (a) `publish` into a fresh directory (checkpoint, hash tiles,
entry bundles, each file written atomically and synced); (b) the raw
baseline: every entry's bytes concatenated into one file, written and synced
once, the least any copy of the log must cost; and (c) a second `publish`
into the directory of (a), which finds everything present (the incremental
no-op). Medians with min-max; the ratio publish/raw is compared with TARGET.
Prints one JSON object on stdout.
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

from mnemolog.eventlog.store.log import Log
from mnemolog.substrate.home import Home, init_home
from mnemolog.substrate.witness.publish import publish

TARGET = 10.0  # publish may cost at most this many times the raw write


def payload(i: int) -> dict[str, Any]:
    return {
        "id": f"m-{i:016d}",
        "ns": "agent/default",
        "text": f"observation {i}: " + "the user prefers concise answers with sources cited " * 2,
        "tags": ["preference", "style"],
    }


def build(root: Path, n: int) -> Home:
    init_home(root, key_name="bench")
    home = Home(root)
    with home.open_writer(periodic_checkpoints=False) as w:
        for start in range(0, n, 1000):
            w.append_many([("memory.stored", payload(i), 1) for i in range(start, min(n, start + 1000))])
    return home


def raw_write(log_dir: Path, out: Path) -> int:
    with Log(log_dir) as log:
        data = b"".join(log.raw(s) for s in range(log.size))
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(data)


def stats(xs: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(xs), 4), "min": round(min(xs), 4), "max": round(max(xs), 4)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="publish-bench-"))
    try:
        print(f"building a log of {args.entries} entries", file=sys.stderr, flush=True)
        home = build(tmp / "home", args.entries)
        pub_s, raw_s, noop_s = [], [], []
        files = bytes_written = raw_bytes = 0
        for r in range(args.rounds):
            out = tmp / f"pub{r}"
            t0 = time.perf_counter()
            rep = publish(home.log_dir, out)
            pub_s.append(time.perf_counter() - t0)
            files, bytes_written = rep.files_written, rep.bytes_written
            t0 = time.perf_counter()
            raw_bytes = raw_write(home.log_dir, tmp / f"raw{r}")
            raw_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            again = publish(home.log_dir, out)
            noop_s.append(time.perf_counter() - t0)
            assert again.files_written == 0
            shutil.rmtree(out)
            (tmp / f"raw{r}").unlink()
        ratio = statistics.median(pub_s) / statistics.median(raw_s)
        print(
            json.dumps(
                {
                    "bench": "publish",
                    "entries": rep.size,
                    "rounds": args.rounds,
                    "files": files,
                    "published_bytes": bytes_written,
                    "raw_bytes": raw_bytes,
                    "publish_s": stats(pub_s),
                    "raw_s": stats(raw_s),
                    "noop_republish_s": stats(noop_s),
                    "ratio_publish_to_raw": round(ratio, 2),
                    "target_ratio_max": TARGET,
                    "pass": ratio <= TARGET,
                },
                indent=1,
            )
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
