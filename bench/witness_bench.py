"""Benchmark: group-commit append rate with periodic checkpoints sent to one loopback witness,
beside the same run with the same checkpoints and no witness.

    python -m bench.witness_bench [--entries N] [--checkpoint-every K] [--rounds R]

Sixteen threads append N memory.stored-like entries, each waiting for its
acknowledgement, so group commit batches them; a checkpointer thread (standing in for the writer's periodic
checkpoints) signs a checkpoint every K entries. In the witnessed run each
checkpoint is handed to `BackgroundPublisher`, which sends it to a witness
(`mnemolog witness serve`, a separate process on 127.0.0.1, on the same two
cores) and appends the cosignature to the checkpoint file. Runs alternate,
R of each, so a noisy machine moves both sides; the medians are compared.
Target: witnessed >= 0.9 x unwitnessed. Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.format.note import parse_note
from mnemolog.eventlog.store.writer import Durability, LogWriter
from mnemolog.eventlog.witness.cosignature import CosignerVerifier, cosignatures
from mnemolog.substrate.witness.config import WitnessConfig, WitnessSettings
from mnemolog.substrate.witness.service import BackgroundPublisher, CheckpointPublisher

TYPE = "memory.stored"
TARGET = 0.9
PRODUCERS = 16  # appending threads, each waiting for its own acknowledgement


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def payload(i: int) -> dict[str, Any]:
    return {
        "id": f"m-{i:016d}",
        "ns": "agent/default",
        "text": f"observation {i}: " + "the user prefers concise answers with sources cited " * 2,
        "tags": ["preference", "style"],
    }


def run_once(
    d: Path, key: SigningKey, n: int, every: int, publisher: BackgroundPublisher | None
) -> dict[str, Any]:
    w = LogWriter(d, [key], durability=Durability("group"), checkpoint_on_close=False)
    done = threading.Event()
    checkpoints = 0

    def checkpointer() -> None:
        nonlocal checkpoints
        last = w.size
        while not done.is_set():
            if w.size - last >= every:
                cp, _ = w.checkpoint()
                last = cp.size
                checkpoints += 1
                if publisher is not None:
                    publisher.submit(cp.size)
            else:
                time.sleep(0.001)

    t = threading.Thread(target=checkpointer)
    payloads = [payload(i) for i in range(n)]

    def producer(k: int) -> None:
        append = w.append
        for p in payloads[k::PRODUCERS]:
            append(TYPE, p)

    producers = [threading.Thread(target=producer, args=(k,)) for k in range(PRODUCERS)]
    try:
        t.start()
        t0 = time.perf_counter()
        for p in producers:
            p.start()
        for p in producers:
            p.join()
        seconds = time.perf_counter() - t0
    finally:
        done.set()
        t.join()
        w.close()
    return {"entries_per_s": round(n / seconds, 1), "seconds": round(seconds, 3), "checkpoints": checkpoints}


def start_witness(root: Path, logs: list[tuple[str, str]]) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    args = [sys.executable, "-m", "mnemolog.cli.main", "--json", "witness", "serve", "--dir", str(root)]
    args += ["--listen", "127.0.0.1:0", "--name", "bench.witness/w1"]
    for origin, vkey in logs:
        args += ["--log", f"{origin}={vkey}"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.witness_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=50_000)
    ap.add_argument("--checkpoint-every", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    n, every, rounds = args.entries, args.checkpoint_every, args.rounds
    root = Path(tempfile.mkdtemp(prefix="mnemolog-witness-bench-"))
    key = SigningKey.generate("bench")
    proc = None
    try:
        logs: list[Path] = []
        for i in range(2 * rounds):
            d = root / f"log{i}"
            LogWriter.create(d, key, log_id=os.urandom(16))
            logs.append(d)
        origins = []
        for d in logs:
            with LogWriter(d, [key], checkpoint_on_close=False) as w:
                cp, _ = w.checkpoint()
            origins.append((cp.origin, key.verifier.vkey()))
        proc, info = start_witness(root / "witness", origins)
        wkey = CosignerVerifier.from_vkey(info["vkey"])
        settings = WitnessSettings((WitnessConfig("w1", info["url"], wkey),), 5.0, 0)
        plain: list[dict[str, Any]] = []
        witnessed: list[dict[str, Any]] = []
        cosigned_at_end: list[bool] = []
        for r in range(rounds):
            d0, d1 = logs[2 * r], logs[2 * r + 1]
            say(f"round {r + 1}/{rounds}: without witness")
            plain.append(run_once(d0, key, n, every, None))
            say(f"round {r + 1}/{rounds}: with one loopback witness")
            pub = BackgroundPublisher(
                CheckpointPublisher(d1, root / "nokeys", settings), report=lambda _r: None
            )
            try:
                witnessed.append(run_once(d1, key, n, every, pub))
                pub.wait_idle(30)
            finally:
                pub.close()
            newest = max(int(p.name) for p in (d1 / "checkpoints").iterdir() if p.name.isdigit())
            note = parse_note((d1 / "checkpoints" / f"{newest:020d}").read_bytes())
            cosigned_at_end.append(bool(cosignatures(note, [wkey])))
        a = statistics.median(x["entries_per_s"] for x in plain)
        b = statistics.median(x["entries_per_s"] for x in witnessed)
        ratio = round(b / a, 3) if a else 0.0
        result = {
            "ok": True,
            "entries": n,
            "checkpoint_every": every,
            "rounds": rounds,
            "group_commit_no_witness_per_s": a,
            "group_commit_one_witness_per_s": b,
            "ratio_witnessed_vs_not": ratio,
            "target": TARGET,
            "meets_target": ratio >= TARGET,
            "newest_checkpoint_cosigned": cosigned_at_end,
            "runs": {"no_witness": plain, "one_witness": witnessed},
        }
        print(json.dumps(result))
        return 0
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
