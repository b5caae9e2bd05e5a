"""The hinted pass of `log verify`: what the index covers, checked in parallel chunks.

The sidecar index (`log/index/loc`, `keys`) is read only as an untrusted
*hint* of where entries start and where the key changes. Worker processes
decode and check disjoint chunks (`verify_chunks.check_hinted_chunk`: exactly
the hinted slices; seq, prev links inside the chunk, shape, canonical bytes,
signatures under the hinted key schedule) and return the chunk's leaf
hashes, its first prev and the key events they saw; this module folds the
leaves into the Merkle compact range and checks the links between chunks and
the observed key events against the hint. `hinted_pass` is a function of its
inputs: it returns what it vouches for (`Hinted`: the key schedule, the
compact range, the roots at the checkpoint sizes, the back-chain fold), and
the verifier folds that in and checks the checkpoints at those roots. CBOR items are
self-delimiting, so hinted slices that each decode to exactly one item and
tile a segment are the segment's only split into items: when every check
passes, the hint was right and the covered prefix is verified.

Any doubt raises `Mismatch`, and the sequential pass starts over: the hint
can cost time, never a verdict.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import cbor2

from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.format import merkle
from mnemolog.eventlog.format.entry import HASH_LEN, ZERO_HASH, Entry, entry_from_map
from mnemolog.eventlog.store.fsio import open_regular, read_regular
from mnemolog.eventlog.store.index import KEYREC, LOC
from mnemolog.eventlog.verify.backchain import ChainFold
from mnemolog.eventlog.verify.chunks import ChunkDoubt, ChunkOk, ChunkResult, check_hinted_chunk_safely
from mnemolog.eventlog.verify.pool import make_pool, run_ordered
from mnemolog.eventlog.verify.trust import GENESIS_TYPE, ROTATION_TYPE, KeySchedule, TrustPolicy

# Entries per worker task: small enough that the last tasks leave no worker idle for long
# (2048 left one of two workers a whole task behind on a 20k log), large enough that a
# task's pickling stays near 1% of its signature work.
CHUNK_ENTRIES = 512
PARALLEL_MIN_ENTRIES = 12_000  # below this, workers cost more to start than they save
#: The index files are hints read whole: a billion entries' locations at most.
MAX_HINT_BYTES = 1 << 35


class Mismatch(Exception):
    """The hinted pass cannot vouch for the log: the sequential pass decides (reusing the
    pool the hinted pass started, if any)."""

    pool: ProcessPoolExecutor | None = None


class Hint(NamedTuple):
    locs: bytes  # whole LOC records
    key_seqs: list[int]  # hinted key events below the hint's size


class Task(NamedTuple):
    path: str
    seg_first: int
    start: int  # first seq
    stop: int  # seq after the last


def read_hint(log_dir: Path) -> Hint | None:
    idx = log_dir / "index"
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
    return Hint(locs, keys)


def _plan(segs: list[tuple[int, Path]], locs: bytes, n_hint: int) -> tuple[list[Task], tuple[int, int]]:
    """Chunk tasks over the segments the hint covers, and where the sequential pass resumes."""

    def loc(i: int) -> tuple[int, int, int]:
        return LOC.unpack_from(locs, i * LOC.size)

    tasks: list[Task] = []
    resume: tuple[int, int] | None = None
    for i, (first, path) in enumerate(segs):
        if first >= n_hint:
            break
        stop = min(segs[i + 1][0], n_hint) if i + 1 < len(segs) else n_hint
        if stop <= first:
            raise Mismatch("segment names out of order")
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise Mismatch(str(exc)) from exc
        s0, last = loc(first), loc(stop - 1)
        if s0[0] != first or s0[1] != 0 or last[0] != first:
            raise Mismatch(f"hint places entries outside {path.name}")
        end = last[1] + last[2]
        complete = i + 1 < len(segs) and segs[i + 1][0] <= n_hint
        if end > size or (complete and end != size):
            raise Mismatch(f"hint does not tile {path.name}")
        for a in range(first, stop, CHUNK_ENTRIES):
            tasks.append(Task(str(path), first, a, min(a + CHUNK_ENTRIES, stop)))
        resume = (i, end) if not complete else (i + 1, 0)
    if not tasks or resume is None:
        raise Mismatch("the hint covers no segment")
    return tasks, resume


def _hinted_schedule(segs: list[tuple[int, Path]], hint: Hint) -> tuple[KeySchedule, Entry]:
    """The key schedule the hint implies, read from the hinted key entries."""
    paths = dict(segs)
    ks: KeySchedule | None = None
    genesis: Entry | None = None
    for s in hint.key_seqs:
        segf, off, length = LOC.unpack_from(hint.locs, s * LOC.size)
        p = paths.get(segf)
        if p is None:
            raise Mismatch("a key event in no segment")
        try:
            with open_regular(p) as f:
                raw = os.pread(f.fileno(), length, off)
            e = entry_from_map(cbor2.loads(raw), raw, f"entry {s}")
            if e.seq != s or (s == 0) != (e.type == GENESIS_TYPE) or (s != 0 and e.type != ROTATION_TYPE):
                raise Mismatch(f"hinted key event {s} is a {e.type}")
            if ks is None:
                ks = KeySchedule.from_genesis(e)
                genesis = e
            else:
                ks.add(e)
        except Mismatch:
            raise
        except Exception as exc:  # any doubt about a hint means: do not use it
            raise Mismatch(f"hinted key event {s}: {exc}") from exc
    if ks is None or genesis is None:
        raise Mismatch("the hint lists no genesis")
    return ks, genesis


class Hinted(NamedTuple):
    """What the hinted pass vouches for, for the verifier to fold in (`_Verifier.adopt`)."""

    resume: tuple[int, int]  # (segment index, byte offset) where the sequential pass goes on
    entries: int  # entries covered: seqs 0 .. entries - 1
    keys: KeySchedule  # the key schedule, every hinted key event seen in the bytes
    genesis: Entry
    cr: merkle.CompactRange  # the Merkle compact range of the covered entries
    prev: bytes  # the leaf hash of the last covered entry
    roots: list[tuple[int, bytes]]  # (size, Merkle root) at each stop size the pass reached
    chains: ChainFold  # the back-chain fold of the covered entries
    pool: ProcessPoolExecutor | None  # the workers it started, handed on to the verifier


def hinted_pass(
    log_dir: Path,
    segs: list[tuple[int, Path]],
    *,
    policy: TrustPolicy,
    processes: int,
    hashes_only: bool,
    stops: list[int],
    advance: Callable[[int], None],
) -> Hinted | None:
    """Verify what the index covers; None when there is no index to use.

    `stops` are the sizes (ascending) at which a checkpoint or a high-water
    mark names a root: the pass returns the root at each one it reaches, and
    the verifier checks them. Raises `Mismatch` (carrying any pool started)
    on any doubt.
    """
    hint = read_hint(log_dir)
    if hint is None or not hint.locs:
        return None
    pool: ProcessPoolExecutor | None = None
    try:
        n_hint = len(hint.locs) // LOC.size
        if segs[0][0] != 0 or not hint.key_seqs or hint.key_seqs[0] != 0:
            raise Mismatch("the first segment or the genesis key event is not where the hint says")
        tasks, resume = _plan(segs, hint.locs, n_hint)
        keys, genesis = _hinted_schedule(segs, hint)
        try:
            policy.check_genesis(keys)
        except VerificationError as exc:  # decided by the sequential pass, from the bytes themselves
            raise Mismatch(str(exc)) from exc
        if stops and stops[0] == 0:
            raise Mismatch("a checkpoint of size 0")
        if processes > 1 and n_hint >= PARALLEL_MIN_ENTRIES and len(tasks) > 1:
            pool = make_pool(processes)
        cr, prev, roots, chains = _fold(tasks, hint, keys, hashes_only, stops, pool, processes, advance)
    except Mismatch as exc:
        exc.pool = pool
        raise
    except BaseException:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        raise
    return Hinted(resume, n_hint, keys, genesis, cr, prev, roots, chains, pool)


def _fold(
    tasks: list[Task],
    hint: Hint,
    keys: KeySchedule,
    hashes_only: bool,
    stops: list[int],
    pool: ProcessPoolExecutor | None,
    processes: int,
    advance: Callable[[int], None],
) -> tuple[merkle.CompactRange, bytes, list[tuple[int, bytes]], ChainFold]:
    """Run the chunk checks and fold their results in seq order."""
    packed = keys.packed()
    expected_events = [(ep.event_seq, ep.key.name, ep.key.public_key) for ep in keys.epochs]

    def args() -> Iterator[tuple[Any, ...]]:
        for t in tasks:
            locs = hint.locs[t.start * LOC.size : t.stop * LOC.size]
            yield (t.path, locs, t.start, t.seg_first, packed, hashes_only)

    def died(_task: tuple[Any, ...], exc: BaseException) -> ChunkResult:
        return ChunkDoubt(-1, f"worker failed: {exc!r}")

    results = run_ordered(pool, check_hinted_chunk_safely, args(), 2 * processes + 2, died)
    cr = merkle.CompactRange()
    chains = ChainFold(enabled=not hashes_only)
    roots: list[tuple[int, bytes]] = []
    prev = ZERO_HASH
    event_i = 0
    stop_i = 0
    try:
        for t, res in zip(tasks, results, strict=True):
            a, b = t.start, t.stop
            if not isinstance(res, ChunkOk):
                raise Mismatch(f"chunk at seq {a}: {res.why} at seq {res.seq}")
            if res.first_prev != prev or len(res.leaves) != (b - a) * HASH_LEN:
                raise Mismatch(f"chunk at seq {a} does not continue the chain")
            if res.events != expected_events[event_i : event_i + len(res.events)]:
                raise Mismatch(f"key events in the chunk at seq {a} differ from the hint")
            event_i += len(res.events)
            chains.feed(b - a, res.digests, Path(t.path).name)
            if a == 0 and res.log_id != keys.log_id:
                raise Mismatch("the genesis log id differs from the hinted key history's")
            # Fold the leaves, stopping at each stop size the chunk reaches for its root.
            done = 0
            while done < b - a:
                upto = b - a
                if stop_i < len(stops) and stops[stop_i] <= b:
                    upto = stops[stop_i] - a
                cr.extend_packed(res.leaves, done * HASH_LEN, upto * HASH_LEN)
                done = upto
                while stop_i < len(stops) and stops[stop_i] <= a + done:
                    if stops[stop_i] == a + done:
                        roots.append((a + done, cr.root()))
                    stop_i += 1
            prev = res.leaves[-HASH_LEN:]
            advance(b - a)
    finally:
        results.close()
    if event_i != len(expected_events):
        raise Mismatch("the hint lists key events the log does not have")
    return cr, prev, roots, chains
