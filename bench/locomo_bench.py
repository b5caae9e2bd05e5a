"""LoCoMo-10: does recall find the dialogue turns that answer a question? bm25, vector, hybrid.

    python -m bench.locomo_bench [--conversations N] [--embedder minilm|wordllama|ollama [--model M]]
                                 [--atomise] [--data PATH]

The data (LoCoMo-10, evaluation only) is read from
../shared/benchmarks/locomo/locomo10.zip beside the repository, or --data;
when it is absent the benchmark prints {"ok": true, "skipped": REASON}.
Nothing of it is written anywhere but a temporary home.

Per conversation: a new home embedding with --embedder (default MiniLM,
the default offline embedder); every turn is one memory, speaker name
prefixed ("Calvin: ..."), stored through the bulk path (`import`, which
embeds on insert); ingest is timed beside the same texts put into SQLite
FTS5 one insert at a time. Every question of categories 1-4 (single-hop,
multi-hop, temporal, open-domain; category 5 is adversarial and has no
evidence) is asked through Substrate.recall in each mode; a retrieved memory
is relevant when its turn is in the question's `evidence`. recall@5,
recall@10 and MRR are computed by ir-measures (R@5, R@10, RR) over all
questions of all conversations. Latency is per recall, the embedding of the
question included (the query-vector cache is cleared first).

The candidate lists of both rankers (top 50, with scores) are kept, and both
fusions (the weighted sum and reciprocal rank fusion) are recomputed for a
grid of their parameters, so the defaults in projections/recall/hybrid.py can be
checked against it. `--embedder ollama --model M` measures an Ollama model
(the server at MNEMOLOG_EMBED_HOST; skipped with the reason when it does
not answer). `--atomise` runs the atomisation experiment instead: each
session stored as one long memory, as it is and atomised by the rules
curator, and how much of each question's evidence the top 5 and 10
memories hold.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from mnemolog.curators.embedding.embedder import EmbedderFailed
from mnemolog.eventlog.errors import UsageError
from mnemolog.projections.embedding import vectors as vx
from mnemolog.projections.recall import hybrid
from mnemolog.projections.recall.query import Filters
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.home import Home, init_home

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "benchmarks" / "locomo" / "locomo10.zip"
CATEGORIES = (1, 2, 3, 4)
DEPTH = 50


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
        for r in rows:  # one insert per text, in one transaction
            db.execute("INSERT INTO f(content) VALUES (?)", [r])
        db.commit()
        secs = time.perf_counter() - t0
        db.close()
    return secs


def run_conversation(work: Path, name: str, conv: dict[str, Any], embedder: Any, out: dict[str, Any]) -> None:
    root = work / name
    init_home(root, key_name="locomo")
    home = Home(root)
    c = conv.get("conversation", conv)
    ts = turns(c)
    texts = [f"{speaker}: {text}" for _, speaker, text in ts]
    # Each turn carries its session as its source (turns of one session are neighbours) and
    # the session's date as created_at (noon UTC: the day whatever the speakers' time zone).
    dates = session_dates(c)
    lines = []
    for (n, _, _, _), t in zip(session_turns(c), texts, strict=True):
        line: dict[str, Any] = {"content": t, "source": f"locomo/{name}/session_{n}"}
        if n in dates:
            day = datetime.datetime(*dates[n], 12, tzinfo=datetime.UTC)
            line["created_at"] = int(day.timestamp()) * 1_000_000
        lines.append(json.dumps(line) + "\n")
    src = root / "turns.jsonl"
    src.write_text("".join(lines))
    fts_s = fts5_ingest(texts)  # interleaved with ours, conversation by conversation
    with Substrate.open(home, long_lived=True, worker=False, embedder=embedder) as sub:
        t0 = time.perf_counter()
        report = sub.import_jsonl(src, progress=False)
        ingest_s = time.perf_counter() - t0
        assert report["pending"] == 0, report
        with sub.projections.session() as conn:
            dia_of = {
                int(seq): ts[i][0]
                for i, (seq,) in enumerate(
                    conn.execute("SELECT stored_seq FROM memories ORDER BY stored_seq").fetchall()
                )
            }
            meta = vx.read_meta(conn)
            rec = vx.recorded(conn)
        assert meta is not None and rec is not None
        out["ingest"].append({"turns": len(ts), "import_s": ingest_s, "fts5_s": fts_s})
        qas = [q for q in conv.get("qa", []) if q.get("category") in CATEGORIES and evidence(q)]
        for i, qa in enumerate(qas):
            qid = f"{name}/{i}"
            question = str(qa["question"])
            out["qrels"][qid] = dict.fromkeys(evidence(qa), 1)
            out["category"][qid] = int(qa["category"])
            for mode in hybrid.MODES:
                sub.embedding._queries.clear()  # time the question's embedding too
                t0 = time.perf_counter()
                got = sub.recall(question, limit=10, mode=mode)  # type: ignore[arg-type]
                out["latency"][mode].append(time.perf_counter() - t0)
                out["runs"][mode][qid] = as_run([dia_of[m["stored_seq"]] for m in got])
            # The candidate lists with their scores, for the fusion grid.
            qv = sub.embedding.query_vector(rec, question)
            with sub.projections.session() as conn:
                lex = hybrid.rank(conn, question, None, Filters(), DEPTH, mode="bm25")
                near = hybrid.rank(conn, question, qv, Filters(), DEPTH, mode="vector", meta=meta)
                dist = {r.doc: r.distance for r in near}
                dist.update(vx.distances(conn, qv, [r.doc for r in lex if r.doc not in dist], meta=meta))
            out["candidates"][qid] = (
                [(r.doc, r.score) for r in lex],
                [r.doc for r in near],
                {d: 1.0 - float(x) for d, x in dist.items() if x is not None},
                dia_of,
            )


GRID_RRF_K = (5, 10, 20, 60)
GRID_RRF_W = (0.25, 0.5, 1.0)
GRID_CONVEX_W = (0.5, 0.6, 0.7, 0.8, 0.9)


def grid(out: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    points: list[tuple[str, dict[str, Any]]] = [
        ("rrf", {"k": k, "vector_weight": w}) for k in GRID_RRF_K for w in GRID_RRF_W
    ] + [("convex", {"bm25_weight": a, "vector_weight": round(1 - a, 2)}) for a in GRID_CONVEX_W]
    for method, params in points:
        run = {}
        for qid, (lex, near, cos, dia_of) in out["candidates"].items():
            if method == "rrf":
                fused = [
                    d
                    for d, _, _ in hybrid.rrf(
                        {"bm25": [d for d, _ in lex], "vector": near},
                        {"bm25": 1.0, "vector": params["vector_weight"]},
                        params["k"],
                    )
                ]
            else:
                fused = [
                    d
                    for d, _ in hybrid.convex(
                        lex, cos, near, (params["bm25_weight"], params["vector_weight"])
                    )
                ]
            run[qid] = as_run([dia_of[d] for d in fused[:10]])
        rows.append({"fusion": method, **params, **measure(out["qrels"], run)})
    return sorted(rows, key=lambda r: (-r["recall@5"], -r["mrr"]))


def sessions(conv: dict[str, Any]) -> list[tuple[str, list[tuple[str, int, int]]]]:
    """Each session as one text ("Speaker: text" per line) with (dia_id, start, end) of its turns."""
    out = []
    keys = sorted((int(m.group(1)), k) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)) and conv[k])
    for _, key in keys:
        parts: list[str] = []
        spans: list[tuple[str, int, int]] = []
        pos = 0
        for t in conv[key]:
            if isinstance(t, dict) and t.get("text") and t.get("dia_id"):
                line = f"{t.get('speaker', '')}: {t['text']}"
                spans.append((str(t["dia_id"]), pos, pos + len(line)))
                parts.append(line)
                pos += len(line) + 1
        if parts:
            out.append(("\n".join(parts), spans))
    return out


def atomisation_experiment(
    work: Path, convs: list[tuple[str, dict[str, Any]]], embedder: Any
) -> dict[str, Any]:
    """Sessions stored as long memories, as they are and atomised (rules curator): do pointed
    questions find their evidence better? A retrieved memory covers the turns inside it (a session
    all of its turns; an atom those its source span overlaps); the measure is the share of a
    question's evidence turns covered by the top k memories (ir-measures R@1000 over the covered
    turns of the top k), with the characters a reader gets in those k memories."""
    qrels: dict[str, dict[str, int]] = {}
    runs: dict[str, dict[int, dict[str, dict[str, float]]]] = {
        "sessions": {5: {}, 10: {}},
        "atoms": {5: {}, 10: {}},
    }
    chars: dict[str, list[int]] = {"sessions": [], "atoms": []}
    atoms_made = 0
    for name, conv in convs:
        c = conv.get("conversation", conv)
        sess = sessions(c)
        qas = [q for q in conv.get("qa", []) if q.get("category") in CATEGORIES and evidence(q)]
        for variant in ("sessions", "atoms"):
            root = work / f"{name}-{variant}"
            init_home(root, key_name="locomo")
            with Substrate.open(Home(root), long_lived=False, worker=False, embedder=embedder) as sub:
                covers: dict[str, list[str]] = {}
                for text, spans in sess:
                    m = sub.store(text)
                    covers[m["id"]] = [d for d, _, _ in spans]
                    if variant == "atoms":
                        res = sub.atomise(m["id"], curator="rules", max_atom_tokens=120)
                        for aid in res.atom_ids:
                            a = sub.get(aid)
                            lo, hi = a["source_span"] or (0, len(text))
                            covers[aid] = [d for d, s0, s1 in spans if s0 < hi and s1 > lo]
                        atoms_made += len(res.atom_ids)
                for i, qa in enumerate(qas):
                    qid = f"{name}/{i}"
                    qrels[qid] = dict.fromkeys(evidence(qa), 1)
                    got = sub.recall(str(qa["question"]), limit=10)
                    for k in (5, 10):
                        run: dict[str, float] = {}
                        for rank, m in enumerate(got[:k]):
                            for d in covers.get(m["id"], []):
                                run.setdefault(d, float(k - rank))
                        runs[variant][k][qid] = run
                    chars[variant].append(sum(len(m["content"]) for m in got[:5]))
    import ir_measures
    from ir_measures import R

    out: dict[str, Any] = {"atoms_made": atoms_made, "max_atom_tokens": 120, "mode": "hybrid (default)"}
    for variant in ("sessions", "atoms"):
        out[variant] = {
            f"evidence_covered@{k}": round(
                float(ir_measures.calc_aggregate([R @ 1000], qrels, runs[variant][k])[R @ 1000]), 4
            )
            for k in (5, 10)
        }
        out[variant]["chars_in_top5_mean"] = round(statistics.mean(chars[variant]), 1)
    return out


def session_dates(conv: dict[str, Any]) -> dict[int, tuple[int, int, int]]:
    """(year, month, day) of each session, from `session_N_date_time` ("1:56 pm on 8 May, 2023")."""
    out = {}
    for k, v in conv.items():
        m = re.fullmatch(r"session_(\d+)_date_time", k)
        d = re.search(r"(\d{1,2}) ([A-Za-z]+),? (\d{4})", str(v)) if m else None
        if m and d:
            try:
                when = datetime.datetime.strptime(" ".join(d.groups()), "%d %B %Y")
            except ValueError:
                continue  # not a month name: no date for that session
            out[int(m.group(1))] = (when.year, when.month, when.day)
    return out


def session_turns(conv: dict[str, Any]) -> list[tuple[int, str, str, str]]:
    """(session number, dia_id, speaker, text) of every turn, session by session."""
    out = []
    keys = sorted((int(m.group(1)), k) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)) and conv[k])
    for n, key in keys:
        for t in conv[key]:
            if isinstance(t, dict) and t.get("text") and t.get("dia_id"):
                out.append((n, str(t["dia_id"]), str(t.get("speaker", "")), str(t["text"])))
    return out


def sweep(convs: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """BM25 parameters, neighbour weight and dates-as-words on these conversations, in memory.

    The project's own tokenizer (the DuckDB macros) and `bm25.score`; a turn's
    neighbours are the turns before and after it in its session, as recall's
    neighbours are the memories stored before and after in one source.
    Recall@k and reciprocal rank are computed as ir-measures does (R@k: share
    of the evidence in the top k; RR: 1 / rank of the first relevant).
    """
    from collections import Counter
    from itertools import product

    import duckdb
    import numpy as np

    from mnemolog.projections import db
    from mnemolog.projections.recall import bm25, text

    conn = duckdb.connect()
    db.load_fts(conn)
    text.install_macros(conn)

    def terms(texts: list[str]) -> list[list[str]]:
        rows = conn.execute(
            "SELECT t, ml_terms(t) FROM (SELECT unnest(?::VARCHAR[]) AS t)", [texts]
        ).fetchall()
        got = dict(rows)
        return [list(got[t] or []) for t in texts]

    prepared = []
    for _, conv in convs:
        c = conv.get("conversation", conv)
        ts = session_turns(c)
        dates = session_dates(c)
        bodies = [f"{sp}: {tx}" for _, _, sp, tx in ts]
        plain = terms(bodies)
        dated = terms(
            [
                f"{b} {text.date_words(*dates[s])}" if s in dates else b
                for b, (s, _, _, _) in zip(bodies, ts, strict=True)
            ]
        )
        sess = np.array([s for s, _, _, _ in ts])
        prev = np.array([i - 1 if i > 0 and sess[i - 1] == sess[i] else -1 for i in range(len(ts))])
        nxt = np.array([i + 1 if i + 1 < len(ts) and sess[i + 1] == sess[i] else -1 for i in range(len(ts))])
        qas = [q for q in conv.get("qa", []) if q.get("category") in CATEGORIES and evidence(q)]
        qterms = terms([str(q["question"]) for q in qas])
        index = {}
        for variant, docs in (("plain", plain), ("dated", dated)):
            by_term: dict[str, list[tuple[int, int, int]]] = {}
            for d, ws in enumerate(docs):
                for t, tf in Counter(ws).items():
                    by_term.setdefault(t, []).append((d, tf, len(ws)))
            post = {
                t: bm25.TermPostings(
                    np.array([r[0] for r in rs], np.int64),
                    np.array([r[1] for r in rs], np.float64),
                    np.array([r[2] for r in rs], np.float64),
                )
                for t, rs in by_term.items()
            }
            index[variant] = (post, sum(len(ws) for ws in docs))
        prepared.append((ts, prev, nxt, qas, qterms, index))

    rows = []
    grid_k1 = (0.9, 1.2, 1.5, 2.0)
    grid_b = (0.3, 0.4, 0.5, 0.6, 0.75)
    grid_alpha = (0.0, 0.3, 0.5, 0.7, 0.8, 1.0, 1.2)
    for variant, k1, b in product(("plain", "dated"), grid_k1, grid_b):
        base_scores = []
        for ts, _, _, _, qterms, index in prepared:
            post, total = index[variant]
            for qt in qterms:
                s = np.zeros(len(ts))
                got = bm25.score(
                    [post.get(t, bm25.EMPTY) for t in dict.fromkeys(qt)],
                    len(ts),
                    total,
                    limit=None,
                    k1=k1,
                    b=b,
                )
                for d, v in got:
                    s[d] = v / bm25.SCORE_SCALE
                base_scores.append(s)
        for alpha in grid_alpha:
            r5 = r10 = rr = 0.0
            n = 0
            qi = 0
            for ts, prev, nxt, qas, _, _ in prepared:
                for qa in qas:
                    s = base_scores[qi]
                    qi += 1
                    nb = np.maximum(np.where(prev >= 0, s[prev], 0.0), np.where(nxt >= 0, s[nxt], 0.0))
                    f = s + alpha * nb
                    docs = np.arange(len(ts))
                    order = np.lexsort((-docs, -f))[:10]
                    order = order[f[order] > 0]
                    ev = evidence(qa)
                    got_ids = [ts[i][1] for i in order]
                    r5 += len(ev & set(got_ids[:5])) / len(ev)
                    r10 += len(ev & set(got_ids)) / len(ev)
                    first = next((i for i, d in enumerate(got_ids) if d in ev), None)
                    rr += 0.0 if first is None else 1.0 / (first + 1)
                    n += 1
            rows.append(
                {
                    "dates": variant == "dated",
                    "k1": k1,
                    "b": b,
                    "alpha": alpha,
                    "recall@5": round(r5 / n, 4),
                    "recall@10": round(r10 / n, 4),
                    "mrr": round(rr / n, 4),
                    "questions": n,
                }
            )
    return sorted(rows, key=lambda r: (-r["recall@5"], -r["mrr"]))


def make(kind: str, model: str | None) -> Any:
    from mnemolog.curators.embedding.embedder import make_embedder

    return make_embedder(kind, model)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conversations", type=int, default=10)
    ap.add_argument("--embedder", default="minilm", choices=["minilm", "wordllama", "ollama"])
    ap.add_argument("--model", help="the Ollama model (with --embedder ollama)")
    ap.add_argument("--data")
    ap.add_argument(
        "--atomise", action="store_true", help="only the atomisation experiment (sessions as memories)"
    )
    ap.add_argument(
        "--sweep",
        action="store_true",
        help="only the in-memory sweep of BM25 k1, b, the neighbour weight and dates (conversations 0-3)",
    )
    args = ap.parse_args(argv)
    path = find_data(args.data)
    if path is None:
        print(
            json.dumps({"ok": True, "bench": "locomo", "skipped": f"LoCoMo-10 not found at {DEFAULT_DATA}"})
        )
        return 0
    if args.sweep:
        rows = sweep(conversations(path)[: min(args.conversations, 4)])
        base = next(
            r for r in rows if not r["dates"] and r["k1"] == 1.2 and r["b"] == 0.75 and r["alpha"] == 0
        )
        print(json.dumps({"ok": True, "bench": "locomo_sweep", "baseline": base, "top": rows[:15]}))
        return 0
    try:
        embedder = make(args.embedder, args.model)
        assert embedder is not None
        model_id = embedder.model_id
    except (EmbedderFailed, UsageError) as exc:  # no server, or no model named
        print(json.dumps({"ok": True, "bench": "locomo", "skipped": f"{args.embedder}: {exc.message}"}))
        return 0
    if args.atomise:
        work = Path(tempfile.mkdtemp(prefix="locomo_atomise-"))
        try:
            exp = atomisation_experiment(work, conversations(path)[: args.conversations], embedder)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(json.dumps({"ok": True, "bench": "locomo_atomise", "embedder": model_id, **exp}))
        return 0
    out: dict[str, Any] = {
        "ingest": [],
        "qrels": {},
        "runs": {m: {} for m in hybrid.MODES},
        "latency": {m: [] for m in hybrid.MODES},
        "candidates": {},
        "category": {},
    }
    work = Path(tempfile.mkdtemp(prefix="locomo_bench-"))
    try:
        for name, conv in conversations(path)[: args.conversations]:
            log(f"conversation {name}")
            run_conversation(work, name, conv, embedder, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    turns_n = sum(x["turns"] for x in out["ingest"])
    import_s = sum(x["import_s"] for x in out["ingest"])
    fts_s = sum(x["fts5_s"] for x in out["ingest"])
    result: dict[str, Any] = {
        "ok": True,
        "bench": "locomo",
        "data": "LoCoMo-10 (evaluation only, read in place)",
        "conversations": len(out["ingest"]),
        "turns": turns_n,
        "questions": len(out["qrels"]),
        "embedder": model_id,
        "recall_policy": vars(hybrid.Fusion()),
        "modes": {},
        "ingest": {
            "import_per_s": round(turns_n / import_s, 1),
            "fts5_per_s": round(turns_n / fts_s, 1),
            "ratio_vs_fts5": round(fts_s / import_s, 4),
            "what": "mnemolog import (signed log, group commit, projections, embed-on-insert) per "
            "conversation, beside one FTS5 insert per turn in one transaction",
        },
    }
    names = [n for n, _ in conversations(path)[: args.conversations]]
    tuning = set(names[:4])  # the sweep's conversations; 4-9 are held out

    def subset(mode: str, keep: Any) -> dict[str, float]:
        qrels = {q: r for q, r in out["qrels"].items() if keep(q)}
        return measure(qrels, {q: r for q, r in out["runs"][mode].items() if q in qrels}) if qrels else {}

    for mode in hybrid.MODES:
        lat = out["latency"][mode]
        result["modes"][mode] = {
            **measure(out["qrels"], out["runs"][mode]),
            "p50_ms": round(pct(lat, 50) * 1e3, 3),
            "p99_ms": round(pct(lat, 99) * 1e3, 3),
            "conversations_0_3": subset(mode, lambda q: q.split("/")[0] in tuning),
            "conversations_4_9_held_out": subset(mode, lambda q: q.split("/")[0] not in tuning),
            "recall@5_by_category": {
                c: subset(mode, lambda q, c=c: out["category"][q] == c).get("recall@5") for c in CATEGORIES
            },
        }
    result["hybrid_minus_bm25_recall@5"] = round(
        result["modes"]["hybrid"]["recall@5"] - result["modes"]["bm25"]["recall@5"], 4
    )
    result["fusion_grid_top"] = grid(out)[:8]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
