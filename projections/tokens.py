"""Reads of the `tokens` table: the scoped tokens a home has issued, found by the hash of a secret."""

from __future__ import annotations

from typing import Any

import duckdb

__all__ = ["COLUMNS", "by_hash", "list_tokens"]

COLUMNS = (
    "token_id",
    "sha256",
    "level",
    "namespaces",
    "projects",
    "expires_at",
    "rate_per_minute",
    "label",
    "issued_seq",
    "issued_at",
    "revoked_seq",
    "revoked_at",
    "reason",
)


def _row(r: tuple[Any, ...]) -> dict[str, Any]:
    out = dict(zip(COLUMNS, r, strict=True))
    out["namespaces"] = list(out["namespaces"] or [])
    out["projects"] = list(out["projects"] or [])
    return out


def by_hash(conn: duckdb.DuckDBPyConnection, token_id: str, sha256: str) -> dict[str, Any] | None:
    """The token with this id and secret hash (revoked or not), or None."""
    row = conn.execute(
        f"SELECT {', '.join(COLUMNS)} FROM tokens WHERE token_id = ? AND sha256 = ?", [token_id, sha256]
    ).fetchone()
    return _row(row) if row else None


def list_tokens(conn: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every token, oldest first (their hashes included: they are what the log holds)."""
    rows = conn.execute(f"SELECT {', '.join(COLUMNS)} FROM tokens ORDER BY issued_seq").fetchall()
    return [_row(r) for r in rows]
