"""The embedding room's fold: the home's embedders, and the vectors an erasure drops.

Tables: `embedders` (every embedder.configured, in log order: the last row
is the home's embedder), and the vector tables that
`projections/embedding/vectors.py` creates and fills after each catch-up
(`vectors.follow`, outside the fold: a vector is computed, not read from
the log). The fold's part of them is an erasure: the vectors of erased
memories and of erased documents' chunks go. It reads which those are from
the memory and context tables, so `engine.FOLDS` runs it before their
folds drop the rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.eventlog.vocabulary.events import read_int, read_str
from mnemolog.projections.fold import Fold, Handler, Shared, erasure_subjects, has_table, id_set
from mnemolog.projections.schema import OWNED_ELSEWHERE


class EmbeddingFold(Fold):
    """The embedding room's fold (see the module docstring)."""

    TABLES: ClassVar[tuple[str, ...]] = ("embedders", *OWNED_ELSEWHERE)

    def configured(self, e: Entry, d: dict[str, Any]) -> None:
        """embedder.configured: the home's embedding model from this seq on (read totally)."""
        dim = read_int(d.get("dim"), v.INT32)
        self.conn.execute(
            "INSERT INTO embedders VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                e.seq,
                read_str(d.get("kind")) or "",
                read_str(d.get("model")),
                read_str(d.get("version")),
                dim if dim is not None and dim > 0 else None,
                read_str(d.get("model_id")),
                e.ts,
            ],
        )

    def __init__(self, shared: Shared) -> None:
        super().__init__(shared)
        # Created outside the folds (`vectors.follow`, after a catch-up): known for a whole pass.
        self._has: dict[str, bool] = {}

    def _has_table(self, table: str) -> bool:
        got = self._has.get(table)
        if got is None:
            got = self._has[table] = has_table(self.conn, table)
        return got

    def erased(self, e: Entry, d: dict[str, Any]) -> None:
        """memory.erased: the vectors of the erased memories and of the erased documents' chunks."""
        self.shared.flush()
        who = erasure_subjects(d)
        conn = self.conn
        if who.memories and self._has_table("vectors"):
            with id_set(conn, "ml_erased", who.memories) as ids:
                for t in ("vectors", "vector_pending"):
                    conn.execute(
                        f"DELETE FROM {t} WHERE doc IN (SELECT stored_seq FROM memories WHERE id IN {ids})"
                    )
        if who.documents and self._has_table("chunk_vectors"):
            with id_set(conn, "ml_erased", who.documents) as ids:
                for t in ("chunk_vectors", "chunk_vector_pending"):
                    conn.execute(
                        f"DELETE FROM {t} WHERE doc IN "
                        f"(SELECT doc FROM ctx_chunks WHERE document_id IN {ids})"
                    )

    HANDLES: ClassVar[Mapping[str, Handler]] = {
        v.EMBEDDER_CONFIGURED: configured,
        v.MEMORY_ERASED: erased,
    }
