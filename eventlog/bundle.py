"""Forensic bundles: the format, the pure builder and the standalone offline verifier.

A bundle is a strict, deterministic ustar archive (eventlog.tarball) of a
fixed set of files: a sparse slice of the log about one memory (and, by
default, its whole atomisation chain), the key history, a signed checkpoint,
an RFC 9162 inclusion proof for every entry, views recomputable from those
entries (memories.json, envelopes.json, entries.parquet), VERIFY.md, and a
manifest naming every other file with its size and SHA-256, signed in full
by the key valid at the checkpoint. docs/forensics.md is the specification.

This module imports only the standard library, cbor2, pynacl and
mnemolog.eventlog modules that obey the same rule, so an auditor runs

    python -m mnemolog.eventlog.bundle BUNDLE.tar [--trusted-key KEY] [--json]

with nothing else installed. Verification returns a report or raises the
first failure as a VerificationError naming the check, the file and the seq.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mnemolog.eventlog import codec, memview, merkle, offline, parquet, tarball
from mnemolog.eventlog.entry import Entry, to_jsonable
from mnemolog.eventlog.errors import (
    MnemologError,
    NotFound,
    SignerError,
    StorageError,
    UsageError,
    VerificationError,
)
from mnemolog.eventlog.fsio import open_regular
from mnemolog.eventlog.keys import SigningKey, VerifierKey, load_verifier_key, verify_signature
from mnemolog.eventlog.note import Checkpoint, peek_checkpoint

FORMAT = "mnemolog/forensic-bundle/v1"
MANIFEST_DOMAIN = b"mnemolog/bundle-manifest/v1\x00"
MAX_KEY_FILE = 4096

MANIFEST = "manifest.cbor"
CHECKPOINT = "checkpoint"
KEYS = "keys.cbor"
ENTRIES = "entries.cbor"
PROOFS = "proofs.cbor"
PARQUET = "entries.parquet"
MEMORIES = "memories.json"
ENVELOPES = "envelopes.json"
VERIFY_MD = "VERIFY.md"
# Every file but the manifest, which lists them all.
LISTED = (CHECKPOINT, ENTRIES, ENVELOPES, PARQUET, MEMORIES, PROOFS, KEYS, VERIFY_MD)

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


def _json_compact(value: Any) -> str:
    return json.dumps(to_jsonable(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def entries_parquet(entries: Sequence[Entry]) -> bytes:
    """entries.parquet: one row per bundle entry (key history included), by seq."""
    rows = [
        (
            e.seq,
            e.ts,
            e.type,
            e.tv,
            e.kid.hex(),
            _json_compact(memview.touched_ids(e.type, e.data)),
            _json_compact(e.data),
            e.prev.hex(),
            e.leaf.hex(),
            e.sig.hex(),
            e.raw,
        )
        for e in entries
    ]
    return parquet.write_table(PARQUET_COLUMNS, rows)


def manifest_tbs(manifest: dict[str, Any]) -> bytes:
    """The signed bytes: domain tag || canonical CBOR of the manifest without `sig`."""
    return MANIFEST_DOMAIN + codec.encode({k: v for k, v in manifest.items() if k != "sig"})


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def verify_md(memory_id: str, include_chain: bool, origin: str, size: int, n_entries: int) -> bytes:
    chain = "with its whole atomisation chain" if include_chain else "without the atomisation chain"
    return VERIFY_TEMPLATE.format(
        memory_id=memory_id, chain=chain, origin=origin, size=size, n_entries=n_entries
    ).encode()


# -- building ---------------------------------------------------------------


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


def build_bundle(inp: BundleInput, signer: SigningKey) -> bytes:
    """The archive bytes. Deterministic: Ed25519 signatures and the tar layout are fixed."""
    cp = peek_checkpoint(inp.checkpoint)
    key_seqs = [e.seq for e in inp.key_entries]
    seqs = [e.seq for e in inp.entries]
    everything = sorted([*inp.key_entries, *inp.entries], key=lambda e: e.seq)
    ids = sorted(set(inp.memory_ids))
    views = memview.fold_views(everything, ids)
    if set(views) != set(ids):
        raise ValueError(f"no memory.stored among the entries for {sorted(set(ids) - set(views))}")
    genesis = inp.key_entries[0]
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
        VERIFY_MD: verify_md(inp.memory_id, inp.include_chain, cp.origin, cp.size, len(everything)),
    }
    manifest: dict[str, Any] = {
        "format": FORMAT,
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
        "files": [{"name": n, "size": len(b), "sha256": _sha(b)} for n, b in sorted(files.items())],
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
        {"name": n, "size": len(b), "sha256": _sha(b)} for n, b in sorted(members.items()) if n != MANIFEST
    ]
    m["kid"] = signer.kid
    m["sig"] = signer.sign(manifest_tbs(m))
    return {**members, MANIFEST: codec.encode(m)}


# -- verifying --------------------------------------------------------------


@dataclass
class BundleReport:
    file: str = ""
    memory_id: str = ""
    include_chain: bool = True
    origin: str = ""
    tree_size: int = 0
    root: str = ""
    checkpoint_key: str = ""
    trust: dict[str, Any] = field(default_factory=dict)
    entries: int = 0
    key_entries: int = 0
    seqs: list[int] = field(default_factory=list)
    memories: list[str] = field(default_factory=list)
    unstored: list[str] = field(default_factory=list)
    envelopes: dict[str, Any] = field(default_factory=dict)
    files: list[dict[str, Any]] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "memory_id": self.memory_id,
            "include_chain": self.include_chain,
            "origin": self.origin,
            "tree_size": self.tree_size,
            "root": self.root,
            "checkpoint_key": self.checkpoint_key,
            "trust": self.trust,
            "entries": self.entries,
            "key_entries": self.key_entries,
            "seqs": self.seqs,
            "memories": self.memories,
            "unstored": self.unstored,
            "envelopes": self.envelopes,
            "files": self.files,
            "checks": self.checks,
        }

    def text(self) -> str:
        trust = self.trust
        if trust.get("pinned"):
            anchor = f"pinned key {trust['key']} (in the key history from seq {trust['epoch_from_seq']})"
        else:
            anchor = f"genesis key of the bundle {trust.get('key')} (NOT pinned: use --trusted-key)"
        chain = "with its atomisation chain" if self.include_chain else "without the atomisation chain"
        lines = [
            f"ok: forensic bundle {self.file + ' ' if self.file else ''}verified",
            f"memory      {self.memory_id} ({chain})",
            f"memories    {', '.join(self.memories)}",
            f"log         {self.origin}",
            f"checkpoint  size {self.tree_size}, root {self.root}",
            f"signed by   {self.checkpoint_key}",
            f"trust       {anchor}",
            f"entries     {self.entries} selected + {self.key_entries} key history, each canonical, "
            "signed under the key history and proven in the tree",
            f"seqs        {', '.join(str(s) for s in self.seqs)}",
            f"files       {len(self.files) + 1} (manifest included), sizes and SHA-256 as signed",
            "checks      " + ", ".join(self.checks),
        ]
        if self.unstored:
            lines.append(f"note        the chain names ids the log never stored: {', '.join(self.unstored)}")
        return "\n".join(lines)


def _f(message: str, check: str, **where: Any) -> VerificationError:
    return VerificationError(message, check=check, **where)


class _Check:
    """One verification run over the members of an archive, in the documented order."""

    def __init__(self, members: dict[str, bytes], trusted: VerifierKey | None) -> None:
        self.m = members
        self.trusted = trusted
        self.report = BundleReport()

    def need(self, name: str) -> bytes:
        data = self.m.get(name)
        if data is None:
            raise _f(f"the bundle has no {name}", "bundle.missing_file", file=name)
        return data

    def done(self, check: str) -> None:
        self.report.checks.append(check)

    def run(self) -> BundleReport:
        r = self.report
        # 1. The manifest: one canonical CBOR map of exactly the v1 keys.
        man = offline.decode_map(self.need(MANIFEST), MANIFEST, "manifest.decode")
        offline.require_keys(man, MANIFEST_KEYS, MANIFEST, "manifest.decode")
        if man["format"] != FORMAT:
            raise _f(
                f"{MANIFEST}: format {man['format']!r}, this verifier reads {FORMAT}",
                "manifest.format",
                file=MANIFEST,
                expected=FORMAT,
                found=man["format"],
            )
        self.done("manifest_decoded")
        # 2. The key history, each key event signed under the history before it.
        key_entries = offline.parse_entries(self.need(KEYS), KEYS)
        keys = offline.KeySchedule(key_entries, KEYS)
        self.done("key_history")
        # 3. Trust, then the checkpoint signature by the key valid at its size.
        r.trust = keys.trust(self.trusted)
        cp = offline.open_trusted_checkpoint(self.need(CHECKPOINT), keys, CHECKPOINT)
        cp_key = keys.key_at(cp.size)
        r.checkpoint_key = cp_key.vkey()
        self.done("checkpoint_signature")
        # 4. The manifest signature, by the same key, over every field but `sig`.
        self._manifest_signature(man, cp_key)
        self.done("manifest_signature")
        self._manifest_matches(man, cp, keys)
        # 5. No missing, extra or modified file.
        self._files(man)
        self.done("files")
        # 6. Entries: canonical, signed under the key history, chained where adjacent.
        entries = offline.parse_entries(self.need(ENTRIES), ENTRIES)
        self._entries(man, key_entries, entries, keys, cp)
        self.done("entry_signatures")
        # 7. An inclusion proof for every entry against the signed root.
        self._proofs(key_entries, entries, cp)
        self.done("inclusion_proofs")
        # 8. Selection, chain and views, recomputed from the entries alone.
        self._views(man, key_entries, entries)
        r.memory_id = man["memory_id"]
        r.include_chain = bool(man["include_chain"])
        r.origin = cp.origin
        r.tree_size = cp.size
        r.root = merkle_b64(cp.root)
        r.entries = len(entries)
        r.key_entries = len(key_entries)
        r.seqs = [e.seq for e in entries]
        r.unstored = list(man["unstored"])
        r.files = [to_jsonable(f) for f in man["files"]]
        return r

    def _manifest_signature(self, man: dict[str, Any], key: VerifierKey) -> None:
        if man["kid"] != key.kid:
            raise _f(
                f"{MANIFEST}: signed by key {to_jsonable(man['kid'])}, but the key valid at the "
                f"checkpoint is {key.kid.hex()}",
                "manifest.kid",
                file=MANIFEST,
                expected=key.kid.hex(),
                found=to_jsonable(man["kid"]),
            )
        sig = man["sig"]
        if not isinstance(sig, bytes) or not verify_signature(key.public_key, manifest_tbs(man), sig):
            raise _f(
                f"{MANIFEST}: the manifest signature does not verify with {key.vkey()}",
                "manifest.signature",
                file=MANIFEST,
                expected=key.vkey(),
            )

    def _manifest_matches(self, man: dict[str, Any], cp: Checkpoint, keys: offline.KeySchedule) -> None:
        def same(name: str, want: Any) -> None:
            if man[name] != want:
                raise _f(
                    f"{MANIFEST}: {name} differs from the signed checkpoint and key history",
                    "manifest.mismatch",
                    file=MANIFEST,
                    expected=to_jsonable(want),
                    found=to_jsonable(man[name]),
                )

        same("log_id", keys.log_id)
        same("origin", cp.origin)
        same("tree_size", cp.size)
        same("root", cp.root)
        same("key_seqs", [ep.event_seq for ep in keys.epochs])
        for name in ("memory_id",):
            offline.as_str(man[name], name, MANIFEST, "manifest.decode")
        if not isinstance(man["include_chain"], bool):
            raise _f(f"{MANIFEST}: include_chain must be a boolean", "manifest.decode", file=MANIFEST)
        for name in ("memories", "unstored", "seqs", "key_seqs", "files"):
            offline.as_list(man[name], name, MANIFEST, "manifest.decode")
        if not isinstance(man["envelopes"], dict):
            raise _f(f"{MANIFEST}: envelopes must be a map", "manifest.decode", file=MANIFEST)

    def _files(self, man: dict[str, Any]) -> None:
        listed: dict[str, dict[str, Any]] = {}
        for f in man["files"]:
            if not isinstance(f, dict) or set(f) != {"name", "size", "sha256"}:
                raise _f(f"{MANIFEST}: a malformed file record", "manifest.decode", file=MANIFEST)
            name = offline.as_str(f["name"], "file name", MANIFEST, "manifest.decode")
            if name in listed:
                raise _f(f"{MANIFEST}: {name} is listed twice", "manifest.files", file=name)
            listed[name] = f
        for name in sorted(listed):
            if name not in LISTED:
                raise _f(
                    f"{MANIFEST}: lists {name!r}, which is not a bundle v1 file",
                    "manifest.files",
                    file=name,
                )
        for name in LISTED:
            if name not in listed:
                raise _f(f"{MANIFEST}: does not list {name}", "manifest.files", file=name)
            if name not in self.m:
                raise _f(f"{name} is listed in the manifest but missing", "bundle.missing_file", file=name)
        for name in sorted(self.m):
            if name != MANIFEST and name not in listed:
                raise _f(f"{name} is in the archive but not in the manifest", "bundle.extra_file", file=name)
        for name in LISTED:
            data, f = self.m[name], listed[name]
            if len(data) != f["size"]:
                raise _f(
                    f"{name} is {len(data)} bytes, the manifest says {f['size']}",
                    "bundle.file_size",
                    file=name,
                    expected=f["size"],
                    found=len(data),
                )
            digest = _sha(data)
            if digest != f["sha256"]:
                raise _f(
                    f"{name} has been modified: its SHA-256 differs from the signed manifest",
                    "bundle.file_hash",
                    file=name,
                    expected=to_jsonable(f["sha256"]),
                    found=digest.hex(),
                )

    def _entries(
        self,
        man: dict[str, Any],
        key_entries: list[Entry],
        entries: list[Entry],
        keys: offline.KeySchedule,
        cp: Checkpoint,
    ) -> None:
        seqs = [e.seq for e in entries]
        if seqs != man["seqs"]:
            raise _f(
                f"{ENTRIES}: the entries are not the ones the manifest lists",
                "entries.selection",
                file=ENTRIES,
                expected=to_jsonable(man["seqs"]),
                found=seqs,
            )
        key_seqs = {e.seq for e in key_entries}
        last = -1
        for e in entries:
            if e.seq <= last:
                raise _f(
                    f"{ENTRIES}: entries out of order at {e.seq}", "entries.order", seq=e.seq, file=ENTRIES
                )
            if e.seq in key_seqs:
                raise _f(
                    f"{ENTRIES}: entry {e.seq} repeats a key event", "entries.order", seq=e.seq, file=ENTRIES
                )
            if e.seq >= cp.size:
                raise _f(
                    f"{ENTRIES}: entry {e.seq} is beyond the checkpoint of size {cp.size}",
                    "entries.beyond_checkpoint",
                    seq=e.seq,
                    file=ENTRIES,
                )
            if e.type in ("log.created", "key.rotated"):
                raise _f(
                    f"{ENTRIES}: entry {e.seq} is a key event missing from the key history",
                    "keys.missing",
                    seq=e.seq,
                    file=ENTRIES,
                )
            keys.check(e, ENTRIES)
            last = e.seq
        # Where two entries are adjacent in the log, the chain link between them is checkable.
        by_seq = {e.seq: (e, KEYS) for e in key_entries}
        by_seq.update({e.seq: (e, ENTRIES) for e in entries})
        for s, (e, file) in sorted(by_seq.items()):
            before = by_seq.get(s - 1)
            if before is not None and e.prev != before[0].leaf:
                raise _f(
                    f"{file}: entry {s} does not chain to entry {s - 1}",
                    "entry.prev",
                    seq=s,
                    file=file,
                    expected=before[0].leaf.hex(),
                    found=e.prev.hex(),
                )

    def _proofs(self, key_entries: list[Entry], entries: list[Entry], cp: Checkpoint) -> None:
        pf = offline.decode_map(self.need(PROOFS), PROOFS, "proofs.decode")
        offline.require_keys(pf, {"tree_size", "proofs"}, PROOFS, "proofs.decode")
        if pf["tree_size"] != cp.size:
            raise _f(
                f"{PROOFS}: proofs are for a tree of size {pf['tree_size']}, the checkpoint is {cp.size}",
                "proofs.size",
                file=PROOFS,
                expected=cp.size,
                found=pf["tree_size"],
            )
        leaves = {e.seq: e.leaf for e in [*key_entries, *entries]}
        items = offline.as_list(pf["proofs"], "proofs", PROOFS, "proofs.decode")
        got: dict[int, list[bytes]] = {}
        for item in items:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], list)):
                raise _f(f"{PROOFS}: a proof is [seq, [hash, ...]]", "proofs.decode", file=PROOFS)
            seq = offline.as_int(item[0], "seq", PROOFS, "proofs.decode")
            if seq in got:
                raise _f(f"{PROOFS}: two proofs for entry {seq}", "proofs.decode", seq=seq, file=PROOFS)
            got[seq] = item[1]
        if sorted(got) != sorted(leaves):
            missing = sorted(set(leaves) - set(got))
            raise _f(
                f"{PROOFS}: proofs do not cover exactly the bundle's entries (missing {missing[:10]})",
                "proofs.coverage",
                file=PROOFS,
                expected=sorted(leaves),
                found=sorted(got),
                seq=missing[0] if missing else None,
            )
        for seq in sorted(got):
            try:
                merkle.verify_inclusion(seq, cp.size, leaves[seq], got[seq], cp.root)
            except VerificationError as exc:
                raise _f(
                    f"{PROOFS}: {exc.message}",
                    exc.check,
                    seq=seq,
                    file=PROOFS,
                    expected=exc.expected,
                    found=exc.found,
                ) from exc
            except TypeError as exc:
                raise _f(
                    f"{PROOFS}: proof hashes must be bytes", "proofs.decode", seq=seq, file=PROOFS
                ) from exc

    def _views(self, man: dict[str, Any], key_entries: list[Entry], entries: list[Entry]) -> None:
        r = self.report
        target = man["memory_id"]
        ids = man["memories"]
        if ids != sorted(set(ids)) or not all(isinstance(i, str) for i in ids):
            raise _f(f"{MANIFEST}: memories must be sorted, unique ids", "manifest.decode", file=MANIFEST)
        if target not in ids:
            raise _f(f"{MANIFEST}: the memory {target!r} has no view", "selection.target", file=MANIFEST)
        wanted = set(ids)
        for e in entries:
            if not wanted.intersection(memview.touched_ids(e.type, e.data)):
                raise _f(
                    f"{ENTRIES}: entry {e.seq} ({e.type}) touches none of the bundle's memories",
                    "selection.extra_entry",
                    seq=e.seq,
                    file=ENTRIES,
                )
        stored = memview.stored_ids(entries)
        closure = memview.chain_closure(target, entries) if man["include_chain"] else {target}
        unstored = set(man["unstored"])
        if man["unstored"] != sorted(unstored) or unstored & wanted:
            raise _f(
                f"{MANIFEST}: unstored must be sorted ids without views", "manifest.decode", file=MANIFEST
            )
        for mid in sorted(closure | wanted | unstored):
            if mid in unstored:
                if mid in stored or mid not in closure:
                    raise _f(
                        f"{MANIFEST}: {mid} is listed as never stored, but the entries disagree",
                        "chain.unstored",
                        file=MANIFEST,
                    )
            elif mid not in stored:
                raise _f(
                    f"the atomisation chain names memory {mid}, but the bundle has no memory.stored for it "
                    "(an entry was removed from the bundle)",
                    "chain.missing_memory",
                    file=ENTRIES,
                    expected=mid,
                )
            elif mid not in closure or mid not in wanted:
                raise _f(
                    f"{MANIFEST}: the memory set differs from the atomisation chain at {mid}",
                    "chain.members",
                    file=MANIFEST,
                    expected=sorted(closure - unstored),
                    found=ids,
                )
        self.done("selection")
        self.done("atomisation_chain")
        everything = sorted([*key_entries, *entries], key=lambda e: e.seq)
        views = memview.fold_views(everything, ids)
        self._same(MEMORIES, memview.render_views(views), "view.memories")
        self.done("memory_views")
        envelopes = {k: memview.envelope(v) for k, v in views.items()}
        self._same(ENVELOPES, memview.render_envelopes(views), "view.envelopes")
        if man["envelopes"] != envelopes:
            raise _f(
                f"{MANIFEST}: the envelopes differ from what the entries imply",
                "view.envelopes",
                file=MANIFEST,
                expected=envelopes,
                found=to_jsonable(man["envelopes"]),
            )
        self.done("envelopes")
        self._same(PARQUET, entries_parquet(everything), "view.parquet")
        self.done("parquet")
        r.memories = list(ids)
        r.envelopes = envelopes

    def _same(self, name: str, want: bytes, check: str) -> None:
        have = self.need(name)
        if have == want:
            return
        detail = ""
        if name != PARQUET:
            try:
                a = json.loads(want)
                b = json.loads(have)
                key = "memories" if name == MEMORIES else "envelopes"
                diff = sorted(
                    k for k in set(a.get(key, {})) | set(b.get(key, {})) if a[key].get(k) != b[key].get(k)
                )
                detail = f" (first difference: memory {diff[0]})" if diff else ""
            except (ValueError, AttributeError, KeyError, TypeError):
                detail = " (not valid JSON)"
        raise _f(f"{name} differs from what the entries imply{detail}", check, file=name)


def merkle_b64(h: bytes) -> str:
    return base64.b64encode(h).decode()


def read_members(path: Path, limits: tarball.Limits = tarball.DEFAULT_LIMITS) -> dict[str, bytes]:
    """The members of the archive at `path`, through the strict tar reader."""
    try:
        f = open_regular(path)  # closed below; size is read from the same handle
    except FileNotFoundError as exc:
        raise NotFound(f"no bundle at {path}", file=str(path)) from exc
    except OSError as exc:
        raise StorageError(f"cannot open {path}: {exc}", file=str(path)) from exc
    with f:
        size = os.fstat(f.fileno()).st_size
        return tarball.read_tar(f, size, limits)


def verify_members(members: dict[str, bytes], trusted: VerifierKey | None = None) -> BundleReport:
    """Verify a bundle already read into memory; return the report or raise."""
    try:
        return _Check(members, trusted).run()
    except MnemologError as exc:
        if isinstance(exc, VerificationError):
            raise
        raise _f(exc.message, "input.malformed", **exc.details) from exc
    except (
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        AttributeError,
        OverflowError,
        RecursionError,
    ) as exc:
        raise offline.wrap_unexpected(exc, "bundle") from exc


def verify_bundle(
    path: Path, trusted: VerifierKey | None = None, limits: tarball.Limits = tarball.DEFAULT_LIMITS
) -> BundleReport:
    """Verify the bundle at `path` (every check of docs/forensics.md); return a report or raise."""
    members = read_members(path, limits)
    report = verify_members(members, trusted)
    report.file = str(path)
    report.checks.insert(0, "archive")
    return report


def parse_trusted_key(text: str | None) -> VerifierKey | None:
    """A --trusted-key value: a vkey string `name+hash+base64` or a file holding one."""
    if text is None:
        return None
    try:
        # A key file is a line; refuse a huge one before reading it.
        if os.path.isfile(text) and os.path.getsize(text) > MAX_KEY_FILE:
            raise UsageError(f"--trusted-key: {text} is larger than a key file ({MAX_KEY_FILE} bytes)")
        return load_verifier_key(text)
    except SignerError as exc:
        raise UsageError(f"--trusted-key: {exc.message}", field="trusted_key") from exc


# -- the standalone command -------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mnemolog.eventlog.bundle",
        description="Verify a mnemolog forensic bundle offline (needs only cbor2 and pynacl).",
    )
    p.add_argument("bundle", help="the bundle (.tar)")
    p.add_argument("--trusted-key", help="the pinned public key: name+hash+base64, or a file holding one")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    try:
        report = verify_bundle(Path(args.bundle), parse_trusted_key(args.trusted_key))
    except MnemologError as err:
        if args.json:
            print(json.dumps(err.to_json(), default=str))
        else:
            print(f"mnemolog: {err.message}", file=sys.stderr)
            parts = [
                f"{k}={err.details[k]}"
                for k in ("check", "seq", "file", "expected", "found")
                if k in err.details
            ]
            if parts:
                print("  " + " ".join(parts), file=sys.stderr)
        return err.exit_code
    if args.json:
        print(json.dumps({"ok": True, **report.to_json()}, default=str))
    else:
        print(report.text())
    return 0


VERIFY_TEMPLATE = """\
# Verifying this forensic bundle by hand

This archive is a mnemolog forensic bundle (format `mnemolog/forensic-bundle/v1`)
about memory `{memory_id}`, {chain}. It holds {n_entries} log entries of the log
`{origin}` and proves each of them is in that log's Merkle tree of size {size}.
The quick way is the standalone verifier, which needs only Python, cbor2 and pynacl:

    python -m mnemolog.eventlog.bundle BUNDLE.tar --trusted-key 'NAME+HASH+BASE64'

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

## Querying

    duckdb -c "SELECT seq, ts, type, memory_ids, data FROM 'entries.parquet' ORDER BY seq"

A bundle is sparse: it proves that each entry it holds is in the log at the
checkpoint, not that the log holds nothing else about the memory; that claim
is the exporter's, signed in the manifest. `mnemolog log consistency {size} M`
on the live log proves a later tree of size M extends this one.
"""


if __name__ == "__main__":
    sys.exit(main())
