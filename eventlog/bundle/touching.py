"""Which entries of a log touch given memories, found in the log itself and judged by the pure fold.

A forensic bundle must hold every entry about its memories, so the exporter
may not take the list from a projection table: a deleted row there would
silently drop an entry from a signed bundle. Folding every entry of a large
log for each export would be correct but slow, so this does the same fold
in two steps that select exactly the same entries:

1. Every memory id an entry touches is a text string in its payload, and a
   CBOR text string holds its UTF-8 bytes verbatim; so an entry that touches
   memory m contains m's bytes. Each segment is searched for them (a byte
   search at memory speed), and each hit is mapped to the entry around it.
2. Each such entry is read (its bytes checked against the log's leaf), decoded,
   and kept only if the verifier's own rule (`touched`) says it touches one of
   the memories: a memory id quoted in some content does not select an entry.

A hit that falls outside every entry, or an entry that does not decode where
the log says it is, stops the export (the log needs `mnemolog log verify`)
rather than being skipped. The test suite holds step 1's premise as a
property of the vocabulary: every touched id occurs in the entry's bytes.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from mnemolog.eventlog.errors import DecodeError, MnemologError, VerificationError
from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.format.merkle import hash_leaf
from mnemolog.eventlog.store.fsio import open_regular, read_regular
from mnemolog.eventlog.store.group_commit import Receipt
from mnemolog.eventlog.store.index import HASH as HASH_SIZE
from mnemolog.eventlog.store.log import Log
from mnemolog.eventlog.store.segments import list_segments

#: Segments are read whole here; none is larger than a writer ever rolls at (64 MiB by default).
MAX_SEGMENT_READ = 1 << 32
#: Past this many ids, the entries are decoded in one pass instead of searched for each id.
MANY_IDS = 64

Touched = Callable[[Entry], Iterable[str]]


def _positions(data: bytes, needle: bytes, at: int = 0) -> Iterable[int]:
    i = data.find(needle, at)
    while i >= 0:
        yield i
        i = data.find(needle, i + 1)


def _leaves(log: Log, start: int, stop: int) -> Callable[[int], bytes]:
    """The log's leaf hash of any seq, those in [start, stop) read from the index in one go."""
    upto = min(stop, log.indexed)
    buf = log.index.leaves(start, upto) if start < upto else b""

    def leaf(seq: int) -> bytes:
        if start <= seq < upto:
            return buf[(seq - start) * HASH_SIZE : (seq - start + 1) * HASH_SIZE]
        return log.leaf(seq)

    return leaf


def _checked(e: Entry, leaf: Callable[[int], bytes]) -> Entry:
    """`e`, once its bytes are the log's leaf (else the log needs `log verify`)."""
    if hash_leaf(e.raw) != leaf(e.seq):
        raise DecodeError(
            f"entry {e.seq}: its bytes are not the log's leaf (run `mnemolog log verify`)", seq=e.seq
        )
    return e


def _seq_at(log: Log, first: int, last: int, pos: int, path: Path) -> int:
    """The seq in [first, last) of the segment `path` whose entry bytes contain offset `pos`."""
    lo, hi = first, last - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if log.location(mid).offset <= pos:
            lo = mid
        else:
            hi = mid - 1
    loc = log.location(lo)
    if not (loc.offset <= pos < loc.offset + loc.length):
        raise DecodeError(
            f"{path.name}: byte {pos} lies outside every entry the log knows of (run `mnemolog log verify`)",
            file=str(path),
        )
    return lo


def entries_touching(
    log: Log,
    memory_ids: Iterable[str],
    below: int,
    touched: Touched,
    start: int = 0,
    starts: Mapping[str, int] | None = None,
) -> dict[int, Entry]:
    """Every entry with `start` <= seq < `below` that `touched` says touches one of `memory_ids`, by seq.

    `starts` gives some ids a first seq of their own (at least `start`): an entry before it is
    selected only if it touches another id from that id's first seq on.
    """
    ids = {m for m in memory_ids if m}
    first_of = {m: max(start, (starts or {}).get(m, start)) for m in ids}
    needles = sorted({m.encode() for m in ids})
    out: dict[int, Entry] = {}
    if not needles or below <= start:
        return out

    def wanted(e: Entry) -> bool:
        return any(m in first_of and e.seq >= first_of[m] for m in touched(e))

    if len(needles) > MANY_IDS:
        # One byte search per id costs ids x bytes: a bulk erasure's thousands of ids would
        # search the log thousands of times. One sequential pass, judged by the same rule,
        # selects the same entries.
        leaf = _leaves(log, min(first_of.values()), below)
        for e in log.iter_entries(min(first_of.values()), below):
            if wanted(e):
                out[e.seq] = _checked(e, leaf)
        return out
    segs = list_segments(log.dir)
    bounds = [first for first, _ in segs[1:]] + [log.size]
    for (first, path), nxt in zip(segs, bounds, strict=True):
        if first >= below:
            break
        last = min(nxt, below)
        if last <= max(first, start):
            continue
        lo = max(first, start)
        end = log.location(last - 1)
        limit = end.offset + end.length
        begin = log.location(lo).offset
        if begin:
            # Only the entries from `start` on (a writer checking what came after a head).
            with open_regular(path) as f:
                f.seek(begin)
                data = f.read(limit - begin)
        else:
            data = read_regular(path, MAX_SEGMENT_READ)
        candidates: set[int] = set()
        for needle in needles:
            own = first_of[needle.decode()]
            if own >= last:
                continue  # nothing of this segment comes at or after this id's first seq
            # Search from the id's own first entry in this segment on (its bytes' offset).
            at = log.location(own).offset - begin if own > lo else 0
            for rel in _positions(data, needle, at):
                pos = begin + rel
                if pos >= limit:
                    break  # beyond `below` (or a torn tail): not part of this selection
                candidates.add(_seq_at(log, lo, last, pos, path))
        for seq in sorted(candidates):
            e = log.entry(seq)
            if wanted(e):
                out[seq] = e
    return out


def check_heads(log: Log, claimed: Mapping[str, int], below: int, touched: Touched) -> None:
    """Hold a derived table's heads to the log: entry `claimed[m]` touches m, no later one below `below` does.

    A writer fills each new entry's back-chain pointers from the projection's
    newest touch of each memory; a row deleted from that table would make it
    sign a pointer that skips an entry. This reads the claimed head and
    searches only the log after it, so the cost follows what was appended
    since the memory was last touched, not the log's size. Raises
    VerificationError (`projection.head`) naming the memory, the claim and the
    log's answer.
    """
    _check_heads(log, claimed, below, touched, {})


def _check_heads(
    log: Log,
    claimed: Mapping[str, int],
    below: int,
    touched: Touched,
    known: Mapping[str, int],
    leaves: dict[int, bytes] | None = None,
) -> None:
    """`check_heads`, where `known[m]` (for some m with a claim) says the log's entry `claimed[m]`
    was found to touch m, and no entry after it below `known[m]`: those heads are not read, and m
    is searched for from `known[m]` on. `leaves` receives the leaf hash of each head it reads."""
    if not claimed:
        return
    if not known and len(claimed) > MANY_IDS and all(0 <= h < below for h in claimed.values()):
        _check_many_heads(log, claimed, below, touched)
        return
    at: dict[int, set[str]] = {}  # each head entry read once (a pack is the head of many)
    for m, h in sorted(claimed.items()):
        if m in known:
            continue  # found to touch m already (never a bad head: the first one raised is the same)
        if 0 <= h < below and h not in at:
            e = log.entry(h)
            at[h] = set(touched(e))
            if leaves is not None:
                leaves[h] = hash_leaf(e.raw)
        if not 0 <= h < below or m not in at[h]:
            raise _bad_head(m, h)
    # Each memory is searched for only after its own head: a memory touched by every recent
    # entry (one that every context pack quotes) does not make the others' older heads select
    # all those entries for decoding.
    starts = {m: known[m] if m in known else h + 1 for m, h in claimed.items()}
    later = entries_touching(log, claimed, below, touched, start=min(starts.values()), starts=starts)
    for seq, e in sorted(later.items()):
        for m in touched(e):
            if m in claimed and seq > claimed[m]:
                raise _missing_touch(m, claimed[m], seq)


class KnownHeads:
    """What one process has found out about its memories' heads, so a writer's next head check
    reads only what it has not seen (`check_heads`, with a memory of the log).

    Two kinds of knowledge, both held to the log's leaves:

    * per memory, from a `check` that read its head entry and searched the log after it, or from
      `signed` (the entries this process's writer has just signed: their leaves are the
      writer's receipts, what each touches is read from the very payload it encoded, by the same
      rule): a head seq, that entry's leaf, and a seq `upto` such that no entry after the head
      below `upto` touches the memory;
    * after `COPY_AFTER` checks on one open log (a long-lived process: a one-shot command never
      pays for it), a copy of every memory's newest touch, made in one pass over the log with
      each entry's bytes held to the index's leaf (the index is written under the writer lock)
      and then kept up with the log: by `signed`, or by reading the entries appended since.

    A memory's knowledge is used only when the projection claims that same head, and only after
    the head entry's bytes, read again from the segment, still hash to the leaf the knowledge
    came with (`Log.raw` holds them to the index too). A claim that differs (a row deleted or
    altered by another process, a log appended by another writer and folded since) or a head
    rewritten on disk takes the full check, entry by entry, and raises what `check_heads`
    raises; the log after what is known is searched as before. What is taken on trust is that
    an entry already read, or searched, has not been rewritten in place since, and that the
    entries the copy was made from are canonical CBOR (their leaves match the index, but only
    `Log.entry` re-encodes them): both are the log's own promises, which `mnemolog log verify`
    holds.
    """

    #: Past this many memories the per-memory knowledge is dropped and gathered again.
    LIMIT = 100_000
    #: Checks on one open log before the copy of every memory's head is made.
    COPY_AFTER = 3

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._log_id: bytes | None = None
        self._heads: dict[str, tuple[int, bytes, int]] = {}
        self._checks = 0
        # The copy: every memory's newest touching seq among entries [0, _upto), and the leaf of
        # entry _upto - 1 (a log replaced under the same directory shows there first).
        self._copy: dict[str, int] | None = None
        self._upto = 0
        self._upto_leaf = b""

    def _for(self, log: Log) -> dict[str, tuple[int, bytes, int]]:
        """The knowledge about `log` (dropped when the home's log is another one)."""
        if self._log_id != log.log_id or len(self._heads) > self.LIMIT:
            self._log_id = log.log_id
            self._heads = {}
            self._copy = None
        return self._heads

    def _follow(self, log: Log, below: int, touched: Touched) -> dict[str, int] | None:
        """The copy of every memory's head among entries [0, below), made or brought up to it
        (None: not made yet, or it cannot answer for `below`)."""
        if self._copy is None:
            if self._checks < self.COPY_AFTER:
                return None
            self._copy, self._upto, self._upto_leaf = {}, 0, b""
        if below < self._upto or (self._upto and log.leaf(self._upto - 1) != self._upto_leaf):
            self._copy = None  # the log is not the one copied (or the tables are behind it)
            return None
        if below > self._upto:
            leaf = _leaves(log, self._upto, below)
            copy = self._copy
            last = b""
            for e in log.iter_entries(self._upto, below):
                last = leaf(e.seq)
                if hash_leaf(e.raw) != last:
                    self._copy = None
                    return None  # the full check reads it again and says why
                for m in touched(e):
                    copy[m] = e.seq
            self._upto, self._upto_leaf = below, last
        return self._copy

    def check(self, log: Log, claimed: Mapping[str, int], below: int, touched: Touched) -> None:
        """`check_heads(log, claimed, below, touched)`: the same answer and the same error."""
        if not claimed:
            return
        with self._lock:
            heads = self._for(log)
            self._checks += 1
            try:
                copy = self._follow(log, below, touched)
            except (MnemologError, OSError):
                self._copy, copy = None, None  # the full check reads the log and says why
            known: dict[str, int] = {}
            same: dict[int, bool] = {}  # each head entry's bytes hashed once
            leaves: dict[int, bytes] = {}
            for m, h in claimed.items():
                if not 0 <= h < below:
                    continue
                k = heads.get(m)
                if copy is not None and copy.get(m) == h:
                    leaf, upto = (k[1] if k is not None and k[0] == h else log.leaf(h)), below
                elif k is not None and k[0] == h:
                    leaf, upto = k[1], min(k[2], below)
                else:
                    continue
                if h not in same:
                    try:
                        same[h] = hash_leaf(log.raw(h)) == leaf
                    except (MnemologError, OSError):
                        same[h] = False  # the full check reads it again and says why
                if same[h]:
                    known[m] = upto
                    leaves[h] = leaf
            try:
                _check_heads(log, claimed, below, touched, known, leaves)
            except BaseException:
                for m in claimed:
                    heads.pop(m, None)  # what a failed check named is read afresh next time
                raise
            if copy is not None and any(m not in known and copy.get(m) != h for m, h in claimed.items()):
                self._copy = None  # the log's answer differs from the copy's: make it again
            for m, h in claimed.items():
                if h in leaves:
                    heads[m] = (h, leaves[h], below)

    @property
    def learning(self) -> bool:
        """Whether `signed` would keep anything (a check has read this log since it was made)."""
        return self._log_id is not None

    def signed(self, touches: Sequence[Iterable[str]], receipts: Sequence[Receipt]) -> None:
        """After this process's writer appended a batch: `touches[i]` are the memories the i-th
        entry touches (by the check's rule, from the payload it signed), `receipts` the batch's."""
        if len(touches) != len(receipts) or not receipts:
            return
        first = receipts[0].seq
        if any(r.seq != first + i for i, r in enumerate(receipts)):
            return  # not one run of entries: learn nothing
        end = first + len(receipts)
        with self._lock:
            if self._log_id is None:
                return  # nothing learnt about any log yet: the first check reads the log
            if len(self._heads) > self.LIMIT:
                self._heads = {}
            extend = self._copy is not None and self._upto == first
            for ms, r in zip(touches, receipts, strict=True):
                for m in ms:
                    self._heads[m] = (r.seq, r.leaf, end)
                    if extend:
                        assert self._copy is not None
                        self._copy[m] = r.seq
            if extend:
                self._upto, self._upto_leaf = end, receipts[-1].leaf


def _check_many_heads(log: Log, claimed: Mapping[str, int], below: int, touched: Touched) -> None:
    """`check_heads` of many memories (a bulk erasure's thousands): one sequential pass from the
    oldest head, instead of a read of each head and then that pass; the same entries are judged by
    the same rule, and the same error is raised first (the first bad head in memory order, else
    the first later touch in seq order)."""
    heads: dict[int, list[str]] = {}
    for m, h in claimed.items():
        heads.setdefault(h, []).append(m)
    start = min(heads)
    leaf = _leaves(log, start, below)
    bad: list[str] = []
    later: tuple[str, int] | None = None
    for e in log.iter_entries(start, below):
        got = list(touched(e))
        here = heads.get(e.seq)
        if here is None and not any(m in claimed for m in got):
            continue
        _checked(e, leaf)  # as `entries_touching` checks every entry it selects
        if here is not None:
            bad += [m for m in here if m not in got]
        if later is None:
            later = next(((m, e.seq) for m in got if m in claimed and e.seq > claimed[m]), None)
    if bad:
        m = min(bad)
        raise _bad_head(m, claimed[m])
    if later is not None:
        raise _missing_touch(later[0], claimed[later[0]], later[1])


def _bad_head(m: str, h: int) -> VerificationError:
    return VerificationError(
        f"the projection says entry {h} is the newest touching memory {m}, but the log's "
        f"entry {h} does not touch it: the projection was altered; run `mnemolog rebuild` "
        "(and `mnemolog log verify`)",
        check="projection.head",
        seq=h,
        field="touches",
        found=h,
    )


def _missing_touch(m: str, claim: int, seq: int) -> VerificationError:
    return VerificationError(
        f"the projection says entry {claim} is the newest touching memory {m}, "
        f"but the log's entry {seq} touches it too: a row is missing from the "
        "projection's touches table; run `mnemolog rebuild` before writing (no "
        "back-chain pointer was signed)",
        check="projection.head",
        seq=seq,
        field="touches",
        expected=seq,
        found=claim,
    )


_KNOWN: weakref.WeakKeyDictionary[Log, KnownHeads] = weakref.WeakKeyDictionary()
_KNOWN_LOCK = threading.Lock()


def known_heads(log: Log) -> KnownHeads:
    """The process's `KnownHeads` for this open log (one per `Log` object, gone with it)."""
    with _KNOWN_LOCK:
        k = _KNOWN.get(log)
        if k is None:
            k = _KNOWN[log] = KnownHeads()
        return k
