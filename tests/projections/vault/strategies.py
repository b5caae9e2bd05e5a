"""Hypothesis strategies for frontmatter values and NoteRecords."""

from __future__ import annotations

import string
from datetime import date
from typing import Any

from hypothesis import strategies as st

from mnemolog.projections.vault.frontmatter import FIELD_ORDER
from mnemolog.projections.vault.render import KINDS, NoteRecord

# Text that exercises quoting: YAML indicators, line breaks, unicode, control characters.
tricky_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
    max_size=40,
) | st.sampled_from(
    [
        "",
        " ",
        "yes",
        "no",
        "null",
        "~",
        "true",
        "1",
        "1.5",
        "0x1f",
        "2026-01-01",
        "2026-02-30",
        "- item",
        "key: value",
        "# comment",
        "---",
        "...",
        "a\nb",
        "tab\there",
        "'quoted'",
        '"dq"',
        "\u2028",
        "\x85",
        "\ufeff",
        "trailing ",
        "é ü 日本",
        "[x]",
        "{y}",
        "&anchor",
        "*alias",
        "!tag",
        "%dir",
        "@at",
        "`tick`",
    ]
)
dates = st.dates(min_value=date(1900, 1, 1), max_value=date(2200, 12, 31))
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | dates
    | tricky_text
)
keys = st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=12) | tricky_text.filter(bool)
values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)
metas = st.dictionaries(keys, values, max_size=10)
bodies = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200)

_words = st.sampled_from(
    [
        "debt",
        "priority",
        "order",
        "risk",
        "tolerance",
        "income",
        "target",
        "launch",
        "tax",
        "strategy",
        "credit",
        "score",
        "the",
        "of",
        "and",
        "note",
        "café",
        "naïve",
        "Über",
        "2026",
        "q3",
        "április",
    ]
)
titles = st.lists(_words, min_size=0, max_size=8).map(" ".join) | tricky_text
labels = st.text(alphabet=string.ascii_letters + string.digits + "-_:/ .", min_size=1, max_size=20).filter(
    lambda s: s.strip() != ""
)
extra_keys = st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=10).filter(
    lambda k: not k.startswith("mnemolog_") and k not in {*FIELD_ORDER, "archived", "promoted_to_persona"}
)


@st.composite
def records(draw: st.DrawFn, max_size: int = 12) -> list[NoteRecord]:
    """A set of records with unique ids and supersedes/atom_of pointing within the set (or not)."""
    n = draw(st.integers(min_value=0, max_value=max_size))
    ids = draw(
        st.lists(
            st.text(alphabet="0123456789abcdefXYZ-", min_size=1, max_size=10),
            min_size=n,
            max_size=n,
            unique=True,
        )
    )
    out = []
    for i, memory_id in enumerate(ids):
        others = [x for x in ids if x != memory_id] + ["not-rendered"]
        kind = draw(st.sampled_from(KINDS))
        raw = draw(st.booleans())
        sources = (
            draw(st.lists(st.sampled_from(["raw/a.pdf", "raw/notes/b.md"]), min_size=1, max_size=2))
            if raw
            else draw(st.lists(labels, max_size=3))
        )
        captured = draw(dates)
        out.append(
            NoteRecord(
                memory_id=memory_id,
                kind=kind,
                title=draw(titles),
                description=draw(titles | st.text(max_size=300)),
                content=draw(bodies),
                tags=draw(st.lists(labels, max_size=3)),
                confidence=draw(
                    st.sampled_from([0.9, 0.6, 0.3, 0.0, 1.0, 0.75, 0.45])
                    | st.floats(min_value=0.0, max_value=1.0)
                ),
                captured=captured,
                last_seen=draw(dates),
                sources=sources,
                pinned=draw(st.booleans()),
                expires_at=draw(st.none() | dates),
                supersedes=draw(st.none() | st.sampled_from(others)) if i % 3 == 0 else None,
                superseded_by=draw(st.none() | st.sampled_from(others)) if i % 3 == 1 else None,
                archived=draw(st.booleans()),
                atom_of=draw(st.none() | st.sampled_from(others)) if kind == "observation" else None,
                namespace=draw(st.sampled_from(["default", "finance", "ops/eu"])),
                extra_frontmatter=draw(st.dictionaries(extra_keys, values, max_size=2)),
            )
        )
    return out
