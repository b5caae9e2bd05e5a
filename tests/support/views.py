"""A bundle's memory view as the projection's row of the same memory."""

from __future__ import annotations

from typing import Any

from mnemolog.eventlog.bundle import memview

#: View keys the projection's memory row does not have (it serves them separately).
VIEW_ONLY = frozenset({"links", "seqs", "atom_ids", "knowledge"})


def as_row(view: dict[str, Any]) -> dict[str, Any]:
    """The view's fields as a row: its knowledge block (or the defaults) flattened in."""
    flat = {k: x for k, x in view.items() if k not in VIEW_ONLY}
    # occurred_at is in a view only when the memory has one; a row always has the column.
    return {"occurred_at": None, **flat, **(view.get("knowledge") or memview.KNOWLEDGE_DEFAULTS)}
