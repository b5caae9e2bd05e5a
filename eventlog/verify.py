"""Whole-log verification: every byte of every segment and checkpoint, nothing trusted.

What is checked (DESIGN §2): segment names; each entry's shape, canonical
CBOR, contiguous seq and prev chain; its key id and Ed25519 signature against
the key history that starts at the genesis key; the Merkle root at every
stored checkpoint, whose signature is checked with the key valid at its size;
and that no checkpoint covers more entries than the log holds. `hashes_only`
skips the per-entry canonical and signature work: integrity in one pass of
SHA-256 against the signed checkpoints.

Two strategies give the same verdict:

- The hinted pass. The sidecar index (`log/index/loc`, `keys`) is read only
  as an untrusted *hint* of where entries start and where the key changes.
  Worker processes decode and check disjoint chunks (exactly the hinted
  slices: seq, prev links inside the chunk, shape, canonical bytes,
  signatures against the hinted key schedule) and return the chunk's leaf
  hashes, its first prev and the key events they saw; this process folds the
  leaves into the Merkle compact range, checks the links between chunks, the
  observed key events against the hint, and the checkpoints. CBOR items are
  self-delimiting, so hinted slices that each decode to exactly one item and
  tile a segment are the segment's only split into items: when every check
  passes, the hint was right and the log is verified. Whatever the index
  covers is checked this way; the rest of the log by the sequential pass.
- The sequential pass. One streaming pass in this process, with signature
  chunks fanned out to workers. It runs whenever the hint is missing, or
  disagrees with the bytes, or anything at all fails in the hinted pass: so a
  failure is always reported by this pass (the first one, by lowest seq) and
  correctness never depends on the index.

Returns a report or raises the first failure as a VerificationError; it never
returns "false".
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cbor2

from mnemolog.eventlog import codec, merkle
from mnemolog.eventlog.entry import (
    FORMAT_VERSION,
    HASH_LEN,
    KID_LEN,
    SIG_LEN,
    ZERO_HASH,
    check_type_name,
    entry_from_map,
    tbs_from_raw,
)
from mnemolog.eventlog.errors import DecodeError, MnemologError, VerificationError
from mnemolog.eventlog.fsio import open_regular, read_regular
from mnemolog.eventlog.index import KEYREC, LOC
from mnemolog.eventlog.keys import VerifierKey, verify_signature
from mnemolog.eventlog.log import (
    CHECKPOINT_DIR,
    GENESIS_TYPE,
    ROTATION_TYPE,
    checkpoint_name,
    genesis_key,
    key_from_data,
    rotation_key,
)
from mnemolog.eventlog.note import MAX_NOTE_BYTES, open_checkpoint, origin_for
from mnemolog.eventlog.progress import Progress
from mnemolog.eventlog.segments import MAX_ENTRY_BYTES, is_entry_prefix, list_segments

CHUNK_ENTRIES = 2048  # entries per worker task in the hinted pass
SEQ_CHUNK_ENTRIES = 2048  # entries per signature task in the sequential pass
PARALLEL_MIN_ENTRIES = 12_000  # below this, workers cost more to start than they save
SERIAL_BELOW = 4096  # (kept for callers) logs smaller than ~this many entries stay in-process
ENTRY_KEY_ORDER = ("v", "ts", "tv", "kid", "seq", "sig", "data", "prev", "type")
UINT_MAX = codec.UINT_MAX
#: The index files are hints read whole: a billion entries' locations at most.
MAX_HINT_BYTES = 1 << 35


@dataclass
class VerifyReport:
    entries: int = 0
    segments: int = 0
    checkpoints: int = 0
    keys: int = 0
    root: str = ""
    hashes_only: bool = False
    processes: int = 1
    seconds: float = 0.0
    latest_checkpoint: int = 0
    torn_tail: dict[str, Any] | None = None
    checks: list[str] = field(default_factory=list)
    # How the index served as a hint: "used" (it covered `hinted` entries),
    # "absent", "disagreed" (the sequential pass ran instead) or "not_tried".
    index_hint: str = "not_tried"
    hinted: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "segments": self.segments,
            "checkpoints": self.checkpoints,
            "keys": self.keys,
            "root": self.root,
            "latest_checkpoint": self.latest_checkpoint,
            "hashes_only": self.hashes_only,
            "processes": self.processes,
            "seconds": round(self.seconds, 3),
            "torn_tail": self.torn_tail,
            "checks": self.checks,
            "index_hint": self.index_hint,
        }


# -- per-entry checks ------------------------------------------------------------


def check_entry_bytes(raw: bytes, value: Any, seq: int, public_key: bytes) -> None:
    """Canonical encoding and signature of one entry; raises VerificationError."""
    try:
        e = entry_from_map(value, raw, f"entry {seq}")
        canonical = codec.is_canonical(value, raw, f"entry {seq}")
    except DecodeError as exc:
        raise VerificationError(f"entry {seq}: {exc.message}", check="entry.decode", seq=seq) from exc
    # Re-encoding also rejects duplicate keys, non-shortest forms and key order.
    if not canonical:
        raise VerificationError(
            f"entry {seq}: bytes are not the canonical CBOR encoding of the entry",
            check="entry.canonical",
            seq=seq,
        )
    if not verify_signature(public_key, tbs_from_raw(raw, e.seq, e.ts, e.tv), e.sig):
        raise VerificationError(
            f"entry {seq}: the signature does not verify with key {e.kid.hex()}",
            check="entry.signature",
            seq=seq,
            expected=public_key.hex(),
        )


def _verify_chunk(
    path: str, start: int, end: int, first_seq: int, schedule: list[tuple[int, bytes]]
) -> tuple[int, str, str, Any, Any] | None:
    """Sequential pass worker: canonical bytes and signatures of the entries in path[start:end]."""
    with open_regular(path) as f:
        buf = os.pread(f.fileno(), end - start, start)
    stream = io.BytesIO(buf)
    dec = cbor2.CBORDecoder(stream)
    seq = first_seq
    pos = 0
    si = 0
    while pos < len(buf):
        value = dec.decode()
        nxt = stream.tell()
        while si + 1 < len(schedule) and schedule[si + 1][0] <= seq:
            si += 1
        try:
            check_entry_bytes(buf[pos:nxt], value, seq, schedule[si][1])
        except VerificationError as exc:
            return (seq, exc.check, exc.message, exc.expected, exc.found)
        pos = nxt
        seq += 1
    return None


# -- the hinted pass: worker side ----------------------------------------------


class _Mismatch(Exception):
    """The hinted pass cannot vouch for the log: the sequential pass decides."""


# (first seq, public key, key id) of each key epoch
Schedule = list[tuple[int, bytes, bytes]]
# ("ok", leaves, first prev, key events [(seq, name, public key)], genesis log id) or ("no", seq, why)
ChunkResult = tuple[Any, ...]


def _check_chunk(
    path: str,
    locs: bytes,
    first_seq: int,
    seg_first: int,
    schedule: Schedule,
    hashes_only: bool,
) -> ChunkResult:
    """Hinted pass worker: decode and check the entries the hint places in one chunk.

    Everything a single entry (or a run of entries) can show is checked here;
    the links to neighbouring chunks, the key schedule and the Merkle tree are
    the caller's. Any doubt is answered ("no", seq, why), never trusted.
    """
    n = len(locs) // LOC.size
    if n == 0 or len(locs) != n * LOC.size:
        return ("no", first_seq, "empty or ragged location hint")
    first = LOC.unpack_from(locs, 0)
    last = LOC.unpack_from(locs, (n - 1) * LOC.size)
    start, end = first[1], last[1] + last[2]
    if end <= start or end - start > n * MAX_ENTRY_BYTES:
        return ("no", first_seq, "location hint out of order")
    try:
        with open_regular(path) as f:
            buf = os.pread(f.fileno(), end - start, start)
    except OSError as exc:
        return ("no", first_seq, f"cannot read {path}: {exc}")
    if len(buf) != end - start:
        return ("no", first_seq, "segment shorter than the hint")
    stream = io.BytesIO(buf)
    decode = cbor2.CBORDecoder(stream).decode
    tell = stream.tell
    sha256 = hashlib.sha256
    is_plain = codec.is_plain
    dumps = cbor2.dumps
    verify = verify_signature
    leaves = bytearray()
    events: list[tuple[int, str, bytes]] = []
    log_id: bytes | None = None
    si = 0
    while si + 1 < len(schedule) and schedule[si + 1][0] <= first_seq:
        si += 1
    next_epoch = schedule[si + 1][0] if si + 1 < len(schedule) else -1
    pk, kid = schedule[si][1], schedule[si][2]
    first_prev = b""
    prev: bytes | None = None
    seq = first_seq
    pos = 0
    for segf, off, length in LOC.iter_unpack(locs):
        if segf != seg_first or off != start + pos:
            return ("no", seq, "location hint is not contiguous")
        try:
            m = decode()
        except Exception:
            return ("no", seq, "undecodable bytes at a hinted boundary")
        nxt = tell()
        if nxt - pos != length:
            return ("no", seq, "hinted length differs from the item's")
        raw = buf[pos:nxt]
        pos = nxt
        if seq == next_epoch:
            si += 1
            next_epoch = schedule[si + 1][0] if si + 1 < len(schedule) else -1
            pk, kid = schedule[si][1], schedule[si][2]
        # Shape: exactly the v1 keys in canonical order, with their types.
        if type(m) is not dict or tuple(m) != ENTRY_KEY_ORDER:
            return ("no", seq, "entry keys")
        s, ts, tv, typ, data, pv, k, sig = (
            m["seq"],
            m["ts"],
            m["tv"],
            m["type"],
            m["data"],
            m["prev"],
            m["kid"],
            m["sig"],
        )
        if (
            m["v"] != FORMAT_VERSION
            or type(m["v"]) is not int
            or s != seq
            or type(s) is not int
            or type(ts) is not int
            or type(tv) is not int
            or not 0 <= ts <= UINT_MAX
            or not 0 <= tv <= UINT_MAX
            or type(typ) is not str
            or type(data) is not dict
            or type(pv) is not bytes
            or len(pv) != HASH_LEN
            or type(k) is not bytes
            or len(k) != KID_LEN
            or type(sig) is not bytes
            or len(sig) != SIG_LEN
        ):
            return ("no", seq, "entry fields")
        try:
            check_type_name(typ)
        except DecodeError:
            return ("no", seq, "entry type")
        if prev is None:
            first_prev = pv
        elif pv != prev:
            return ("no", seq, "prev chain")
        if not hashes_only:
            if k != kid:
                return ("no", seq, "key id")
            # The envelope's values are checked above; the payload's here. A
            # decoded map keeps its encoded key order, so when the payload is
            # plain, cbor2's default encoding must give back exactly `raw`.
            try:
                plain = is_plain(data)
            except DecodeError:
                return ("no", seq, "value model")
            if (dumps(m) if plain else dumps(m, canonical=True)) != raw:
                return ("no", seq, "canonical")
            if not verify(pk, tbs_from_raw(raw, seq, ts, tv), sig):
                return ("no", seq, "signature")
        if seq == 0:
            if typ != GENESIS_TYPE:
                return ("no", seq, "genesis type")
            lid = data.get("log_id")
            if type(lid) is not bytes or len(lid) != 16:
                return ("no", seq, "genesis log id")
            log_id = lid
        elif typ == GENESIS_TYPE:
            return ("no", seq, "genesis repeated")
        if seq == 0 or typ == ROTATION_TYPE:
            try:
                key = key_from_data(data, typ, seq)
            except DecodeError:
                return ("no", seq, "key event payload")
            events.append((seq, key.name, key.public_key))
        leaf = sha256(b"\x00" + raw).digest()
        leaves += leaf
        prev = leaf
        seq += 1
    return ("ok", bytes(leaves), first_prev, events, log_id)


def _check_chunk_safely(*args: Any) -> ChunkResult:
    try:
        return _check_chunk(*args)
    except Exception as exc:  # pragma: no cover - a bug here must not decide a verdict
        return ("no", -1, f"chunk check failed: {exc!r}")


# -- multiprocessing ---------------------------------------------------------------


def _thread_count() -> int:
    """Threads of this process, native ones included where the OS tells."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _main_is_importable() -> bool:
    """forkserver and spawn children re-import __main__: only a real file or module will do."""
    main = sys.modules.get("__main__")
    if main is None:
        return True
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None):
        return True
    path = getattr(main, "__file__", None)
    return path is None or os.path.isfile(path)


def make_pool(processes: int) -> ProcessPoolExecutor | None:
    """A worker pool started safely, or None when none can be (verify then runs in-process).

    fork only while this process has a single thread (forking a threaded
    process can copy a lock some other thread holds); else forkserver, when
    the children can re-import __main__ (not a script read from stdin).
    """
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and _thread_count() == 1:
        method = "fork"
    elif "forkserver" in methods and _main_is_importable():
        method = "forkserver"
    else:
        return None
    try:
        return ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context(method))
    except (OSError, ValueError, ImportError):
        return None


# -- the verifier ------------------------------------------------------------------


class _Verifier:
    def __init__(
        self,
        log_dir: Path,
        hashes_only: bool,
        processes: int,
        progress: bool | None,
        use_hint: bool = True,
        anchor: VerifierKey | None = None,
    ):
        self.dir = log_dir
        self.anchor = anchor
        self.hashes_only = hashes_only
        self.processes = processes
        self.use_hint = use_hint
        self.report = VerifyReport(hashes_only=hashes_only)
        self.cp_sizes: list[int] = []
        self.pool: ProcessPoolExecutor | None = None
        self.progress = Progress("verifying log", enabled=progress)
        self._reset()

    def _reset(self) -> None:
        self.cr = merkle.CompactRange()
        self.prev = ZERO_HASH
        self.seq = 0
        self.schedule: list[tuple[int, bytes]] = []  # (first seq, public key)
        self.epochs: list[tuple[int, VerifierKey]] = []
        self.kid = b""
        self.log_id: bytes | None = None
        self.cp_pos = 0
        self.pending: list[tuple[int, Future[Any], tuple[Any, ...]]] = []  # (first seq, future, args)
        self.report.torn_tail = None

    def fail(self, message: str, check: str, **where: Any) -> VerificationError:
        return VerificationError(message, check=check, **where)

    def key_for(self, size: int) -> VerifierKey:
        key = self.epochs[0][1]
        for first, k in self.epochs:
            if first <= size:
                key = k
        return key

    def run(self) -> VerifyReport:
        t0 = time.perf_counter()
        segs = list_segments(self.dir)
        if not segs:
            raise self.fail("the log has no segments", "segments.none", file=str(self.dir))
        self._read_checkpoint_names()
        parallel_used = False
        try:
            resume: tuple[int, int] | None = None
            if self.use_hint:
                try:
                    resume, parallel_used = self._hinted(segs)
                except _Mismatch:
                    self.report.index_hint = "disagreed"
                    self.report.hinted = 0
                    resume = None
            if resume is None:
                self._reset()
                if self.processes > 1 and not self.hashes_only and self._worth_pool(segs):
                    self.pool = self.pool or make_pool(self.processes)
                elif self.pool is not None:
                    self.pool.shutdown(cancel_futures=True)
                    self.pool = None
                parallel_used = self.pool is not None
                start_i, start_off = 0, 0
            else:
                start_i, start_off = resume
            for i in range(start_i, len(segs)):
                first, path = segs[i]
                self._segment(first, path, i == len(segs) - 1, start_off if i == start_i else 0)
            self._checkpoints_through(self.seq)
            if self.cp_pos < len(self.cp_sizes):
                size = self.cp_sizes[self.cp_pos]
                raise self.fail(
                    f"the log has {self.seq} entries but a checkpoint covers {size}: "
                    "entries are missing (truncated log)",
                    "log.truncated",
                    seq=self.seq,
                    file=f"{CHECKPOINT_DIR}/{checkpoint_name(size)}",
                    expected=size,
                    found=self.seq,
                )
            self._drain(None)
        except VerificationError as exc:
            # A worker may hold an earlier failure than the one found here.
            self._drain(exc.seq)
            raise
        finally:
            if self.pool is not None:
                self.pool.shutdown(cancel_futures=True)
            self.progress.close()
        if self.anchor is not None and all(k.public_key != self.anchor.public_key for _, k in self.epochs):
            raise self.fail(
                f"the log's key history does not contain the trusted key {self.anchor.vkey()}",
                "key.anchor",
                seq=0,
                expected=self.anchor.vkey(),
                found=[k.vkey() for _, k in self.epochs],
            )
        r = self.report
        r.entries = self.seq
        r.segments = len(segs)
        r.checkpoints = len(self.cp_sizes)
        r.keys = len(self.epochs)
        r.root = self.cr.root().hex()
        r.latest_checkpoint = self.cp_sizes[-1] if self.cp_sizes else 0
        r.processes = self.processes if parallel_used else 1
        r.seconds = time.perf_counter() - t0
        r.checks = (
            ["segments", "seq", "chain", "merkle_root", "checkpoint_signatures"]
            if self.hashes_only
            else [
                "segments",
                "canonical_cbor",
                "seq",
                "chain",
                "key_history",
                "entry_signatures",
                "merkle_root",
                "checkpoint_signatures",
                "checkpoint_consistency",
            ]
        )
        return r

    def _read_checkpoint_names(self) -> None:
        cp_dir = self.dir / CHECKPOINT_DIR
        try:
            names = sorted(os.listdir(cp_dir))
        except FileNotFoundError:
            names = []
        for name in names:
            if not (len(name) == 20 and name.isdigit()):
                if name.startswith("."):
                    continue  # an atomic-write temp file
                raise self.fail(
                    f"unexpected file {name} among checkpoints",
                    "checkpoint.name",
                    file=f"{CHECKPOINT_DIR}/{name}",
                )
            self.cp_sizes.append(int(name))
        self.cp_sizes.sort()

    def _worth_pool(self, segs: list[tuple[int, Path]]) -> bool:
        total = 0
        for _, p in segs:
            with contextlib.suppress(OSError):
                total += p.stat().st_size
        return total >= SERIAL_BELOW * 200

    # -- the hinted pass ---------------------------------------------------------

    def _read_hint(self) -> tuple[bytes, list[int]] | None:
        idx = self.dir / "index"
        try:
            # loc first: the writer appends a key event's record to `keys` before
            # the entry's location, so every hinted entry's key event is listed.
            locs = read_regular(idx / "loc", MAX_HINT_BYTES)
            keys_raw = read_regular(idx / "keys", MAX_HINT_BYTES)
        except OSError:
            return None
        n = len(locs) // LOC.size
        locs = locs[: n * LOC.size]
        whole = len(keys_raw) // KEYREC.size * KEYREC.size
        keys = sorted({s for (s,) in KEYREC.iter_unpack(keys_raw[:whole]) if s < n})
        return locs, keys

    def _hinted(self, segs: list[tuple[int, Path]]) -> tuple[tuple[int, int] | None, bool]:
        """Verify what the index covers in chunks; return where the sequential pass resumes."""
        hint = self._read_hint()
        if hint is None or not hint[0]:
            self.report.index_hint = "absent"
            return None, False
        locs, key_seqs = hint
        n_hint = len(locs) // LOC.size
        if segs[0][0] != 0 or not key_seqs or key_seqs[0] != 0:
            raise _Mismatch("the first segment or the genesis key event is not where the hint says")

        def loc(i: int) -> tuple[int, int, int]:
            return LOC.unpack_from(locs, i * LOC.size)

        # Tasks: (segment path, first seq, seq range) in segment order.
        tasks: list[tuple[str, int, int, int]] = []
        resume: tuple[int, int] | None = None
        for i, (first, path) in enumerate(segs):
            if first >= n_hint:
                break
            stop = min(segs[i + 1][0], n_hint) if i + 1 < len(segs) else n_hint
            if stop <= first:
                raise _Mismatch("segment names out of order")
            try:
                size = path.stat().st_size
            except OSError as exc:
                raise _Mismatch(str(exc)) from exc
            s0, last = loc(first), loc(stop - 1)
            if s0[0] != first or s0[1] != 0 or last[0] != first:
                raise _Mismatch(f"hint places entries outside {path.name}")
            end = last[1] + last[2]
            complete = i + 1 < len(segs) and segs[i + 1][0] <= n_hint
            if end > size or (complete and end != size):
                raise _Mismatch(f"hint does not tile {path.name}")
            for a in range(first, stop, CHUNK_ENTRIES):
                tasks.append((str(path), first, a, min(a + CHUNK_ENTRIES, stop)))
            resume = (i, end) if not complete else (i + 1, 0)
        if not tasks or resume is None:
            raise _Mismatch("the hint covers no segment")

        # The key schedule the hint implies, read from the hinted entries.
        schedule: Schedule = []
        keys: list[tuple[int, VerifierKey]] = []
        paths = dict(segs)
        for s in key_seqs:
            segf, off, length = loc(s)
            p = paths.get(segf)
            if p is None:
                raise _Mismatch("a key event in no segment")
            try:
                with open_regular(p) as f:
                    raw = os.pread(f.fileno(), length, off)
                e = entry_from_map(cbor2.loads(raw), raw, f"entry {s}")
                key = genesis_key(e) if s == 0 else rotation_key(e)
            except Exception as exc:  # any doubt about a hint means: do not use it
                raise _Mismatch(f"hinted key event {s}: {exc}") from exc
            if (s == 0) != (e.type == GENESIS_TYPE) or (s != 0 and e.type != ROTATION_TYPE):
                raise _Mismatch(f"hinted key event {s} is a {e.type}")
            first_seq = 0 if s == 0 else s + 1
            schedule.append((first_seq, key.public_key, key.kid))
            keys.append((first_seq, key))
        expected_events = [(s, k.name, k.public_key) for s, (_, k) in zip(key_seqs, keys, strict=True)]

        use_pool = self.processes > 1 and n_hint >= PARALLEL_MIN_ENTRIES and len(tasks) > 1
        if use_pool:
            self.pool = make_pool(self.processes)
        results = self._run_tasks(tasks, locs, schedule)
        self.report.index_hint = "used"
        self.report.hinted = n_hint
        self.schedule = [(f, pk) for f, pk, _ in schedule]
        self.epochs = keys
        event_i = 0
        cp_sizes, cr = self.cp_sizes, self.cr
        if cp_sizes and cp_sizes[0] == 0:
            raise _Mismatch("a checkpoint of size 0")
        try:
            for (_, _, a, b), res in zip(tasks, results, strict=True):
                if res[0] != "ok":
                    raise _Mismatch(f"chunk at seq {a}: {res[2]} at seq {res[1]}")
                _, leaves, first_prev, events, log_id = res
                if first_prev != self.prev or len(leaves) != (b - a) * HASH_LEN:
                    raise _Mismatch(f"chunk at seq {a} does not continue the chain")
                if events != expected_events[event_i : event_i + len(events)]:
                    raise _Mismatch(f"key events in the chunk at seq {a} differ from the hint")
                event_i += len(events)
                if a == 0:
                    if log_id is None:
                        raise _Mismatch("no genesis")
                    self.log_id = log_id
                # Fold the leaves, stopping at each checkpoint size the chunk reaches.
                done = 0
                while done < b - a:
                    upto = b - a
                    if self.cp_pos < len(cp_sizes) and cp_sizes[self.cp_pos] <= b:
                        upto = cp_sizes[self.cp_pos] - a
                    cr.extend_packed(leaves, done * HASH_LEN, upto * HASH_LEN)
                    done = upto
                    try:
                        self._checkpoints_through(a + done)
                    except VerificationError as exc:
                        raise _Mismatch(str(exc)) from exc
                self.seq = b
                self.prev = leaves[-HASH_LEN:]
                self.progress.advance(b - a)
        finally:
            close = getattr(results, "close", None)
            if close is not None:
                close()
        if event_i != len(expected_events):
            raise _Mismatch("the hint lists key events the log does not have")
        self.kid = schedule[-1][2]
        return resume, self.pool is not None

    def _run_tasks(
        self, tasks: list[tuple[str, int, int, int]], locs: bytes, schedule: Schedule
    ) -> Iterator[Any]:
        """Results of the chunk tasks in order, with a bounded number in flight."""

        def args(t: tuple[str, int, int, int]) -> tuple[Any, ...]:
            path, segf, a, b = t
            return (path, locs[a * LOC.size : b * LOC.size], a, segf, schedule, self.hashes_only)

        if self.pool is None:
            return (_check_chunk_safely(*args(t)) for t in tasks)
        pool = self.pool

        def gen() -> Iterator[Any]:
            window = 2 * self.processes + 2
            futs: list[Future[ChunkResult]] = []
            nxt = 0
            try:
                while nxt < len(tasks) or futs:
                    while nxt < len(tasks) and len(futs) < window:
                        futs.append(pool.submit(_check_chunk_safely, *args(tasks[nxt])))
                        nxt += 1
                    try:
                        yield futs.pop(0).result()
                    except Exception as exc:  # a worker that died: the sequential pass decides
                        yield ("no", -1, f"worker failed: {exc!r}")
            finally:
                for f in futs:
                    f.cancel()

        return gen()

    # -- the sequential pass -------------------------------------------------------

    def _segment(self, first: int, path: Path, is_last: bool, start: int = 0) -> None:
        if start == 0 and first != self.seq:
            raise self.fail(
                f"segment {path.name} should be named for seq {self.seq}",
                "segments.name",
                seq=self.seq,
                file=path.name,
                expected=f"{self.seq:020d}.seg",
                found=path.name,
            )
        with open_regular(path) as f:
            if start:
                f.seek(start)
            buf = f.read()
        if not buf and not is_last and start == 0:
            raise self.fail(f"segment {path.name} is empty", "segments.empty", file=path.name)
        stream = io.BytesIO(buf)
        dec = cbor2.CBORDecoder(stream)
        pos = 0
        n = len(buf)
        chunk_start, chunk_seq = 0, self.seq
        while pos < n:
            try:
                value = dec.decode()
            except cbor2.CBORDecodeEOF:
                if is_last and n - pos < MAX_ENTRY_BYTES and is_entry_prefix(buf, pos):
                    self.report.torn_tail = {"segment": path.name, "offset": start + pos, "bytes": n - pos}
                    break
                raise self.fail(
                    f"{path.name}: truncated or oversized entry at offset {start + pos}",
                    "entry.decode",
                    seq=self.seq,
                    file=path.name,
                ) from None
            except (cbor2.CBORError, ValueError, OverflowError, MemoryError, RecursionError) as e:
                raise self.fail(
                    f"{path.name}: malformed CBOR at offset {start + pos}: {e}",
                    "entry.decode",
                    seq=self.seq,
                    file=path.name,
                ) from None
            end = stream.tell()
            try:
                self._entry(buf, pos, end, value, path.name)
            except VerificationError:
                # Entries before the failure still get their signatures checked,
                # so the earliest failure of any kind is the one reported.
                if pos > chunk_start:
                    self._dispatch(str(path), start + chunk_start, start + pos, chunk_seq)
                raise
            pos = end
            if self.seq - chunk_seq >= SEQ_CHUNK_ENTRIES:
                self._dispatch(str(path), start + chunk_start, start + pos, chunk_seq)
                chunk_start, chunk_seq = pos, self.seq
            if self.seq % 8192 == 0:
                self.progress.advance(8192)
        if self.seq > chunk_seq:
            self._dispatch(str(path), start + chunk_start, start + pos, chunk_seq)

    def _entry(self, buf: bytes, start: int, end: int, value: Any, fname: str) -> None:
        seq = self.seq
        raw = buf[start:end]
        try:
            e = entry_from_map(value, raw, f"entry {seq}")
        except DecodeError as exc:
            raise self.fail(
                f"{fname}: entry {seq}: {exc.message}", "entry.decode", seq=seq, file=fname
            ) from exc
        if e.seq != seq:
            raise self.fail(
                f"entry at position {seq} has seq {e.seq}",
                "entry.seq",
                seq=seq,
                file=fname,
                expected=seq,
                found=e.seq,
            )
        if e.prev != self.prev:
            raise self.fail(
                f"entry {seq} does not chain to entry {seq - 1}",
                "entry.prev",
                seq=seq,
                file=fname,
                expected=self.prev.hex(),
                found=e.prev.hex(),
            )
        if seq == 0:
            if e.type != GENESIS_TYPE:
                raise self.fail(
                    f"entry 0 has type {e.type!r}",
                    "genesis.type",
                    seq=0,
                    file=fname,
                    expected=GENESIS_TYPE,
                    found=e.type,
                )
            try:
                key = genesis_key(e)
                lid = e.data.get("log_id")
                if not isinstance(lid, bytes) or len(lid) != 16:
                    raise DecodeError("log_id must be 16 bytes")
            except MnemologError as exc:
                raise self.fail(
                    f"genesis entry is malformed: {exc}", "genesis.data", seq=0, file=fname
                ) from exc
            self.log_id = lid
            self.epochs.append((0, key))
            self.schedule.append((0, key.public_key))
            self.kid = key.kid
        elif e.type == GENESIS_TYPE:
            raise self.fail(f"entry {seq} repeats the genesis type", "genesis.repeated", seq=seq, file=fname)
        if not self.hashes_only and e.kid != self.kid:
            raise self.fail(
                f"entry {seq} is signed by key {e.kid.hex()}, but the key history says {self.kid.hex()}",
                "entry.kid",
                seq=seq,
                file=fname,
                expected=self.kid.hex(),
                found=e.kid.hex(),
            )
        if e.type == ROTATION_TYPE:
            try:
                new = rotation_key(e)
            except MnemologError as exc:
                raise self.fail(
                    f"key.rotated at {seq} is malformed: {exc}", "key.rotated", seq=seq, file=fname
                ) from exc
            self.epochs.append((seq + 1, new))
            self.schedule.append((seq + 1, new.public_key))
            self.kid = new.kid
        self.cr.append(e.leaf)
        self.prev = e.leaf
        self.seq += 1
        self._checkpoints_through(self.seq)

    def _checkpoints_through(self, size: int) -> None:
        while self.cp_pos < len(self.cp_sizes) and self.cp_sizes[self.cp_pos] <= size:
            cp_size = self.cp_sizes[self.cp_pos]
            if cp_size == size:
                self._checkpoint(cp_size)
            elif cp_size == 0:
                raise self.fail("a checkpoint of size 0", "checkpoint.size", file=checkpoint_name(0))
            self.cp_pos += 1

    def _checkpoint(self, size: int) -> None:
        rel = f"{CHECKPOINT_DIR}/{checkpoint_name(size)}"
        try:
            raw = read_regular(self.dir / CHECKPOINT_DIR / checkpoint_name(size), MAX_NOTE_BYTES)
        except OSError as exc:
            raise self.fail(f"{rel}: unreadable: {exc}", "checkpoint.read", file=rel, seq=size - 1) from exc
        try:
            cp = open_checkpoint(raw, self.key_for(size), rel)
        except DecodeError as exc:
            raise self.fail(f"{rel}: {exc.message}", "checkpoint.decode", file=rel, seq=size - 1) from exc
        except VerificationError as exc:
            raise self.fail(exc.message, exc.check, file=rel, seq=size - 1) from exc
        if self.log_id is not None and cp.origin != origin_for(self.log_id):
            raise self.fail(
                f"{rel}: checkpoint origin is not this log's",
                "checkpoint.origin",
                file=rel,
                seq=size - 1,
                expected=origin_for(self.log_id),
                found=cp.origin,
            )
        if cp.size != size:
            raise self.fail(
                f"{rel}: file name says size {size}, the checkpoint says {cp.size}",
                "checkpoint.size",
                file=rel,
                seq=size - 1,
                expected=size,
                found=cp.size,
            )
        root = self.cr.root()
        if cp.root != root:
            raise self.fail(
                f"{rel}: the root of the first {size} entries differs from the signed root",
                "checkpoint.root",
                file=rel,
                seq=size - 1,
                expected=cp.root.hex(),
                found=root.hex(),
            )

    def _dispatch(self, path: str, start: int, end: int, first_seq: int) -> None:
        if self.hashes_only:
            return
        schedule = list(self.schedule)
        if self.pool is None:
            res = _verify_chunk(path, start, end, first_seq, schedule)
            if res is not None:
                raise self._from_worker(res)
            return
        args = (path, start, end, first_seq, schedule)
        self.pending.append((first_seq, self.pool.submit(_verify_chunk, *args), args))
        # Bound the queue so memory stays flat on huge logs.
        while len(self.pending) > 4 * self.processes:
            _, fut, args = self.pending.pop(0)
            res = self._result(fut, args)
            if res is not None:
                raise self._from_worker(res)

    @staticmethod
    def _result(fut: Future[Any], args: tuple[Any, ...]) -> tuple[int, str, str, Any, Any] | None:
        """A worker's verdict; should the worker have died, the chunk is checked here."""
        try:
            return fut.result()  # type: ignore[no-any-return]
        except Exception:
            return _verify_chunk(*args)

    def _from_worker(self, res: tuple[int, str, str, Any, Any]) -> VerificationError:
        seq, check, message, expected, found = res
        return VerificationError(message, check=check, seq=seq, expected=expected, found=found)

    def _drain(self, before: int | None) -> None:
        """Collect worker results; raise the earliest failure (before `before` if given)."""
        best: tuple[int, str, str, Any, Any] | None = None
        for first_seq, fut, args in self.pending:
            if before is not None and first_seq > before:
                fut.cancel()
                continue
            res = self._result(fut, args)
            if res is not None and (best is None or res[0] < best[0]):
                best = res
        self.pending = []
        if best is not None and (before is None or best[0] <= before):
            raise self._from_worker(best)


def verify_log(
    log_dir: Path,
    *,
    hashes_only: bool = False,
    processes: int | None = None,
    progress: bool | None = None,
    use_index_hint: bool = True,
    anchor: VerifierKey | None = None,
) -> VerifyReport:
    """Verify the whole log; return a report or raise the first VerificationError.

    `processes` defaults to the number of cores; small logs are checked in
    this process whatever it says. `use_index_hint=False` forces the
    sequential pass (the verdict is the same either way). `anchor` is a key
    obtained out of band: the genesis key or a later one, which the key
    history must contain (check `key.anchor`); without it the genesis entry's
    key is the trust anchor.
    """
    procs = processes if processes is not None else (os.cpu_count() or 1)
    return _Verifier(log_dir, hashes_only, max(1, procs), progress, use_index_hint, anchor).run()
