"""Managed regions: the parts of a hand-editable Markdown file that mnemolog may rewrite.

Persona files and journal days are shared between mnemolog and a person.
mnemolog writes only between its markers:

    <!-- mnemolog:begin user.role_and_context sha256=0123456789abcdef -->
    - Mechanical/optical engineer (promoted 2026-05-06 from user_role.md)
    <!-- mnemolog:end user.role_and_context -->

Everything outside the markers is the person's and is kept byte for byte.
The `sha256=` field is the first 16 hex digits of the SHA-256 of what
mnemolog last wrote inside, so a later render can tell whether the person
edited the region too:

- digest matches: the region is mnemolog's; it is replaced by the new content;
- digest differs: the person edited it; it is kept as it is and reported;
- no digest (`<!-- mnemolog:begin NAME -->`): an invitation; it is filled;
- region missing (the person deleted it, markers and all): not put back,
  and reported; adding the two markers by hand asks for it again.

A file whose markers do not pair up (an end without a begin, a begin inside
a region, a name used twice, a region never closed) is not rewritten at all:
`merge` raises RegionError and the caller reports it. Pure functions.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

NAME_PATTERN: Final = r"[a-z0-9][a-z0-9_.-]{0,63}"
DIGEST_HEX: Final = 16
_BEGIN = re.compile(rf"<!-- mnemolog:begin ({NAME_PATTERN})(?: sha256=([0-9a-f]{{{DIGEST_HEX}}}))? -->")
_END = re.compile(rf"<!-- mnemolog:end ({NAME_PATTERN}) -->")
_ANY = re.compile(r"<!-- mnemolog:(?:begin|end)\b")


class RegionError(ValueError):
    """Markers that do not pair up; `line` is 1-based."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.reason = message


@dataclass(frozen=True)
class Region:
    name: str
    digest: str | None
    begin: int  # offset of the begin marker line
    content_start: int
    content_end: int
    end: int  # offset just past the end marker line (and its newline)

    def content(self, text: str) -> str:
        return text[self.content_start : self.content_end]


def digest(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()[:DIGEST_HEX]


def _content(content: str) -> str:
    # Text that would read as a marker (a memory quoting one) is defused, so that what
    # mnemolog writes can always be parsed again.
    content = content.replace("<!-- mnemolog:", "<!-- mnemolog :")
    return content if not content or content.endswith("\n") else content + "\n"


def block(name: str, content: str) -> str:
    """A region holding `content` (a final newline added when missing), markers included."""
    if not re.fullmatch(NAME_PATTERN, name):
        raise ValueError(f"region name {name!r} does not match {NAME_PATTERN}")
    body = _content(content)
    return f"<!-- mnemolog:begin {name} sha256={digest(body)} -->\n{body}<!-- mnemolog:end {name} -->\n"


def parse(text: str) -> list[Region]:
    """Every region of `text`, in order; RegionError when the markers do not pair up."""
    regions: list[Region] = []
    names: set[str] = set()
    open_: tuple[str, str | None, int, int, int] | None = None  # name, digest, begin, content start, line
    pos = 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        stripped = line.rstrip("\r\n")
        start, pos = pos, pos + len(line)
        if not _ANY.search(stripped):
            continue
        b = _BEGIN.fullmatch(stripped)
        e = _END.fullmatch(stripped)
        if b:
            if open_ is not None:
                raise RegionError(f"region {b.group(1)!r} begins inside region {open_[0]!r}", number)
            if b.group(1) in names:
                raise RegionError(f"region {b.group(1)!r} appears twice", number)
            open_ = (b.group(1), b.group(2), start, pos, number)
        elif e:
            if open_ is None or open_[0] != e.group(1):
                raise RegionError(f"end of region {e.group(1)!r} without its begin", number)
            names.add(open_[0])
            regions.append(Region(open_[0], open_[1], open_[2], open_[3], start, pos))
            open_ = None
        else:
            raise RegionError("a mnemolog marker that is not `<!-- mnemolog:begin|end NAME -->`", number)
    if open_ is not None:
        raise RegionError(f"region {open_[0]!r} is never closed", open_[4])
    return regions


@dataclass
class MergeResult:
    text: str
    updated: list[str] = field(default_factory=list)
    kept_edits: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def merge(existing: str, contents: Mapping[str, str]) -> MergeResult:
    """`existing` with each of its regions named in `contents` brought up to date (rules above)."""
    out: list[str] = []
    result = MergeResult("")
    pos = 0
    present = set()
    for r in parse(existing):
        present.add(r.name)
        out.append(existing[pos : r.begin])
        pos = r.end
        current = r.content(existing)
        if r.name not in contents:
            out.append(existing[r.begin : r.end])
            continue
        if r.digest is not None and digest(current) != r.digest:
            result.kept_edits.append(r.name)
            out.append(existing[r.begin : r.end])
            continue
        new = block(r.name, contents[r.name])
        if new != existing[r.begin : r.end]:
            result.updated.append(r.name)
        tail = existing[r.begin : r.end]
        # Keep the file's own line end after the end marker (a CRLF file stays CRLF there).
        if tail.endswith("\r\n"):
            new = new[:-1] + "\r\n"
        elif not tail.endswith("\n"):
            new = new[:-1]
        out.append(new)
    out.append(existing[pos:])
    result.missing = sorted(set(contents) - present)
    result.text = "".join(out)
    return result


def one_line(text: str, limit: int) -> str:
    """Whitespace runs collapsed to one space, cut at `limit` characters with an ellipsis."""
    s = " ".join(text.split())
    return s if len(s) <= limit else s[: limit - 1].rstrip() + "…"


def check_regions(text: str) -> list[tuple[str, str, str]]:
    """Validation findings about a file's regions: unpaired markers (error), hand edits (warning)."""
    try:
        edited = hand_edited(text)
    except RegionError as exc:
        return [("regions", f"{exc}; render leaves this file alone until it is fixed", "error")]
    return [
        ("regions", f"region {n} was edited by hand; render keeps it as it is", "warning") for n in edited
    ]


def hand_edited(text: str) -> list[str]:
    """Names of regions whose content no longer matches their digest (for validation)."""
    return [r.name for r in parse(text) if r.digest is not None and digest(r.content(text)) != r.digest]
