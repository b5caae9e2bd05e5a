"""Benchmark of the vault projection: full render, then an incremental re-render after one change.

    python -m bench.vault_bench [--records N] [--dir D]

Records come from the paragraphs of CPython's `pydoc_data.topics` (2.6k
paragraphs, cycled with varying title windows, kinds, dates and confidences).
Each figure sits beside the bound that limits it, measured in the same run:

  full render         render_vault into an empty directory     vs  atomic_write of the same
                                                                   bytes to the same paths
                                                                   (before and after; the
                                                                   faster one is the bound)
  incremental render  render_vault after one record's content  vs  atomic_write of the files it
                      changed (plan + compare + write)              rewrote, and the plan alone

Prints one JSON object on stdout (progress on stderr).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from pydoc_data.topics import topics
from typing import Any

from mnemolog.eventlog.store.fsio import atomic_write
from mnemolog.eventlog.vocabulary.events import KINDS
from mnemolog.projections.vault.render import NoteRecord, plan_vault, render_vault

AGENT = "bench"


def corpus() -> list[tuple[str, str]]:
    out = []
    for name in sorted(topics):
        for para in topics[name].split("\n\n"):
            text = " ".join(para.split())
            if len(text.split()) >= 4:
                out.append((name, text))
    return out


def make_records(n: int) -> list[NoteRecord]:
    paras = corpus()
    start = date(2024, 1, 1)
    records = []
    for i in range(n):
        topic, text = paras[i % len(paras)]
        words = text.split()
        k = (i // len(paras)) % max(1, len(words) - 4)
        kind = KINDS[i % len(KINDS)]
        sources = [f"raw/python-docs/{topic}.txt"] if kind == "knowledge" and i % 2 else [f"pydoc:{topic}"]
        captured = start + timedelta(days=i % 900)
        records.append(
            NoteRecord(
                memory_id=f"m{i:07d}",
                kind=kind,
                title=" ".join(words[k : k + 5]),
                description=text[:140],
                content=text + "\n",
                tags=[topic],
                confidence=(i % 100) / 99,
                captured=captured,
                last_seen=captured + timedelta(days=i % 30),
                sources=sources,
                pinned=i % 97 == 0,
                expires_at=date(2026, 9, 30) if kind in ("decision", "project") and i % 5 == 0 else None,
                superseded_by=f"m{i + 1:07d}" if i % 211 == 0 and i + 1 < n else None,
                atom_of=f"m{i - 1:07d}" if kind == "observation" and i % 3 == 0 and i else None,
            )
        )
    return records


def timed(fn: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    result = fn()
    return time.perf_counter() - t, result


def plain_writes(root: Path, files: dict[str, bytes]) -> float:
    t = time.perf_counter()
    for rel, data in files.items():
        atomic_write(root / rel, data)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temp dir)")
    args = ap.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="vault-bench-", dir=args.dir))
    try:
        print(f"generating {args.records} records ...", file=sys.stderr, flush=True)
        records = make_records(args.records)

        plan_s, files = timed(lambda: plan_vault(AGENT, records))
        total_bytes = sum(len(v) for v in files.values())
        # fsync latency drifts over a long run, so the bound is measured before and
        # after the render and the render is compared with the faster of the two.
        print("bound: plain atomic writes of the same bytes ...", file=sys.stderr, flush=True)
        bound_before = plain_writes(scratch / "bound_a" / AGENT, files)
        print(f"full render of {len(files)} files ...", file=sys.stderr, flush=True)
        render_s, full = timed(lambda: render_vault(scratch / "vault", AGENT, records))
        print("bound again ...", file=sys.stderr, flush=True)
        bound_after = plain_writes(scratch / "bound_b" / AGENT, files)
        bound_s = min(bound_before, bound_after)

        noop_s, noop = timed(lambda: render_vault(scratch / "vault", AGENT, records))

        i = len(records) // 2
        changed = list(records)
        changed[i] = dataclasses.replace(records[i], content=records[i].content + "One more line.\n")
        print("incremental render after one change ...", file=sys.stderr, flush=True)
        inc_s, inc = timed(lambda: render_vault(scratch / "vault", AGENT, changed))
        inc_plan_s, new_files = timed(lambda: plan_vault(AGENT, changed))
        rewritten = {rel.split("/", 1)[1]: new_files[rel.split("/", 1)[1]] for rel in inc.written}
        inc_bound_s = plain_writes(scratch / "bound2" / AGENT, rewritten)

        result = {
            "ok": True,
            "records": len(records),
            "files": len(files),
            "bytes": total_bytes,
            "full_render": {
                "seconds": round(render_s, 3),
                "files_written": len(full.written),
                "files_per_s": round(len(full.written) / render_s),
                "plan_seconds": round(plan_s, 3),
                "bound_plain_atomic_writes_seconds": [round(bound_before, 3), round(bound_after, 3)],
                "ratio_to_bound": round(render_s / bound_s, 3),
            },
            "noop_rerender": {
                "seconds": round(noop_s, 3),
                "files_written": len(noop.written),
                "unchanged": noop.unchanged,
            },
            "incremental_after_one_change": {
                "seconds": round(inc_s, 3),
                "files_written": len(inc.written),
                "written": inc.written,
                "removed": len(inc.removed),
                "unchanged": inc.unchanged,
                "plan_seconds": round(inc_plan_s, 3),
                "bound_plain_atomic_writes_seconds": round(inc_bound_s, 6),
                "ratio_to_plan": round(inc_s / inc_plan_s, 3),
            },
        }
        print(json.dumps(result))
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
