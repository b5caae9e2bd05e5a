"""Many tenants in one process: latency beside one tenant alone, memory against the cache, scope checks.

Three measurements, each against its bound in the same run:

1. Latency. `serve --tenants ROOT` holding T tenants of M memories each
   (the cache large enough for all of them, every tenant opened once
   before timing), and `serve --home H` holding one home of M memories
   (the single-tenant server as it was before tenants). Requests alternate
   between the two servers so both see the same machine: a store and a
   recall on the tenant server go to a tenant chosen round robin with that
   tenant's scoped token; on the single server, to its one home without a
   token. Every home has been opened and has written once before the timing
   (a home's first write opens its writer). Reported: p50 of each, and the ratio tenant/single (bound: 1.2).
2. Memory. For cache sizes C (default 4, 16 and T), a fresh tenant server
   gets one recall for every tenant in turn, then its peak resident set
   (VmHWM) is read. Reported: peak RSS per cache size and the growth per
   open tenant; the bound is that the growth follows the cache: peak RSS at
   the smallest cache is below that at the largest, and the server with
   the smallest cache, after touching all T tenants, stays within 1.25x of
   one that touched only C of them.
3. The scope check. In this process: a recall through the operation layer
   without a token, and the check a token's request adds
   (`Substrate.authenticate` + `Substrate.authorise`). Reported: p50 of
   each and the ratio check/recall (bound: 0.05).

The tenants are copies of one home of M memories (made once, embeddings
off so recall ranks by BM25 and no model is loaded): a server's costs do
not depend on what the memories say. `python -m bench.tenants_bench
[--tenants 100] [--memories 1000] [--requests 200]`; prints one JSON object.
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
import time
from pathlib import Path
from typing import Any

import httpx

from mnemolog.cli.agents import operations
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import init_home
from mnemolog.substrate.tenancy.tenants import TenantRoot

WORDS = [
    "pool",
    "worker",
    "deploy",
    "checkout",
    "rollback",
    "latency",
    "vendor",
    "budget",
    "thermal",
    "polish",
    "index",
    "shard",
    "cache",
    "token",
    "schema",
    "migration",
    "backup",
    "restore",
    "audit",
    "witness",
    "bundle",
    "review",
    "queue",
    "retry",
]


def log(msg: str) -> None:
    print(f"tenants_bench: {msg}", file=sys.stderr, flush=True)


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(args: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    p = subprocess.Popen(
        [sys.executable, "-m", "mnemolog.cli.main", *args, "--listen", f"127.0.0.1:{port}"],
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return p, f"http://127.0.0.1:{port}"
        except OSError:
            if p.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("a server did not start") from None
            time.sleep(0.1)


def stop(p: subprocess.Popen[bytes]) -> None:
    p.terminate()
    p.wait(timeout=60)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def template(dest: Path, memories: int) -> None:
    init_home(dest)
    lines = []
    for i in range(memories):
        w = [WORDS[(i * k + k) % len(WORDS)] for k in range(1, 9)]
        lines.append(json.dumps({"content": f"note {i}: " + " ".join(w), "namespace": f"agents/a{i % 4}"}))
    src = dest.parent / "template.jsonl"
    src.write_text("\n".join(lines) + "\n")
    with Substrate.open(dest, long_lived=False, worker=False) as s:
        s.set_embedder("off")
        s.import_jsonl(src)


def make_root(base: Path, tpl: Path, tenants: int) -> tuple[TenantRoot, dict[str, str]]:
    root = TenantRoot(base / "root")
    root.create()
    tokens = {}
    for i in range(tenants):
        name = f"t{i:03d}"
        shutil.copytree(tpl, root.tenants_dir / name, ignore=shutil.ignore_patterns("*.lock", "*.wait"))
        with Substrate.open(root.home(name), long_lived=False, worker=False) as s:
            tokens[name] = s.issue_token("write", namespaces=["agents"], tenant=name)["token"]
    return root, tokens


def latency(root: TenantRoot, tokens: dict[str, str], single: Path, requests: int) -> dict[str, Any]:
    names = sorted(tokens)
    tp, turl = start(["serve", "--tenants", str(root.path), "--cache", str(len(names))])
    sp, surl = start(["--home", str(single), "serve"])
    out: dict[str, Any] = {}
    try:
        with httpx.Client(timeout=120) as tc, httpx.Client(timeout=120) as sc:
            # Every tenant opened, and its writer (a home's first write opens it: the key, the
            # checks of the log's tail), outside the timing; the single server's too.
            warm = {"content": "warm up", "namespace": "agents/a0"}
            for n in names:
                tc.post(f"{turl}/memory", json=warm, headers={"Authorization": f"Bearer {tokens[n]}"})
            sc.post(f"{surl}/memory", json=warm)
            times: dict[str, list[float]] = {k: [] for k in ("t_store", "s_store", "t_recall", "s_recall")}
            for i in range(requests):
                n = names[i % len(names)]
                auth = {"Authorization": f"Bearer {tokens[n]}"}
                body = {"content": f"bench note {i} {WORDS[i % len(WORDS)]}", "namespace": "agents/a0"}
                q = {"query": f"{WORDS[i % len(WORDS)]} {WORDS[(i * 7) % len(WORDS)]}", "limit": 10}
                for key, client, url, path, payload, headers in (
                    ("t_store", tc, turl, "/memory", body, auth),
                    ("s_store", sc, surl, "/memory", body, {}),
                    ("t_recall", tc, turl, "/recall", q, auth),
                    ("s_recall", sc, surl, "/recall", q, {}),
                ):
                    t0 = time.perf_counter()
                    r = client.post(f"{url}{path}", json=payload, headers=headers)
                    times[key].append(time.perf_counter() - t0)
                    if r.status_code >= 300:
                        raise SystemExit(f"{key}: {r.status_code} {r.text[:200]}")
        for op in ("store", "recall"):
            t, s = pct(times[f"t_{op}"], 50), pct(times[f"s_{op}"], 50)
            out[op] = {
                "tenants_p50_ms": round(t * 1e3, 2),
                "single_p50_ms": round(s * 1e3, 2),
                "ratio": round(t / s, 3),
                "bound": 1.2,
                "ok": t / s <= 1.2,
            }
        out["tenant_server_peak_rss_mib"] = peak_rss_mib(tp.pid)
        out["single_server_peak_rss_mib"] = peak_rss_mib(sp.pid)
    finally:
        stop(tp)
        stop(sp)
    return out


def memory(root: TenantRoot, tokens: dict[str, str], caches: list[int]) -> dict[str, Any]:
    names = sorted(tokens)
    rows = []
    for cache in caches:
        p, url = start(["serve", "--tenants", str(root.path), "--cache", str(cache)])
        try:
            with httpx.Client(timeout=120) as c:
                for n in names[:cache]:
                    c.post(
                        f"{url}/recall",
                        json={"query": "pool"},
                        headers={"Authorization": f"Bearer {tokens[n]}"},
                    )
                filled = peak_rss_mib(p.pid)
                for n in names[cache:]:
                    c.post(
                        f"{url}/recall",
                        json={"query": "pool"},
                        headers={"Authorization": f"Bearer {tokens[n]}"},
                    )
                after_all = peak_rss_mib(p.pid)
        finally:
            stop(p)
        rows.append(
            {"cache": cache, "peak_rss_mib_cache_filled": filled, "peak_rss_mib_all_touched": after_all}
        )
        log(f"cache {cache}: {filled} MiB filled, {after_all} MiB after all {len(names)} tenants")
    small, large = rows[0], rows[-1]
    per_tenant = (large["peak_rss_mib_all_touched"] - small["peak_rss_mib_all_touched"]) / max(
        1, large["cache"] - small["cache"]
    )
    flat = small["peak_rss_mib_all_touched"] / small["peak_rss_mib_cache_filled"]
    return {
        "by_cache": rows,
        "mib_per_open_tenant": round(per_tenant, 2),
        "smallest_cache_all_touched_over_filled": round(flat, 3),
        "bound": "smallest cache: all tenants touched within 1.25x of the cache filled; more cache, more RSS",
        "ok": flat <= 1.25 and small["peak_rss_mib_all_touched"] < large["peak_rss_mib_all_touched"],
    }


def scope_check(home: Path, requests: int) -> dict[str, Any]:
    # Long-lived, as a server holds a home (the projection stays open between requests).
    with Substrate.open(home, long_lived=True, worker=False) as s:
        token = s.issue_token("write", namespaces=["agents/a1"])["token"]
        op = operations.OPERATIONS["memory_recall"]
        recall, check = [], []
        for i in range(max(requests, 50)):
            args = {
                "query": f"{WORDS[i % len(WORDS)]} {WORDS[(i * 7) % len(WORDS)]}",
                "namespace": "agents/a1",
            }
            t0 = time.perf_counter()
            operations.invoke(s, "memory_recall", args, None)
            t1 = time.perf_counter()
            sc = s.authenticate(token)
            s.authorise(sc, op.access, args, op.name)
            t2 = time.perf_counter()
            recall.append(t1 - t0)
            check.append(t2 - t1)
    r, c = pct(recall, 50), pct(check, 50)
    return {
        "recall_p50_ms": round(r * 1e3, 3),
        "check_p50_ms": round(c * 1e3, 3),
        "ratio": round(c / r, 4),
        "bound": 0.05,
        "ok": c / r <= 0.05,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tenants", type=int, default=100)
    ap.add_argument("--memories", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--caches", default="", help="comma-separated cache sizes (default: 4,16,TENANTS)")
    ap.add_argument(
        "--idle-release-ms",
        type=int,
        default=None,
        help="[serve] idle_release_ms of the tenant root (default: the tenant server's, 60000)",
    )
    a = ap.parse_args()
    caches = [int(x) for x in a.caches.split(",")] if a.caches else [4, 16, a.tenants]
    base = Path(tempfile.mkdtemp(prefix="mnemolog-tenants-bench-"))
    try:
        t0 = time.monotonic()
        tpl = base / "template"
        template(tpl, a.memories)
        single = base / "single"
        shutil.copytree(tpl, single)
        root, tokens = make_root(base, tpl, a.tenants)
        if a.idle_release_ms is not None:
            (root.path / "tenants.toml").write_text(f"[serve]\nidle_release_ms = {a.idle_release_ms}\n")
        log(f"{a.tenants} tenants of {a.memories} memories in {time.monotonic() - t0:.0f} s")
        result = {
            "tenants": a.tenants,
            "memories_per_tenant": a.memories,
            "requests": a.requests,
            "idle_release_ms": a.idle_release_ms,
            "cpus": os.cpu_count(),
            "scope_check": scope_check(single, a.requests),
            "latency": latency(root, tokens, single, a.requests),
            "memory": memory(root, tokens, caches),
        }
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
