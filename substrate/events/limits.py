"""Every limit on what a payload may carry, as checks the payload models run.

Each check raises the error a person sees (class, exit code, message naming
the field) and returns the value in the shape it is stored in. The payload
models (mnemolog.substrate.events) call them from their validators, so no
path that builds a payload — `store`, `update`, atomisation, vault import,
migrations — can write past a limit; the API calls the same functions for
its read filters.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from mnemolog.eventlog.errors import BadInput, UsageError
from mnemolog.eventlog.vocabulary.events import KINDS, RELATIONS
from mnemolog.eventlog.vocabulary.knowledge import DOMAIN_NAME

__all__ = [
    "MAX_CONTENT_BYTES",
    "MAX_LIMIT",
    "MAX_METADATA_BYTES",
    "MAX_SOURCE_CHARS",
    "MAX_TAGS",
    "MAX_TAG_CHARS",
    "MAX_TEXT_CHARS",
    "MAX_TITLE_CHARS",
    "NAMESPACE_RE",
    "ROOT_NAMESPACE",
    "check_confidence",
    "check_content",
    "check_domain_names",
    "check_kind",
    "check_limit",
    "check_metadata",
    "check_namespace",
    "check_occurred_at",
    "check_relation",
    "check_source",
    "check_tags",
    "check_text",
    "check_title",
    "check_unicode",
]

MAX_CONTENT_BYTES: Final = 256 * 1024
MAX_TITLE_CHARS: Final = 512
MAX_TAGS: Final = 64
MAX_TAG_CHARS: Final = 64
MAX_METADATA_BYTES: Final = 64 * 1024
MAX_SOURCE_CHARS: Final = 2048
MAX_TEXT_CHARS: Final = 2048  # reasons and other short free text
MAX_LIMIT: Final = 1000

NAMESPACE_RE: Final = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}(/[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}){0,15}$"
)
ROOT_NAMESPACE: Final = ""


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_unicode(value: Any, what: str) -> Any:
    """Refuse lone surrogates anywhere in `value` (text, or lists and maps of it)."""
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            if _has_lone_surrogate(v):
                raise BadInput(f"{what} is not valid Unicode text (lone surrogates)", field=what)
        elif isinstance(v, Mapping):
            todo += list(v.keys()) + list(v.values())
        elif isinstance(v, list | tuple):
            todo += list(v)
    return value


def check_content(content: Any, what: str = "content") -> str:
    """Text that is not blank, at most 256 KiB of UTF-8, without NUL or lone surrogates."""
    if not isinstance(content, str):
        raise BadInput(f"{what} must be text", field=what)
    if not content.strip():
        raise BadInput(f"{what} is empty", field=what)
    n = len(content.encode("utf-8", "surrogatepass"))
    if n > MAX_CONTENT_BYTES:
        raise BadInput(
            f"{what} is {n} bytes; the limit is {MAX_CONTENT_BYTES} bytes (256 KiB)",
            field=what,
            expected=MAX_CONTENT_BYTES,
            found=n,
        )
    check_unicode(content, what)
    if "\x00" in content:
        raise BadInput(f"{what} contains a NUL character", field=what)
    return content


def check_title(title: Any) -> str | None:
    """None, or text of at most MAX_TITLE_CHARS characters without NUL."""
    if title is None:
        return None
    if not isinstance(title, str) or len(title) > MAX_TITLE_CHARS or "\x00" in title:
        raise BadInput(f"title must be text of at most {MAX_TITLE_CHARS} characters, no NUL", field="title")
    return check_unicode(title, "title")  # type: ignore[no-any-return]


def check_source(source: Any) -> str | None:
    """None, or text of at most MAX_SOURCE_CHARS characters without NUL."""
    if source is None:
        return None
    if not isinstance(source, str):
        raise BadInput("source must be text", field="source")
    if len(source) > MAX_SOURCE_CHARS:
        raise BadInput(f"source longer than {MAX_SOURCE_CHARS} characters", field="source")
    if "\x00" in source:
        raise BadInput("source contains a NUL character", field="source")
    return check_unicode(source, "source")  # type: ignore[no-any-return]


def check_text(value: Any, what: str, limit: int = MAX_TEXT_CHARS) -> str | None:
    """Short free text (a reason): at most `limit` characters, no NUL, valid Unicode."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit or "\x00" in value:
        raise BadInput(f"{what} must be text of at most {limit} characters, no NUL", field=what)
    return check_unicode(value, what)  # type: ignore[no-any-return]


def check_tags(tags: Any) -> list[str]:
    """Up to MAX_TAGS distinct tags of 1 to MAX_TAG_CHARS characters, no whitespace (a text is one tag)."""
    out: list[str] = []
    if isinstance(tags, str):
        tags = [tags]
    if not isinstance(tags, list | tuple):
        raise BadInput("tags must be a list of text", field="tags")
    for t in tags:
        if not isinstance(t, str) or not t.strip() or len(t) > MAX_TAG_CHARS or any(c.isspace() for c in t):
            raise BadInput(f"tag {t!r} must be 1–{MAX_TAG_CHARS} characters without whitespace", field="tags")
        check_unicode(t, "tags")
        if t not in out:
            out.append(t)
    if len(out) > MAX_TAGS:
        raise BadInput(f"at most {MAX_TAGS} tags", field="tags", found=len(out))
    return out


def check_metadata(meta: Any, what: str = "metadata") -> dict[str, Any]:
    """A JSON object of at most MAX_METADATA_BYTES (None is {})."""
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise BadInput(f"{what} must be a JSON object", field=what)
    try:
        size = len(json.dumps(meta, ensure_ascii=False, allow_nan=False).encode())
    except (TypeError, ValueError, RecursionError) as exc:
        raise BadInput(f"{what} is not JSON-compatible: {exc}", field=what) from exc
    if size > MAX_METADATA_BYTES:
        raise BadInput(f"{what} is {size} bytes; the limit is {MAX_METADATA_BYTES}", field=what)
    return dict(meta)


def check_domain_names(domains: Any) -> list[str]:
    """Domain tags: a list of well-formed names, lowercased, without repeats.

    Whether a name is one of the home's domains is the command's check (the
    vocabulary is configuration); a payload holds only well-formed names.
    """
    if isinstance(domains, str):
        domains = [domains]
    if not isinstance(domains, list | tuple):
        raise BadInput("domains must be a list of domain names", field="domains")
    out: list[str] = []
    for d in domains:
        name = d.strip().lower() if isinstance(d, str) else d
        if not isinstance(name, str) or DOMAIN_NAME.fullmatch(name) is None:
            raise BadInput(
                f"domain {d!r} must match {DOMAIN_NAME.pattern}", field="domains", found=repr(d)[:80]
            )
        if name not in out:
            out.append(name)
    if len(out) > MAX_TAGS:
        raise BadInput(f"at most {MAX_TAGS} domains", field="domains", found=len(out))
    return out


def check_kind(kind: Any) -> str:
    """One of the vocabulary's KINDS (UsageError, exit 64, otherwise)."""
    if kind not in KINDS:
        raise UsageError(f"unknown kind {kind!r} (one of {', '.join(KINDS)})", field="kind")
    return str(kind)


def check_relation(relation: Any) -> str:
    """One of the vocabulary's RELATIONS (UsageError, exit 64, otherwise)."""
    if relation not in RELATIONS:
        raise UsageError(f"unknown relation {relation!r} (one of {', '.join(RELATIONS)})", field="relation")
    return str(relation)


def check_confidence(c: Any) -> float | None:
    """None, or a number in [0, 1] (not a boolean), as a float."""
    if c is None:
        return None
    if isinstance(c, bool) or not isinstance(c, int | float) or not 0.0 <= float(c) <= 1.0:
        raise BadInput(f"confidence must be a number in [0, 1], found {c!r}", field="confidence")
    return float(c)


#: The latest instant a date may name: the end of year 9999, in µs since the epoch (UTC).
MAX_TIMESTAMP_US: Final = 253_402_300_799_999_999
_ISO_DATE: Final = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def check_occurred_at(value: Any, field: str = "occurred_at") -> int | None:
    """None, or when something happened, as µs since the epoch (UTC).

    Given as an integer of µs (what `created_at` is), or as ISO 8601 text: a
    date (`2023-05-08`, midnight UTC) or a date and time (`2023-05-08T14:30`,
    UTC unless it names an offset). From 1970 to the end of year 9999.
    """
    if value is None:
        return None
    import datetime as dt

    if isinstance(value, str):
        text = value.strip()
        if len(text) > 64:
            raise BadInput(
                f"{field} must be an ISO 8601 date or time, found {len(text)} characters", field=field
            )
        try:
            if _ISO_DATE.fullmatch(text):
                when = dt.datetime.combine(dt.date.fromisoformat(text), dt.time(), dt.UTC)
            else:
                when = dt.datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
                if when.tzinfo is None:
                    when = when.replace(tzinfo=dt.UTC)
        except ValueError:
            raise BadInput(
                f"{field} must be an ISO 8601 date (2023-05-08) or date and time (2023-05-08T14:30Z), "
                f"found {text[:64]!r}",
                field=field,
                found=text[:64],
            ) from None
        delta = when - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        value = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    elif isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(
            f"{field} must be µs since the epoch or an ISO 8601 date, found {type(value).__name__}",
            field=field,
        )
    if not 0 <= value <= MAX_TIMESTAMP_US:
        raise BadInput(
            f"{field} must lie between 1970-01-01 and the end of year 9999, found {value!r} µs", field=field
        )
    return int(value)


def check_namespace(ns: Any, *, allow_root: bool = False) -> str:
    """Path segments `a/b/c` (letters, digits, _ . -; at most 16 levels); '' only with allow_root."""
    if allow_root and ns == ROOT_NAMESPACE:
        return ns  # type: ignore[no-any-return]
    if not isinstance(ns, str) or not NAMESPACE_RE.fullmatch(ns):
        raise BadInput(
            f"namespace {ns!r} must be path segments of letters, digits, '_', '.', '-' "
            "separated by '/' (e.g. team/project), at most 16 levels",
            field="namespace",
            found=ns,
        )
    return ns


def check_limit(limit: Any) -> int:
    """An integer result count between 1 and MAX_LIMIT (UsageError otherwise)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise UsageError(f"limit must be between 1 and {MAX_LIMIT}", field="limit", found=limit)
    return limit
