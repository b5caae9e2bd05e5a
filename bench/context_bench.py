"""Benchmark of context packs and document ingest, each beside the work that bounds it.

    python -m bench.context_bench [--quick] [--dir D] [--keep]
    python -m bench.context_bench --packs N [--files F] [--embedder E] [--per-source K] [--dir D] [--keep]

Measured in this one run:

  ingest   a 1,000-file Markdown tree (10 sections a file, 10k chunks) through
           Substrate.ingest: files/s, MB/s, chunks/s, beside (a) reading and
           chunking the same files with no log (the pure work) and (b) the
           bare group-commit writer appending the same payloads (signing and
           writing, no reading, chunking or indexing).
  packs    p50/p99 of Substrate.build_context at 100k memories and 10k chunks,
           without and with recording the context.built event (fsync per
           pack, the default durability), beside the recall calls a pack
           makes (candidate gathering: memory recall, the always-wanted
           memories, chunk BM25) and a plain Substrate.recall of the same
           query; the pure assembly's share is reported too. Target: p50 <= 50 ms.

`--packs N` measures instead, on one home of N memories (and F files of
chunks) with the default embedder's vectors, a pack without and with its
record beside the recall it gathers with (Substrate.recall of the same
query in the same mode, limit = the pack's candidates per tier), the three
sides interleaved query by query (the first side rotating), medians with
min-max, with this process's CPU time per call beside the wall clock and the load average
before and after. Targets (issue 21): pack p50 <= 1.5x that recall, recorded pack <= 2x.

Memories come from CPython's pydoc topics (bench.recall_bench's corpus),
appended with the group-commit writer; one in ten is a user or feedback
memory so the identity tier has candidates. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.recall_bench import Corpus, ms
from mnemolog.eventlog.store.writer import Durability
from mnemolog.projections.context import sources
from mnemolog.projections.context.assemble import assemble
from mnemolog.projections.context.chunker import chunk_text
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.context.config import pack_config
from mnemolog.substrate.context.documents import discover, read_document
from mnemolog.substrate.embedding.service import Unchanged
from mnemolog.substrate.home import Home, init_home

TARGETS = {"pack_p50_ms_max": 50.0}
KINDS = ["observation", "reference", "knowledge", "decision", "project", "knowledge", "observation",
         "reference", "user", "feedback"]  # fmt: skip


def log(msg: str) -> None:
    print(f"context_bench: {msg}", file=sys.stderr, flush=True)


def memory_event(corpus: Corpus, i: int, run: int = 0) -> dict[str, Any]:
    title, content = corpus.doc(i)
    out: dict[str, Any] = {
        "id": f"C{i:025d}",
        "namespace": "agent",
        "kind": KINDS[i % len(KINDS)],
        "title": title,
        "content": content,
        "tags": [],
        "metadata": {},
    }
    if run:
        out["source"] = f"bench/source-{i // run}"
    return out


def fill(home: Home, corpus: Corpus, n: int, run: int = 0) -> float:
    t0 = time.perf_counter()
    with home.open_writer(durability=Durability("group", 4096, 20)) as w:
        for lo in range(0, n, 20_000):
            w.append_many(
                [("memory.stored", memory_event(corpus, i, run), 1) for i in range(lo, min(lo + 20_000, n))]
            )
    return time.perf_counter() - t0


def write_tree(root: Path, corpus: Corpus, files: int, sections: int) -> int:
    """A Markdown tree: `files` files in 20 directories, `sections` headed sections each; its bytes."""
    total = 0
    for f in range(files):
        rng = random.Random(f)
        parts = [f"# Topic {f}: {corpus.doc(10**6 + f)[0]}\n"]
        for s in range(sections):
            title, text = corpus.doc(2 * 10**6 + f * sections + s)
            parts.append(f"\n## {title} ({s})\n\n{text}\n")
            if rng.random() < 0.3:
                parts.append(f"\n{corpus.doc(3 * 10**6 + f * sections + s)[1]}\n")
        d = root / f"area{f % 20:02d}"
        d.mkdir(parents=True, exist_ok=True)
        data = "".join(parts).encode()
        (d / f"note{f:04d}.md").write_bytes(data)
        total += len(data)
    return total


def ingest_vs_bounds(work: Path, home: Home, corpus: Corpus, files: int) -> dict[str, Any]:
    tree = work / "tree"
    nbytes = write_tree(tree, corpus, files, 10)
    # (a) the pure work: discover, read, decode, chunk.
    t0 = time.perf_counter()
    found, _ = discover([tree])
    n_chunks = 0
    for f in found:
        doc = read_document(f.path)
        n_chunks += len(chunk_text(doc.text))
    pure_s = time.perf_counter() - t0
    # The ingest itself, into the home the packs are built from.
    with Substrate.open(home, long_lived=False, worker=False) as s:
        t0 = time.perf_counter()
        report = s.ingest([tree], project="p-bench")
        ingest_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = s.ingest([tree], project="p-bench")
        unchanged_s = time.perf_counter() - t0
    assert report["chunks"] == n_chunks and again["unchanged"] == files, (report["chunks"], n_chunks)
    # (b) the bare writer: the same payloads signed and appended, nothing else.
    payloads = [e.data for e in home.open_log().iter_entries() if e.type == "document.ingested"]
    init_home(work / "bare", key_name="bench")
    t0 = time.perf_counter()
    with Home(work / "bare").open_writer(durability=Durability("group", 4096, 20)) as w:
        for lo in range(0, len(payloads), 64):
            w.append_many([("document.ingested", p, 1) for p in payloads[lo : lo + 64]])
    bare_s = time.perf_counter() - t0
    shutil.rmtree(work / "bare")
    mb = nbytes / 1e6
    return {
        "files": files,
        "bytes": nbytes,
        "chunks": n_chunks,
        "ingest_s": round(ingest_s, 3),
        "files_per_s": round(files / ingest_s, 1),
        "mb_per_s": round(mb / ingest_s, 3),
        "chunks_per_s": round(n_chunks / ingest_s, 1),
        "reingest_unchanged_s": round(unchanged_s, 3),
        "bound_read_and_chunk_s": round(pure_s, 3),
        "bound_bare_writer_s": round(bare_s, 3),
        "ratio_to_read_and_chunk": round(ingest_s / pure_s, 2),
        "ratio_to_bare_writer": round(ingest_s / bare_s, 2),
    }


def packs_vs_recall(home: Home, queries: list[str]) -> dict[str, Any]:
    build: list[float] = []
    recorded: list[float] = []
    gather: list[float] = []
    pure: list[float] = []
    plain: list[float] = []
    sizes: list[int] = []
    with Substrate.open(home, long_lived=True, worker=False) as s:
        cfg = pack_config(s.home.config.raw)
        for q in queries[:5]:  # warm caches and the tokenizer
            s.build_context(q, project="p-bench", record=False)
        for q in queries:
            t0 = time.perf_counter()
            p = s.build_context(q, project="p-bench", record=False)
            build.append(time.perf_counter() - t0)
            sizes.append(len(p["text"]))
            t0 = time.perf_counter()
            s.recall(q, limit=10)
            plain.append(time.perf_counter() - t0)
            with s.session() as sess:
                t0 = time.perf_counter()
                c = sources.candidates(sess.conn, q, "p-bench", cfg)
                gather.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assemble(q, "p-bench", now=0, config=cfg, state=c.state, memories=c.memories, chunks=c.chunks)
            pure.append(time.perf_counter() - t0)
        for q in queries[: max(20, len(queries) // 5)]:
            t0 = time.perf_counter()
            s.build_context(q, project="p-bench", record=True)
            recorded.append(time.perf_counter() - t0)
    b = ms(build)
    return {
        "queries": len(queries),
        "build_no_record": b,
        "build_recorded_fsync": ms(recorded),
        "candidate_gathering": ms(gather),
        "assembly_only": ms(pure),
        "plain_recall_top10": ms(plain),
        "p50_ratio_to_plain_recall": round(b["p50_ms"] / ms(plain)["p50_ms"], 2),
        "pack_chars_p50": sorted(sizes)[len(sizes) // 2],
    }


def spread(xs: list[float]) -> dict[str, float]:
    """Median with min and max (ms): on a shared machine a figure is a range, not one number."""
    return {
        "p50_ms": round(statistics.median(xs) * 1e3, 3),
        "min_ms": round(min(xs) * 1e3, 3),
        "max_ms": round(max(xs) * 1e3, 3),
        "n": len(xs),
    }


def packs_beside_recall(
    work: Path, corpus: Corpus, n: int, files: int, nq: int, *, embedder: str, run: int, keep: bool
) -> dict[str, Any]:
    """A pack, unrecorded and recorded, beside the recall it gathers with, interleaved (see --packs)."""
    root = work / f"packs{n}-{files}-{embedder}-run{run}"
    prep: dict[str, Any] = {}
    if (root / "bench-ready").exists():
        home = Home(root)
        prep["reused"] = True
    else:
        shutil.rmtree(root, ignore_errors=True)
        init_home(root, key_name="bench")
        home = Home(root)
        prep["write_s"] = round(fill(home, corpus, n, run), 2)
        tree = work / f"tree{files}"
        shutil.rmtree(tree, ignore_errors=True)
        write_tree(tree, corpus, files, 10)
        os.environ.pop("MNEMOLOG_EMBED", None)
        t0 = time.perf_counter()
        with Substrate.open(home, long_lived=False, worker=False) as s:
            s.ingest([tree], project="p-bench")
            with contextlib.suppress(Unchanged):  # already the home's (the default embedder)
                s.set_embedder(embedder)
            s.embed_pending(progress=False)
        prep["ingest_and_embed_s"] = round(time.perf_counter() - t0, 2)
        (root / "bench-ready").touch()
        shutil.rmtree(tree, ignore_errors=True)
    names = ["pack", "pack_recorded", "recall"]
    times: dict[str, list[float]] = {k: [] for k in names}
    cpu: dict[str, list[float]] = {k: [] for k in names}  # this process's CPU time, beside the wall
    modes: set[str] = set()
    load_before = os.getloadavg()
    with Substrate.open(home, long_lived=True, worker=False) as s:
        cfg = pack_config(s.home.config.raw)
        queries = corpus.queries(nq)
        for q in queries[:5]:
            s.build_context(q, project="p-bench", record=False)
            s.recall(q, limit=cfg.candidates)
        for i, q in enumerate(queries):
            # Once each, untimed: the query's vector is then kept by the process for every side,
            # and the stems of its words are known (a statement on a word's first use).
            s.build_context(q, project="p-bench", record=False)
            s.recall(q, limit=cfg.candidates)
            k = i % len(names)
            for name in names[k:] + names[:k]:
                t0, c0 = time.perf_counter(), time.process_time()
                if name == "recall":
                    r = s.retrieval.report(q, limit=cfg.candidates)
                    modes.add("recall:" + r["mode"])
                else:
                    p = s.build_context(q, project="p-bench", record=name == "pack_recorded")
                    modes.add("pack:" + p["config"]["recall_mode"])
                times[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
        st = s.embedding_status()
    med = {k: statistics.median(v) for k, v in times.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    load = os.getloadavg()
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "memories": n,
        "files": files,
        "embedder": embedder,
        "memories_per_source": run or None,
        "vectors": st["vectors"],
        "modes_used": sorted(modes),
        "candidates_per_tier": cfg.candidates,
        "prepare": prep,
        **{k: spread(v) for k, v in times.items()},
        "cpu": {k: spread(v) for k, v in cpu.items()},
        "ratios_of_medians": {
            "pack_vs_recall": round(med["pack"] / med["recall"], 3),
            "pack_recorded_vs_recall": round(med["pack_recorded"] / med["recall"], 3),
        },
        "cpu_ratios_of_medians": {
            "pack_vs_recall": round(med_cpu["pack"] / med_cpu["recall"], 3),
            "pack_recorded_vs_recall": round(med_cpu["pack_recorded"] / med_cpu["recall"], 3),
        },
        "load_avg_before": load_before,
        "load_avg_after": load,
        "met": {
            "pack p50 <= 1.5 x recall": med["pack"] <= 1.5 * med["recall"],
            "recorded pack p50 <= 2 x recall": med["pack_recorded"] <= 2 * med["recall"],
        },
        "measures": "Substrate.build_context(project='p-bench') with and without its record (fsync, the "
        "default durability) beside Substrate.recall of the same query in the default mode with "
        "limit = the pack's candidates per tier, in one long-lived Substrate, the query's vector kept",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    ap.add_argument("--dir", help="work directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--packs", type=int, metavar="N", help="only: packs beside recall, N memories")
    ap.add_argument("--files", type=int, default=100, help="with --packs: files of chunks (10 sections each)")
    ap.add_argument("--embedder", default="minilm", help="with --packs: the home's embedder (default minilm)")
    ap.add_argument(
        "--per-source", type=int, default=0, metavar="K", help="with --packs: memories per source"
    )
    ap.add_argument("--queries", type=int, default=200, help="with --packs: queries (default 200)")
    args = ap.parse_args(argv)
    if args.packs:
        work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="context_bench-"))
        work.mkdir(parents=True, exist_ok=True)
        try:
            log(f"packs beside recall at {args.packs} memories and {args.files} files")
            res = packs_beside_recall(
                work,
                Corpus(),
                args.packs,
                args.files,
                args.queries,
                embedder=args.embedder,
                run=args.per_source,
                keep=args.keep,
            )
        finally:
            if not args.keep and not args.dir:
                shutil.rmtree(work, ignore_errors=True)
        print(json.dumps({"ok": True, "bench": "context", "cpus": os.cpu_count(), "packs": res}))
        return 0
    memories, files, nq = (10_000, 100, 50) if args.quick else (100_000, 1_000, 300)
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="context_bench-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus = Corpus()
    out: dict[str, Any] = {"ok": True, "bench": "context", "cpus": os.cpu_count(), "targets": TARGETS}
    try:
        init_home(work / "home", key_name="bench")
        home = Home(work / "home")
        log(f"{memories} memories")
        write_s = fill(home, corpus, memories)
        t0 = time.perf_counter()
        with Substrate.open(home, long_lived=False, worker=False) as s:
            s.stats()
        out["prepare"] = {
            "memories": memories,
            "write_s": round(write_s, 2),
            "catch_up_s": round(time.perf_counter() - t0, 2),
        }
        log(f"ingest of a {files}-file tree")
        out["ingest"] = ingest_vs_bounds(work, home, corpus, files)
        log(f"{nq} packs at {memories} memories and {out['ingest']['chunks']} chunks")
        out["packs"] = packs_vs_recall(home, corpus.queries(nq))
        out["met"] = {"pack_p50": out["packs"]["build_no_record"]["p50_ms"] <= TARGETS["pack_p50_ms_max"]}
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
