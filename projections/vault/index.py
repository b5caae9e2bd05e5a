"""The INDEX.md line format: writing entries and finding what an index references.

An entry is the format's one-line form (docs/vault.md, INDEX.md) ``- `Title` — hook`` with the title made
a Markdown link to its file (``- [`Title`](file.md) — hook``), as the reference
implementation links its entries: it reads the same to a person or a model and
lets a tool follow it. When reading, a note counts as referenced by a link to
its filename, its filename in backticks, or its title in backticks (the
format's hand-written form). Pure functions only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINK_RE = re.compile(r"\[(?:[^\]\n]|\\\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_CODE_RE = re.compile(r"`([^`\n]+)`")
_SPACE_RE = re.compile(r"\s+")
EM_DASH = "—"


def one_line(text: str) -> str:
    """Whitespace runs (line breaks included) collapsed to one space, ends trimmed."""
    return _SPACE_RE.sub(" ", text).strip()


def code_text(text: str) -> str:
    """Text that can sit inside a one-backtick code span: no backticks, one line."""
    return one_line(text.replace("`", "'"))


def entry(title: str, target: str, hook: str) -> str:
    hook = one_line(hook)
    tail = f" {EM_DASH} {hook}" if hook else ""
    return f"- [`{code_text(title)}`]({target}){tail}"


@dataclass(frozen=True)
class IndexRefs:
    links: tuple[str, ...]
    code_spans: tuple[str, ...]


def references(text: str) -> IndexRefs:
    """Local link targets (anchors and ./ dropped) and code-span texts of an index."""
    links = []
    for m in _LINK_RE.finditer(text):
        target = m.group(1).split("#", 1)[0].removeprefix("./")
        if target and "://" not in target:
            links.append(target)
    spans = [code_text(m.group(1)) for m in _CODE_RE.finditer(text)]
    return IndexRefs(tuple(links), tuple(spans))
