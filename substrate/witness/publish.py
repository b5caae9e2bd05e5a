"""`log publish`: the log as C2SP tlog-tiles in a directory, for any static file server or object store.

What is published is the tree of the log's newest signed checkpoint: that
checkpoint note (with whatever witness cosignatures it carries) at
`checkpoint`, every hash tile and entry bundle of its tree, and entries too
large for a bundle at `large-entry/<N>` (eventlog.tiles). Publishing is
incremental: a full tile or bundle already present is never rewritten (its
content is fixed by the tree), a partial one is written under its new width,
and the checkpoint is replaced last, atomically, after every file it needs is
durable, so a reader never sees a checkpoint whose tiles are missing.
Partial tiles of older checkpoints are kept (a reader may be following one).

Reading needs neither the private key nor the writer lock. Before writing,
the directory's current checkpoint must be this log's and a prefix of its
tree: publishing over another log's or a forked publication is refused.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from mnemolog.eventlog.errors import DecodeError, StorageError, VerificationError
from mnemolog.eventlog.format.note import MAX_NOTE_BYTES, peek_checkpoint
from mnemolog.eventlog.store.fsio import atomic_write, read_regular
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.witness import tiles


@dataclass
class PublishReport:
    dir: str
    origin: str
    size: int
    root: str
    files_written: int = 0
    files_kept: int = 0
    bytes_written: int = 0
    large_entries: int = 0
    previous_size: int | None = None

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def _check_previous(log: Log, out: Path, origin: str, size: int) -> int | None:
    path = out / tiles.CHECKPOINT_PATH
    try:
        raw = read_regular(path, MAX_NOTE_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}", file=str(path)) from exc
    try:
        prev = peek_checkpoint(raw, str(path))
    except DecodeError as exc:
        raise VerificationError(
            f"{path} is not a checkpoint ({exc.message}); refusing to publish over it",
            check="publish.previous",
            file=str(path),
        ) from exc
    if prev.origin != origin:
        raise VerificationError(
            f"{out} holds the publication of another log ({prev.origin}), not {origin}",
            check="publish.origin",
            expected=origin,
            found=prev.origin,
        )
    if prev.size > size:
        raise VerificationError(
            f"{out} already publishes size {prev.size}, more than this log's newest checkpoint "
            f"({size}): the log was rolled back, or another copy of it went further",
            check="publish.rollback",
            expected=prev.size,
            found=size,
        )
    if prev.size and log.root(prev.size) != prev.root:
        raise VerificationError(
            f"{out} publishes size {prev.size} with root {prev.root.hex()}, but this log's root at "
            f"that size is {log.root(prev.size).hex()}: a forked copy of the log published there",
            check="publish.fork",
            size=prev.size,
            expected=log.root(prev.size).hex(),
            found=prev.root.hex(),
        )
    return prev.size


def _present(path: Path, length: int | None) -> bool:
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    return length is None or st.st_size == length


def publish(log_dir: Path, out: Path) -> PublishReport:
    """Publish the tree of the newest checkpoint of the log at `log_dir` into `out`."""
    with Log(log_dir) as log:
        cp, note = log.latest_checkpoint()
        size = cp.size
        if log.root(size) != cp.root:
            raise VerificationError(
                f"the log's root at size {size} is not its checkpoint's (run `mnemolog log verify`)",
                check="publish.root",
                size=size,
            )
        out.mkdir(parents=True, exist_ok=True)
        report = PublishReport(str(out), cp.origin, size, cp.root.hex())
        report.previous_size = _check_previous(log, out, cp.origin, size)

        def put(rel: str, data: bytes) -> None:
            atomic_write(out / rel, data)
            report.files_written += 1
            report.bytes_written += len(data)

        for level in range(tiles.levels(size)):
            span = 1 << (tiles.TILE_HEIGHT * level)
            for index, width in tiles.tile_widths(size, level):
                rel = tiles.tile_path(level, index, width)
                if _present(out / rel, width * 32):
                    report.files_kept += 1
                    continue
                start = index * tiles.TILE_WIDTH * span
                if level == 0:
                    hashes = [log.leaf(s) for s in range(start, start + width)]
                else:
                    hashes = [log.subtree(a, a + span) for a in range(start, start + width * span, span)]
                put(rel, b"".join(hashes))
        for index, width in tiles.tile_widths(size, 0):
            rel = tiles.entries_path(index, width)
            if _present(out / rel, None):
                report.files_kept += 1
                continue
            start = index * tiles.TILE_WIDTH
            raws = [log.raw(s) for s in range(start, start + width)]
            for seq, raw in enumerate(raws, start):
                if len(raw) > tiles.MAX_BUNDLE_ENTRY:
                    report.large_entries += 1
                    big = tiles.large_entry_path(seq)
                    if not _present(out / big, len(raw)):
                        put(big, raw)
            put(rel, tiles.encode_bundle(raws))
    # Last: every tile and bundle the checkpoint needs is durable (atomic_write syncs each).
    cp_path = out / tiles.CHECKPOINT_PATH
    try:
        same = cp_path.is_file() and read_regular(cp_path, MAX_NOTE_BYTES) == note
    except OSError:
        same = False
    if not same:
        put(tiles.CHECKPOINT_PATH, note)
    else:
        report.files_kept += 1
    return report
