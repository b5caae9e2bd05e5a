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

from typing import Any, Protocol

from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.store.log import Log
from mnemolog.projections.memory import queries
from mnemolog.substrate.session import Sessions

MAX_HISTORY = 10_000  # entries returned for one memory; a memory with more is a pathology


class HasLog(Sessions, Protocol):
    @property
    def log(self) -> Log: ...


def memory_history(sub: HasLog, memory_id: str, limit: int = MAX_HISTORY) -> dict[str, Any]:
    """{memory_id, events: [entry summary, oldest first], anchor, truncated}; raises on a bad signature."""
    log = sub.log
    with sub.session() as s:
        s.require(memory_id)
        seqs = sorted(queries.touching_seqs(s.conn, [memory_id], log.size))  # log caught up by the session
    truncated = len(seqs) > limit
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
