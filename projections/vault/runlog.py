"""Run logs: one JSON line per model or rules call, `logs/YYYY-MM/YYYY-MM-DD.jsonl`.

Every curator, extractor and triage call the log records (atomisations,
extractions, triage verdicts, and their failures) becomes one line with the
Atomic Agents required fields, in this order:

    {"ts": "2026-05-06T09:14:03.120000Z", "trigger": "manual", "model": "qwen2.5:7b",
     "input_tokens": 812, "output_tokens": 203, "status": "ok",
     "summary": "atomise 01JX…: 4 atoms", "event_seq": 1234}

`ts` is the event's time (UTC, ISO 8601 with a zone), `trigger` one of cron
(a background worker), skill, api, manual (a command), `status` ok, error or
skipped; `error` is added when the call failed and `event_seq` names the
log entry it comes from. Lines are ordered by time, then seq; a day is its
UTC date. Pure: `plan_runlogs` returns each file's bytes; `check_runlog`
holds the validation rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, Final

from mnemolog.projections.vault import regions
from mnemolog.projections.vault.journal import day_of

TRIGGERS: Final = ("cron", "skill", "api", "manual")
STATUSES: Final = ("ok", "error", "skipped")
REQUIRED: Final = ("ts", "trigger", "model", "input_tokens", "output_tokens", "status", "summary")
OPTIONAL_TYPES: Final = {
    "error": (str,),
    "cost_usd": (int, float),
    "cache_hit": (bool,),
    "tools_called": (list,),
    "skill_invocation_id": (str,),
    "event_seq": (int,),
}
PATH_RE: Final = re.compile(r"logs/(\d{4}-\d{2})/(\d{4}-\d{2}-\d{2})\.jsonl")
MAX_SUMMARY = 200


@dataclass(frozen=True)
class RunRecord:
    ts: int  # µs since the epoch
    trigger: str
    model: str
    input_tokens: int
    output_tokens: int
    status: str
    summary: str
    error: str | None = None
    seq: int | None = None

    def __post_init__(self) -> None:
        if self.trigger not in TRIGGERS:
            raise ValueError(f"trigger must be one of {TRIGGERS}, found {self.trigger!r}")
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, found {self.status!r}")


def iso(ts_us: int) -> str:
    return datetime.fromtimestamp(ts_us / 1e6, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _one_line(text: str, limit: int = MAX_SUMMARY) -> str:
    return regions.one_line(text, limit)


def line(r: RunRecord) -> str:
    obj: dict[str, Any] = {
        "ts": iso(r.ts),
        "trigger": r.trigger,
        "model": r.model,
        "input_tokens": max(0, int(r.input_tokens)),
        "output_tokens": max(0, int(r.output_tokens)),
        "status": r.status,
        "summary": _one_line(r.summary),
    }
    if r.error:
        obj["error"] = _one_line(r.error, 1000)
    if r.seq is not None:
        obj["event_seq"] = r.seq
    return json.dumps(obj, ensure_ascii=False, allow_nan=False) + "\n"


def path_of(day: date) -> str:
    return f"logs/{day:%Y-%m}/{day.isoformat()}.jsonl"


def plan_runlogs(records: Sequence[RunRecord]) -> dict[str, bytes]:
    days: dict[date, list[RunRecord]] = {}
    for r in records:
        days.setdefault(day_of(r.ts), []).append(r)
    out = {}
    for d, rs in sorted(days.items()):
        rs.sort(key=lambda r: (r.ts, r.seq if r.seq is not None else -1, r.summary))
        out[path_of(d)] = "".join(line(r) for r in rs).encode("utf-8")
    return out


# -- validation ---------------------------------------------------------------

Finding = tuple[str, str, str]


def _type_name(v: Any) -> str:
    return type(v).__name__


def check_runlog(rel: str, text: str) -> list[Finding]:
    """Rules for one run log: its path, and every line's required fields, types and enums."""
    m = PATH_RE.fullmatch(rel)
    if m is None:
        return [("filename", "expected logs/YYYY-MM/YYYY-MM-DD.jsonl", "error")]
    try:
        day = date.fromisoformat(m.group(2))
    except ValueError:
        return [("filename", f"{m.group(2)} is not a real calendar date", "error")]
    out: list[Finding] = []
    if m.group(1) != f"{day:%Y-%m}":
        out.append(("filename", f"a {day:%Y-%m} day filed under {m.group(1)}/", "error"))
    for n, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        where = f"line {n}"

        def bad(key: str, message: str, severity: str = "error", where: str = where) -> None:
            out.append((f"{where}.{key}", message, severity))

        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            out.append((where, f"not JSON: {exc.msg} at column {exc.colno}", "error"))
            continue
        if not isinstance(obj, dict):
            out.append((where, f"expected a JSON object, found {_type_name(obj)}", "error"))
            continue
        for key in REQUIRED:
            if key not in obj:
                bad(key, "required field is missing")
        ts = obj.get("ts")
        if "ts" in obj:
            when = None
            if isinstance(ts, str):
                try:
                    when = datetime.fromisoformat(ts)
                except ValueError:
                    when = None
            if when is None or when.tzinfo is None:
                bad("ts", f"expected an ISO 8601 time with a zone, found {ts!r:.60}")
            elif when.astimezone(UTC).date() != day:
                bad("ts", f"{ts} is not on {day.isoformat()} (UTC)", "warning")
        if "trigger" in obj and obj["trigger"] not in TRIGGERS:
            bad("trigger", f"expected one of {', '.join(TRIGGERS)}, found {obj['trigger']!r:.40}")
        if "status" in obj and obj["status"] not in STATUSES:
            bad("status", f"expected one of {', '.join(STATUSES)}, found {obj['status']!r:.40}")
        for key in ("model", "summary"):
            if key in obj and not isinstance(obj[key], str):
                bad(key, f"expected a string, found {_type_name(obj[key])}")
        if isinstance(obj.get("summary"), str) and "\n" in obj["summary"]:
            bad("summary", "expected one line")
        for key in ("input_tokens", "output_tokens"):
            v = obj.get(key)
            if key in obj and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                bad(key, f"expected a non-negative integer, found {v!r:.40}")
        for key, types in OPTIONAL_TYPES.items():
            v = obj.get(key)
            if key in obj and (not isinstance(v, types) or (isinstance(v, bool) and bool not in types)):
                bad(key, f"expected {'/'.join(t.__name__ for t in types)}, found {_type_name(v)}")
    return out
