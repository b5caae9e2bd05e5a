"""The HTTP API's latency and throughput, beside the same work done in-process.

A real `mnemolog serve` on 127.0.0.1 and a real client (httpx). The bound
of every HTTP request is the Substrate call it makes: a store or a recall
done in this process on a home of its own, alternating with the HTTP one (the
side that goes first alternating too) so both see the same machine. Both
homes hold `--memories` memories (10,000 by default) before the first timed
call, and both are warmed (caught up, one recall) first: an empty home
measures nothing but the request's framing. Reported: p50/p99 of each side and the overhead
HTTP adds; then the load test (4 concurrent clients x 500 stores, every
write acknowledged exactly once, checked against the log), its p50/p99 and
throughput beside the in-process store rate (one log, so stores serialise
on its sync whatever the number of clients).

`python -m bench.http_bench [--memories K] [--requests N] [--clients C] [--per-client M]`;
prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import init_home


def log(msg: str) -> None:
    print(f"http_bench: {msg}", file=sys.stderr, flush=True)


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def ms(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(pct(xs, 50) * 1e3, 2), "p99_ms": round(pct(xs, 99) * 1e3, 2), "n": len(xs)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(home: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mnemolog.cli.main",
            "--home",
            str(home),
            "serve",
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return p, f"http://127.0.0.1:{port}"
        except OSError:
            if p.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the server did not start") from None
            time.sleep(0.1)


def text(i: int) -> str:
    return f"Memory {i}: the checkout workers timed out when the connection pool of service {i % 37} ran dry."


def prefill(home: Path, n: int) -> None:
    """n memories of the recall bench's corpus, appended and caught up, so the home is of the stated size."""
    from bench.recall_bench import Corpus, fill
    from mnemolog.substrate.home import Home

    fill(Home(home), Corpus(), n)
    with Substrate.open(home, long_lived=False, worker=False) as s:
        s.stats()


def side_by_side(url: str, local: Substrate, n: int) -> dict[str, Any]:
    http_store: list[float] = []
    local_store: list[float] = []
    http_recall: list[float] = []
    local_recall: list[float] = []
    with httpx.Client(base_url=url, timeout=120) as c:
        c.post("/recall", json={"query": "warm", "limit": 5})
        local.recall("warm", limit=5)

        def h_store(i: int) -> None:
            t0 = time.perf_counter()
            r = c.post("/memory", json={"content": text(i)})
            http_store.append(time.perf_counter() - t0)
            assert r.status_code == 201, r.text

        def l_store(i: int) -> None:
            t0 = time.perf_counter()
            local.store(text(i))
            local_store.append(time.perf_counter() - t0)

        def h_recall(i: int) -> None:
            t0 = time.perf_counter()
            r = c.post("/recall", json={"query": f"why did service {i % 37} time out", "limit": 5})
            http_recall.append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text

        def l_recall(i: int) -> None:
            t0 = time.perf_counter()
            local.recall(f"why did service {i % 37} time out", limit=5)
            local_recall.append(time.perf_counter() - t0)

        for i in range(n):
            for f in (h_store, l_store) if i % 2 == 0 else (l_store, h_store):
                f(i)
        for i in range(n):
            for f in (h_recall, l_recall) if i % 2 == 0 else (l_recall, h_recall):
                f(i)

    def pair(h: list[float], loc: list[float]) -> dict[str, Any]:
        return {
            "http": {**ms(h), "min_ms": round(min(h) * 1e3, 2), "max_ms": round(max(h) * 1e3, 2)},
            "in_process": {**ms(loc), "min_ms": round(min(loc) * 1e3, 2), "max_ms": round(max(loc) * 1e3, 2)},
            "overhead_p50_ms": round((pct(h, 50) - pct(loc, 50)) * 1e3, 2),
            "ratio_p50": round(pct(h, 50) / pct(loc, 50), 2),
        }

    return {"store": pair(http_store, local_store), "recall": pair(http_recall, local_recall)}


def load(url: str, home: Path, clients: int, per_client: int) -> dict[str, Any]:
    lat: list[float] = []
    acks: list[str] = []
    failures: list[str] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        mine: list[tuple[float, str]] = []
        with httpx.Client(base_url=url, timeout=300) as c:
            for j in range(per_client):
                t0 = time.perf_counter()
                r = c.post("/memory", json={"content": f"load {i}-{j}", "namespace": f"load/c{i}"})
                dt = time.perf_counter() - t0
                if r.status_code != 201:
                    failures.append(f"{i}-{j}: {r.status_code}")
                    continue
                mine.append((dt, r.json()["memory"]["id"]))
        with lock:
            lat.extend(d for d, _ in mine)
            acks.extend(x for _, x in mine)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {
        "clients": clients,
        "per_client": per_client,
        "acknowledged": len(acks),
        "unique_ids": len(set(acks)),
        "failures": len(failures),
        **ms(lat),
        "stores_per_s": round(len(acks) / wall, 1),
        "wall_s": round(wall, 2),
        "ids": acks,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--memories", type=int, default=10_000, help="memories in each home before timing")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--per-client", type=int, default=500)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mnemolog-http-bench-"))
    try:
        served, local_home, load_home = work / "served", work / "local", work / "load"
        for h in (served, local_home, load_home):
            init_home(h, key_name="bench")
        for h in (served, local_home):
            log(f"{args.memories} memories into {h.name}")
            prefill(h, args.memories)
        proc, url = start(served)
        try:
            log(f"{args.requests} stores and recalls, HTTP beside in-process")
            with Substrate.open(local_home, long_lived=True, worker=False) as local:
                pairs = side_by_side(url, local, args.requests)
                t0 = time.perf_counter()
                for i in range(args.requests):
                    local.store(f"rate {i}")
                local_rate = args.requests / (time.perf_counter() - t0)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        proc, url = start(load_home)
        try:
            log(f"load: {args.clients} clients x {args.per_client} stores")
            ld = load(url, load_home, args.clients, args.per_client)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        with Substrate.open(load_home, long_lived=False, worker=False) as s:
            stored = sorted(e.data["id"] for e in s.log.iter_entries() if e.type == "memory.stored")
        ids = ld.pop("ids")
        ld["exactly_once"] = (
            stored == sorted(ids) and len(set(ids)) == len(ids) == args.clients * args.per_client
        )
        ld["in_process_stores_per_s"] = round(local_rate, 1)
        out = {
            "memories": args.memories,
            "load_avg": os.getloadavg(),
            **pairs,
            "load": ld,
            "ok": bool(ld["exactly_once"] and ld["failures"] == 0),
        }
        print(json.dumps(out))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
