"""Whole-log exports: a contiguous run of entries with what it takes to check it elsewhere.

An export file is an RFC 8742 CBOR sequence. The first item is a header
map; then come the entries `start .. start + count - 1`, each exactly the
bytes it has in the log's segments:

    {"format": "mnemolog/log-export/v1", "log_id": bytes(16),
     "start": A, "count": k, "tree_size": n, "checkpoint": bytes (signed note),
     "key_entries": [entry bytes, ...],      genesis and every rotation below n
     "key_proofs": [[seq, [hash, ...]], ...], an inclusion proof for each
     "range_proof": [hash, ...]}              the range [A, A + k) in the tree of size n

The range proof holds the hashes of the maximal subtrees outside the range,
in the order the RFC 9162 tree recursion meets them (left to right); with
the range's own leaves they rebuild the root of size n. For a whole log
(A = 0, k = n) it is empty. Nothing in the header needs its own signature:
the checkpoint is signed, and every other field is checked against it.
The module is part of the standalone verifier (stdlib, cbor2, pynacl).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import cbor2

from mnemolog.eventlog.bundle import offline
from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.format import codec, merkle
from mnemolog.eventlog.format.entry import ZERO_HASH, Entry
from mnemolog.eventlog.format.note import Checkpoint
from mnemolog.eventlog.progress import Progress
from mnemolog.eventlog.store.log import GENESIS_TYPE, ROTATION_TYPE
from mnemolog.eventlog.verify.trust import KeySchedule, TrustPolicy

FORMAT = "mnemolog/log-export/v1"
HEADER_KEYS = {
    "format",
    "log_id",
    "start",
    "count",
    "tree_size",
    "checkpoint",
    "key_entries",
    "key_proofs",
    "range_proof",
}
FILE = "export"


def range_proof(start: int, end: int, size: int, subtree: Callable[[int, int], bytes]) -> list[bytes]:
    """Hashes of the maximal subtrees of the tree of `size` that lie outside [start, end)."""
    if not 0 <= start < end <= size:
        raise ValueError(f"no range [{start}, {end}) in a tree of size {size}")
    out: list[bytes] = []

    def walk(lo: int, hi: int) -> None:
        if hi <= start or lo >= end:
            out.append(subtree(lo, hi))
        elif not (start <= lo and hi <= end):
            k = merkle.split_point(hi - lo)
            walk(lo, lo + k)
            walk(lo + k, hi)

    walk(0, size)
    return out


def root_from_range(start: int, leaves: Sequence[bytes], size: int, proof: Sequence[bytes]) -> bytes:
    """The root of the tree of `size` from the leaves of [start, start + len) and a range proof."""
    end = start + len(leaves)
    if not 0 <= start < end <= size:
        raise offline.fail(f"no range [{start}, {end}) in a tree of size {size}", "range.bounds")
    if any(not isinstance(h, bytes) or len(h) != 32 for h in proof):
        raise offline.fail("range proof hashes must be 32 bytes", "range.hash_length")
    pos = 0

    def walk(lo: int, hi: int) -> bytes:
        nonlocal pos
        if hi <= start or lo >= end:
            if pos >= len(proof):
                raise offline.fail("the range proof is too short", "range.length", found=len(proof))
            h = proof[pos]
            pos += 1
            return h
        if start <= lo and hi <= end:
            return merkle.root_of(leaves[lo - start : hi - start])
        k = merkle.split_point(hi - lo)
        left = walk(lo, lo + k)
        return merkle.hash_children(left, walk(lo + k, hi))

    root = walk(0, size)
    if pos != len(proof):
        raise offline.fail(
            "the range proof has unused hashes", "range.length", expected=pos, found=len(proof)
        )
    return root


def encode_header(
    *,
    log_id: bytes,
    start: int,
    count: int,
    checkpoint: Checkpoint,
    checkpoint_raw: bytes,
    key_entries: Sequence[Entry],
    key_proofs: dict[int, list[bytes]],
    proof: list[bytes],
) -> bytes:
    return codec.encode(
        {
            "format": FORMAT,
            "log_id": log_id,
            "start": start,
            "count": count,
            "tree_size": checkpoint.size,
            "checkpoint": checkpoint_raw,
            "key_entries": [e.raw for e in key_entries],
            "key_proofs": [[e.seq, key_proofs[e.seq]] for e in key_entries],
            "range_proof": proof,
        }
    )


def write_export(out: BinaryIO, header: bytes, raw_entries: Iterable[bytes]) -> int:
    """Write the header and the entries; return the bytes written."""
    n = out.write(header)
    for raw in raw_entries:
        n += out.write(raw)
    return n


@dataclass
class VerifiedExport:
    start: int
    count: int
    tree_size: int
    log_id: bytes
    checkpoint: bytes
    entries: list[Entry]
    keys: KeySchedule
    trust: dict[str, Any]

    def summary(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "count": self.count,
            "last": self.start + self.count - 1,
            "tree_size": self.tree_size,
            "log_id": self.log_id.hex(),
            "origin": self.keys.origin,
            "keys": [ep.key.vkey() for ep in self.keys.epochs],
            "trust": self.trust,
        }


def _header(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise offline.fail("the export does not start with a header map", "export.header", file=FILE)
    offline.require_keys(value, HEADER_KEYS, FILE, "export.header")
    if value["format"] != FORMAT:
        raise offline.fail(
            f"export format {value['format']!r}, this reader knows {FORMAT}",
            "export.format",
            file=FILE,
            expected=FORMAT,
            found=value["format"],
        )
    return value


def verify_export(data: bytes, *, policy: TrustPolicy, progress: bool | None = None) -> VerifiedExport:
    """Check an export completely (see the module docstring); return its entries or raise."""
    try:
        return _verify(data, policy, progress)
    except VerificationError:
        raise
    except (
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        AttributeError,
        OverflowError,
        RecursionError,
    ) as exc:
        raise offline.wrap_unexpected(exc, "export") from exc


def _verify(data: bytes, policy: TrustPolicy, progress: bool | None) -> VerifiedExport:
    stream = io.BytesIO(data)
    dec = cbor2.CBORDecoder(stream)
    try:
        dec.decode()
    except (cbor2.CBORError, ValueError, OverflowError, MemoryError, RecursionError) as exc:
        raise offline.fail(
            f"the export does not start with a CBOR header: {exc}", "export.header", file=FILE
        ) from None
    header_end = stream.tell()
    h = _header(offline.decode_map(data[:header_end], FILE, "export.header"))
    start = offline.as_int(h["start"], "start", FILE, "export.header")
    count = offline.as_int(h["count"], "count", FILE, "export.header")
    size = offline.as_int(h["tree_size"], "tree_size", FILE, "export.header")
    if count == 0 or start + count > size:
        raise offline.fail(
            f"the export's range [{start}, {start + count}) is empty or beyond the tree of size {size}",
            "export.range",
            file=FILE,
        )
    if not isinstance(h["checkpoint"], bytes):
        raise offline.fail("checkpoint must be bytes", "export.header", file=FILE)
    key_raw = offline.as_list(h["key_entries"], "key_entries", FILE, "export.header")
    key_entries = []
    for i, raw in enumerate(key_raw):
        if not isinstance(raw, bytes):
            raise offline.fail("key entries must be entry bytes", "export.header", file=FILE)
        key_entries.append(offline.parse_entry_item(raw, offline.decode_any(raw, FILE), FILE, i))
    keys = offline.key_schedule(key_entries, FILE)
    trust = policy.check(keys).to_json()
    cp = offline.open_trusted_checkpoint(h["checkpoint"], keys, FILE)
    if cp.size != size:
        raise offline.fail(
            f"the header says tree size {size}, the checkpoint {cp.size}",
            "export.header",
            file=FILE,
            expected=cp.size,
            found=size,
        )
    if h["log_id"] != keys.log_id:
        raise offline.fail("the header's log_id is not the genesis entry's", "export.header", file=FILE)
    proofs = offline.as_list(h["key_proofs"], "key_proofs", FILE, "export.header")
    if len(proofs) != len(key_entries):
        raise offline.fail("one inclusion proof per key entry", "export.key_proofs", file=FILE)
    for e, item in zip(key_entries, proofs, strict=True):
        if not (isinstance(item, list) and len(item) == 2 and item[0] == e.seq and isinstance(item[1], list)):
            raise offline.fail(f"no proof for key entry {e.seq}", "export.key_proofs", seq=e.seq, file=FILE)
        try:
            merkle.verify_inclusion(e.seq, size, e.leaf, item[1], cp.root)
        except VerificationError as exc:
            raise offline.fail(exc.message, exc.check, seq=e.seq, file=FILE) from exc
    key_by_seq = {e.seq: e for e in key_entries}
    entries: list[Entry] = []
    prog = Progress("verifying export", count, enabled=progress)
    prev = ZERO_HASH if start == 0 else None
    try:
        for i, (raw, value) in enumerate(offline.split_sequence(data[header_end:], FILE)):
            seq = start + i
            if i >= count:
                raise offline.fail(
                    f"the export holds more than the {count} entries its header announces",
                    "export.count",
                    file=FILE,
                    expected=count,
                )
            e = offline.parse_entry_item(raw, value, FILE, i + 1)
            if e.seq != seq:
                raise offline.fail(
                    f"entry {i} of the export has seq {e.seq}, expected {seq}",
                    "entry.seq",
                    seq=seq,
                    file=FILE,
                    expected=seq,
                    found=e.seq,
                )
            if prev is not None and e.prev != prev:
                raise offline.fail(
                    f"entry {seq} does not chain to entry {seq - 1}",
                    "entry.prev",
                    seq=seq,
                    file=FILE,
                    expected=prev.hex(),
                    found=e.prev.hex(),
                )
            if e.type in (GENESIS_TYPE, ROTATION_TYPE):
                known = key_by_seq.get(seq)
                if known is None or known.raw != e.raw:
                    raise offline.fail(
                        f"entry {seq} is a key event that the header's key history lacks",
                        "keys.missing",
                        seq=seq,
                        file=FILE,
                    )
            keys.check_entry(e, FILE)
            entries.append(e)
            prev = e.leaf
            if i % 4096 == 0:
                prog.advance(4096 if i else 1)
    finally:
        prog.close()
    if len(entries) != count:
        raise offline.fail(
            f"the export holds {len(entries)} entries, its header announces {count} (truncated)",
            "export.count",
            file=FILE,
            expected=count,
            found=len(entries),
        )
    range_hashes = offline.as_list(h["range_proof"], "range_proof", FILE, "export.header")
    root = root_from_range(start, [e.leaf for e in entries], size, range_hashes)
    if root != cp.root:
        raise offline.fail(
            f"the entries [{start}, {start + count}) and the range proof do not give the signed root",
            "range.root",
            file=FILE,
            expected=cp.root.hex(),
            found=root.hex(),
        )
    return VerifiedExport(start, count, size, keys.log_id, h["checkpoint"], entries, keys, trust)
