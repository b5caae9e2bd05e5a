"""A migrated log's provenance: the genesis field naming the log it replaced, and its check.

A log made by migrating an older home (`mnemolog migrate seal`) starts with a genesis that
carries `migrated_from`: the old log's id, its last signed checkpoint, the old key, and the
old key's signature over the hand-off (old log id, checkpoint size and root, new log id, new
public key). `check_provenance` is a pure function of the genesis entry; `verify_log` runs it,
so `log verify` and the standalone verifier check a migration's hand-off, not only the
migration tool. It proves what the old key signed, not that the old key is to be trusted:
that stays the auditor's to know (the old log's own anchor).
"""

from __future__ import annotations

import struct
from typing import Any, Final

from mnemolog.eventlog.errors import BadInput, MnemologError, VerificationError
from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.format.keys import VerifierKey, verify_signature
from mnemolog.eventlog.format.note import open_checkpoint
from mnemolog.eventlog.verify.trust import origin_for

__all__ = ["HANDOFF_CONTEXT", "MIGRATED_FROM", "check_provenance", "handoff_message"]

#: The genesis payload key of a migrated log.
MIGRATED_FROM: Final = "migrated_from"
#: What the old key signs to hand its log over to the new one.
HANDOFF_CONTEXT: Final = b"mnemolog/log-migrated/v1"


def handoff_message(old_log_id: bytes, size: int, root: bytes, new_log_id: bytes, new_key: bytes) -> bytes:
    """The bytes the old log's key signs to name its successor."""
    return b"".join(
        (HANDOFF_CONTEXT, b"\x00", old_log_id, struct.pack(">Q", size), root, new_log_id, new_key)
    )


def check_provenance(genesis: Entry) -> dict[str, Any] | None:
    """The genesis's `migrated_from`, checked (the old checkpoint and the hand-off signature
    under the old key it names); None for a log that was not migrated. Raises
    VerificationError (check `migration.provenance`, seq 0) when it does not hold."""
    g = genesis.data
    mf = g.get(MIGRATED_FROM)
    if mf is None:
        return None
    where = "genesis migrated_from"
    try:
        if not isinstance(mf, dict):
            raise BadInput("not a map")
        key = VerifierKey.from_vkey(str(mf["vkey"]))
        raw = mf["checkpoint"]
        if not isinstance(raw, bytes):
            raise BadInput("checkpoint is not bytes")
        cp = open_checkpoint(raw, key, where)
        lid, sig = mf["log_id"], mf["handoff"]
        if not isinstance(lid, bytes) or not isinstance(sig, bytes):
            raise BadInput("log_id and handoff are bytes")
        new_lid = g.get("log_id")
        if not isinstance(new_lid, bytes):
            raise BadInput("the genesis has no log_id")
    except (MnemologError, KeyError, ValueError, TypeError) as exc:
        why = exc.message if isinstance(exc, MnemologError) else str(exc)
        raise VerificationError(f"{where}: {why}", check="migration.provenance", seq=0) from exc
    if cp.origin != origin_for(lid):
        raise VerificationError(
            f"{where}: the checkpoint is not of log {lid.hex()}", check="migration.provenance", seq=0
        )
    pub = g.get("public_key")
    msg = handoff_message(lid, cp.size, cp.root, new_lid, pub if isinstance(pub, bytes) else b"")
    if not verify_signature(key.public_key, msg, sig):
        raise VerificationError(
            f"{where}: the hand-off is not signed by {key.vkey()}", check="migration.provenance", seq=0
        )
    return {
        "log_id": lid.hex(),
        "size": cp.size,
        "root": cp.root.hex(),
        "vkey": key.vkey(),
        "migrated_at": mf.get("migrated_at"),
    }
