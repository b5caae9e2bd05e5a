"""The per-file frontmatter rules of the Atomic Agents file formats (schema_version 1).

Pure checks over one parsed frontmatter mapping: they return every problem they
find as (field, message, severity) and never raise, so the vault validator can
report all problems at once and the migration runner can reuse the same rules
as its post-migration validator. Vault-wide rules (INDEX coverage, cross-file
references) live in `validate`.

Where the format (docs/vault.md) and the reference implementation (atomic-agents-stack) differ,
both are enforced: the reference caps `name` at 80 and `description` at 200
characters (hard errors here too), the format asks for a ~150 character hook
(a warning).
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final, Literal

from mnemolog.projections.vault import naming

CURRENT_SCHEMA_VERSION: Final = 1

NOTE_TYPES: Final = naming.NOTE_TYPES
WIKI_TYPE: Final = "wiki_page"
CONFIDENCE_LEVELS: Final = ("high", "medium", "low")
WIKI_PROVENANCE: Final = "distilled"

NAME_MAX: Final = 80
DESCRIPTION_MAX: Final = 200
DESCRIPTION_HOOK_MAX: Final = 150

NOTE_REQUIRED: Final = (
    "schema_version",
    "name",
    "description",
    "type",
    "captured",
    "last_seen",
    "sources",
    "confidence",
)
WIKI_REQUIRED: Final = (*NOTE_REQUIRED[:7], "provenance", "confidence")

Severity = Literal["error", "warning"]
Finding = tuple[str, str, Severity]

_DATE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}")


def describe(value: Any) -> str:
    """A short rendering of a found value for messages: its type and a clipped repr."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_INSTANT_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z")


def instant_text(micros: int) -> str:
    """µs since the epoch as UTC ISO 8601 text, exactly (`2023-05-08T14:30:00Z`; a fraction only
    when there is one): how a note carries a memory's `occurred_at`."""
    at = _EPOCH + timedelta(microseconds=micros)
    spec = "microseconds" if at.microsecond else "seconds"
    return at.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def as_instant(value: Any) -> int | None:
    """The µs since the epoch a frontmatter value denotes (`instant_text`'s form, or a date:
    its midnight UTC), or None when it denotes none or one before 1970."""
    if isinstance(value, date) and not isinstance(value, datetime):
        at = datetime(value.year, value.month, value.day, tzinfo=UTC)
    elif isinstance(value, str) and _INSTANT_TEXT.fullmatch(value):
        try:
            at = datetime.fromisoformat(value[:-1]).replace(tzinfo=UTC)
        except ValueError:
            return None
    else:
        return None
    micros = (at - _EPOCH) // timedelta(microseconds=1)
    return micros if micros >= 0 else None


def as_date(value: Any) -> date | None:
    """The calendar date a frontmatter value denotes, or None when it denotes none.

    The frontmatter loader turns well-formed real dates into `date` and keeps
    anything else (2026-02-30, 2026-1-5, timestamps) as the original text.
    """
    if isinstance(value, date):
        return value
    if isinstance(value, str) and _DATE_TEXT.fullmatch(value):
        try:
            return date.fromisoformat(value)
        except ValueError:
            return None
    return None


def _check_date(meta: dict[str, Any], key: str, *, nullable: bool) -> list[Finding]:
    value = meta[key]
    if value is None and nullable:
        return []
    if as_date(value) is not None:
        return []
    if isinstance(value, str) and _DATE_TEXT.fullmatch(value):
        return [(key, f"expected a real calendar date, found {value!r}", "error")]
    what = "a YYYY-MM-DD date or null" if nullable else "a YYYY-MM-DD date"
    return [(key, f"expected {what}, found {describe(value)}", "error")]


def _check_str_list(meta: dict[str, Any], key: str, *, non_empty: bool) -> list[Finding]:
    value = meta[key]
    if not isinstance(value, list):
        return [(key, f"expected a list of strings, found {describe(value)}", "error")]
    out: list[Finding] = []
    if non_empty and not value:
        out.append((key, "expected a non-empty list, found []", "error"))
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            out.append((f"{key}[{i}]", f"expected a non-empty string, found {describe(item)}", "error"))
    return out


def _check_text(meta: dict[str, Any], key: str, limit: int) -> list[Finding]:
    value = meta[key]
    if not isinstance(value, str):
        return [(key, f"expected a string, found {describe(value)}", "error")]
    if not value.strip():
        return [(key, "expected a non-empty string, found an empty one", "error")]
    if len(value) > limit:
        return [(key, f"expected at most {limit} characters, found {len(value)}", "error")]
    return []


def check_common(meta: dict[str, Any], required: tuple[str, ...], expected_version: int) -> list[Finding]:
    """Rules shared by notes and wiki pages: presence, types, enums, dates, limits."""
    out: list[Finding] = [(key, "required field is missing", "error") for key in required if key not in meta]
    if "schema_version" in meta:
        v = meta["schema_version"]
        if isinstance(v, bool) or not isinstance(v, int):
            out.append(("schema_version", f"expected an integer, found {describe(v)}", "error"))
        elif v != expected_version:
            out.append(
                (
                    "schema_version",
                    f"expected {expected_version}, found {v} (run a schema migration)",
                    "error",
                )
            )
    if "name" in meta:
        out += _check_text(meta, "name", NAME_MAX)
    if "description" in meta:
        out += _check_text(meta, "description", DESCRIPTION_MAX)
        d = meta["description"]
        if isinstance(d, str) and DESCRIPTION_HOOK_MAX < len(d) <= DESCRIPTION_MAX:
            out.append(
                (
                    "description",
                    f"a hook should stay within ~{DESCRIPTION_HOOK_MAX} characters, found {len(d)}",
                    "warning",
                )
            )
    for key in ("captured", "last_seen"):
        if key in meta:
            out += _check_date(meta, key, nullable=False)
    if "expires_at" in meta:
        out += _check_date(meta, "expires_at", nullable=True)
    if "sources" in meta:
        out += _check_str_list(meta, "sources", non_empty=True)
    if "confidence" in meta and meta["confidence"] not in CONFIDENCE_LEVELS:
        out.append(
            (
                "confidence",
                f"expected one of high, medium, low, found {describe(meta['confidence'])}",
                "error",
            )
        )
    if "pinned" in meta and not isinstance(meta["pinned"], bool):
        out.append(("pinned", f"expected true or false, found {describe(meta['pinned'])}", "error"))
    if "tags" in meta:
        out += _check_str_list(meta, "tags", non_empty=False)
    for key in ("supersedes", "superseded_by"):
        if key in meta and meta[key] is not None and not isinstance(meta[key], str):
            out.append((key, f"expected a filename or null, found {describe(meta[key])}", "error"))
    return out


def check_note(
    meta: dict[str, Any], filename: str, *, expected_version: int = CURRENT_SCHEMA_VERSION
) -> list[Finding]:
    """Every per-file rule for an atomic note under `<agent>/memory/`."""
    out = check_common(meta, NOTE_REQUIRED, expected_version)
    kind = meta.get("type")
    if "type" in meta and kind not in NOTE_TYPES:
        out.append(
            (
                "type",
                f"expected one of {', '.join(NOTE_TYPES)}, found {describe(kind)}",
                "error",
            )
        )
    out += naming.check_note_filename(filename, kind if isinstance(kind, str) else None)
    return out


def check_wiki(
    meta: dict[str, Any], filename: str, *, expected_version: int = CURRENT_SCHEMA_VERSION
) -> list[Finding]:
    """Every per-file rule for a wiki page under `<agent>/wiki/` (related is checked vault-wide)."""
    out = check_common(meta, WIKI_REQUIRED, expected_version)
    if "type" in meta and meta["type"] != WIKI_TYPE:
        out.append(("type", f"expected wiki_page, found {describe(meta['type'])}", "error"))
    if "provenance" in meta and meta["provenance"] != WIKI_PROVENANCE:
        out.append(("provenance", f"expected distilled, found {describe(meta['provenance'])}", "error"))
    sources = meta.get("sources")
    if isinstance(sources, list):
        for i, src in enumerate(sources):
            if isinstance(src, str) and src.strip() and not src.startswith("raw/"):
                out.append((f"sources[{i}]", f"expected a path under raw/, found {src!r}", "error"))
    if "related" in meta:
        out += _check_str_list(meta, "related", non_empty=False)
    out += naming.check_wiki_filename(filename)
    return out
