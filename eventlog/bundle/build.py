"""Building a forensic bundle: a pure function of its inputs and the signing key.

`build_bundle` turns the selected entries, the key history, a signed
checkpoint and the inclusion proofs into the archive bytes; the views
(memories.json, envelopes.json, entries.parquet) are folded from the entries
by `memview`, exactly as the verifier recomputes them. Selecting the entries
and proving them against a home's log is `substrate.forensics`'s job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mnemolog.eventlog.bundle import memview, tarball
from mnemolog.eventlog.bundle.format import (
    CHECKPOINT,
    DATAKEYS,
    ENTRIES,
    ENVELOPES,
    FORMAT,
    FORMAT_V3,
    FORMAT_V4,
    HEADS,
    KEYS,
    MANIFEST,
    MEMORIES,
    PARQUET,
    PROOFS,
    TOUCHES,
    VERIFY_MD,
    entries_parquet,
    entries_parquet_v3,
    manifest_tbs,
    sha256,
    touches_parquet,
    verify_md,
)
from mnemolog.eventlog.format import codec, sealing
from mnemolog.eventlog.format.entry import Entry
from mnemolog.eventlog.format.heads import HeadProof
from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.format.note import peek_checkpoint


@dataclass(frozen=True)
class HeadsEvidence:
    """The committed heads of a bundle's memories: the heads entry, its inclusion proof, one proof per id."""

    entry: Entry  # a heads.committed entry below the checkpoint
    inclusion: Sequence[bytes]  # its RFC 9162 inclusion proof against the checkpoint
    proofs: Sequence[HeadProof]  # one per memory id of the bundle (memories and unstored), sorted

    def encode(self) -> bytes:
        return codec.encode(
            {
                "entry": self.entry.raw,
                "inclusion": list(self.inclusion),
                "proofs": [p.to_cbor() for p in sorted(self.proofs, key=lambda p: p.memory_id)],
            }
        )


@dataclass(frozen=True)
class BundleInput:
    """Everything a bundle is made of; `build_bundle` is a pure function of it and the key."""

    memory_id: str
    include_chain: bool
    memory_ids: Sequence[str]  # the memories with views: the target and, with the chain, its chain
    unstored: Sequence[str]  # ids the chain names that the log never stored
    key_entries: Sequence[Entry]  # genesis and every rotation below the checkpoint
    entries: Sequence[Entry]  # every entry touching a memory in memory_ids, below the checkpoint
    checkpoint: bytes  # the signed note
    proofs: dict[int, list[bytes]]  # seq -> inclusion proof against the checkpoint
    heads: HeadsEvidence | None = None  # with it the bundle is format v2 and provably complete
    # The data keys of the entries' sealed content (forgotten subjects have none): with heads,
    # format v4, whose views and packs are folded with them.
    data_keys: dict[str, bytes] | None = None


def build_bundle(inp: BundleInput, signer: SigningKey) -> bytes:
    """The archive bytes. Deterministic: Ed25519 signatures and the tar layout are fixed."""
    cp = peek_checkpoint(inp.checkpoint)
    key_seqs = [e.seq for e in inp.key_entries]
    seqs = [e.seq for e in inp.entries]
    everything = sorted([*inp.key_entries, *inp.entries], key=lambda e: e.seq)
    ids = sorted(set(inp.memory_ids))
    keys = inp.data_keys if inp.heads is not None else None
    views = memview.fold_views(everything, ids, keys=keys.get if keys is not None else None)
    if set(views) != set(ids):
        raise ValueError(f"no memory.stored among the entries for {sorted(set(ids) - set(views))}")
    genesis = inp.key_entries[0]
    fmt = FORMAT if inp.heads is None else FORMAT_V3 if keys is None else FORMAT_V4
    proofs = {
        "tree_size": cp.size,
        "proofs": [[s, list(inp.proofs[s])] for s in sorted({*key_seqs, *seqs})],
    }
    files = {
        CHECKPOINT: inp.checkpoint,
        KEYS: b"".join(e.raw for e in inp.key_entries),
        ENTRIES: b"".join(e.raw for e in inp.entries),
        PROOFS: codec.encode(proofs),
        PARQUET: entries_parquet(everything),
        MEMORIES: memview.render_views(views),
        ENVELOPES: memview.render_envelopes(views),
        VERIFY_MD: verify_md(inp.memory_id, inp.include_chain, cp.origin, cp.size, len(everything), fmt),
    }
    if inp.heads is not None:
        files[HEADS] = inp.heads.encode()
        tables = sorted([*everything, inp.heads.entry], key=lambda e: e.seq)
        files[PARQUET] = entries_parquet_v3(tables)
        files[TOUCHES] = touches_parquet(everything)
    if keys is not None:
        files[DATAKEYS] = sealing.encode_keys(keys)
    manifest: dict[str, Any] = {
        "format": fmt,
        "log_id": genesis.data["log_id"],
        "origin": cp.origin,
        "memory_id": inp.memory_id,
        "include_chain": inp.include_chain,
        "memories": ids,
        "unstored": sorted(set(inp.unstored)),
        "tree_size": cp.size,
        "root": cp.root,
        "key_seqs": key_seqs,
        "seqs": seqs,
        "envelopes": {k: memview.envelope(v) for k, v in views.items()},
        "files": [{"name": n, "size": len(b), "sha256": sha256(b)} for n, b in sorted(files.items())],
        "kid": signer.kid,
    }
    manifest["sig"] = signer.sign(manifest_tbs(manifest))
    files[MANIFEST] = codec.encode(manifest)
    return tarball.write_tar(files.items())


def resign_manifest(members: dict[str, bytes], signer: SigningKey, **changes: Any) -> dict[str, bytes]:
    """Recompute the manifest's file list (and apply `changes`), then sign it again.

    For tests and for auditors' experiments: it shows which checks hold even
    against someone who holds the signing key.
    """
    m = codec.decode(members[MANIFEST])
    m.update(changes)
    m["files"] = [
        {"name": n, "size": len(b), "sha256": sha256(b)} for n, b in sorted(members.items()) if n != MANIFEST
    ]
    m["kid"] = signer.kid
    m["sig"] = signer.sign(manifest_tbs(m))
    return {**members, MANIFEST: codec.encode(m)}
