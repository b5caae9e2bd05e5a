"""LoCoMo-10: does recall find the dialogue turns that answer a question? bm25, vector, hybrid.

    python -m bench.locomo_bench [--conversations N] [--data PATH]

The data (LoCoMo-10, evaluation only) is read from
../shared/benchmarks/locomo/locomo10.zip beside the repository, or --data;
when it is absent the benchmark prints {"ok": true, "skipped": REASON}.
Nothing of it is written anywhere but a temporary home.

Per conversation: a new home; every turn stored as one memory (speaker
name prefixed: "Calvin: ..."), through Substrate.store; then the vectors
synced with the default offline embedder (WordLlama). Every question of
categories 1-4 (single-hop, multi-hop, temporal, open-domain; category 5 is
adversarial and has no evidence) is asked in each mode; a retrieved memory
is relevant when its turn is in the question's `evidence`. recall@5,
recall@10 and MRR are computed by ir-measures (R@5, R@10, RR) over all
questions of all conversations. Latency is per query, embedding of the
question included for vector and hybrid. Ingest is reported per turn: the
store (signed log entry and projections, group commit) and the embedding
sync, beside the time to put the same texts into SQLite FTS5.

Fusion parameters: the BM25 and vector candidate lists (top 50 each) are
kept and fused again for a grid of k and weights, and the grid is reported,
so the defaults in projections/hybrid.py can be checked against it.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sqlite3
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from mnemolog.eventlog.writer import Durability
from mnemolog.projections import hybrid
from mnemolog.projections import vectors as vx
from mnemolog.projections.recall import Filters
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import Home, init_home

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "benchmarks" / "locomo" / "locomo10.zip"
CATEGORIES = (1, 2, 3, 4)
DEPTH = 50
GRID_K = (5, 10, 20, 40, 60, 100)
GRID_VECTOR_WEIGHT = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)


def log(msg: str) -> None:
    print(f"locomo_bench: {msg}", file=sys.stderr, flush=True)


def find_data(arg: str | None) -> Path | None:
    for p in ([Path(arg)] if arg else []) + [
        DEFAULT_DATA,
        Path("/work/shared/benchmarks/locomo/locomo10.zip"),
    ]:
        if p.is_file():
            return p
    return None


def conversations(path: Path) -> list[tuple[str, dict[str, Any]]]:
    with zipfile.ZipFile(path) as z:
        names = sorted(n for n in z.namelist() if n.endswith(".json"))
        return [(Path(n).stem, json.loads(z.read(n))) for n in names]


def turns(conv: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(dia_id, speaker, text) of every turn, session by session."""
    out = []
    sessions = sorted(
        (int(m.group(1)), k) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)) and conv[k]
    )
    for _, key in sessions:
        for t in conv[key]:
            if isinstance(t, dict) and t.get("text") and t.get("dia_id"):
                out.append((str(t["dia_id"]), str(t.get("speaker", "")), str(t["text"])))
    return out


def evidence(qa: dict[str, Any]) -> set[str]:
    ids: set[str] = set()
    for e in qa.get("evidence") or []:
        for part in re.split(r"[;,\s]+", str(e)):
            if re.fullmatch(r"D\d+:\d+", part):
                ids.add(part)
    return ids


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))] if s else 0.0


def measure(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> dict[str, float]:
    import ir_measures
    from ir_measures import RR, R

    got = ir_measures.calc_aggregate([R @ 5, R @ 10, RR], qrels, run)
    return {
        "recall@5": round(float(got[R @ 5]), 4),
        "recall@10": round(float(got[R @ 10]), 4),
        "mrr": round(float(got[RR]), 4),
    }


def as_run(ranked_dia: list[str]) -> dict[str, float]:
    """A ranking as ir-measures scores (higher first), the first occurrence of a turn kept."""
    out: dict[str, float] = {}
    for i, d in enumerate(ranked_dia):
        out.setdefault(d, float(len(ranked_dia) - i))
    return out


def fts5_ingest(rows: list[str]) -> float:
    with tempfile.TemporaryDirectory() as d:
        db = sqlite3.connect(Path(d) / "f.sqlite")
        db.execute(
            "CREATE VIRTUAL TABLE f USING fts5(content, tokenize='porter unicode61 remove_diacritics 2')"
        )
        t0 = time.perf_counter()
        for r in rows:  # one insert per text, as memories are stored one by one
            db.execute("INSERT INTO f(content) VALUES (?)", [r])
        db.commit()
        secs = time.perf_counter() - t0
        db.close()
    return secs


def run_conversation(work: Path, name: str, conv: dict[str, Any], embedder: Any, out: dict[str, Any]) -> None:
    root = work / name
    init_home(root, key_name="locomo")
    home = Home(root)
    ts = turns(conv.get("conversation", conv))
    texts = [f"{speaker}: {text}" for _, speaker, text in ts]
    with Substrate.open(home, long_lived=True, worker=False, durability=Durability("group", 512, 5)) as sub:
        t0 = time.perf_counter()
        dia_of: dict[int, str] = {}
        for (dia, _, _), text in zip(ts, texts, strict=True):
            dia_of[sub.store(text)["stored_seq"]] = dia
        store_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with sub.projections.session() as conn:
            meta = vx.configure(conn, embedder.model_id, embedder.dim)
            vx.sync(conn, embedder.embed, meta)
            meta = vx.read_meta(conn)
        embed_s = time.perf_counter() - t0
        out["ingest"].append(
            {"turns": len(ts), "store_s": store_s, "embed_s": embed_s, "fts5_s": fts5_ingest(texts)}
        )
        qas = [q for q in conv.get("qa", []) if q.get("category") in CATEGORIES and evidence(q)]
        with sub.projections.session() as conn:
            for i, qa in enumerate(qas):
                qid = f"{name}/{i}"
                question = str(qa["question"])
                out["qrels"][qid] = dict.fromkeys(evidence(qa), 1)
                for mode in hybrid.MODES:
                    t0 = time.perf_counter()
                    qv = embedder.embed([question])[0] if mode != "bm25" else None
                    got = hybrid.rank(conn, question, qv, Filters(), 10, mode=mode, meta=meta)  # type: ignore[arg-type]
                    out["latency"][mode].append(time.perf_counter() - t0)
                    out["runs"][mode][qid] = as_run([dia_of[r.doc] for r in got])
                # The candidate lists, for the fusion grid.
                qv = embedder.embed([question])[0]
                lex = hybrid.rank(conn, question, None, Filters(), DEPTH, mode="bm25")
                near = hybrid.rank(conn, question, qv, Filters(), DEPTH, mode="vector", meta=meta)
                out["candidates"][qid] = ([r.doc for r in lex], [r.doc for r in near], dia_of)


def grid(out: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for k in GRID_K:
        for w in GRID_VECTOR_WEIGHT:
            run = {}
            for qid, (lex, near, dia_of) in out["candidates"].items():
                fused = hybrid.rrf({"bm25": lex, "vector": near}, {"bm25": 1.0, "vector": w}, k)
                run[qid] = as_run([dia_of[d] for d, _, _ in fused[:10]])
            rows.append({"k": k, "vector_weight": w, **measure(out["qrels"], run)})
    return sorted(rows, key=lambda r: (-r["recall@5"], -r["mrr"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conversations", type=int, default=10)
    ap.add_argument("--data")
    args = ap.parse_args(argv)
    path = find_data(args.data)
    if path is None:
        print(
            json.dumps({"ok": True, "bench": "locomo", "skipped": f"LoCoMo-10 not found at {DEFAULT_DATA}"})
        )
        return 0
    from mnemolog.curators.embed_wordllama import WordLlamaEmbedder

    embedder = WordLlamaEmbedder.shared()
    out: dict[str, Any] = {
        "ingest": [],
        "qrels": {},
        "runs": {m: {} for m in hybrid.MODES},
        "latency": {m: [] for m in hybrid.MODES},
        "candidates": {},
    }
    work = Path(tempfile.mkdtemp(prefix="locomo_bench-"))
    try:
        for name, conv in conversations(path)[: args.conversations]:
            log(f"conversation {name}")
            run_conversation(work, name, conv, embedder, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    turns_n = sum(x["turns"] for x in out["ingest"])
    store_s = sum(x["store_s"] for x in out["ingest"])
    embed_s = sum(x["embed_s"] for x in out["ingest"])
    fts_s = sum(x["fts5_s"] for x in out["ingest"])
    result: dict[str, Any] = {
        "ok": True,
        "bench": "locomo",
        "data": "LoCoMo-10 (evaluation only, read in place)",
        "conversations": len(out["ingest"]),
        "turns": turns_n,
        "questions": len(out["qrels"]),
        "embedder": embedder.model_id,
        "fusion": vars(hybrid.Fusion()),
        "modes": {},
        "ingest": {
            "store_per_s": round(turns_n / store_s, 1),
            "store_and_embed_per_s": round(turns_n / (store_s + embed_s), 1),
            "fts5_per_s": round(turns_n / fts_s, 1),
            "ratio_vs_fts5": round(fts_s / (store_s + embed_s), 4),
            "what": "Substrate.store per turn (signed entry, group commit, projections) + vector sync, "
            "beside one FTS5 insert per turn and a commit",
        },
        "ollama": "not measured: no Ollama server is reachable from this machine",
    }
    for mode in hybrid.MODES:
        lat = out["latency"][mode]
        result["modes"][mode] = {
            **measure(out["qrels"], out["runs"][mode]),
            "p50_ms": round(pct(lat, 50) * 1e3, 3),
            "p99_ms": round(pct(lat, 99) * 1e3, 3),
        }
    result["hybrid_minus_bm25_recall@5"] = round(
        result["modes"]["hybrid"]["recall@5"] - result["modes"]["bm25"]["recall@5"], 4
    )
    result["fusion_grid_top5"] = grid(out)[:5]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
