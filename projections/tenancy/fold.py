"""The tenancy room's fold: `tokens`, each issued token's hash and scope, and its revocation.

Only a token's hash is ever written, in the log and here. Read totally; a
token id issued twice keeps the first, and the first revocation stands.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.eventlog.vocabulary.events import read_int, read_str, read_tags
from mnemolog.projections.fold import Fold, Handler


class TenancyFold(Fold):
    """The tenancy room's fold (see the module docstring)."""

    TABLES: ClassVar[tuple[str, ...]] = ("tokens",)

    def issued(self, e: Entry, d: dict[str, Any]) -> None:
        """token.issued: a token's hash and scope (read totally; a token id issued twice keeps the first)."""
        tid = read_str(d.get("token_id"))
        digest = read_str(d.get("sha256"))
        if not tid or not digest:
            return
        self.conn.execute(
            "INSERT OR IGNORE INTO tokens VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL)",
            [
                tid,
                digest,
                read_str(d.get("level")) or "read",
                read_tags(d.get("namespaces")),
                read_tags(d.get("projects")),
                read_int(d.get("expires_at")),
                read_int(d.get("rate_per_minute")),
                read_str(d.get("label")),
                e.seq,
                e.ts,
            ],
        )

    def revoked(self, e: Entry, d: dict[str, Any]) -> None:
        """token.revoked: the first revocation of a token stands."""
        self.conn.execute(
            "UPDATE tokens SET revoked_seq = ?, revoked_at = ?, reason = ? "
            "WHERE token_id = ? AND revoked_seq IS NULL",
            [e.seq, e.ts, read_str(d.get("reason")), read_str(d.get("token_id")) or ""],
        )

    HANDLES: ClassVar[Mapping[str, Handler]] = {v.TOKEN_ISSUED: issued, v.TOKEN_REVOKED: revoked}
