"""A memory's history: every signed log entry about it, each signature checked.

Which entries are "about" a memory is decided by the fold (the `touches`
projection: a store, every update, archive and restore, every link in or
out, its atomisation). The entries themselves are read from the log, not
from the projection, and each one's Ed25519 signature is checked against the
key the log's key history names for its seq: the trust anchor is that key
history as the log records it (its genesis key and signed rotations);
`log verify` checks the chain that makes the history itself trustworthy, and
a forensic bundle proves the entries against a signed checkpoint offline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mnemolog.eventlog.errors import NotFound, VerificationError

if TYPE_CHECKING:
    from mnemolog.substrate.api import Substrate

MAX_HISTORY = 10_000  # entries returned for one memory; a memory with more is a pathology


def memory_history(sub: Substrate, memory_id: str, limit: int = MAX_HISTORY) -> dict[str, Any]:
    """{memory_id, events: [entry summary, oldest first], anchor, truncated}; raises on a bad signature."""
    from mnemolog.projections import recall as q

    with sub.session() as conn:
        if not isinstance(memory_id, str) or q.get(conn, memory_id) is None:
            raise NotFound(f"no memory with id {memory_id!r}", id=memory_id)
        rows = conn.execute(
            "SELECT DISTINCT seq FROM touches WHERE memory_id = ? ORDER BY seq LIMIT ?",
            [memory_id, limit + 1],
        ).fetchall()
    seqs = [int(r[0]) for r in rows]
    truncated = len(seqs) > limit
    log = sub.log
    events = []
    for seq in seqs[:limit]:
        e = log.entry(seq)
        key = log.key_at(seq)
        if key.kid != e.kid or not key.verify(e.tbs(), e.sig):
            raise VerificationError(
                f"entry {seq}: the signature does not verify with the key the log names for it",
                check="entry.signature",
                seq=seq,
                expected=key.kid.hex(),
                found=e.kid.hex(),
            )
        events.append({**e.summary(), "signed_by": key.vkey(), "signature": "verified"})
    return {
        "memory_id": memory_id,
        "events": events,
        "truncated": truncated,
        "anchor": (
            f"the key history recorded in this log (genesis key {log.key_at(0).vkey()}); "
            "`log verify` checks the chain, a forensic bundle proves the entries offline"
        ),
    }
