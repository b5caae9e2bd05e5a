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

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from mnemolog.eventlog.errors import DecodeError, VerificationError
from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.format.merkle import hash_leaf
from mnemolog.eventlog.store.fsio import open_regular, read_regular
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
    if not claimed:
        return
    if len(claimed) > MANY_IDS and all(0 <= h < below for h in claimed.values()):
        _check_many_heads(log, claimed, below, touched)
        return
    at: dict[int, set[str]] = {}  # each head entry read once (a pack is the head of many)
    for m, h in sorted(claimed.items()):
        if 0 <= h < below and h not in at:
            at[h] = set(touched(log.entry(h)))
        if not 0 <= h < below or m not in at[h]:
            raise _bad_head(m, h)
    # Each memory is searched for only after its own head: a memory touched by every recent
    # entry (one that every context pack quotes) does not make the others' older heads select
    # all those entries for decoding.
    later = entries_touching(
        log,
        claimed,
        below,
        touched,
        start=min(claimed.values()) + 1,
        starts={m: h + 1 for m, h in claimed.items()},
    )
    for seq, e in sorted(later.items()):
        for m in touched(e):
            if m in claimed and seq > claimed[m]:
                raise _missing_touch(m, claimed[m], seq)


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
