"""The recall-hit ledger: which memories a recall has answered with, kept beside the log.

Decay counts a recall hit as a reference, but a recall is a read: it needs
neither the writer lock nor the signing key, and it must not grow the signed
log by an entry per question. So hits go to one local file in the home's
state directory (``state/recall-hits``), one line per hit
(``<memory id> <time µs>``), appended with ``O_APPEND`` in a single write per
recall so concurrent readers never interleave inside a line.

The ledger is a hint that can only keep a memory, never retire one: decay
leaves a recalled memory alone, and nothing else reads the file. A forged or
damaged ledger therefore costs at most a memory that stays longer; malformed
lines are skipped, and a ledger beyond ``MAX_BYTES`` is read up to that size
and compacted (the last hit of each memory) by the next decay run. A home that
cannot be written to (read-only copies, an auditor's mount) loses nothing: the
hit is simply not noted. It is not replayed and not exported: it says what
this home's readers did, not what the log holds.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

from mnemolog.eventlog.store.fsio import atomic_write, open_regular
from mnemolog.substrate.ids import looks_like_id

NAME = "recall-hits"
#: A ledger larger than this is read up to here and compacted by the next decay run.
MAX_BYTES = 8 << 20
#: One write per recall stays below the size a local O_APPEND write keeps whole.
_MAX_WRITE = 4096


def note(state_dir: Path, ids: Iterable[str], at_us: int) -> None:
    """Append a hit for each of ``ids`` at ``at_us``; silently nothing when the home is read-only."""
    lines = "".join(f"{i} {at_us}\n" for i in dict.fromkeys(ids) if looks_like_id(i))
    if not lines:
        return
    data = lines.encode("ascii")[:_MAX_WRITE]
    data = data[: data.rfind(b"\n") + 1]
    path = state_dir / NAME
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return  # read-only home, missing state dir, or a symlink planted in its place
    try:
        if os.fstat(fd).st_size <= 2 * MAX_BYTES:  # a runaway ledger waits for decay's compaction
            os.write(fd, data)
    except OSError:
        pass
    finally:
        os.close(fd)


def last_hits(state_dir: Path) -> dict[str, int]:
    """Each recalled memory's last hit (µs), from the first ``MAX_BYTES`` of the ledger; {} if none."""
    try:
        with open_regular(state_dir / NAME) as f:
            raw = f.read(MAX_BYTES)
    except OSError:
        return {}
    hits: dict[str, int] = {}
    for line in raw.split(b"\n"):
        parts = line.split(b" ")
        if len(parts) != 2 or not parts[1].isdigit() or len(parts[1]) > 19:
            continue  # a torn, forged or foreign line: the ledger is a hint, never a reason to fail
        try:
            mid = parts[0].decode("ascii")
        except UnicodeDecodeError:
            continue
        if looks_like_id(mid):
            at = int(parts[1])
            if at > hits.get(mid, -1):
                hits[mid] = at
    return hits


def compact(state_dir: Path, hits: dict[str, int]) -> None:
    """Rewrite the ledger as the last hit of each memory, when it has grown past ``MAX_BYTES``.

    Called by decay under the writer lock. A hit appended between the read and
    the rename is lost, which is the hint's accepted cost: the memory merely
    counts as unrecalled until its next hit.
    """
    path = state_dir / NAME
    with contextlib.suppress(OSError):
        if path.stat().st_size > MAX_BYTES:
            atomic_write(path, "".join(f"{i} {t}\n" for i, t in sorted(hits.items())).encode("ascii"), 0o600)
