"""The forensic bundle format (v1, v2): file names, manifest keys, the signed bytes, the derived files.

What both the builder and the verifier must agree on, byte for byte: the
fixed file set, the manifest's keys and the domain-separated bytes its
signature covers, the columns of entries.parquet and how each row is made
from an entry, and the text of VERIFY.md. docs/forensics.md is the
specification. Standard library, cbor2 and pynacl only (through the
mnemolog.eventlog modules it uses), like the rest of the offline verifier.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from mnemolog.eventlog.bundle import memview, parquet
from mnemolog.eventlog.format import codec
from mnemolog.eventlog.format.entry import Entry, to_jsonable
from mnemolog.eventlog.vocabulary import events as vocabulary

FORMAT = "mnemolog/forensic-bundle/v1"
# v2 adds heads.cbor: the committed per-memory heads that make a bundle provably complete.
FORMAT_V2 = "mnemolog/forensic-bundle/v2"
# v3 makes the tables an auditor's SQL: entries.parquet with typed payload columns, BLOB hashes
# and the heads entry, and touches.parquet naming the memories of each entry.
FORMAT_V3 = "mnemolog/forensic-bundle/v3"
# v4 carries datakeys.cbor: the data keys (eventlog.sealing) of the bundle's sealed content that
# was not forgotten; views and packs are folded with them, and a forgotten memory's view says
# which of its fields stay sealed.
FORMAT_V4 = "mnemolog/forensic-bundle/v4"
FORMATS = (FORMAT, FORMAT_V2, FORMAT_V3, FORMAT_V4)
MANIFEST_DOMAIN = b"mnemolog/bundle-manifest/v1\x00"

MANIFEST = "manifest.cbor"
CHECKPOINT = "checkpoint"
KEYS = "keys.cbor"
ENTRIES = "entries.cbor"
PROOFS = "proofs.cbor"
PARQUET = "entries.parquet"
MEMORIES = "memories.json"
ENVELOPES = "envelopes.json"
VERIFY_MD = "VERIFY.md"
HEADS = "heads.cbor"
TOUCHES = "touches.parquet"
DATAKEYS = "datakeys.cbor"
# Every file but the manifest, which lists them all.
LISTED = (CHECKPOINT, ENTRIES, ENVELOPES, PARQUET, MEMORIES, PROOFS, KEYS, VERIFY_MD)
LISTED_V2 = (*LISTED, HEADS)
LISTED_V3 = (*LISTED_V2, TOUCHES)
LISTED_V4 = (*LISTED_V3, DATAKEYS)
HEADS_KEYS = {"entry", "inclusion", "proofs"}
# The log entry that commits the heads map: {"size": L, "root": bytes(32), "count": M}, the heads
# of the M memories touched among the first L entries (L <= its own seq).
HEADS_TYPE = vocabulary.HEADS_COMMITTED


def listed(fmt: str) -> tuple[str, ...]:
    """The files a bundle of format `fmt` holds besides its manifest."""
    return {FORMAT_V2: LISTED_V2, FORMAT_V3: LISTED_V3, FORMAT_V4: LISTED_V4}.get(fmt, LISTED)


MANIFEST_KEYS = {
    "format",
    "log_id",
    "origin",
    "memory_id",
    "include_chain",
    "memories",
    "unstored",
    "tree_size",
    "root",
    "key_seqs",
    "seqs",
    "envelopes",
    "files",
    "kid",
    "sig",
}

PARQUET_COLUMNS = (
    parquet.Column("seq", "int64"),
    parquet.Column("ts", "timestamp_us"),
    parquet.Column("type", "string"),
    parquet.Column("tv", "int64"),
    parquet.Column("kid", "string"),
    parquet.Column("memory_ids", "string"),
    parquet.Column("data", "string"),
    parquet.Column("prev", "string"),
    parquet.Column("leaf_hash", "string"),
    parquet.Column("sig", "string"),
    parquet.Column("entry", "binary"),
)


def json_compact(value: Any) -> str:
    return json.dumps(to_jsonable(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def entries_parquet(entries: Sequence[Entry]) -> bytes:
    """entries.parquet of formats v1 and v2: one row per bundle entry (key history included), by seq."""
    rows = [
        (
            e.seq,
            e.ts,
            e.type,
            e.tv,
            e.kid.hex(),
            json_compact(memview.touched_ids(e.type, e.data)),
            json_compact(e.data),
            e.prev.hex(),
            e.leaf.hex(),
            e.sig.hex(),
            e.raw,
        )
        for e in entries
    ]
    return parquet.write_table(PARQUET_COLUMNS, rows)


V3_COLUMNS = (
    parquet.Column("seq", "int64"),
    parquet.Column("ts", "timestamp_us"),
    parquet.Column("type", "string"),
    parquet.Column("tv", "int64"),
    parquet.Column("kid", "binary"),
    parquet.Column("prev", "binary"),
    parquet.Column("leaf_hash", "binary"),
    parquet.Column("sig", "binary"),
    parquet.Column("data", "string"),
    parquet.Column("entry", "binary"),
)
#: Typed payload columns are named by this prefix and the payload field.
PAYLOAD_PREFIX = "p_"
TOUCHES_COLUMNS = (parquet.Column("memory_id", "string"), parquet.Column("seq", "int64"))


def _payload_kind(values: Sequence[Any]) -> parquet.Kind:
    """The one Parquet kind of a payload field's values, or `string` (as JSON) when they differ."""
    kinds = set()
    for v in values:
        if isinstance(v, bool):
            kinds.add("boolean")
        elif isinstance(v, int) and -(2**63) <= v < 2**63:
            kinds.add("int64")
        elif isinstance(v, float):
            kinds.add("double")
        elif isinstance(v, bytes):
            kinds.add("binary")
        elif isinstance(v, str):
            kinds.add("text")
        else:
            kinds.add("json")
    if len(kinds) == 1 and (kind := next(iter(kinds))) not in ("text", "json"):
        return kind  # type: ignore[return-value]
    return "string"


def entries_parquet_v3(entries: Sequence[Entry]) -> bytes:
    """entries.parquet of format v3: one row per entry by seq, its payload as typed columns.

    Fixed columns first (hashes, key ids and signatures as BLOBs; `data` the
    signed payload as JSON); then one OPTIONAL column `p_<field>` per payload
    field any entry has, in name order, read from the payload as the current
    type version has it (upcast). A field whose values are all of one kind is
    that kind (BIGINT, DOUBLE, BOOLEAN, BLOB); text, lists, maps and mixed
    kinds are VARCHAR (text as it is, anything else as compact JSON).
    """
    ordered = sorted(entries, key=lambda e: e.seq)
    payloads = [vocabulary.upcast(e.type, e.tv, e.data) for e in ordered]
    fields = sorted({k for d in payloads for k in d if isinstance(k, str)})
    columns = list(V3_COLUMNS)
    typed: list[tuple[str, parquet.Kind]] = []
    for f in fields:
        kind = _payload_kind([d[f] for d in payloads if f in d])
        typed.append((f, kind))
        columns.append(parquet.Column(PAYLOAD_PREFIX + f, kind, optional=True))
    if len({c.name for c in columns}) != len(columns):
        raise ValueError("a payload field's column name collides with a fixed column")

    def cell(d: dict[Any, Any], f: str, kind: parquet.Kind) -> Any:
        if f not in d:
            return None
        v = d[f]
        if kind == "string" and not isinstance(v, str):
            return json_compact(v)
        return v

    rows = [
        (
            e.seq,
            e.ts,
            e.type,
            e.tv,
            e.kid,
            e.prev,
            e.leaf,
            e.sig,
            json_compact(e.data),
            e.raw,
            *(cell(d, f, kind) for f, kind in typed),
        )
        for e, d in zip(ordered, payloads, strict=True)
    ]
    return parquet.write_table(columns, rows)


def touches_parquet(entries: Sequence[Entry]) -> bytes:
    """touches.parquet: one row per (memory, entry that touches it), by seq then id."""
    rows = [
        (mid, e.seq)
        for e in sorted(entries, key=lambda e: e.seq)
        for mid in sorted(set(memview.entry_touched_ids(e)))
    ]
    return parquet.write_table(TOUCHES_COLUMNS, rows)


def manifest_tbs(manifest: dict[str, Any]) -> bytes:
    """The signed bytes: domain tag || canonical CBOR of the manifest without `sig`."""
    return MANIFEST_DOMAIN + codec.encode({k: v for k, v in manifest.items() if k != "sig"})


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def verify_md(
    memory_id: str, include_chain: bool, origin: str, size: int, n_entries: int, fmt: str = FORMAT_V3
) -> bytes:
    """VERIFY.md of a bundle of format `fmt` (the manifest's `format`, which it quotes)."""
    chain = "with its whole atomisation chain" if include_chain else "without the atomisation chain"
    query = QUERY_V3.format(memory_id=memory_id) if fmt in (FORMAT_V3, FORMAT_V4) else QUERY_V1
    return VERIFY_TEMPLATE.format(
        memory_id=memory_id,
        chain=chain,
        origin=origin,
        size=size,
        n_entries=n_entries,
        format=fmt,
        query=query,
    ).encode()


QUERY_V1 = """    duckdb -c "SELECT seq, ts, type, memory_ids, data FROM 'entries.parquet' ORDER BY seq\""""
# Every change to the bundle's memory, with the payload's own columns.
QUERY_V3 = (
    "    duckdb -c \"SELECT e.seq, e.ts, e.type, e.p_title, e.p_content FROM 'entries.parquet' e \\\n"
    "      JOIN 'touches.parquet' t USING (seq) WHERE t.memory_id = '{memory_id}' ORDER BY e.seq\""
)


def merkle_b64(h: bytes) -> str:
    return base64.b64encode(h).decode()


VERIFY_TEMPLATE = """\
# Verifying this forensic bundle by hand

This archive is a mnemolog forensic bundle (format `{format}`)
about memory `{memory_id}`, {chain}. It holds {n_entries} log entries of the log
`{origin}` and proves each of them is in that log's Merkle tree of size {size}.
The quick way is the standalone verifier, which needs only Python, cbor2 and pynacl:

    python -m mnemolog.eventlog.bundle BUNDLE.tar --trusted-key 'NAME+HASH+BASE64'

(Install it alone, from the `mnemolog-verifier` wheel that a mnemolog checkout
builds offline: docs/forensics.md of mnemolog, §12.)

Without `--trusted-key` the genesis key inside the bundle anchors trust: that
proves integrity and internal consistency, not who signed. Pin the key you
got from the log's operator by another channel.

## By hand, in this order

All CBOR is RFC 8949 deterministic encoding; re-encode what you decode
(`cbor2.dumps(value, canonical=True)`) and require identical bytes.

1. **Archive.** `tar -tvf BUNDLE.tar` lists only regular files, flat names,
   no links, no `..`. Extract into an empty directory.
2. **Manifest.** `manifest.cbor` is one CBOR map. Its `files` lists every
   other file with `size` and `sha256`; nothing else may be in the archive.
3. **Key history.** `keys.cbor` is a CBOR sequence of entries: `log.created`
   (seq 0, its `data.public_key` is the genesis key) and every `key.rotated`
   below the checkpoint (its `data.public_key` signs from the next seq on).
   Each is signed by the key valid at its seq (see 6).
4. **Checkpoint.** `checkpoint` is a C2SP signed note: origin, tree size,
   base64 root, a blank line, `— <name> <base64(4-byte key hash || sig)>`.
   The Ed25519 signature covers the three body lines with their newlines and
   must verify with the key valid at seq = tree size, which must be the key
   you trust or reached from it through the key history.
5. **Manifest signature.** `sig` is Ed25519 over
   `b"mnemolog/bundle-manifest/v1\\x00" + canonical CBOR of the manifest
   without "sig"`, by the key valid at the checkpoint (`kid` = first 8 bytes
   of SHA-256 of its public key). Then compare every file's size and
   `sha256sum` with the manifest; `log_id`, `origin`, `tree_size`, `root`
   and `key_seqs` must match the checkpoint and the key history.
6. **Entries.** `entries.cbor` is a CBOR sequence of the selected entries
   (seqs listed in the manifest). For each entry: the to-be-signed bytes are
   `b"mnemolog/entry/v1\\x00" + canonical CBOR of the entry map without "sig"`;
   `sig` verifies with the key valid at its seq; `kid` names that key. Its
   leaf hash is `SHA-256(0x00 || entry bytes)`; where seq s and s+1 are both
   present, entry s+1's `prev` equals the leaf hash of entry s.
7. **Proofs.** `proofs.cbor` is `{{"tree_size": N, "proofs": [[seq, [hash, ...]], ...]}}`,
   one RFC 9162 inclusion proof per entry (key history included). With
   `fn = seq, sn = N - 1, r = leaf`: for each hash `p`: if `sn == 0` fail;
   if `fn` is odd or `fn == sn`: `r = SHA-256(0x01 || p || r)` and, if `fn`
   is even, shift `fn` and `sn` right until `fn` is odd or zero; else
   `r = SHA-256(0x01 || r || p)`; then shift both right once. At the end
   `sn == 0` and `r` equals the checkpoint's root.
8. **Views.** `memories.json`, `envelopes.json` (and the manifest's
   `envelopes`) and `entries.parquet` are recomputed from the entries by the
   fold in `mnemolog/eventlog/memview.py` and must be identical. The envelope
   of a memory is `atomised_into`, `archived_at` (the atomisation archive
   time), `atom_ids` and `atom_of`. With the chain, `memories` is every memory
   connected to `{memory_id}` by `atom_of` and `atomisation.completed`, and
   each has its `memory.stored` entry here.

## Completeness (formats v2 and v3)

`heads.cbor` holds a `heads.committed` entry of the log (verify it like the
entries in 6 and 7: its signature, and its inclusion proof, also in this
file, against the checkpoint), whose payload commits to every memory's
newest entry among the log's first `size` entries, and one proof per memory
id of this bundle from that Merkle map (docs/format.md of mnemolog, §13).
For each id, the newest entry of this bundle touching it below `size` must
be the committed head; and each entry's `touch_prev` must name the previous
entry of this bundle about the same memory (-1 for the first; a pointer left
out fails, except in an entry older than back-chains, where the proof
stops). Then the bundle holds every entry about its memories among the first
`size`.

## Witness cosignatures, by hand

`checkpoint` may carry, after the log key's line, lines by witnesses
(C2SP tlog-cosignature/v1; docs/format.md of mnemolog, §12). Check them
with the witness keys you trust, each `NAME+HASH+BASE64` where the base64
decodes to 0x04 (or 0x01) followed by the 32-byte Ed25519 public key:

1. The key hash is `SHA-256(NAME || 0x0a || 0x04 || public key)[0:4]`
   (0x04 even when the key was given with 0x01).
2. Take the lines `— NAME BASE64` whose NAME is the witness's name and whose
   BASE64 decodes to bytes starting with that key hash; each must be 76 bytes:
   the next 8 bytes are the timestamp (POSIX seconds, unsigned big-endian),
   the last 64 the Ed25519 signature. Lines of other names or hashes are not
   this witness's.
3. The signed message is `cosignature/v1` LF `time ` decimal timestamp LF,
   then the checkpoint's three body lines (origin, size, root), each ending
   in LF: the note text above the blank line, nothing of the signature
   lines. The signature must verify under the witness's public key; a line
   with the witness's name and hash that does not verify rejects the note.
4. Count distinct public keys with a valid line; the standalone verifier
   does it with `--witness-key VKEY` (repeatable) and `--min-witnesses N`.

## Querying

{query}

A bundle is sparse: it proves that each entry it holds is in the log at the
checkpoint; that it holds every entry about its memories is proven only by a
format v2 bundle (above), else it is the exporter's claim, signed in the
manifest. `mnemolog log consistency {size} M`
on the live log proves a later tree of size M extends this one.
"""
