"""What `log verify --witness-key` requires of a home's checkpoints, and what a witness cosigned here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mnemolog.eventlog.errors import MnemologError, VerificationError
from mnemolog.eventlog.format.note import MAX_NOTE_BYTES
from mnemolog.eventlog.store.fsio import read_regular
from mnemolog.eventlog.store.log import CHECKPOINT_DIR, checkpoint_name
from mnemolog.eventlog.witness.cosignature import WitnessPolicy, require_cosignatures
from mnemolog.substrate.witness.config import WitnessConfig

__all__ = ["SCAN_CHECKPOINTS", "newest_cosigned", "require_witnessed"]

SCAN_CHECKPOINTS = 64  # how many of the newest checkpoints are searched for cosignatures


def require_witnessed(log_dir: Path, size: int, policy: WitnessPolicy) -> dict[str, Any]:
    """The checkpoint covering all `size` entries of the log must carry the policy's cosignatures.

    A checkpoint beyond the log cannot exist in a log that verified, so "at or
    beyond the log's size" is the checkpoint of exactly `size`. Returns what
    `log verify` reports; raises VerificationError (`witness.unwitnessed`,
    `witness.quorum`, `witness.signature`) otherwise.
    """
    rel = f"{CHECKPOINT_DIR}/{checkpoint_name(size)}"
    try:
        raw = read_regular(log_dir / rel, MAX_NOTE_BYTES)
    except FileNotFoundError:
        raw = None
    if raw is None:
        newest = _newest_witnessed(log_dir, size, policy)
        covered = (
            f"the newest checkpoint with enough cosignatures covers {newest}"
            if newest
            else ("no checkpoint carries enough cosignatures")
        )
        raise VerificationError(
            f"the log's {size} entries have no checkpoint of their own, so no witness vouches for "
            f"the last of them; {covered}",
            check="witness.unwitnessed",
            seq=size - 1,
            expected=size,
            found=newest,
        )
    found = require_cosignatures(raw, policy, rel)
    return {
        **policy.describe(),
        "checkpoint": size,
        "cosignatures": [
            {"name": c.witness.name, "vkey": c.witness.vkey(), "timestamp": c.timestamp} for c in found
        ],
    }


def _newest_witnessed(log_dir: Path, below: int, policy: WitnessPolicy) -> int:
    cp_dir = log_dir / CHECKPOINT_DIR
    try:
        sizes = sorted((int(n) for n in os.listdir(cp_dir) if len(n) == 20 and n.isdigit()), reverse=True)
    except FileNotFoundError:
        return 0
    for s in sizes[:SCAN_CHECKPOINTS]:
        if s > below:
            continue
        try:
            require_cosignatures(read_regular(cp_dir / checkpoint_name(s), MAX_NOTE_BYTES), policy, str(s))
            return s
        except (MnemologError, OSError):
            continue
    return 0


def newest_cosigned(log_dir: Path, w: WitnessConfig) -> int:
    """The size of the newest stored checkpoint carrying `w`'s valid cosignature (0: none seen)."""
    return _newest_witnessed(log_dir, 2**64, WitnessPolicy((w.key,), 1))
