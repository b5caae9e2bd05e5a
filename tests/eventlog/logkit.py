"""Helpers shared by the eventlog tests: deterministic clocks and keys, small logs, file hashes."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.store.writer import Durability, LogWriter

T0 = 1_700_000_000_000_000  # microseconds: 2023-11-14T22:13:20Z


class StepClock:
    """A clock that advances one microsecond per reading: reproducible timestamps."""

    def __init__(self, start: int = T0) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1
        return self.now


def seeded_key(name: str = "test-key", seed_byte: int = 7) -> SigningKey:
    return SigningKey(bytes([seed_byte]) * 32, name)


def make_log(
    log_dir: Path,
    entries: int = 5,
    *,
    key: SigningKey | None = None,
    rotate_to: SigningKey | None = None,
    rotate_after: int = 2,
    segment_bytes: int | None = None,
    checkpoint_every: int = 0,
    payload: Callable[[int], dict[str, Any]] | None = None,
    durability: Durability | None = None,
    log_id: bytes = b"\x11" * 16,
) -> list[SigningKey]:
    """A log with genesis + `entries` note entries (optionally a rotation); closed with a checkpoint."""
    key = key or seeded_key()
    clock = StepClock()
    LogWriter.create(log_dir, key, clock=clock, log_id=log_id)
    kw: dict[str, Any] = {"clock": clock, "durability": durability or Durability("fsync")}
    if segment_bytes is not None:
        kw["segment_bytes"] = segment_bytes
    keys = [key]
    with LogWriter(log_dir, [key], **kw) as w:
        for i in range(entries):
            if rotate_to is not None and i == rotate_after:
                w.rotate_key(rotate_to)
                keys.append(rotate_to)
            data = payload(i) if payload else {"n": i, "text": f"entry {i}"}
            if w.durability.mode == "group":
                w.submit("note.added", data)  # results are awaited by flush/checkpoint/close
            else:
                w.append("note.added", data)
            if checkpoint_every and (i + 1) % checkpoint_every == 0:
                w.checkpoint()
    return keys


def log_files(log_dir: Path) -> list[Path]:
    """The committed files of a log: segments and checkpoints (not the derived index)."""
    segs = sorted(p for p in log_dir.iterdir() if p.suffix == ".seg")
    cps = sorted(p for p in (log_dir / "checkpoints").iterdir() if not p.name.startswith("."))
    return segs + cps


def tree_hashes(root: Path, *, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every regular file under `root` (relative path -> hex), lock files aside."""
    out: dict[str, str] = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            if name in (".lock", ".lock.wait"):
                continue
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if any(rel.startswith(s) for s in skip):
                continue
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out
