"""Benchmark of context packs and document ingest, each beside the work that bounds it.

    python -m bench.context_bench [--quick] [--dir D] [--keep]

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

Memories come from CPython's pydoc topics (bench.recall_bench's corpus),
appended with the group-commit writer; one in ten is a user or feedback
memory so the identity tier has candidates. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
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
from mnemolog.substrate.home import Home, init_home

TARGETS = {"pack_p50_ms_max": 50.0}
KINDS = ["observation", "reference", "knowledge", "decision", "project", "knowledge", "observation",
         "reference", "user", "feedback"]  # fmt: skip


def log(msg: str) -> None:
    print(f"context_bench: {msg}", file=sys.stderr, flush=True)


def memory_event(corpus: Corpus, i: int) -> dict[str, Any]:
    title, content = corpus.doc(i)
    return {
        "id": f"C{i:025d}",
        "namespace": "agent",
        "kind": KINDS[i % len(KINDS)],
        "title": title,
        "content": content,
        "tags": [],
        "metadata": {},
    }


def fill(home: Home, corpus: Corpus, n: int) -> float:
    t0 = time.perf_counter()
    with home.open_writer(durability=Durability("group", 4096, 20)) as w:
        for lo in range(0, n, 20_000):
            w.append_many(
                [("memory.stored", memory_event(corpus, i), 1) for i in range(lo, min(lo + 20_000, n))]
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    ap.add_argument("--dir", help="work directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args(argv)
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
