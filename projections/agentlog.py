"""Named queries for the agent folder's run logs and journal: the projection's calls and interactions.

`run_records` turns every recorded curator call (an `atomisation.completed`
or `atomisation.failed`) into a run-log record: the model (or the rules
curator's name), the token counts the event carries, ok or error, a one-line
summary, and the trigger: `cron` when a deferred request started it (the
background worker), `manual` otherwise. Pure mapping over rows the fold
keeps; no model is ever called.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

from mnemolog.projections.vault.runlog import RunRecord


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def _run(seq: int, status: str, request_seq: int | None, detail: dict[str, Any], ts: int) -> RunRecord:
    curator = str(detail.get("curator") or "unknown")
    model = detail.get("model")
    source = str(detail.get("source_id") or "")
    trigger = "cron" if request_seq is not None else "manual"
    if status == "completed":
        atoms = detail.get("atom_ids")
        n = len(atoms) if isinstance(atoms, list) else 0
        return RunRecord(
            ts=ts,
            trigger=trigger,
            model=str(model) if isinstance(model, str) and model else curator,
            input_tokens=_int(detail.get("input_tokens")),
            output_tokens=_int(detail.get("output_tokens")),
            status="ok",
            summary=f"atomise {source}: {n} atoms ({curator})",
            seq=seq,
        )
    reason = str(detail.get("reason") or "failed")
    return RunRecord(
        ts=ts,
        trigger=trigger,
        model=curator,
        input_tokens=0,
        output_tokens=0,
        status="error",
        summary=f"atomise {source} failed: {reason} ({curator})",
        error=f"{reason}: {detail.get('message', '')}",
        seq=seq,
    )


def run_records(conn: duckdb.DuckDBPyConnection) -> list[RunRecord]:
    """Every curator call the log records, oldest first."""
    rows = conn.execute(
        "SELECT seq, status, request_seq, detail, ts FROM atomisations "
        "WHERE status IN ('completed', 'failed') ORDER BY seq"
    ).fetchall()
    out = []
    for seq, status, request_seq, detail, ts in rows:
        try:
            d = json.loads(detail)
        except (TypeError, ValueError):
            d = {}
        out.append(_run(int(seq), str(status), request_seq, d if isinstance(d, dict) else {}, int(ts)))
    return out
