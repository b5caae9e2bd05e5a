"""What the agent-facing surfaces (MCP, the HTTP API) return for a memory.

A memory as the projections hold it carries everything: microsecond
timestamps, bookkeeping sequence numbers, empty fields. An agent reading it
through a context window wants less: the compact view keeps what an agent
acts on (id, where it lives, what it says, how sure, where from, when) with
ISO 8601 times and without empty fields; the verbose view keeps every field,
times as ISO 8601. Pure functions of the memory map.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

#: Fields holding microseconds since the epoch.
TIME_FIELDS = (
    "created_at",
    "updated_at",
    "last_seen",
    "archived_at",
    "atomisation_archived_at",
    "occurred_at",
)
#: The compact view's fields, in order, when present and not empty.
COMPACT_FIELDS = (
    *("id", "namespace", "kind", "title", "content", "tags", "confidence", "source", "atom_of"),
    *("project", "domains"),
    *("atomise_mode", "atomise_outcome", "embedding", "warnings", "already_stored"),
)


def iso(us: int | None) -> str | None:
    """Microseconds since the epoch as ISO 8601 in UTC (`2026-01-02T03:04:05.123456Z`)."""
    if us is None:
        return None
    return dt.datetime.fromtimestamp(us / 1e6, dt.UTC).isoformat().replace("+00:00", "Z")


def hidden(m: Mapping[str, Any]) -> bool:
    """Hidden from recall: archived by an operator, or atomised with its atoms recorded."""
    return m.get("archived_at") is not None or (
        m.get("atomisation_archived_at") is not None and bool(m.get("atomised_into"))
    )


def memory_view(m: Mapping[str, Any], verbose: bool = False) -> dict[str, Any]:
    if verbose:
        out = {k: (iso(v) if k in TIME_FIELDS else v) for k, v in m.items() if k != "links"}
        if "links" in m:
            out["links"] = m["links"]
        return out
    out = {k: m[k] for k in COMPACT_FIELDS if m.get(k) not in (None, "", [], {})}
    out["created_at"] = iso(m.get("created_at"))
    if m.get("updated_at") not in (None, m.get("created_at")):
        out["updated_at"] = iso(m["updated_at"])
    if m.get("occurred_at") is not None:
        out["occurred_at"] = iso(m["occurred_at"])
    if hidden(m):
        out["archived"] = True
    if m.get("status") not in (None, "active"):
        out["status"] = m["status"]
    if m.get("atomised_into"):
        out["atomised_into"] = m["atomised_into"]
    if "score" in m:
        out["score"] = round(float(m["score"]), 4)
    if "explain" in m:  # asked for: how a recall ranked it
        out["explain"] = m["explain"]
    if "links" in m:
        out["links"] = [
            *({"to": e["dst"], "relation": e["relation"]} for e in m["links"].get("outgoing", [])),
            *({"from": e["src"], "relation": e["relation"]} for e in m["links"].get("incoming", [])),
        ]
    return out


def memories_view(ms: Sequence[Mapping[str, Any]], verbose: bool = False) -> list[dict[str, Any]]:
    return [memory_view(m, verbose) for m in ms]


def event_view(summary: dict[str, Any]) -> dict[str, Any]:
    """A log entry's summary with its time as ISO 8601 (the raw µs kept as ts_us)."""
    return {**summary, "ts": iso(summary["ts"]), "ts_us": summary["ts"]}
