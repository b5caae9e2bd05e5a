"""Benchmark of memories that recall: store, recall, rebuild, each beside the bound that limits it.

    python -m bench.recall_bench [--quick] [--dir D] [--keep]
                                 [--modes N [--embedder E] [--per-source K]]

Every figure is measured in this one run and reported beside its bound from
the same run:

  store      p50/p99 of Substrate.store at 1k and at 100k memories   ratio 100k / 1k  (target <= 1.5),
             the two homes stored into alternately so that both see the same machine
  recall     top-10 p50/p99 of Substrate.recall at 100k memories     vs SQLite FTS5 bm25() over the
             same corpus and queries (target p50 ratio <= 1.5, goal <= 1.0)
  rebuild    replay of 1M memory.stored events into a new database    vs building an Arrow table from
             the same decoded rows and inserting it into a fresh DuckDB table (target >= 0.3 x)
  rss        peak resident memory of that rebuild, in a child process (target <= 1.5 GiB)
  ingest     (--ingest N) `import` of N memories with the default embeddings  vs the same texts into FTS5
             (target rate >= 1/3 of FTS5's), then hybrid recall beside BM25 recall on them (target p50 <= 2x)

The corpus is real English text: the paragraphs of the Python documentation
that CPython ships in pydoc_data.topics, split into sentences and recombined
(1-4 neighbouring sentences per memory, titled by topic) to reach 100k and
1M memories. FTS5 gets the same terms recall uses after our stop-word
removal, OR-joined, with its porter tokenizer (its stemmer, on our words),
and the title weighted 2 as ours is. Prints one JSON object on stdout
(progress on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.writer import Durability
from mnemolog.projections.db import load_fts
from mnemolog.projections.recall.text import STOP_WORDS, install_macros
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.embedding.service import Unchanged
from mnemolog.substrate.events import upcast
from mnemolog.substrate.home import Home, init_home

TARGETS = {
    "store_p50_ratio_max": 1.5,
    "store_p99_ratio_max": 1.5,
    "recall_p50_ratio_max": 1.5,
    "recall_p50_ratio_goal": 1.0,
    "rebuild_vs_raw_insert_min": 0.3,
    "rebuild_peak_rss_mib_max": 1536,
}
NAMESPACES = ["agent", "agent/notes", "team/python", "team/python/docs", "ops"]
KINDS = ["observation", "reference", "knowledge", "decision"]


def log(msg: str) -> None:
    print(f"recall_bench: {msg}", file=sys.stderr, flush=True)


# -- corpus ------------------------------------------------------------------------------


def sentences() -> list[tuple[str, str]]:
    """(topic title, sentence) for every sentence of the paragraphs of pydoc_data.topics."""
    from pydoc_data.topics import topics

    out: list[tuple[str, str]] = []
    for name in sorted(topics):
        title = name.replace("-", " ").replace("_", " ")
        for para in re.split(r"\n\s*\n", topics[name]):
            lines = para.strip().splitlines()
            if not lines or lines[0].startswith(("   ", ">>>")):
                continue  # code, not prose
            text = " ".join(" ".join(lines).split())
            if len(text.split()) < 6:
                continue
            for s in re.split(r"(?<=[.!?])\s+", text):
                if len(s.split()) >= 4:
                    out.append((title, s))
    return out


class Corpus:
    """Memory i's title and text, the same in every run and computable without the others."""

    def __init__(self) -> None:
        self.sents = sentences()

    def doc(self, i: int) -> tuple[str, str]:
        rng = random.Random(i * 7919 + 17)
        n = len(self.sents)
        j = rng.randrange(n)
        k = rng.randint(1, 4)
        picks = [self.sents[(j + rng.randint(-25, 25)) % n][1] for _ in range(k)]
        return self.sents[j][0], " ".join(picks)

    def event(self, i: int, run: int = 0) -> dict[str, Any]:
        """Memory i's event; with `run`, memories come `run` at a time from one source (so each has
        neighbours in its namespace, as a conversation's turns or a capture's notes do)."""
        title, content = self.doc(i)
        out: dict[str, Any] = {
            "id": f"B{i:025d}",
            "namespace": NAMESPACES[i % len(NAMESPACES)],
            "kind": KINDS[i % len(KINDS)],
            "title": title,
            "content": content,
            "tags": [f"t{i % 7}"],
            "metadata": {},
        }
        if run:
            out["source"] = f"bench/source-{i // run}"
        return out

    def queries(self, n: int) -> list[str]:
        """Natural-language questions: a few words of some memory, with stop words around them."""
        rng = random.Random(4242)
        glue = ["how do I", "what is", "why does", "when should I use", "explain", "the", "about"]
        out = []
        for _ in range(n):
            words = re.findall(r"[A-Za-z]{4,}", self.doc(rng.randrange(10**6))[1])
            rng.shuffle(words)
            out.append(f"{rng.choice(glue)} {' '.join(words[: rng.randint(2, 4)])}".strip())
        return out


def fill(home: Home, corpus: Corpus, n: int, run: int = 0) -> float:
    """Append n memory.stored events with the group-commit writer; returns the seconds taken."""
    t0 = time.perf_counter()
    with home.open_writer(durability=Durability("group", 4096, 20)) as w:
        for lo in range(0, n, 20_000):
            w.append_many(
                [("memory.stored", corpus.event(i, run), 1) for i in range(lo, min(lo + 20_000, n))]
            )
    return time.perf_counter() - t0


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def ms(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(pct(xs, 50) * 1e3, 3), "p99_ms": round(pct(xs, 99) * 1e3, 3), "n": len(xs)}


def make_home(root: Path, corpus: Corpus, n: int, run: int = 0) -> tuple[Home, dict[str, float]]:
    init_home(root, key_name="bench")
    home = Home(root)
    write_s = fill(home, corpus, n, run)
    t0 = time.perf_counter()
    with Substrate.open(home, long_lived=False, worker=False) as s:
        s.stats()  # the first session catches up on all n
    return home, {"write_s": round(write_s, 2), "catch_up_s": round(time.perf_counter() - t0, 2)}


# -- store -------------------------------------------------------------------------------------


def store_latencies(small: Home, large: Home, corpus: Corpus, n: int) -> tuple[list[float], list[float]]:
    """Stores into both homes, alternating, so that both see the same machine at the same time."""
    a: list[float] = []
    b: list[float] = []
    with (
        Substrate.open(small, long_lived=True, worker=False) as s,
        Substrate.open(large, long_lived=True, worker=False) as t,
    ):
        s.stats()
        t.stats()
        for i in range(10**7, 10**7 + n):
            e = corpus.event(i)
            kw = {"title": e["title"], "namespace": e["namespace"], "kind": e["kind"], "tags": e["tags"]}
            for sub, out in ((s, a), (t, b)) if i % 2 else ((t, b), (s, a)):
                t0 = time.perf_counter()
                sub.store(e["content"], **kw)
                out.append(time.perf_counter() - t0)
    return a, b


# -- recall beside FTS5 ---------------------------------------------------------------------------


def fts5_build(path: Path, home: Home) -> float:
    db = sqlite3.connect(path)
    db.execute(
        "CREATE VIRTUAL TABLE f USING fts5(title, content, tokenize='porter unicode61 remove_diacritics 2')"
    )
    t0 = time.perf_counter()
    with Log(home.log_dir) as lg:
        rows = [
            (e.data.get("title"), e.data.get("content"))
            for e in lg.iter_entries(1)
            if e.type == "memory.stored"
        ]
    db.executemany("INSERT INTO f(title, content) VALUES (?, ?)", rows)
    db.commit()
    db.execute("INSERT INTO f(f) VALUES ('optimize')")
    db.commit()
    db.close()
    return time.perf_counter() - t0


def fts5_match(words: list[str]) -> str:
    """Our words minus our stop words, each quoted, OR-joined."""
    stop = set(STOP_WORDS)
    kept = list(dict.fromkeys(w for w in words if w not in stop))
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in kept)


def recall_vs_fts5(home: Home, fts_path: Path, queries: list[str]) -> dict[str, Any]:
    words_conn = duckdb.connect()
    load_fts(words_conn)
    install_macros(words_conn)
    db = sqlite3.connect(fts_path)
    ours: list[float] = []
    cold: list[float] = []
    theirs: list[float] = []
    overlap: list[float] = []
    sql = "SELECT rowid, title, content, bm25(f, 2.0, 1.0) AS s FROM f WHERE f MATCH ? ORDER BY s LIMIT 10"
    with Substrate.open(home, long_lived=True, worker=False) as s:
        for q in queries[:5]:  # warm both caches
            s.recall(q, mode="bm25")
        for q in queries:
            row = words_conn.execute("SELECT ml_words(?)", [q]).fetchone()
            match = fts5_match(list(row[0]) if row and row[0] else [])
            if not match:
                continue
            # Each side runs the query once untimed, then timed: FTS5 always had its warm-up,
            # ours did not, so its first run (a statement for the stems of words it has not
            # seen) was timed against FTS5's second. The first run is reported apart.
            t0 = time.perf_counter()
            s.recall(q, limit=10, mode="bm25")
            cold.append(time.perf_counter() - t0)
            db.execute(sql, [match]).fetchall()  # interleaved, so both see the same machine
            t0 = time.perf_counter()
            got = s.recall(q, limit=10, mode="bm25")
            ours.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            ref = db.execute(sql, [match]).fetchall()
            theirs.append(time.perf_counter() - t0)
            a = {r["content"] for r in got}
            b = {r[2] for r in ref}
            overlap.append(len(a & b) / max(len(b), 1))
    db.close()
    words_conn.close()
    o, t = ms(ours), ms(theirs)
    return {
        "ours": o,
        "fts5": t,
        "ours_first_run": ms(cold),
        "p50_ratio": round(o["p50_ms"] / t["p50_ms"], 3),
        "p99_ratio": round(o["p99_ms"] / t["p99_ms"], 3),
        "top10_overlap_mean": round(statistics.mean(overlap), 3) if overlap else None,
        "ours_measures": "Substrate.recall(limit=10): session, catch-up check, terms, BM25, rows",
        "fts5_query": "our words after our stop-word removal, quoted and OR-joined; "
        "tokenize='porter unicode61 remove_diacritics 2'; bm25(f, 2.0, 1.0) (title weight 2); "
        "rowid, title, content of the top 10",
    }


def recall_vs_bm25s(home: Home, queries: list[str]) -> dict[str, Any]:
    """Our recall beside bm25s (in-memory sparse BM25) over the same texts, interleaved."""
    import bm25s

    with Log(home.log_dir) as lg:
        docs = [
            " ".join([e.data.get("title") or ""] * 2 + [e.data.get("content") or ""])
            for e in lg.iter_entries(1)
            if e.type == "memory.stored"
        ]
    retriever = bm25s.BM25(k1=1.2, b=0.75)
    retriever.index(bm25s.tokenize(docs, stopwords="en", show_progress=False), show_progress=False)
    ours: list[float] = []
    theirs: list[float] = []
    with Substrate.open(home, long_lived=True, worker=False) as s:
        for q in queries[:5]:
            s.recall(q, mode="bm25")
        for q in queries:
            t0 = time.perf_counter()
            s.recall(q, limit=10, mode="bm25")
            ours.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            toks = bm25s.tokenize([q], stopwords="en", show_progress=False)
            if toks.vocab:
                retriever.retrieve(toks, k=min(10, len(docs)), show_progress=False)
            theirs.append(time.perf_counter() - t0)
    o, t = ms(ours), ms(theirs)
    return {
        "ours": o,
        "bm25s": t,
        "p50_ratio": round(o["p50_ms"] / t["p50_ms"], 3),
        "bm25s_query": "bm25s.tokenize (English stop words, no stemmer) + retrieve(k=10), index in memory",
    }


# -- rebuild beside a raw Arrow insert ------------------------------------------------------------


def rows_of(log_dir: Path) -> Iterator[dict[str, Any]]:
    """The decoded memory rows the fold would produce (for the bound)."""
    with Log(log_dir) as lg:
        for e in lg.iter_entries(1):
            if e.type != "memory.stored":
                continue  # a home holds other events (keys, checkpoints, links); the fold skips them too
            d = upcast(e.type, e.tv, e.data)
            yield {
                "id": d["id"],
                "namespace": d["namespace"],
                "kind": d["kind"],
                "title": d.get("title"),
                "content": d["content"],
                "tags": d.get("tags", []),
                "metadata": json.dumps(d.get("metadata") or {}),
                "created_at": e.ts,
                "updated_at": e.ts,
                "stored_seq": e.seq,
            }


def child_bound(log_dir: str, db_path: str) -> dict[str, Any]:
    rows = list(rows_of(Path(log_dir)))  # decoding is not part of the bound
    t0 = time.perf_counter()
    tbl = pa.Table.from_pylist(rows)
    conn = duckdb.connect(db_path)
    conn.register("rows", tbl)
    conn.execute("CREATE TABLE memories AS SELECT * FROM rows")
    conn.execute("CHECKPOINT")
    conn.close()
    return {"seconds": time.perf_counter() - t0, "rows": len(rows)}


def child_rebuild(home: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    with Substrate.open(home, long_lived=False, worker=False) as s:
        r = s.rebuild()
    secs = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {"seconds": secs, "replayed": r["replayed"], "peak_rss_mib": round(peak, 1)}


def in_child(*args: str) -> dict[str, Any]:
    p = subprocess.run(
        [sys.executable, "-m", "bench.recall_bench", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )
    if p.returncode != 0:
        raise RuntimeError(f"child {args[0]} failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def rebuild_vs_bound(root: Path, corpus: Corpus, n: int) -> dict[str, Any]:
    init_home(root, key_name="bench")
    home = Home(root)
    write_s = fill(home, corpus, n)
    log(f"{n} events written in {write_s:.1f} s; rebuilding")
    ours = in_child("--child-rebuild", str(root))
    log(f"rebuild {ours['seconds']:.1f} s, peak RSS {ours['peak_rss_mib']} MiB; raw insert")
    bound = in_child("--child-bound", str(home.log_dir), str(root / "bound.duckdb"))
    return {
        "events": n,
        "write_s": round(write_s, 2),
        "rebuild_s": round(ours["seconds"], 2),
        "raw_arrow_insert_s": round(bound["seconds"], 2),
        "ratio": round(bound["seconds"] / ours["seconds"], 3),
        "peak_rss_mib": ours["peak_rss_mib"],
        "bound": "pa.Table.from_pylist of the decoded rows + CREATE TABLE AS into a fresh DuckDB file "
        "(decoding excluded); ours includes reading and decoding the log, the fold, tokenising, "
        "the inverted index and its final sort",
    }


def recall_sizes(work: Path, corpus: Corpus, sizes: tuple[int, ...], nq: int) -> dict[str, Any]:
    """Recall beside FTS5 at each size, and beside bm25s at the largest."""
    out: dict[str, Any] = {}
    for n in sizes:
        log(f"recall at {n} memories beside FTS5")
        home, prep = make_home(work / f"r{n}", corpus, n)
        fts_s = fts5_build(work / f"r{n}.sqlite", home)
        r = recall_vs_fts5(home, work / f"r{n}.sqlite", corpus.queries(nq))
        r["fts5_build_s"] = round(fts_s, 2)
        r["prepare"] = prep
        if n == max(sizes):
            log(f"recall at {n} memories beside bm25s")
            r["vs_bm25s"] = recall_vs_bm25s(home, corpus.queries(nq))
        out[f"at_{n}"] = r
        shutil.rmtree(work / f"r{n}", ignore_errors=True)
    big, small = out[f"at_{max(sizes)}"], out[f"at_{min(sizes)}"]
    out["met"] = {
        f"p50 <= 1.5 x FTS5 at {min(sizes)}": small["p50_ratio"] <= 1.5,
        f"p50 <= 1.0 x FTS5 at {max(sizes)}": big["p50_ratio"] <= 1.0,
        f"p50 <= 2 x bm25s at {max(sizes)}": big["vs_bm25s"]["p50_ratio"] <= 2.0,
    }
    return out


# -- bulk ingest beside FTS5, hybrid beside BM25 ---------------------------------------------------


def ingest_vs_fts5(work: Path, corpus: Corpus, n: int, chunk: int = 2000) -> tuple[Home, dict[str, Any]]:
    """`import` of n memories (signed log, group commit, projections, default embedder) beside FTS5.

    Interleaved, so both see the same machine: the memories are cut into
    files of `chunk` lines; each is imported (one call, one batch) right after
    FTS5 took the same titles and contents (one `executemany` in one
    transaction, its ordinary bulk usage). FTS5's `optimize` at the end is counted on its side.
    Returns the home too.
    """
    root = work / f"ingest{n}"
    init_home(root, key_name="bench")
    home = Home(root)
    os.environ.pop("MNEMOLOG_EMBED", None)  # the default embedder, as a new home has it
    db = sqlite3.connect(work / f"ingest{n}.sqlite")
    db.execute(
        "CREATE VIRTUAL TABLE f USING fts5(title, content, tokenize='porter unicode61 remove_diacritics 2')"
    )
    ours_s = fts_s = 0.0
    embedded = 0
    with Substrate.open(home, long_lived=True, worker=False) as s:
        s.embedding_status()  # open the home (the embedder loads on the first batch, timed)
        for lo in range(0, n, chunk):
            ids = range(lo, min(lo + chunk, n))
            src = work / "chunk.jsonl"
            with src.open("w") as f:
                for i in ids:
                    e = corpus.event(i)
                    f.write(json.dumps({k: e[k] for k in ("namespace", "kind", "title", "content", "tags")}))
                    f.write("\n")
            rows = [corpus.doc(i) for i in ids]
            t0 = time.perf_counter()
            db.executemany("INSERT INTO f(title, content) VALUES (?, ?)", rows)
            db.commit()
            fts_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            report = s.import_jsonl(src, progress=False, batch=chunk)
            ours_s += time.perf_counter() - t0
            embedded += report["embedded"]
        embedder = s.embedding_status()["configured"]
    t0 = time.perf_counter()
    db.execute("INSERT INTO f(f) VALUES ('optimize')")
    db.commit()
    fts_s += time.perf_counter() - t0
    db.close()
    return home, {
        "memories": n,
        "import_s": round(ours_s, 2),
        "fts5_s": round(fts_s, 2),
        "import_per_s": round(n / ours_s, 1),
        "fts5_per_s": round(n / fts_s, 1),
        "rate_ratio": round(fts_s / ours_s, 4),
        "embedded": embedded,
        "embedder": embedder,
        "load_avg_after": os.getloadavg(),
        "what": "mnemolog import in files of 2,000 lines, each right after FTS5 took the same rows "
        "(parse and check every line, the default embedder into the cache, signed entries with one "
        "group commit per file, fold with the bulk tokenizer, vectors), in a long-lived Substrate; "
        "FTS5: one executemany per chunk in a transaction, optimize at the end",
    }


def hybrid_vs_bm25(home: Home, queries: list[str]) -> dict[str, Any]:
    """Hybrid recall beside BM25 recall on one home whose memories all have vectors, interleaved."""
    bm: list[float] = []
    hy: list[float] = []
    with Substrate.open(home, long_lived=True, worker=False) as s:
        s.embed_pending()
        for q in queries[:5]:
            s.recall(q, mode="hybrid")
            s.recall(q, mode="bm25")
        for q in queries:
            s.embedding._queries.clear()  # the query's embedding is part of a hybrid recall
            t0 = time.perf_counter()
            s.recall(q, limit=10, mode="bm25")
            bm.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            s.recall(q, limit=10, mode="hybrid")
            hy.append(time.perf_counter() - t0)
        st = s.embedding_status()
    b, h = ms(bm), ms(hy)
    return {
        "bm25": b,
        "hybrid": h,
        "p50_ratio": round(h["p50_ms"] / b["p50_ms"], 3),
        "vectors": st["vectors"],
        "hnsw": st["vectors"] >= 20_000,
        "hybrid_measures": "Substrate.recall(mode=hybrid): the query embedded (default embedder), "
        "BM25 top 50, "
        "vector top 50 (exact scan below 20,000 vectors, HNSW above), exact cosines, fusion, rows",
    }


# -- every mode beside its bound, one home with vectors, interleaved ------------------------------


def spread(xs: list[float]) -> dict[str, float]:
    """Median with min and max (ms): on a shared machine a figure is a range, not one number."""
    return {
        "p50_ms": round(statistics.median(xs) * 1e3, 3),
        "min_ms": round(min(xs) * 1e3, 3),
        "max_ms": round(max(xs) * 1e3, 3),
        "p99_ms": round(pct(xs, 99) * 1e3, 3),
        "n": len(xs),
    }


def modes_vs_bounds(
    work: Path, corpus: Corpus, n: int, nq: int, *, embedder: str = "minilm", run: int = 0, keep: bool = False
) -> dict[str, Any]:
    """BM25 beside FTS5, vector beside a numpy brute-force cosine, hybrid beside BM25, on one home.

    The home holds n memories with `embedder`'s vectors (MiniLM, the default
    embedder, unless asked otherwise); with `run`, memories come `run` at a
    time from one source, so BM25's neighbour term and hybrid's fused
    smoothing have neighbours to read, as on a home of conversations. Each
    query runs once untimed in every mode (its embedding is then cached, as
    the recall policy caches a process's recent queries; numpy gets the same
    vector for free; and the stems of its words are known: a word's first
    recall asks DuckDB's stemmer, a statement, which a vector-only warm-up
    left to whichever of bm25 and hybrid ran first), then one timed round of
    every side, the order of the sides rotating query by query so that none
    always runs first. `hybrid_embedding` is hybrid with the process's query
    cache emptied first: the question's embedding (the embedder's cost, not
    the ranking's) included. Ratios are of the medians. With `keep` the home
    stays in `work` and a later run with the same arguments reuses it.
    """
    import numpy as np

    root = work / f"modes{n}-{embedder}-run{run}"
    if (root / "bench-ready").exists():
        home, prep = Home(root), {"reused": True}
    else:
        shutil.rmtree(root, ignore_errors=True)
        home, prep = make_home(root, corpus, n, run)
        os.environ.pop("MNEMOLOG_EMBED", None)
        t0 = time.perf_counter()
        with Substrate.open(home, long_lived=False, worker=False) as s:
            with contextlib.suppress(Unchanged):  # already the home's (the default embedder)
                s.set_embedder(embedder)
            s.embed_pending(progress=False)
        prep["embed_s"] = round(time.perf_counter() - t0, 2)
        (root / "bench-ready").touch()
    fts_path = work / f"modes{n}-run{run}.sqlite"
    fts_path.unlink(missing_ok=True)
    prep["fts5_build_s"] = round(fts5_build(fts_path, home), 2)
    words_conn = duckdb.connect()
    load_fts(words_conn)
    install_macros(words_conn)
    db = sqlite3.connect(fts_path)
    fts_sql = (
        "SELECT rowid, title, content, bm25(f, 2.0, 1.0) AS s FROM f WHERE f MATCH ? ORDER BY s LIMIT 10"
    )
    names = ["bm25", "fts5", "vector", "numpy", "hybrid", "hybrid_embedding"]
    times: dict[str, list[float]] = {k: [] for k in names}
    same_top10: list[bool] = []
    same_hybrid: list[bool] = []
    with Substrate.open(home, long_lived=True, worker=False) as s:
        with s.projections.session() as conn:
            tbl = conn.execute("SELECT doc, vec FROM vectors ORDER BY doc").to_arrow_table()
        docs = tbl.column("doc").to_numpy()
        mat = tbl.column("vec").combine_chunks().flatten().to_numpy().reshape(len(docs), -1)
        norms = np.linalg.norm(mat, axis=1)
        rec = None
        with s.projections.session() as conn:
            from mnemolog.projections.embedding import vectors as vx

            rec = vx.recorded(conn)
        assert rec is not None
        queries = corpus.queries(nq)
        for q in queries[:5]:
            for m in ("bm25", "vector", "hybrid"):
                s.recall(q, mode=m)
        for i, q in enumerate(queries):
            row = words_conn.execute("SELECT ml_words(?)", [q]).fetchone()
            match = fts5_match(list(row[0]) if row and row[0] else [])
            if not match:
                continue
            for m in ("bm25", "vector", "hybrid"):  # once each, untimed: see the docstring
                s.recall(q, mode=m)
            qv = np.asarray(s.embedding.query_vector(rec, q), dtype=np.float32)
            got: dict[str, Any] = {}
            k = i % len(names)
            for name in names[k:] + names[:k]:
                if name == "hybrid_embedding":
                    s.embedding._queries.clear()
                t0 = time.perf_counter()
                if name == "fts5":
                    db.execute(fts_sql, [match]).fetchall()
                elif name == "numpy":
                    d = 1.0 - (mat @ qv) / (norms * np.linalg.norm(qv))
                    top = np.argpartition(d, 10)[:10]
                    got["numpy"] = [int(docs[j]) for j in top[np.argsort(d[top])]]
                else:
                    mode = "hybrid" if name == "hybrid_embedding" else name
                    got[name] = [r["stored_seq"] for r in s.recall(q, limit=10, mode=mode)]  # type: ignore[arg-type]
                times[name].append(time.perf_counter() - t0)
            same_top10.append(set(got["vector"]) == set(got["numpy"]))
            same_hybrid.append(got["hybrid"] == got["hybrid_embedding"])
        st = s.embedding_status()
    db.close()
    words_conn.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "memories": n,
        "embedder": embedder,
        "memories_per_source": run or None,
        "vectors": st["vectors"],
        "hnsw": st["vectors"] >= 20_000,
        "prepare": prep,
        **{k: spread(v) for k, v in times.items()},
        "ratios_of_medians": {
            "bm25_vs_fts5": round(med["bm25"] / med["fts5"], 3),
            "vector_vs_numpy": round(med["vector"] / med["numpy"], 3),
            "hybrid_vs_bm25": round(med["hybrid"] / med["bm25"], 3),
            "hybrid_embedding_vs_bm25": round(med["hybrid_embedding"] / med["bm25"], 3),
        },
        "vector_top10_equals_numpy_share": round(sum(same_top10) / max(len(same_top10), 1), 3),
        "hybrid_embedding_same_results_share": round(sum(same_hybrid) / max(len(same_hybrid), 1), 3),
        "load_avg_after": os.getloadavg(),
        "met": {
            "bm25 p50 <= 1.5 x FTS5": med["bm25"] <= 1.5 * med["fts5"],
            "vector p50 <= 2 x numpy": med["vector"] <= 2 * med["numpy"],
            "hybrid p50 <= 1.5 x bm25": med["hybrid"] <= 1.5 * med["bm25"],
        },
        "measures": "Substrate.recall(limit=10) in a long-lived Substrate (session, catch-up check, "
        "ranking, rows), the query's vector kept by the process except in hybrid_embedding; FTS5: "
        "bm25() top 10 with rows; numpy: cosine of the query vector against the float32 matrix of the "
        "same vectors and its top 10 (no rows, no filters)",
    }


# -- main ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    ap.add_argument("--dir", help="work directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument(
        "--recall-only", action="store_true", help="only recall at 10k and 100k (no store, rebuild)"
    )
    ap.add_argument(
        "--ingest",
        type=int,
        default=None,
        metavar="N",
        help="only: import N memories beside FTS5, then hybrid beside BM25 recall on them",
    )
    ap.add_argument(
        "--modes",
        type=int,
        default=None,
        metavar="N",
        help="only: bm25 beside FTS5, vector beside numpy, hybrid beside bm25 on a home of N memories",
    )
    ap.add_argument(
        "--embedder",
        default="minilm",
        help="with --modes: the embedder of the home (default minilm, the default embedder)",
    )
    ap.add_argument(
        "--per-source",
        type=int,
        default=0,
        metavar="K",
        help="with --modes: memories come K at a time from one source (neighbours; default 0: none)",
    )
    ap.add_argument("--child-rebuild", help=argparse.SUPPRESS)
    ap.add_argument("--child-bound", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_rebuild:
        print(json.dumps(child_rebuild(args.child_rebuild)))
        return 0
    if args.child_bound:
        print(json.dumps(child_bound(*args.child_bound)))
        return 0

    small, large, huge = (1_000, 10_000, 50_000) if args.quick else (1_000, 100_000, 1_000_000)
    stores, nq = (100, 50) if args.quick else (1_000, 300)
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="recall_bench-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus = Corpus()
    out: dict[str, Any] = {
        "ok": True,
        "bench": "recall",
        "cpus": os.cpu_count(),
        "duckdb": duckdb.__version__,
        "sqlite": sqlite3.sqlite_version,
        "corpus": {
            "source": "pydoc_data.topics paragraphs, sentences recombined",
            "sentences": len(corpus.sents),
        },
        "targets": TARGETS,
    }
    if args.modes:
        try:
            log(f"every mode beside its bound at {args.modes} memories")
            out["modes"] = modes_vs_bounds(
                work, corpus, args.modes, nq, embedder=args.embedder, run=args.per_source, keep=args.keep
            )
        finally:
            if not args.keep and not args.dir:
                shutil.rmtree(work, ignore_errors=True)
        print(json.dumps(out))
        return 0
    if args.ingest:
        try:
            log(f"import of {args.ingest} memories beside FTS5")
            home, out["ingest"] = ingest_vs_fts5(work, corpus, args.ingest)
            log("hybrid beside bm25 recall")
            out["hybrid"] = hybrid_vs_bm25(home, corpus.queries(nq))
            out["met"] = {
                "ingest >= 1/3 of FTS5": out["ingest"]["rate_ratio"] >= 1 / 3,
                "hybrid p50 <= 2 x bm25": out["hybrid"]["p50_ratio"] <= 2.0,
            }
        finally:
            if not args.keep and not args.dir:
                shutil.rmtree(work, ignore_errors=True)
        print(json.dumps(out))
        return 0
    if args.recall_only:
        try:
            out["recall_sizes"] = recall_sizes(work, corpus, (10_000, large), nq)
        finally:
            if not args.keep and not args.dir:
                shutil.rmtree(work, ignore_errors=True)
        print(json.dumps(out))
        return 0
    try:
        log(f"homes of {small} and {large} memories")
        h_small, prep_small = make_home(work / "small", corpus, small)
        h_large, prep_large = make_home(work / "large", corpus, large)
        log("store, alternating between them")
        lat_small, lat_large = store_latencies(h_small, h_large, corpus, stores)
        a, b = ms(lat_small), ms(lat_large)
        out["store"] = {
            f"at_{small}": a,
            f"at_{large}": b,
            "p50_ratio": round(b["p50_ms"] / a["p50_ms"], 3),
            "p99_ratio": round(b["p99_ms"] / a["p99_ms"], 3),
            "durability": "fsync per append (the default)",
            "method": "the same memories stored into both homes, alternating, each home held open",
            "prepare": {f"at_{small}": prep_small, f"at_{large}": prep_large},
        }
        log(f"recall at {large} memories beside FTS5")
        fts_s = fts5_build(work / "fts5.sqlite", h_large)
        out["recall"] = {"memories": large + stores, "queries": nq, "fts5_build_s": round(fts_s, 2)}
        out["recall"].update(recall_vs_fts5(h_large, work / "fts5.sqlite", corpus.queries(nq)))
        for h in ("small", "large", "fts5.sqlite"):
            p = work / h
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        log(f"rebuild of {huge} events")
        out["rebuild"] = rebuild_vs_bound(work / "huge", corpus, huge)
        out["met"] = {
            "store_p50": out["store"]["p50_ratio"] <= TARGETS["store_p50_ratio_max"],
            "store_p99": out["store"]["p99_ratio"] <= TARGETS["store_p99_ratio_max"],
            "recall_p50": out["recall"]["p50_ratio"] <= TARGETS["recall_p50_ratio_max"],
            "recall_p50_goal": out["recall"]["p50_ratio"] <= TARGETS["recall_p50_ratio_goal"],
            "rebuild_ratio": out["rebuild"]["ratio"] >= TARGETS["rebuild_vs_raw_insert_min"],
            "rebuild_rss": out["rebuild"]["peak_rss_mib"] <= TARGETS["rebuild_peak_rss_mib_max"],
        }
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
