"""The whole log's back-chains and committed heads, folded from the entries and checked.

A forensic bundle's completeness rests on two signed statements inside the
log (docs/forensics.md §3a): each entry's `touch_prev` pointers and each
`heads.committed` root. Both are claims about the log itself, so anyone
holding it can check them by folding it: this module is that fold, run by
`log verify` after every byte, signature and checkpoint was checked.

For each entry in seq order, with `heads[m]` the newest earlier entry
touching memory m (absent: none):

- an entry whose type and version carry back-chains (`vocabulary.chained`)
  must, for every memory it touches and names in `touch_prev`, name exactly
  `heads[m]` (or `FIRST_TOUCH` when there is none) — `backchain.pointer`
  otherwise. A pointer left out is no claim and is counted, not failed (the
  bundle verifier already refuses a bundle that needs it);
- a `heads.committed` entry of size L must state the root and count of the
  heads map of the first L entries — `heads.committed` otherwise.

Pure: entries in, a summary or a VerificationError out. Standard library
only (plus the vocabulary and the heads map of this package).
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.format.heads import heads_root
from mnemolog.eventlog.vocabulary import events as vocabulary

__all__ = ["BackChainSummary", "BackChains", "ChainFold", "Digest", "check_back_chains", "digest"]


@dataclass
class BackChainSummary:
    entries: int = 0
    pointers: int = 0  # touch_prev values checked
    unpointed: int = 0  # (entry, memory) pairs of chained types that carry no pointer
    commitments: int = 0  # heads.committed entries checked

    def to_json(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "pointers_checked": self.pointers,
            "pointers_missing": self.unpointed,
            "heads_commitments_checked": self.commitments,
        }


# What the fold needs of one entry, computed from it alone (so a worker process that decoded
# the entry can hand it over): (seq, type, the memory ids it touches, its back-chain pointers
# or None when its type and version carry none); for heads.committed, (seq, type, (size, root,
# count) as found). None: the entry touches no memory.
Digest = tuple[int, str, list[str] | tuple[Any, Any, Any], dict[str, int] | None]


def digest(seq: int, type_: str, tv: int, data: dict[str, Any]) -> Digest | None:
    """The part of an entry the back-chain fold reads (see `Digest`). Pure."""
    if type_ == vocabulary.HEADS_COMMITTED:
        return (seq, type_, (data.get("size"), data.get("root"), data.get("count")), None)
    if type_ not in vocabulary.TOUCHES:  # touches nothing at any tv: no payload to upcast
        return None
    touched = vocabulary.touched_ids(type_, vocabulary.upcast(type_, tv, data))
    if not touched:
        return None
    pointers = vocabulary.read_touch_prev(data) if vocabulary.chained(type_, tv) else None
    return (seq, type_, touched, pointers)


class BackChains:
    """Feed entries in seq order; raises on the first false pointer or false commitment."""

    def __init__(self, file: str | None = None) -> None:
        self.file = file
        # Every touching seq of each memory, ascending: the last one is its head, and the
        # heads as of any earlier size L are one bisection away (a commitment may name
        # an L below its own seq when another process appended in between).
        self._seqs: dict[str, array[int]] = {}
        self.summary = BackChainSummary()

    def feed(self, e: Entry) -> None:
        self.apply(digest(e.seq, e.type, e.tv, e.data))

    def apply_run(self, n: int, digests: list[Digest]) -> None:
        """Fold a run of `n` entries given the digests of those that have one, in seq order."""
        self.summary.entries += n - len(digests)
        for d in digests:
            self.apply(d)

    def apply(self, d: Digest | None) -> None:
        """Fold one entry's digest (`digest`), in seq order."""
        self.summary.entries += 1
        if d is None:
            return
        seq, type_, touched, pointers = d
        if type(touched) is tuple:
            self._commitment(seq, touched)
            return
        assert type(touched) is list
        for m in touched:
            seqs = self._seqs.get(m)
            if pointers is not None:
                head = seqs[-1] if seqs else vocabulary.FIRST_TOUCH
                got = pointers.get(m)
                if got is None:
                    self.summary.unpointed += 1
                elif got != head:
                    raise VerificationError(
                        f"entry {seq} ({type_}) says the previous entry touching memory {m} is "
                        + ("none" if got == vocabulary.FIRST_TOUCH else f"entry {got}")
                        + ", but the log's is "
                        + ("none" if head == vocabulary.FIRST_TOUCH else f"entry {head}")
                        + ": a false back-chain pointer (a bundle of this memory could omit entries)",
                        check="backchain.pointer",
                        seq=seq,
                        file=self.file,
                        field=f"data.touch_prev[{m!r}]",
                        expected=head,
                        found=got,
                    )
                else:
                    self.summary.pointers += 1
            if seqs is None:
                self._seqs[m] = array("q", [seq])
            else:
                seqs.append(seq)

    def heads_at(self, size: int) -> dict[str, int]:
        """Each memory's newest touching seq among the first `size` entries fed."""
        out: dict[str, int] = {}
        for m, seqs in self._seqs.items():
            if seqs[-1] < size:
                out[m] = seqs[-1]
            else:
                i = bisect.bisect_left(seqs, size)
                if i:
                    out[m] = seqs[i - 1]
        return out

    def _commitment(self, seq: int, claim: tuple[Any, Any, Any]) -> None:
        size, root, count = claim
        if (
            isinstance(size, bool)
            or not isinstance(size, int)
            or not 0 <= size <= seq
            or not isinstance(root, bytes)
            or isinstance(count, bool)
            or not isinstance(count, int)
        ):
            raise VerificationError(
                f"entry {seq} (heads.committed) is malformed: size must be an unsigned integer "
                "no larger than its seq, root bytes and count an unsigned integer",
                check="heads.committed",
                seq=seq,
                file=self.file,
                field="data",
            )
        heads = self.heads_at(size)
        want = heads_root(heads)
        if root != want or count != len(heads):
            raise VerificationError(
                f"entry {seq} (heads.committed) commits to the heads of the first {size} entries "
                f"as root {root.hex()} over {count} memories, but the log's heads give root "
                f"{want.hex()} over {len(heads)}: a false commitment",
                check="heads.committed",
                seq=seq,
                file=self.file,
                field="data.root" if root != want else "data.count",
                expected={"root": want.hex(), "count": len(heads)},
                found={"root": root.hex(), "count": count},
            )
        self.summary.commitments += 1


@dataclass
class ChainFold:
    """The fold as `log verify` runs it, fed from the entries its checks decode (nothing is
    decoded twice); its first failure is kept, not raised, until every byte, signature and
    checkpoint has been checked, which is when its verdict counts (format.md §8 item 11).
    Off for a hashes-only verify, which decodes no payload."""

    enabled: bool
    chains: BackChains = field(default_factory=BackChains)
    failed: VerificationError | None = None

    def feed(self, n: int, digests: list[Digest], fname: str) -> None:
        """Fold the digests of `n` checked entries of file `fname`, in seq order."""
        if not self.enabled or self.failed is not None:
            return
        self.chains.file = fname
        try:
            self.chains.apply_run(n, digests)
        except VerificationError as exc:
            self.failed = exc


def check_back_chains(entries: Iterable[Entry], file: str | None = None) -> BackChainSummary:
    """Fold `entries` (a whole log from seq 0, in order) and check every pointer and commitment."""
    fold = BackChains(file)
    for e in entries:
        fold.feed(e)
    return fold.summary
