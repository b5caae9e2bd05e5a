"""Forensic export and replay against a home: selecting entries, proving them, rebuilding elsewhere.

The bundle exporter signs a fresh checkpoint with the home's writer, finds
in the log itself (eventlog.touching: the segment bytes, judged by the
verifier's own `memview.entry_touched_ids`) every entry below it that touches the
memory (and, with the chain, every memory of its atomisation chain, to a
fixpoint of `memview.chain_closure`), proves each against the checkpoint and
hands it all to the pure `bundle.build_bundle`. Nothing is taken from the
projection: a row deleted from or added to its tables cannot change what a
bundle holds. Views come from the entries too, so the verifier recomputes
them.

`log export` writes the container of `eventlog.logexport`; `replay`
verifies such an export completely in memory and only then builds the new
home in a temporary directory beside it, renamed into place at the end, so
a failed verification leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemolog.eventlog.bundle import build as bundle_build
from mnemolog.eventlog.bundle import format as bundle_format
from mnemolog.eventlog.bundle import logexport, memview, touching
from mnemolog.eventlog.bundle import verifier as bundle
from mnemolog.eventlog.errors import BadInput, MnemologError, NotFound, SignerError, StorageError, UsageError
from mnemolog.eventlog.format import codec, merkle, sealing
from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.format.heads import HeadsMap
from mnemolog.eventlog.format.keys import load_private_key, write_private_key, write_public_key
from mnemolog.eventlog.format.note import Checkpoint, peek_checkpoint
from mnemolog.eventlog.progress import Progress
from mnemolog.eventlog.store.checkpoints import write_high_water
from mnemolog.eventlog.store.fsio import (
    FileTooLarge,
    NotRegularFile,
    atomic_write,
    check_replaceable,
    fsync_dir,
    pid_alive,
    read_regular,
)
from mnemolog.eventlog.store.index import IndexWriter
from mnemolog.eventlog.store.log import CHECKPOINT_DIR, Log, checkpoint_name, segment_file
from mnemolog.eventlog.verify.trust import TRUST_GENESIS, TrustPolicy
from mnemolog.projections.engine import Projections
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.erasure.datakeys import DataKeys
from mnemolog.substrate.events.forensics import HeadsCommitted
from mnemolog.substrate.home import Home, default_config_text
from mnemolog.substrate.witness import service as witnessing

MAX_CHAIN = 10_000  # memories in one atomisation chain; far beyond any real one
MAX_EXPORT_BYTES = 64 * 1024**3
KEYS_SUFFIX = ".keys"


@dataclass(frozen=True)
class ExportedBundle:
    data: bytes
    memory_id: str
    memories: list[str]
    unstored: list[str]
    seqs: list[int]
    key_seqs: list[int]
    tree_size: int
    root: bytes

    def summary(self) -> dict[str, Any]:
        return {
            "memory_id": self.memory_id,
            "memories": self.memories,
            "unstored": self.unstored,
            "entries": len(self.seqs),
            "seqs": self.seqs,
            "key_seqs": self.key_seqs,
            "tree_size": self.tree_size,
            "root": self.root.hex(),
            "bytes": len(self.data),
        }


@dataclass(frozen=True)
class Selection:
    """What a bundle holds: the memories (the target and its chain) and every entry touching them."""

    memory_ids: set[str]
    entries: list[Entry]


def _touched(e: Entry) -> list[str]:
    # The verifier's own rule (bundle_checks uses the same call), never a projection table.
    return memview.entry_touched_ids(e)


def select(log: Log, memory_id: str, include_chain: bool, below: int) -> Selection:
    """The memories and the entries below `below` touching any of them, chain followed to a fixpoint.

    Entries are found in the log itself (`eventlog.touching`), so a projection
    that lost or gained rows cannot change what a bundle holds.
    """
    ids = {memory_id}
    found: dict[int, Entry] = {}
    searched: set[str] = set()
    while True:
        found.update(touching.entries_touching(log, ids - searched, below, _touched))
        searched |= ids
        entries = [found[s] for s in sorted(found)]
        if not include_chain:
            return Selection(ids, entries)
        closure = memview.chain_closure(memory_id, entries)
        if closure <= ids:
            return Selection(ids, entries)
        ids |= closure
        if len(ids) > MAX_CHAIN:
            raise UsageError(f"the atomisation chain of {memory_id} has more than {MAX_CHAIN} memories")


HEADS_CACHE = "heads-cache.cbor"  # in projections/: derived, checked against the log before use


@dataclass(frozen=True)
class CurrentHeads:
    """Every memory's newest touching entry among the first `size` entries of the log."""

    size: int
    heads: dict[str, int]


def _load_heads_cache(path: Path, log: Log) -> CurrentHeads:
    """The cached heads, if they hash to the root a heads.committed entry of this log commits to."""
    try:
        doc = codec.decode(read_regular(path, 1 << 30), str(path))
        size, seq, heads = doc["size"], doc["heads_seq"], doc["heads"]
        e = log.entry(seq)
        ok = (
            e.type == bundle_format.HEADS_TYPE
            and e.data.get("size") == size
            and isinstance(heads, dict)
            and all(isinstance(k, str) and isinstance(v, int) for k, v in heads.items())
            and HeadsMap(heads).root == e.data.get("root")
        )
    except (OSError, MnemologError, KeyError, TypeError, ValueError):
        ok = False
    return CurrentHeads(size, heads) if ok else CurrentHeads(0, {})


def current_heads(log: Log, cache: Path, size: int) -> CurrentHeads:
    """The heads among the first `size` entries, folded from the log (a verified cache, then the rest)."""
    base = _load_heads_cache(cache, log)
    if base.size > size:
        base = CurrentHeads(0, {})
    heads = dict(base.heads)
    for e in log.iter_entries(base.size, size):
        for m in _touched(e):
            heads[m] = e.seq
    return CurrentHeads(size, heads)


def commit_heads(sub: Substrate) -> tuple[Entry, HeadsMap]:
    """A heads.committed entry for the log as it is (appended unless the log already ends in one)."""
    log = sub.log
    log.refresh()
    cache = sub.home.projections_dir / HEADS_CACHE
    last = log.entry(log.size - 1)
    if last.type == bundle_format.HEADS_TYPE and last.data.get("size") == last.seq:
        # Nothing happened since the last commitment: exporting again gives the same bundle.
        cur = current_heads(log, cache, last.seq)
        hm = HeadsMap(cur.heads)
        if hm.root == last.data.get("root"):
            return last, hm
    cur = current_heads(log, cache, log.size)
    hm = HeadsMap(cur.heads)
    with sub.session() as s:
        r = s.append(HeadsCommitted(size=cur.size, root=hm.root, count=len(cur.heads)))
    with contextlib.suppress(OSError):
        atomic_write(cache, codec.encode({"size": cur.size, "heads_seq": r.seq, "heads": cur.heads}))
    log.refresh()
    return log.entry(r.seq), hm


def export_bundle(sub: Substrate, memory_id: str, include_chain: bool = True) -> ExportedBundle:
    """Build the forensic bundle of `memory_id` against a freshly signed checkpoint.

    First a heads.committed entry commits to every memory's newest entry as
    the log stands (folded from the log itself), then the checkpoint covers
    it; the bundle carries the proofs of its memories' heads (format v2).
    """
    heads_entry, hm = commit_heads(sub)
    cp, cp_raw = sub.writer.checkpoint()
    log = sub.log
    log.refresh()
    sel = select(log, memory_id, include_chain, cp.size)
    ids, entries = sel.memory_ids, sel.entries
    if memory_id not in memview.stored_ids(entries):
        raise NotFound(f"no memory with id {memory_id!r} in the log", id=memory_id)
    # A bundle carries what the witnesses said about its checkpoint (each asked once, bounded by
    # its timeout; one that is down is simply absent, and verify-bundle --witness-key will say so).
    witnessing.publish_checkpoint(sub.home.root, sub.home.log_dir, sub.home.keys_dir, cp.size)
    cp_raw = log.checkpoint_bytes(cp.size)
    signer = sub.writer.key
    epochs = log.key_history(cp.size)
    if log.key_at(cp.size).kid != signer.kid:
        raise SignerError("the writer's key is not the key valid at the checkpoint it signed")
    key_entries = [log.entry(ep.event_seq) for ep in epochs]
    stored = memview.stored_ids(entries)
    with_views = sorted(i for i in ids if i in stored)
    unstored = sorted(ids - stored)
    proofs = {e.seq: log.inclusion_proof(e.seq, cp.size) for e in [*key_entries, *entries]}
    data = bundle.build_bundle(
        bundle.BundleInput(
            memory_id=memory_id,
            include_chain=include_chain,
            memory_ids=with_views,
            unstored=unstored,
            key_entries=key_entries,
            entries=entries,
            checkpoint=cp_raw,
            proofs=proofs,
            heads=bundle_build.HeadsEvidence(
                heads_entry,
                log.inclusion_proof(heads_entry.seq, cp.size),
                [hm.prove(m) for m in sorted(ids)],
            ),
            data_keys=_bundle_keys(sub, entries),
        ),
        signer,
    )
    return ExportedBundle(
        data,
        memory_id,
        with_views,
        unstored,
        [e.seq for e in entries],
        [e.seq for e in key_entries],
        cp.size,
        cp.root,
    )


def _bundle_keys(sub: Substrate, entries: list[Entry]) -> dict[str, bytes]:
    """The data keys of the sealed content among `entries` that was not forgotten."""
    out: dict[str, bytes] = {}
    for e in entries:
        for kid in sealing.key_ids(e.type, e.data):
            k = sub.keys.get(kid)
            if k is not None:
                out[kid] = k
    return out


def write_output(path: Path, data: bytes) -> None:
    try:
        atomic_write(path, data)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc}", file=str(path)) from exc


# -- whole-log export ---------------------------------------------------------


@dataclass(frozen=True)
class LogExportReport:
    path: str
    start: int
    last: int
    tree_size: int
    root: str
    bytes: int
    keys: str | None  # the data-key file written beside the export (None: --no-keys)
    data_keys: int


def keys_path(export: Path) -> Path:
    """Where the data keys of an export travel: beside it, as `<export>.keys`."""
    return export.with_name(export.name + KEYS_SUFFIX)


def export_log(
    home: Home,
    start: int,
    last: int | None,
    out: Path,
    progress: bool | None = None,
    *,
    with_keys: bool = True,
) -> LogExportReport:
    """Write entries start..last (inclusive; default: all) with a fresh checkpoint to `out`.

    With `with_keys`, the data keys of everything not forgotten go beside it
    (`keys_path(out)`, mode 0600), so `replay` rebuilds every memory; the
    home's private key never goes.
    """
    # Before any work: the rename at the end would turn a FIFO or a device into a file.
    check_replaceable(out)
    if with_keys:
        check_replaceable(keys_path(out))
    with home.open_writer(checkpoint_on_close=False) as w:
        cp, cp_raw = w.checkpoint()
    with Log(home.log_dir) as log:
        log.refresh()
        stop = cp.size - 1 if last is None else last
        if start > stop:
            raise UsageError(f"--from {start} is after --to {stop}")
        if stop >= cp.size:
            raise NotFound(f"the log has {cp.size} entries; there is no entry {stop}", seq=stop)
        key_entries = [log.entry(ep.event_seq) for ep in log.key_history(cp.size)]
        header = logexport.encode_header(
            log_id=log.log_id,
            start=start,
            count=stop - start + 1,
            checkpoint=cp,
            checkpoint_raw=cp_raw,
            key_entries=key_entries,
            key_proofs={e.seq: log.inclusion_proof(e.seq, cp.size) for e in key_entries},
            proof=logexport.range_proof(start, stop + 1, cp.size, log.index.subtree),
        )
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        prog = Progress("exporting log", stop - start + 1, enabled=progress)
        try:
            with open(tmp, "wb") as f:
                n = logexport.write_export(f, header, _raw_entries(log, start, stop + 1, prog))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, out)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise StorageError(f"cannot write {out}: {exc}", file=str(out)) from exc
        finally:
            prog.close()
        written: str | None = None
        count = 0
        if with_keys:
            keys = DataKeys(home.root).all()
            count = len(keys)
            try:
                atomic_write(keys_path(out), sealing.encode_keys(keys, log.log_id), mode=0o600)
            except OSError as exc:
                raise StorageError(f"cannot write {keys_path(out)}: {exc}", file=str(keys_path(out))) from exc
            written = str(keys_path(out))
    return LogExportReport(str(out), start, stop, cp.size, cp.root.hex(), n, written, count)


def _raw_entries(log: Log, start: int, stop: int, prog: Progress) -> Iterator[bytes]:
    for e in log.iter_entries(start, stop):
        yield e.raw
        prog.advance()


# -- replay -------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayReport:
    home: str
    entries: int
    tree_size: int
    checkpoint: int | None
    signing_key: bool
    replayed: int
    export: dict[str, Any]
    data_keys: int  # keys taken in from beside the export
    sealed: int  # sealed fields the replay could not open (no key for them)


def read_export(path: Path) -> bytes:
    try:
        return read_regular(path, MAX_EXPORT_BYTES)
    except FileTooLarge as exc:
        raise BadInput(f"{path} is {exc.strerror}: more than an export may be", file=str(path)) from exc
    except NotRegularFile as exc:
        raise BadInput(f"{path} is {exc.strerror}: an export is a file", file=str(path)) from exc
    except FileNotFoundError as exc:
        raise NotFound(f"no export at {path}", file=str(path)) from exc
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}", file=str(path)) from exc


def _remove_abandoned(parent: Path, prefix: str) -> None:
    """Build directories of replays that were killed (their pid, in the name, is gone)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        if not name.startswith(prefix):
            continue
        pid = name[len(prefix) :].split("-", 1)[0]
        path = parent / name
        if pid.isdigit() and pid_alive(int(pid)):
            continue  # a replay in progress
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)


def replay(
    export_path: Path,
    new_home: Path,
    *,
    policy: TrustPolicy = TRUST_GENESIS,
    signing_key: Path | None = None,
    progress: bool | None = None,
    keys: Path | None = None,
) -> ReplayReport:
    """Verify an export that starts at seq 0 and rebuild a home from it at `new_home`.

    The data keys come from `keys`, else from `<export>.keys` when it is
    there; without them the home is rebuilt with its sealed content unread
    (`sealed` counts the fields), which the report says.
    """
    if new_home.exists() and (not new_home.is_dir() or any(new_home.iterdir())):
        raise StorageError(
            f"{new_home} exists and is not empty; replay builds a new home", file=str(new_home)
        )
    ex = logexport.verify_export(read_export(export_path), policy=policy, progress=progress)
    if ex.start != 0:
        raise UsageError(
            f"the export starts at seq {ex.start}; replay rebuilds a home from genesis and needs an "
            "export that starts at 0 (`mnemolog log export --from 0`)"
        )
    if ex.count != ex.tree_size and signing_key is None:
        raise UsageError(
            f"the export holds entries 0..{ex.count - 1} of a log of {ex.tree_size}: its checkpoint "
            "covers more than the new home would hold, so the home would have no checkpoint of its "
            "own and `log verify` would reject it; give --signing-key to sign one, or export the "
            "whole log"
        )
    data_keys = _read_data_keys(
        keys if keys is not None else keys_path(export_path), ex.log_id, keys is not None
    )
    key = None
    if signing_key is not None:
        key = load_private_key(signing_key)
        current = ex.keys.key_at(ex.count)
        if key.kid != current.kid:
            raise SignerError(
                f"{signing_key} is not the key that signs the log's next entry",
                expected=current.kid.hex(),
                found=key.kid.hex(),
            )
    parent = new_home.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{new_home.name}.replay-"
    _remove_abandoned(parent, prefix)
    tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))
    try:
        built = Home(tmp)
        checkpoint = _build_home(built, ex, key, progress)
        store = DataKeys(built.root)
        if data_keys:
            store.add(data_keys)
        with Log(built.log_dir) as log:
            projections = Projections(built.projections_dir, log, store.upcast, progress=progress)
            try:
                replayed = projections.rebuild()
            finally:
                projections.close()
        # Only a fully built home is moved into place; until then new_home is untouched.
        if new_home.exists():
            new_home.rmdir()
        os.replace(tmp, new_home)
        fsync_dir(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if key is not None:
        # The private key is copied only into the finished home: a replay killed
        # while building leaves no copy of it in a temporary directory.
        try:
            write_private_key(Home(new_home).signing_key_path, key)
        except OSError as exc:
            raise StorageError(
                f"the home {new_home} was built but its signing key could not be written "
                f"({exc.strerror}); copy {signing_key} to {Home(new_home).signing_key_path} (mode 0600)",
                file=str(Home(new_home).signing_key_path),
            ) from exc
    return ReplayReport(
        str(new_home),
        ex.count,
        ex.tree_size,
        checkpoint,
        key is not None,
        replayed,
        ex.summary(),
        len(data_keys),
        store.closed,
    )


def _read_data_keys(path: Path, log_id: bytes, required: bool) -> dict[str, bytes]:
    """The data keys of a data-key file ({} when an optional one is absent); refused when not this log's."""
    try:
        raw = read_regular(path, sealing.MAX_KEYS_FILE)
    except FileNotFoundError as exc:
        if not required:
            return {}
        raise NotFound(f"no data keys at {path}", file=str(path)) from exc
    except (FileTooLarge, NotRegularFile) as exc:
        raise BadInput(f"{path} is {exc.strerror}: not a data-key file", file=str(path)) from exc
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}", file=str(path)) from exc
    head, keys = sealing.decode_keys(raw, str(path))
    found = head.get("log_id")
    if found is not None and found != log_id:
        raise BadInput(
            f"{path} holds the data keys of another log",
            file=str(path),
            expected=log_id.hex(),
            found=found.hex() if isinstance(found, bytes) else repr(found),
        )
    return keys


def _build_home(home: Home, ex: logexport.VerifiedExport, key: Any, progress: bool | None) -> int | None:
    log_dir = home.log_dir
    (log_dir / CHECKPOINT_DIR).mkdir(parents=True)
    home.keys_dir.mkdir(mode=0o700)
    home.projections_dir.mkdir()
    seg = log_dir / segment_file(0)
    records = []
    offset = 0
    with open(seg, "wb") as f:
        for e in ex.entries:
            f.write(e.raw)
            records.append((0, offset, len(e.raw), e.leaf, e.type in ("log.created", "key.rotated")))
            offset += len(e.raw)
        f.flush()
        os.fsync(f.fileno())
    idx = IndexWriter(log_dir)
    try:
        idx.reset_to(0)
        for i in range(0, len(records), 65536):
            idx.append(records[i : i + 65536])
    finally:
        idx.close()
    checkpoint: int | None = None
    if ex.count == ex.tree_size:
        # The export's checkpoint is a valid signed statement about exactly this log.
        atomic_write(log_dir / CHECKPOINT_DIR / checkpoint_name(ex.tree_size), ex.checkpoint)
        checkpoint = peek_checkpoint(ex.checkpoint).size
    for ep in ex.keys.epochs:
        if ep.event_seq < ex.count:
            write_public_key(home.keys_dir / f"{ep.key.kid.hex()}.pub", ep.key)
    current = ex.keys.key_at(ex.count)
    atomic_write(home.config_path, default_config_text(current.name, ex.log_id).encode())
    if checkpoint is not None:
        write_high_water(home.high_water_path, ex.checkpoint, checkpoint)
    if key is not None and checkpoint is None:
        # A shorter log than the export's checkpoint: sign one for what was replayed
        # (every entry was verified on the way in, and the key is the one that signs next).
        # The private key itself is copied only into the finished home (see replay).
        root = merkle.root_of([e.leaf for e in ex.entries])
        raw = Checkpoint(ex.keys.origin, ex.count, root).sign(key)
        atomic_write(log_dir / CHECKPOINT_DIR / checkpoint_name(ex.count), raw)
        write_high_water(home.high_water_path, raw, ex.count)
        checkpoint = ex.count
    return checkpoint
