"""The erasure room's fold: `erasures`, one row per subject a memory.erased names, never content.

Every other room drops its own rows of the same event (memories, candidates,
documents, vectors); this one keeps what was forgotten, when and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.eventlog.vocabulary.events import read_str
from mnemolog.projections.fold import Fold, Handler, erasure_subjects, insert_rows


class ErasureFold(Fold):
    """The erasure room's fold (see the module docstring)."""

    TABLES: ClassVar[tuple[str, ...]] = ("erasures",)

    def erased(self, e: Entry, d: dict[str, Any]) -> None:
        who = erasure_subjects(d)
        reason, by = read_str(d.get("reason")), read_str(d.get("requested_by"))
        rows = [
            (s, kind, e.seq, e.ts, reason, by)
            for kind, subjects in (
                ("memory", who.memories),
                ("interaction", who.interactions),
                ("document", who.documents),
                ("pack", who.others),
                ("key", who.keys),
            )
            for s in subjects
        ]
        if rows:
            insert_rows(
                self.conn, "erasures", ["subject", "kind", "seq", "ts", "reason", "requested_by"], rows
            )

    HANDLES: ClassVar[Mapping[str, Handler]] = {v.MEMORY_ERASED: erased}
