"""Named queries for the agent folder's run logs and journal: the projection's calls and interactions.

`journal_rows` gives the journal its days: every captured interaction, the
memories promoted from one (the candidates a person or triage promoted,
while they are held: active or superseded later, never rejected ones), and
the candidates from one still waiting for a person.

`run_records` turns every recorded curator call (an `atomisation.completed`
or `atomisation.failed`; an extraction or triage call, from `model_calls`;
an `embedder.configured`) into a run-log record: the model (or the rules
curator's name), the token counts the event carries, ok or error, a one-line
summary, and the trigger: `cron` when a deferred request started it (the
background worker), `manual` otherwise. Pure mapping over rows the fold
keeps; no model is ever called.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

from mnemolog.projections.vault.journal import CapturedRow, InteractionRow, OpenQuestion
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
    """Every model or rules call the log records, oldest first: atomisations, extractions,
    triage verdicts (with their failures) and the embedder choices (an `embeddings set`
    re-embeds everything under the new model)."""
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
    for seq, model, tin, tout, status, summary, error, ts, trigger in conn.execute(
        "SELECT seq, model, input_tokens, output_tokens, status, summary, error, ts, trigger FROM model_calls"
    ).fetchall():
        out.append(
            RunRecord(
                ts=int(ts), trigger=trigger or "manual", model=model, input_tokens=int(tin),
                output_tokens=int(tout), status=status, summary=summary, error=error, seq=int(seq),
            )
        )  # fmt: skip
    for seq, kind, model, dim, ts in conn.execute(
        "SELECT seq, kind, model, dim, ts FROM embedders"
    ).fetchall():
        what = (
            "embeddings off"
            if kind == "off"
            else f"embedder {kind} {model or ''}".rstrip() + f" ({dim} dims)"
        )
        out.append(
            RunRecord(
                ts=int(ts), trigger="manual", model=model or kind, input_tokens=0, output_tokens=0,
                status="ok", summary=f"embeddings set: {what}", seq=int(seq),
            )
        )  # fmt: skip
    return sorted(out, key=lambda r: (r.ts, r.seq or 0))


def _under(column: str, namespace: str | None) -> tuple[str, list[Any]]:
    if namespace is None:
        return "TRUE", []
    return f"({column} = ? OR starts_with({column}, ?))", [namespace, namespace + "/"]


def journal_rows(
    conn: duckdb.DuckDBPyConnection, namespace: str | None = None
) -> tuple[list[InteractionRow], list[CapturedRow], list[OpenQuestion]]:
    """Interactions (of `namespace` and below, when given), what was promoted from them, and what waits.

    A captured row's `note` is left empty: which file a memory renders to is
    the vault's to say (the caller fills it from the notes it renders).
    """
    where, args = _under("namespace", namespace)
    interactions = [
        InteractionRow(
            id=r[0], ts=int(r[1]), prompt=r[2], response=r[3], project=r[4] or "", client=r[5] or ""
        )
        for r in conn.execute(
            "SELECT id, captured_at, prompt, response, project, client FROM interactions "
            f"WHERE {where} ORDER BY captured_at, id",
            args,
        ).fetchall()
    ]
    captured = [
        CapturedRow(interaction_id=r[0], memory_id=r[1], kind=r[2], summary=r[3])
        for r in conn.execute(
            "SELECT c.interaction_id, m.id, m.kind, coalesce(nullif(m.title, ''), m.content) "
            "FROM candidates c JOIN memories m ON m.id = c.id "
            "WHERE c.decided_seq IS NOT NULL AND m.status IN ('active', 'superseded') ORDER BY m.id"
        ).fetchall()
    ]
    questions = [
        OpenQuestion(interaction_id=r[0], candidate_id=r[1], summary=r[2])
        for r in conn.execute(
            "SELECT c.interaction_id, m.id, coalesce(nullif(m.title, ''), m.content) "
            "FROM candidates c JOIN memories m ON m.id = c.id "
            "WHERE m.status = 'candidate' AND c.triage = 'waiting' ORDER BY m.id"
        ).fetchall()
    ]
    return interactions, captured, questions
