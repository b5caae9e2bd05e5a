"""Bulk import beside the bounds that limit it (issue 21, target 1).

    python -m bench.import_bench [--memories N] [--chunk C] [--embed] [--dir D]

The same generated memories (8 to 120 English words, Zipf-weighted, from
the vendored tokenizer's whole-word vocabulary; a title; tags) are cut into
chunks of C lines; for each chunk the sides below run one after the other,
the order rotating from chunk to chunk, so every side sees the same machine:

  import (embeddings off)  `Substrate.import_jsonl` of the chunk's file: every line parsed and
                           checked, content sealed, entries chained, signed and group-committed
                           with one fdatasync, folded into the projection with the bulk tokenizer
  log bound                `LogWriter.append_many` of the same `memory.stored` payloads, already
                           built: CBOR, chain, Ed25519, append, one fdatasync (no checks, no
                           sealing, no projection)
  FTS5 + Ed25519           SQLite FTS5 `executemany` of the same titles and contents in one
                           transaction, and an Ed25519 signature of each text
  import (default embedder) with --embed: the same import into a home that embeds on insert
  embedder bound           with --embed: the default embedder's `embed` of the same texts, the
                           whole chunk in one call (its own batching)

Reported: rates (memories/s over the summed wall seconds), CPU seconds of the
in-process sides, and the ratios the issue sets targets for: import/log bound
(>= 0.5), import/(FTS5 + Ed25519) (>= 0.25), embedded import/embedder bound
(>= 0.5); per-chunk ratios as median with min-max. Prints one JSON object on
stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey as NaclKey

from mnemolog.curators.embedding import minilm
from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.store.writer import LogWriter
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.embedding.service import embed_text_of
from mnemolog.substrate.events.memory import MemoryStored
from mnemolog.substrate.home import Home, init_home

TARGETS = {"import_vs_log_bound": 0.5, "import_vs_fts5_sign": 0.25, "embedded_import_vs_embedder": 0.5}


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def vocabulary() -> list[str]:
    """English words: the whole-word entries of the vendored MiniLM tokenizer's vocabulary, so a
    text costs the embedder what prose does (about a token a word), in the file's order."""
    raw = json.loads((Path(minilm.__file__).parent.parent / "data" / "minilm-tokenizer.json").read_text())
    return [w for w in raw["model"]["vocab"] if w.isascii() and w.isalpha() and 3 <= len(w) <= 12]


def corpus(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """n memories: a title, 8-120 words of content (Zipf-weighted), one or two tags."""
    rng = random.Random(seed)
    vocab = vocabulary()[:6000]
    weights = [1 / (i + 1) for i in range(len(vocab))]
    out = []
    for i in range(n):
        words = rng.choices(vocab, weights, k=rng.randint(8, 120))
        out.append(
            {
                "title": " ".join(rng.choices(vocab, weights, k=3)),
                "content": f"note {i}: " + " ".join(words),
                "tags": sorted({f"t{rng.randint(0, 30)}" for _ in range(rng.randint(1, 2))}),
            }
        )
    return out


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall, CPU of this process, all threads) seconds of fn()."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def new_home(root: Path, embed: bool) -> Home:
    """A new home with the default embedder, or with embeddings off in its config.toml."""
    init_home(root, key_name="bench")
    if not embed:
        config = root / "config.toml"
        text = config.read_text()
        if "[embeddings]" in text:
            text = text.replace("[embeddings]", '[embeddings]\nkind = "off"', 1)
        else:
            text += '\n[embeddings]\nkind = "off"\n'
        config.write_text(text)
    return Home(root)


def spread(xs: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(xs), 4), "min": round(min(xs), 4), "max": round(max(xs), 4)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.import_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--memories", type=int, default=10_000)
    ap.add_argument("--chunk", type=int, default=2_000)
    ap.add_argument("--embed", action="store_true", help="also the default embedder's sides")
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temporary one)")
    args = ap.parse_args(argv)
    os.environ.pop("MNEMOLOG_EMBED", None)  # each home's config.toml says what it embeds with
    work = args.dir or Path(tempfile.mkdtemp(prefix="mnemolog-import-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    mems = corpus(args.memories)
    chunks = [mems[lo : lo + args.chunk] for lo in range(0, len(mems), args.chunk)]

    off_home = new_home(work / "off", embed=False)
    bound_dir = work / "bound-log"
    key = SigningKey.generate("bench")
    LogWriter.create(bound_dir, key)
    bound_writer = LogWriter(bound_dir, [key])
    db = sqlite3.connect(work / "fts5.sqlite")
    db.execute("CREATE VIRTUAL TABLE f USING fts5(title, content, tokenize='unicode61 remove_diacritics 2')")
    nacl_key = NaclKey.generate()
    subs = {"off": Substrate.open(off_home, long_lived=True, worker=False)}
    if args.embed:
        subs["on"] = Substrate.open(new_home(work / "on", embed=True), long_lived=True, worker=False)
        embedder = subs["on"].embedding.build(*subs["on"].embedding.wanted())
        assert embedder is not None, "the default embedder is off"
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    per_chunk: dict[str, list[float]] = {k: [] for k in TARGETS}
    try:
        for n, chunk in enumerate(chunks):
            src = work / "chunk.jsonl"
            src.write_text("".join(json.dumps(m) + "\n" for m in chunk))
            payloads = [
                (
                    MemoryStored.TYPE,
                    MemoryStored.new(m["content"], title=m["title"], tags=m["tags"]).to_data(),
                    MemoryStored.TV,
                )
                for m in chunk
            ]
            texts = [
                embed_text_of(MemoryStored.new(m["content"], title=m["title"], tags=m["tags"])) for m in chunk
            ]
            rows = [(m["title"], m["content"]) for m in chunk]

            def fts5_sign(rows: list[tuple[str, str]] = rows) -> None:
                db.executemany("INSERT INTO f(title, content) VALUES (?, ?)", rows)
                db.commit()
                for _, content in rows:
                    nacl_key.sign(content.encode())

            sides: dict[str, Callable[[], Any]] = {
                "import_off": lambda src=src: subs["off"].import_jsonl(src, progress=False, batch=args.chunk),
                "log_bound": lambda p=payloads: bound_writer.append_many(p),
                "fts5_sign": fts5_sign,
            }
            if args.embed:
                sides["import_on"] = lambda src=src: subs["on"].import_jsonl(
                    src, progress=False, batch=args.chunk
                )
                sides["embedder"] = lambda t=texts: embedder.embed(t)
            names = list(sides)
            order = names[n % len(names) :] + names[: n % len(names)]
            got: dict[str, float] = {}
            for name in order:
                w, c = timed(sides[name])
                got[name] = w
                wall[name] = wall.get(name, 0.0) + w
                cpu[name] = cpu.get(name, 0.0) + c
            per_chunk["import_vs_log_bound"].append(got["log_bound"] / got["import_off"])
            per_chunk["import_vs_fts5_sign"].append(got["fts5_sign"] / got["import_off"])
            if args.embed:
                per_chunk["embedded_import_vs_embedder"].append(got["embedder"] / got["import_on"])
            say(f"chunk {n + 1}/{len(chunks)}: " + ", ".join(f"{k} {v:.2f}s" for k, v in got.items()))
    finally:
        for s in subs.values():
            s.close()
        bound_writer.close()
        db.close()
    total = len(mems)
    rates = {k: round(total / v, 1) for k, v in wall.items()}
    ratios = {
        "import_vs_log_bound": round(wall["log_bound"] / wall["import_off"], 4),
        "import_vs_fts5_sign": round(wall["fts5_sign"] / wall["import_off"], 4),
    }
    if args.embed:
        ratios["embedded_import_vs_embedder"] = round(wall["embedder"] / wall["import_on"], 4)
    out = {
        "memories": total,
        "chunk": args.chunk,
        "per_s": rates,
        "cpu_s": {k: round(v, 2) for k, v in cpu.items()},
        "ratios": ratios,
        "ratios_per_chunk": {k: spread(v) for k, v in per_chunk.items() if v},
        "targets": TARGETS,
        "met": {k: ratios[k] >= t for k, t in TARGETS.items() if k in ratios},
        "load_avg_after": os.getloadavg(),
    }
    print(json.dumps(out))
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
