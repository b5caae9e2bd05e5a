"""Whole-log verification: every byte of every segment and checkpoint, nothing trusted.

One streaming pass in this process checks the segment names, each entry's
shape, contiguous seq, the prev chain, the signer's key id against the key
history, and the Merkle root at every stored checkpoint (whose signature it
checks with the key valid at that size). Full verification also checks that
every entry is canonical CBOR and that its signature verifies; that work is
spread over worker processes, fed chunk by chunk as the streaming pass
reaches them, so both cores are busy at once. `hashes_only` skips the
per-entry work: integrity in one pass of SHA-256 against signed checkpoints.

The sidecar index is never read: verification depends on segments and
checkpoints alone. It returns a report or raises the first failure (lowest
seq) as a VerificationError; it never returns "false".
"""

from __future__ import annotations

import io
import multiprocessing
import os
import time
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cbor2

from mnemolog.eventlog import merkle
from mnemolog.eventlog.entry import encodings, entry_from_map
from mnemolog.eventlog.errors import DecodeError, MnemologError, VerificationError
from mnemolog.eventlog.keys import VerifierKey, verify_signature
from mnemolog.eventlog.log import (
    CHECKPOINT_DIR,
    GENESIS_TYPE,
    ROTATION_TYPE,
    checkpoint_name,
    genesis_key,
    rotation_key,
)
from mnemolog.eventlog.note import open_checkpoint, origin_for
from mnemolog.eventlog.progress import Progress
from mnemolog.eventlog.segments import ENTRY_MAP_HEAD, MAX_ENTRY_BYTES, list_segments

CHUNK_ENTRIES = 2048
SERIAL_BELOW = 4096  # logs smaller than this are checked without worker processes


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
        }


# -- per-entry checks (run in workers) --------------------------------------


def check_entry_bytes(raw: bytes, value: Any, seq: int, public_key: bytes) -> None:
    """Canonical encoding and signature of one entry; raises VerificationError."""
    try:
        e = entry_from_map(value, raw, f"entry {seq}")
        tbs, canonical = encodings(e.seq, e.ts, e.type, e.tv, e.data, e.prev, e.kid, e.sig)
    except DecodeError as exc:
        raise VerificationError(f"entry {seq}: {exc.message}", check="entry.decode", seq=seq) from exc
    # Re-encoding also rejects duplicate keys, non-shortest forms and key order.
    if canonical != raw:
        raise VerificationError(
            f"entry {seq}: bytes are not the canonical CBOR encoding of the entry",
            check="entry.canonical",
            seq=seq,
        )
    if not verify_signature(public_key, tbs, e.sig):
        raise VerificationError(
            f"entry {seq}: the signature does not verify with key {e.kid.hex()}",
            check="entry.signature",
            seq=seq,
            expected=public_key.hex(),
        )


def _verify_chunk(
    path: str, start: int, end: int, first_seq: int, schedule: list[tuple[int, bytes]]
) -> tuple[int, str, str, Any, Any] | None:
    """Worker: canonical bytes and signatures of the entries in path[start:end]."""
    with open(path, "rb") as f:
        f.seek(start)
        buf = f.read(end - start)
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


# -- the streaming pass --------------------------------------------------------


class _Verifier:
    def __init__(self, log_dir: Path, hashes_only: bool, processes: int, progress: bool | None):
        self.dir = log_dir
        self.hashes_only = hashes_only
        self.processes = processes
        self.report = VerifyReport(hashes_only=hashes_only)
        self.cr = merkle.CompactRange()
        self.prev = bytes(32)
        self.seq = 0
        self.schedule: list[tuple[int, bytes]] = []  # (first seq, public key)
        self.epochs: list[tuple[int, VerifierKey]] = []
        self.kid = b""
        self.log_id: bytes | None = None
        self.cp_sizes: list[int] = []
        self.cp_pos = 0
        self.pool: ProcessPoolExecutor | None = None
        self.pending: list[tuple[int, Future[Any]]] = []
        self.serial: list[tuple[str, int, int, int]] = []
        self.progress = Progress("verifying log", enabled=progress)

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
        use_pool = not self.hashes_only and self.processes > 1
        if use_pool:
            ctx = multiprocessing.get_context("forkserver")
            self.pool = ProcessPoolExecutor(self.processes, mp_context=ctx)
        try:
            for i, (first, path) in enumerate(segs):
                self._segment(first, path, is_last=i == len(segs) - 1)
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
        r = self.report
        r.entries = self.seq
        r.segments = len(segs)
        r.checkpoints = len(self.cp_sizes)
        r.keys = len(self.epochs)
        r.root = self.cr.root().hex()
        r.latest_checkpoint = self.cp_sizes[-1] if self.cp_sizes else 0
        r.processes = self.processes if use_pool else 1
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

    def _segment(self, first: int, path: Path, is_last: bool) -> None:
        if first != self.seq:
            raise self.fail(
                f"segment {path.name} should be named for seq {self.seq}",
                "segments.name",
                seq=self.seq,
                file=path.name,
                expected=f"{self.seq:020d}.seg",
                found=path.name,
            )
        with open(path, "rb") as f:
            buf = f.read()
        if not buf and not is_last:
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
                if buf[pos] == ENTRY_MAP_HEAD and n - pos < MAX_ENTRY_BYTES and is_last:
                    self.report.torn_tail = {"segment": path.name, "offset": pos, "bytes": n - pos}
                    break
                raise self.fail(
                    f"{path.name}: truncated or oversized entry at offset {pos}",
                    "entry.decode",
                    seq=self.seq,
                    file=path.name,
                ) from None
            except (cbor2.CBORError, ValueError, OverflowError, MemoryError, RecursionError) as e:
                raise self.fail(
                    f"{path.name}: malformed CBOR at offset {pos}: {e}",
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
                    self._dispatch(str(path), chunk_start, pos, chunk_seq)
                raise
            pos = end
            if self.seq - chunk_seq >= CHUNK_ENTRIES:
                self._dispatch(str(path), chunk_start, pos, chunk_seq)
                chunk_start, chunk_seq = pos, self.seq
            if self.seq % 8192 == 0:
                self.progress.advance(8192)
        if self.seq > chunk_seq:
            self._dispatch(str(path), chunk_start, pos, chunk_seq)

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
                lid = e.data["log_id"]
                if not isinstance(lid, bytes) or len(lid) != 16:
                    raise DecodeError("log_id must be 16 bytes")
            except (DecodeError, MnemologError, KeyError) as exc:
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
            except (DecodeError, MnemologError) as exc:
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
        raw = (self.dir / CHECKPOINT_DIR / checkpoint_name(size)).read_bytes()
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
                expected=origin_for(self.log_id),
                found=cp.origin,
            )
        if cp.size != size:
            raise self.fail(
                f"{rel}: file name says size {size}, the checkpoint says {cp.size}",
                "checkpoint.size",
                file=rel,
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
        schedule = [(s, pk) for s, pk in self.schedule]
        if self.pool is None:
            res = _verify_chunk(path, start, end, first_seq, schedule)
            if res is not None:
                raise self._from_worker(res)
            return
        fut = self.pool.submit(_verify_chunk, path, start, end, first_seq, schedule)
        self.pending.append((first_seq, fut))
        # Bound the queue so memory stays flat on huge logs.
        while len(self.pending) > 4 * self.processes:
            _, fut = self.pending.pop(0)
            res = fut.result()
            if res is not None:
                raise self._from_worker(res)

    def _from_worker(self, res: tuple[int, str, str, Any, Any]) -> VerificationError:
        seq, check, message, expected, found = res
        return VerificationError(message, check=check, seq=seq, expected=expected, found=found)

    def _drain(self, before: int | None) -> None:
        """Collect worker results; raise the earliest failure (before `before` if given)."""
        best: tuple[int, str, str, Any, Any] | None = None
        for first_seq, fut in self.pending:
            if before is not None and first_seq > before:
                fut.cancel()
                continue
            res = fut.result()
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
) -> VerifyReport:
    """Verify the whole log; return a report or raise the first VerificationError."""
    procs = processes if processes is not None else (os.cpu_count() or 1)
    if procs > 1 and not hashes_only:
        total = sum(p.stat().st_size for _, p in list_segments(log_dir))
        if total < SERIAL_BELOW * 200:
            procs = 1
    return _Verifier(log_dir, hashes_only, max(1, procs), progress).run()
