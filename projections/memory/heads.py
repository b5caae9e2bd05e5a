"""Named queries for the back-chain: each memory's newest touching entry, and how far the tables are.

`Session.append` reads them to fill a new entry's `touch_prev` pointers. The
exporter and the verifier never read them: a pointer that a damaged table
made wrong shows up as a broken back-chain when a bundle is verified, and
cannot hide an entry (bundles select entries from the log itself).
"""

from __future__ import annotations

from collections.abc import Collection

import duckdb

from mnemolog.projections.fold import id_set

__all__ = ["applied_size", "memory_heads"]


def applied_size(conn: duckdb.DuckDBPyConnection) -> int:
    """How many entries of the log the tables have applied (last applied seq + 1)."""
    row = conn.execute("SELECT last_seq FROM proj_state").fetchone()
    return 0 if row is None else int(row[0]) + 1


def memory_heads(conn: duckdb.DuckDBPyConnection, ids: Collection[str]) -> dict[str, int]:
    """The seq of the newest entry touching each of `ids` (absent: none has)."""
    if not ids:
        return {}
    with id_set(conn, "ml_heads", sorted(ids)) as wanted:
        rows = conn.execute(
            f"SELECT memory_id, max(seq) FROM touches WHERE memory_id IN {wanted} GROUP BY memory_id"
        ).fetchall()
    return {str(m): int(s) for m, s in rows}
