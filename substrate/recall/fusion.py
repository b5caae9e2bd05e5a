"""`parse_fusion`: the `[recall]` table of config.toml, read when a home is opened.

Kept apart from the recall service so that opening a home (which refuses a bad
`[recall]` table at once) does not import what recall itself needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mnemolog.eventlog.errors import BadInput
from mnemolog.projections.recall import hybrid

__all__ = ["parse_fusion"]


def parse_fusion(table: Any) -> hybrid.Fusion:
    """The `[recall]` table of config.toml: BM25's k1 and b, the neighbour weight, and how
    hybrid recall fuses (defaults: hybrid.Fusion)."""
    if table is None:
        return hybrid.Fusion()
    if not isinstance(table, Mapping):
        raise BadInput("[recall] must be a table", field="recall")
    known = {
        "fusion",
        "bm25_weight",
        "vector_weight",
        "k",
        "depth",
        "k1",
        "b",
        "neighbour_weight",
        "neighbour_decay",
        "fused_neighbour_weight",
        "min_cosine",
    }
    unknown = sorted(set(table) - known)
    if unknown:
        raise BadInput(f"unknown key(s) in [recall]: {unknown}", field="recall", found=unknown)
    base = hybrid.Fusion()
    method = table.get("fusion", base.method)
    if method not in ("convex", "rrf"):
        raise BadInput(f"recall.fusion must be convex or rrf; found {method!r}", field="recall.fusion")

    def number(key: str, default: float, lo: float, hi: float) -> float:
        v = table.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
            raise BadInput(
                f"recall.{key} must be a number in [{lo:g}, {hi:g}]; found {v!r}", field=f"recall.{key}"
            )
        return float(v)

    return hybrid.Fusion(
        method=method,
        bm25_weight=number("bm25_weight", base.bm25_weight, 0.0, 100.0),
        vector_weight=number("vector_weight", base.vector_weight, 0.0, 100.0),
        k=int(number("k", base.k, 1, 10_000)),
        depth=int(number("depth", base.depth, 1, 1000)),
        k1=number("k1", base.k1, 0.0, 10.0),
        b=number("b", base.b, 0.0, 1.0),
        neighbour_weight=number("neighbour_weight", base.neighbour_weight, 0.0, 10.0),
        neighbour_decay=number("neighbour_decay", base.neighbour_decay, 0.0, 1.0),
        fused_neighbour_weight=number("fused_neighbour_weight", base.fused_neighbour_weight, 0.0, 10.0),
        min_cosine=number("min_cosine", base.min_cosine, -1.0, 1.0),
    )
