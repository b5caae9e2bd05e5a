"""Whole-log verification: every byte of every segment and checkpoint, nothing derived trusted.

What is checked (docs/format.md §8): segment names; each entry's shape,
canonical CBOR, contiguous seq and prev chain; its key id and Ed25519
signature under the key schedule that starts at the genesis key; the Merkle
root at every stored checkpoint, whose signature is checked with the key
valid at its size; that no checkpoint covers more entries than the log
holds; that a log past its genesis has a checkpoint at all; that every
high-water mark the caller hands in (a copy of the newest checkpoint kept
outside the log) is this log's, signed, and covered by the log with the same
root; and, last, that the trust policy accepts the key history (`trust.*`).
`hashes_only` skips the per-entry canonical and signature work: integrity in
one pass of SHA-256 against the signed checkpoints.

Two strategies give the same verdict:

- The hinted pass (`verify_hinted`): the sidecar index is read only as an
  untrusted hint of where entries start and where the key changes; workers
  check disjoint chunks and this process folds their leaves, links and key
  events. Whatever the index covers is checked this way; the rest by the
  sequential pass.
- The sequential pass (here): one streaming pass in this process, with
  signature work fanned out to workers (`verify_chunks.verify_span`). It runs
  whenever the hint is missing, disagrees with the bytes, or anything at all
  fails in the hinted pass: so a failure is always reported by this pass (the
  first one, by lowest seq) and correctness never depends on the index.

Returns a report or raises the first failure as a VerificationError; it never
returns "false".
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cbor2

from mnemolog.eventlog.errors import DecodeError, VerificationError
from mnemolog.eventlog.format import merkle
from mnemolog.eventlog.format.entry import ZERO_HASH, Entry, entry_from_map
from mnemolog.eventlog.format.keys import VerifierKey
from mnemolog.eventlog.format.note import MAX_NOTE_BYTES, open_checkpoint
from mnemolog.eventlog.progress import Progress
from mnemolog.eventlog.store.checkpoints import (
    CHECKPOINT_DIR,
    HighWaterMark,
    checkpoint_name,
    list_checkpoints,
)
from mnemolog.eventlog.store.fsio import open_regular, read_regular
from mnemolog.eventlog.store.segments import MAX_ENTRY_BYTES, is_entry_prefix, list_segments
from mnemolog.eventlog.verify.backchain import ChainFold, digest
from mnemolog.eventlog.verify.chunks import Failure, verify_span
from mnemolog.eventlog.verify.hinted import Hinted, Mismatch, hinted_pass
from mnemolog.eventlog.verify.pool import make_pool
from mnemolog.eventlog.verify.provenance import check_provenance
from mnemolog.eventlog.verify.trust import (
    GENESIS_TYPE,
    ROTATION_TYPE,
    KeySchedule,
    TrustPolicy,
)

SEQ_CHUNK_ENTRIES = 2048  # entries per signature task in the sequential pass
SERIAL_BELOW = 4096  # logs smaller than ~this many entries (x 200 bytes) stay in-process


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
    trust: dict[str, Any] = field(default_factory=dict)
    high_water: list[dict[str, Any]] = field(default_factory=list)
    back_chains: dict[str, Any] | None = None
    # A migrated log's hand-off from the log it replaced, checked (verify.provenance).
    migrated_from: dict[str, Any] | None = None

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
            "trust": self.trust,
            "high_water": self.high_water,
            "back_chains": self.back_chains,
            "migrated_from": self.migrated_from,
        }


class _Verifier:
    def __init__(
        self,
        log_dir: Path,
        hashes_only: bool,
        processes: int,
        progress: bool | None,
        use_hint: bool,
        policy: TrustPolicy,
        high_water: Sequence[HighWaterMark],
    ):
        self.dir = log_dir
        self.policy = policy
        self.hashes_only = hashes_only
        self.processes = processes
        self.use_hint = use_hint
        self.report = VerifyReport(hashes_only=hashes_only)
        self.cp_files: set[int] = set()
        self.high_water = list(high_water)
        self.hw_at: dict[int, list[HighWaterMark]] = defaultdict(list)
        # Sizes at which the fold stops to compare a root: checkpoint files and high-water marks.
        self.cp_sizes: list[int] = []
        self.pool: ProcessPoolExecutor | None = None
        self.progress = Progress("verifying log", enabled=progress)
        self._reset()

    def _reset(self) -> None:
        self.cr = merkle.CompactRange()
        self.prev = ZERO_HASH
        self.seq = 0
        self.keys: KeySchedule | None = None
        self.genesis: Entry | None = None
        self.kid = b""
        self.cp_pos = 0
        self.pending: list[tuple[int, Future[Any], tuple[Any, ...]]] = []  # (first seq, future, args)
        self.report.torn_tail = None
        self.chains = ChainFold(enabled=not self.hashes_only)

    def adopt(self, h: Hinted) -> None:
        """Fold in what the hinted pass vouches for, then check the checkpoints and
        high-water marks at the roots it reached; a failure there is a doubt like any
        other (`Mismatch`): the sequential pass decides and reports it."""
        self.report.index_hint = "used"
        self.report.hinted = h.entries
        self.keys, self.genesis = h.keys, h.genesis
        self.kid = h.keys.current.kid
        self.cr, self.prev, self.seq = h.cr, h.prev, h.entries
        self.chains = h.chains
        try:
            # Every stop size up to h.entries has its root here (the pass stops at each).
            for size, root in h.roots:
                self._checkpoints_through(size, root)
        except VerificationError as exc:
            raise Mismatch(str(exc)) from exc

    def fail(self, message: str, check: str, **where: Any) -> VerificationError:
        return VerificationError(message, check=check, **where)

    def key_for(self, size: int) -> VerifierKey:
        assert self.keys is not None
        return self.keys.key_at(size)

    @property
    def log_id(self) -> bytes | None:
        return self.keys.log_id if self.keys is not None else None

    def run(self) -> VerifyReport:
        t0 = time.perf_counter()
        segs = list_segments(self.dir)
        if not segs:
            raise self.fail("the log has no segments", "segments.none", file=str(self.dir))
        self._read_stops()
        parallel_used = False
        try:
            resume: tuple[int, int] | None = None
            if self.use_hint:
                try:
                    h = hinted_pass(
                        self.dir,
                        segs,
                        policy=self.policy,
                        processes=self.processes,
                        hashes_only=self.hashes_only,
                        stops=self.cp_sizes,
                        advance=self.progress.advance,
                    )
                    if h is None:
                        self.report.index_hint = "absent"
                    else:
                        self.pool = h.pool
                        parallel_used = h.pool is not None
                        self.adopt(h)
                        resume = h.resume
                except Mismatch as exc:
                    self.pool = self.pool or exc.pool
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
            self._beyond_the_log()
            self._drain(None)
        except VerificationError as exc:
            # A worker may hold an earlier failure than the one found here.
            self._drain(exc.seq)
            raise
        finally:
            if self.pool is not None:
                self.pool.shutdown(cancel_futures=True)
            self.progress.close()
        assert self.keys is not None
        if self.seq > 1 and not self.cp_files:
            raise self.fail(
                f"the log has {self.seq} entries and no checkpoint: every log past its genesis "
                "entry carries at least one (deleting them all would hide a rollback)",
                "checkpoint.missing",
                seq=self.seq - 1,
                file=CHECKPOINT_DIR,
            )
        if not self.hashes_only:
            if self.chains.failed is not None:
                raise self.chains.failed
            self.report.back_chains = self.chains.chains.summary.to_json()
        r = self.report
        r.trust = self.policy.check(self.keys).to_json()
        if self.genesis is not None:
            r.migrated_from = check_provenance(self.genesis)
        r.entries = self.seq
        r.segments = len(segs)
        r.checkpoints = len(self.cp_files)
        r.keys = len(self.keys.epochs)
        r.root = self.cr.root().hex()
        r.latest_checkpoint = max(self.cp_files, default=0)
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
        if r.migrated_from is not None:
            r.checks.append("migration_provenance")
        if self.high_water:
            r.checks.append("high_water")
        if not self.hashes_only:
            r.checks += ["back_chains", "heads_committed"]
        r.checks.append("trust_anchor")
        return r

    def _read_stops(self) -> None:
        names = list_checkpoints(self.dir)
        if names.unexpected:
            name = names.unexpected[0]
            raise self.fail(
                f"unexpected file {name} among checkpoints",
                "checkpoint.name",
                file=f"{CHECKPOINT_DIR}/{name}",
            )
        self.cp_files = set(names.sizes)
        for hw in self.high_water:
            try:
                size = hw.body().size
            except DecodeError as exc:
                raise self.fail(
                    f"high-water mark {hw.source}: {exc.message}", "high_water.decode", file=hw.source
                ) from exc
            if size == 0:
                raise self.fail(
                    f"high-water mark {hw.source}: a checkpoint of size 0",
                    "high_water.decode",
                    file=hw.source,
                )
            self.hw_at[size].append(hw)
        self.cp_sizes = sorted(self.cp_files | set(self.hw_at))

    def _worth_pool(self, segs: list[tuple[int, Path]]) -> bool:
        total = 0
        for _, p in segs:
            with contextlib.suppress(OSError):
                total += p.stat().st_size
        return total >= SERIAL_BELOW * 200

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
                self.keys = KeySchedule.from_genesis(e)
                self.genesis = e
            except DecodeError as exc:
                raise self.fail(
                    f"genesis entry is malformed: {exc.message}", "genesis.data", seq=0, file=fname
                ) from exc
            self.kid = self.keys.current.kid
            self.policy.check_genesis(self.keys)
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
            assert self.keys is not None
            try:
                self.keys.add(e)
            except DecodeError as exc:
                raise self.fail(
                    f"key.rotated at {seq} is malformed: {exc.message}", "key.rotated", seq=seq, file=fname
                ) from exc
            self.kid = self.keys.current.kid
        self.cr.append(e.leaf)
        self.prev = e.leaf
        if not self.hashes_only:
            d = digest(seq, e.type, e.tv, e.data)
            self.chains.feed(1, [] if d is None else [d], fname)
        self.seq += 1
        self._checkpoints_through(self.seq)

    # -- checkpoints and high-water marks ----------------------------------------------

    def _checkpoints_through(self, size: int, root: bytes | None = None) -> None:
        """Check the stops up to `size` entries; `root` is the Merkle root at `size`
        (default: the compact range's, which then holds exactly `size` entries)."""
        while self.cp_pos < len(self.cp_sizes) and self.cp_sizes[self.cp_pos] <= size:
            cp_size = self.cp_sizes[self.cp_pos]
            if cp_size == size:
                at = self.cr.root() if root is None else root
                if cp_size in self.cp_files:
                    self._checkpoint(cp_size, at)
                for hw in self.hw_at.get(cp_size, ()):
                    self._high_water(hw, cp_size, at)
            elif cp_size == 0:
                raise self.fail("a checkpoint of size 0", "checkpoint.size", file=checkpoint_name(0))
            self.cp_pos += 1

    def _checkpoint(self, size: int, root: bytes) -> None:
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
        if self.log_id is not None and cp.origin != self.keys_origin():
            raise self.fail(
                f"{rel}: checkpoint origin is not this log's",
                "checkpoint.origin",
                file=rel,
                seq=size - 1,
                expected=self.keys_origin(),
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
        if cp.root != root:
            raise self.fail(
                f"{rel}: the root of the first {size} entries differs from the signed root",
                "checkpoint.root",
                file=rel,
                seq=size - 1,
                expected=cp.root.hex(),
                found=root.hex(),
            )

    def keys_origin(self) -> str:
        assert self.keys is not None
        return self.keys.origin

    def _high_water_origin(self, hw: HighWaterMark) -> None:
        body = hw.body()
        if body.origin != self.keys_origin():
            raise self.fail(
                f"high-water mark {hw.source} is a checkpoint of another log: the log in this "
                "directory is not the one the home recorded",
                "high_water.origin",
                file=hw.source,
                expected=body.origin,
                found=self.keys_origin(),
            )

    def _high_water(self, hw: HighWaterMark, size: int, root: bytes) -> None:
        self._high_water_origin(hw)
        try:
            cp = open_checkpoint(hw.note, self.key_for(size), hw.source)
        except DecodeError as exc:
            raise self.fail(
                f"high-water mark {hw.source}: {exc.message}", "high_water.decode", file=hw.source
            ) from exc
        except VerificationError as exc:
            raise self.fail(
                f"high-water mark {hw.source}: {exc.message}",
                "high_water.signature",
                file=hw.source,
                seq=size - 1,
            ) from exc
        if cp.root != root:
            raise self.fail(
                f"the log's root at size {size} differs from the high-water mark {hw.source}: "
                "the log was rewritten after the home signed that checkpoint",
                "high_water.root",
                file=hw.source,
                seq=size - 1,
                expected=cp.root.hex(),
                found=root.hex(),
            )
        self.report.high_water.append({"source": hw.source, "size": size, "ok": True})

    def _beyond_the_log(self) -> None:
        """Checkpoint files and high-water marks larger than the log: entries are missing."""
        beyond = self.cp_sizes[self.cp_pos :]
        files = [s for s in beyond if s in self.cp_files]
        if files:
            size = files[0]
            raise self.fail(
                f"the log has {self.seq} entries but a checkpoint covers {size}: "
                "entries are missing (truncated log)",
                "log.truncated",
                seq=self.seq,
                file=f"{CHECKPOINT_DIR}/{checkpoint_name(size)}",
                expected=size,
                found=self.seq,
            )
        for size in beyond:
            for hw in self.hw_at[size]:
                self._high_water_origin(hw)
                raise self.fail(
                    f"the log has {self.seq} entries but the home's high-water mark {hw.source} "
                    f"records a signed checkpoint of size {size}: entries the home signed are "
                    "missing (the log was truncated or rolled back)",
                    "high_water.size",
                    seq=self.seq,
                    file=hw.source,
                    expected=size,
                    found=self.seq,
                )

    # -- signature work in workers -----------------------------------------------------

    def _dispatch(self, path: str, start: int, end: int, first_seq: int) -> None:
        if self.hashes_only:
            return
        assert self.keys is not None
        schedule = self.keys.packed()
        if self.pool is None:
            res = verify_span(path, start, end, first_seq, schedule)
            if res is not None:
                raise res.error()
            return
        args = (path, start, end, first_seq, schedule)
        self.pending.append((first_seq, self.pool.submit(verify_span, *args), args))
        # Bound the queue so memory stays flat on huge logs.
        while len(self.pending) > 4 * self.processes:
            _, fut, args = self.pending.pop(0)
            res = self._result(fut, args)
            if res is not None:
                raise res.error()

    @staticmethod
    def _result(fut: Future[Any], args: tuple[Any, ...]) -> Failure | None:
        """A worker's verdict; should the worker have died, the span is checked here."""
        try:
            res = fut.result()
        except Exception:
            return verify_span(*args)
        return Failure(*res) if res is not None else None

    def _drain(self, before: int | None) -> None:
        """Collect worker results; raise the earliest failure (before `before` if given)."""
        best: Failure | None = None
        for first_seq, fut, args in self.pending:
            if before is not None and first_seq > before:
                fut.cancel()
                continue
            res = self._result(fut, args)
            if res is not None and (best is None or res.seq < best.seq):
                best = res
        self.pending = []
        if best is not None and (before is None or best.seq <= before):
            raise best.error()


def verify_log(
    log_dir: Path,
    *,
    policy: TrustPolicy,
    high_water: Sequence[HighWaterMark] = (),
    hashes_only: bool = False,
    processes: int | None = None,
    progress: bool | None = None,
    use_index_hint: bool = True,
) -> VerifyReport:
    """Verify the whole log; return a report or raise the first VerificationError.

    `policy` names the trust anchor, always given by the caller (sigstore's
    rule: nothing verifies under an anchor nobody chose); `TRUST_GENESIS`
    takes the genesis key found in the log and reports it as trust on first
    use. `high_water` are copies of the newest checkpoint kept outside the
    log, which it must cover with the same root. `processes` defaults to the
    number of cores; small logs are checked in this process whatever it
    says. `use_index_hint=False` forces the sequential pass (the verdict is
    the same either way).
    """
    procs = processes if processes is not None else (os.cpu_count() or 1)
    v = _Verifier(log_dir, hashes_only, max(1, procs), progress, use_index_hint, policy, high_water)
    return v.run()
