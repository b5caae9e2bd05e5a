"""Checkpoint files of a log, the high-water mark kept outside it, and when writers publish one.

- `log/checkpoints/<20 digits>`: one signed checkpoint note per tree size the
  log's writers signed. Names are sizes; dot files are atomic-write temps.
- The **high-water mark**: a copy of the newest checkpoint a home signed,
  kept outside `log/` (the home's `state/` directory and, optionally, a path
  the operator chooses outside the home). Someone who rolls `log/` back —
  deleting the last segment with its checkpoints, or every checkpoint —
  leaves the high-water mark ahead of the log, and both the writer and
  `log verify` notice. It only ever moves forward (`write_high_water`).
- `CheckpointPolicy`: how often a long-lived writer publishes a checkpoint
  (at most `max_entries` entries or `max_seconds` after the last append
  without one), so that cutting acknowledged entries off behind it is caught
  within that window.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from mnemolog.eventlog.errors import DecodeError, StorageError
from mnemolog.eventlog.format.note import MAX_NOTE_BYTES, Checkpoint, peek_checkpoint
from mnemolog.eventlog.store.fsio import NotRegularFile, open_regular

CHECKPOINT_DIR = "checkpoints"
DEFAULT_CHECKPOINT_ENTRIES = 1000
DEFAULT_CHECKPOINT_SECONDS = 5.0


def checkpoint_name(size: int) -> str:
    return f"{size:020d}"


def is_checkpoint_name(name: str) -> bool:
    return len(name) == 20 and name.isdigit()


class CheckpointNames(NamedTuple):
    sizes: list[int]  # sorted tree sizes named by the files
    unexpected: list[str]  # other names, temp (dot) files aside


def list_checkpoints(log_dir: Path) -> CheckpointNames:
    try:
        names = os.listdir(log_dir / CHECKPOINT_DIR)
    except FileNotFoundError:
        return CheckpointNames([], [])
    sizes: list[int] = []
    unexpected: list[str] = []
    for name in names:
        if is_checkpoint_name(name):
            sizes.append(int(name))
        elif not name.startswith("."):
            unexpected.append(name)
    sizes.sort()
    unexpected.sort()
    return CheckpointNames(sizes, unexpected)


def checkpoint_sizes(log_dir: Path) -> list[int]:
    return list_checkpoints(log_dir).sizes


@dataclass(frozen=True)
class CheckpointPolicy:
    """Publish a checkpoint once `max_entries` entries, or `max_seconds` after the last append, are
    not covered by one (whichever comes first); and at close."""

    max_entries: int = DEFAULT_CHECKPOINT_ENTRIES
    max_seconds: float = DEFAULT_CHECKPOINT_SECONDS

    def __post_init__(self) -> None:
        if self.max_entries < 1 or not self.max_seconds > 0:
            raise StorageError("periodic checkpoints need max_entries >= 1 and max_seconds > 0")


# -- the high-water mark -------------------------------------------------------------


class HighWaterMark(NamedTuple):
    """A checkpoint note kept outside the log, and where it was found (for reports)."""

    source: str
    note: bytes

    def body(self) -> Checkpoint:
        """The checkpoint body, signature unchecked (the verifier checks it with the right key)."""
        return peek_checkpoint(self.note, self.source)


def read_high_water(path: Path) -> HighWaterMark | None:
    """The high-water note at `path`, None when there is none; never blocks on a special file."""
    try:
        with open_regular(path) as f:
            data = f.read(MAX_NOTE_BYTES + 1)
    except FileNotFoundError:
        return None
    except NotRegularFile as exc:
        raise StorageError(f"the high-water mark {path} is not a regular file", file=str(path)) from exc
    except OSError as exc:
        raise StorageError(f"cannot read the high-water mark {path}: {exc}", file=str(path)) from exc
    return HighWaterMark(str(path), data)


def high_water_size(path: Path) -> int:
    """The tree size recorded at `path`; 0 when there is none or it does not parse."""
    try:
        hw = read_high_water(path)
        return hw.body().size if hw is not None else 0
    except (StorageError, DecodeError):
        return 0


def store_note(path: Path, note: bytes) -> None:
    """Replace `path` with `note`: all of it or none of it, its bytes synced before the rename.

    Unlike `fsio.atomic_write` the directory is not synced: a checkpoint or a
    high-water mark whose rename a power failure loses leaves the previous
    one in place, which is still true (the log only grows), and a long-lived
    writer publishes one every thousand entries, where the extra sync would
    cost as much as the appends' own.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(note)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_high_water(path: Path, note: bytes, size: int, *, allow_backwards: bool = False) -> bool:
    """Record `note` (a checkpoint of `size`) at `path` unless it already records a larger size.

    Returns whether it wrote. The caller serialises writers (the checkpoint
    lock); `allow_backwards` is for an accepted rollback only.
    """
    if not allow_backwards and high_water_size(path) >= size:
        return False
    store_note(path, note)
    return True
