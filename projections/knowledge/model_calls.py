"""The rows of `model_calls` (its DDL is in projections.schema): one per extraction or triage call.

Extraction and triage events carry who answered (extractor or triager, and
the model when one was asked), the token counts, and what came of it; the
agent folder's run logs (projections.agentlog) read them from here, beside
atomisations (their own table) and embedder choices (`embedders`). The
handlers of projections.knowledge.fold stay as they are: `recorded` wraps
each one, so a call is recorded whatever the handler did with it (a
repeated extraction is still a call that was paid for). Total like the rest
of the fold: a field of the wrong type reads as absent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.vocabulary import knowledge as vk
from mnemolog.eventlog.vocabulary.events import read_id, read_str

if TYPE_CHECKING:
    from mnemolog.projections.knowledge.fold import KnowledgeFold

Handler = Callable[["KnowledgeFold", Entry, dict[str, Any]], None]

COLUMNS: Final = "seq, type, model, input_tokens, output_tokens, status, summary, error, ts, trigger"
_MESSAGE_CHARS: Final = 300


def _count(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def _row(e: Entry, d: dict[str, Any]) -> tuple[Any, ...] | None:
    who_key = "extractor" if e.type in (vk.CANDIDATE_EXTRACTED, vk.EXTRACTION_FAILED) else "triager"
    who = read_str(d.get(who_key)) or "unknown"
    model = read_str(d.get("model")) or who
    error = None
    if e.type == vk.CANDIDATE_EXTRACTED:
        ids = d.get("candidate_ids")
        n = len(ids) if isinstance(ids, list) else 0
        summary = f"extract {read_id(d.get('interaction_id'))}: {n} candidate(s) ({who})"
    elif e.type == vk.CANDIDATE_TRIAGED:
        verdict, action = read_str(d.get("verdict")) or "?", read_str(d.get("action")) or "?"
        summary = f"triage {read_id(d.get('id'))}: {verdict}, {action} ({who})"
    elif e.type in (vk.EXTRACTION_FAILED, vk.TRIAGE_FAILED):
        what = "extract" if e.type == vk.EXTRACTION_FAILED else "triage"
        about = read_id(d.get("interaction_id") if what == "extract" else d.get("id"))
        reason = read_str(d.get("reason")) or "failed"
        summary = f"{what} {about} failed: {reason} ({who})"
        error = f"{reason}: {(read_str(d.get('message')) or '')[:_MESSAGE_CHARS]}"
    else:
        return None
    status = "ok" if error is None else "error"
    tokens = (_count(d.get("input_tokens")), _count(d.get("output_tokens")))
    trigger = "cron" if d.get("trigger") == "cron" else None
    return (e.seq, e.type, model, *tokens, status, summary, error, e.ts, trigger)


def recorded(handler: Handler) -> Handler:
    """`handler`, then the call recorded in model_calls."""

    def fold(f: KnowledgeFold, e: Entry, d: dict[str, Any]) -> None:
        handler(f, e, d)
        row = _row(e, d)
        if row is not None:
            f.conn.execute(f"INSERT INTO model_calls ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)

    fold.__name__ = handler.__name__
    return fold
