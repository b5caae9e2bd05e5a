"""The work `log verify` hands to worker processes: checking the entries in one slice of a segment.

Two kinds of task, both pure functions of a file's bytes and a key schedule:

- `verify_span` (sequential pass): canonical bytes and signatures of entries
  whose boundaries this process has already found; returns the first
  `Failure` or None.
- `check_hinted_chunk` (hinted pass): decode the entries the untrusted index
  places in one chunk and check everything a run of entries can show; returns
  `ChunkOk` (leaf hashes, first prev, key events, genesis log id, and what
  the back-chain fold needs of each entry, so nobody decodes it again) or
  `ChunkDoubt`, never a verdict: any doubt sends the log to the sequential
  pass. The entry shape is `entry.entry_problem`, the same rule the decoder
  applies, so the fast pass accepts nothing the sequential pass would refuse
  (a property test holds the two passes to the same verdict).
"""

from __future__ import annotations

import hashlib
import io
import os
from typing import Any, NamedTuple

import cbor2
import nacl.bindings
from nacl.exceptions import BadSignatureError, CryptoError

from mnemolog.eventlog.errors import DecodeError, VerificationError
from mnemolog.eventlog.format import codec
from mnemolog.eventlog.format.entry import (
    ENTRY_DOMAIN,
    PAYLOAD_DEPTH,
    SIG_PAIR_LEN,
    entry_from_map,
    entry_problem,
    sig_offset,
    tbs_from_raw,
)
from mnemolog.eventlog.format.keys import verify_signature
from mnemolog.eventlog.store.fsio import open_regular
from mnemolog.eventlog.store.index import LOC
from mnemolog.eventlog.store.segments import MAX_ENTRY_BYTES
from mnemolog.eventlog.verify.backchain import Digest, digest
from mnemolog.eventlog.verify.trust import GENESIS_TYPE, LOG_ID_LEN, ROTATION_TYPE, key_from_data

# (first seq, public key, key id) per key epoch: KeySchedule.packed(), picklable for workers.
Packed = list[tuple[int, bytes, bytes]]
# The canonical order of an entry's keys: a decoded map keeps its encoded order.
ENTRY_KEY_ORDER = ("v", "ts", "tv", "kid", "seq", "sig", "data", "prev", "type")
# The to-be-signed bytes begin with the domain and the head of the 8-pair map (tbs_from_raw).
TBS_HEAD = ENTRY_DOMAIN + b"\xa8"
KEY_EVENT_TYPES = frozenset((GENESIS_TYPE, ROTATION_TYPE))


class Failure(NamedTuple):
    """A verification failure found by a worker, to be raised by the verifier."""

    seq: int
    check: str
    message: str
    expected: Any = None
    found: Any = None

    def error(self) -> VerificationError:
        return VerificationError(
            self.message, check=self.check, seq=self.seq, expected=self.expected, found=self.found
        )


class ChunkOk(NamedTuple):
    leaves: bytes  # the chunk's leaf hashes, concatenated
    first_prev: bytes  # `prev` of its first entry
    events: list[tuple[int, str, bytes]]  # key events seen: (seq, key name, public key)
    log_id: bytes | None  # the genesis log id, when the chunk starts the log
    digests: list[Digest]  # backchain.digest of its entries that have one, in seq order


class ChunkDoubt(NamedTuple):
    seq: int
    why: str


ChunkResult = ChunkOk | ChunkDoubt


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


def verify_span(path: str, start: int, end: int, first_seq: int, schedule: Packed) -> Failure | None:
    """Sequential-pass task: canonical bytes and signatures of the entries in path[start:end]."""
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
            return Failure(seq, exc.check, exc.message, exc.expected, exc.found)
        pos = nxt
        seq += 1
    return None


def check_hinted_chunk(
    path: str,
    locs: bytes,
    first_seq: int,
    seg_first: int,
    schedule: Packed,
    hashes_only: bool,
) -> ChunkResult:
    """Hinted-pass task: decode and check the entries the hint places in one chunk.

    Everything a single entry (or a run of entries) can show is checked here;
    the links to neighbouring chunks, the key schedule and the Merkle tree are
    the caller's.
    """
    n = len(locs) // LOC.size
    if n == 0 or len(locs) != n * LOC.size:
        return ChunkDoubt(first_seq, "empty or ragged location hint")
    first = LOC.unpack_from(locs, 0)
    last = LOC.unpack_from(locs, (n - 1) * LOC.size)
    start, end = first[1], last[1] + last[2]
    if end <= start or end - start > n * MAX_ENTRY_BYTES:
        return ChunkDoubt(first_seq, "location hint out of order")
    try:
        with open_regular(path) as f:
            buf = os.pread(f.fileno(), end - start, start)
    except OSError as exc:
        return ChunkDoubt(first_seq, f"cannot read {path}: {exc}")
    if len(buf) != end - start:
        return ChunkDoubt(first_seq, "segment shorter than the hint")
    stream = io.BytesIO(buf)
    decode = cbor2.CBORDecoder(stream).decode
    tell = stream.tell
    sha256 = hashlib.sha256
    scan = codec.is_plain
    dumps = cbor2.dumps
    sign_open = nacl.bindings.crypto_sign_open
    problem = entry_problem
    order = ENTRY_KEY_ORDER
    leaves: list[bytes] = []
    digests: list[Digest] = []
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
    # Every entry passes through here once: the loop reads each field once, calls the
    # signature binding itself (the to-be-signed bytes built in the one concatenation
    # crypto_sign_open needs) and tests the rare cases (key events) last.
    for segf, off, length in LOC.iter_unpack(locs):
        if segf != seg_first or off != start + pos:
            return ChunkDoubt(seq, "location hint is not contiguous")
        try:
            m = decode()
        except Exception:
            return ChunkDoubt(seq, "undecodable bytes at a hinted boundary")
        nxt = pos + length
        if tell() != nxt:
            return ChunkDoubt(seq, "hinted length differs from the item's")
        raw = buf[pos:nxt]
        pos = nxt
        if seq == next_epoch:
            si += 1
            next_epoch = schedule[si + 1][0] if si + 1 < len(schedule) else -1
            pk, kid = schedule[si][1], schedule[si][2]
        # The decoder's shape rule, plus the canonical key order.
        if tuple(m) != order or problem(m) is not None:
            return ChunkDoubt(seq, "entry shape")
        if m["seq"] != seq:
            return ChunkDoubt(seq, "entry seq")
        typ, data, pv = m["type"], m["data"], m["prev"]
        if prev is None:
            first_prev = pv
        elif pv != prev:
            return ChunkDoubt(seq, "prev chain")
        if not hashes_only:
            if m["kid"] != kid:
                return ChunkDoubt(seq, "key id")
            # A decoded map keeps its encoded key order, so when the payload is
            # plain, cbor2's default encoding must give back exactly `raw`.
            try:
                plain = scan(data, depth=PAYLOAD_DEPTH)
            except DecodeError:
                return ChunkDoubt(seq, "value model")
            if (dumps(m) if plain else dumps(m, canonical=True)) != raw:
                return ChunkDoubt(seq, "canonical")
            tv = m["tv"]
            at = sig_offset(seq, m["ts"], tv)
            try:  # keys.verify_signature's call (sizes are the shape rule's): signature || tbs
                sign_open(m["sig"] + TBS_HEAD + raw[1:at] + raw[at + SIG_PAIR_LEN :], pk)
            except (BadSignatureError, CryptoError, ValueError, TypeError):
                return ChunkDoubt(seq, "signature")
            d = digest(seq, typ, tv, data)
            if d is not None:
                digests.append(d)
        if seq == 0 or typ in KEY_EVENT_TYPES:
            if seq == 0:
                if typ != GENESIS_TYPE:
                    return ChunkDoubt(seq, "genesis type")
                lid = data.get("log_id")
                if type(lid) is not bytes or len(lid) != LOG_ID_LEN:
                    return ChunkDoubt(seq, "genesis log id")
                log_id = lid
            elif typ == GENESIS_TYPE:
                return ChunkDoubt(seq, "genesis repeated")
            try:
                key = key_from_data(data, typ, seq)
            except DecodeError:
                return ChunkDoubt(seq, "key event payload")
            events.append((seq, key.name, key.public_key))
        prev = sha256(b"\x00" + raw).digest()
        leaves.append(prev)
        seq += 1
    if len(leaves) != n:  # pragma: no cover - one leaf per hinted entry by construction
        return ChunkDoubt(first_seq, "leaf count")
    return ChunkOk(b"".join(leaves), first_prev, events, log_id, digests)


def check_hinted_chunk_safely(*args: Any) -> ChunkResult:
    try:
        return check_hinted_chunk(*args)
    except Exception as exc:  # pragma: no cover - a bug here must not decide a verdict
        return ChunkDoubt(-1, f"chunk check failed: {exc!r}")
