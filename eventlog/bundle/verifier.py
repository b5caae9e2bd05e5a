"""Forensic bundles: the standalone offline verifier, and the package's public names.

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

Where the rest lives: the format (file names, manifest keys, signed bytes,
derived files, VERIFY.md) is `bundle_format`, the pure builder
`bundle_build`, the checks that need no key `bundle_checks`, the report
`bundle_report`; this module runs the checks in the documented order and
re-exports the names callers use (`bundle.build_bundle`, `bundle.MANIFEST`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemolog.eventlog.bundle import offline, packview, tarball
from mnemolog.eventlog.bundle.build import BundleInput, build_bundle, resign_manifest
from mnemolog.eventlog.bundle.checks import (
    check_files,
    check_heads,
    check_proofs,
    check_tables,
    check_views,
    read_heads,
)
from mnemolog.eventlog.bundle.format import (
    CHECKPOINT,
    DATAKEYS,
    ENTRIES,
    ENVELOPES,
    FORMAT,
    FORMAT_V2,
    FORMAT_V3,
    FORMAT_V4,
    FORMATS,
    HEADS,
    HEADS_TYPE,
    KEYS,
    LISTED,
    LISTED_V2,
    MANIFEST,
    MANIFEST_DOMAIN,
    MANIFEST_KEYS,
    MEMORIES,
    PARQUET,
    PARQUET_COLUMNS,
    PROOFS,
    TOUCHES,
    VERIFY_MD,
    VERIFY_TEMPLATE,
    entries_parquet,
    entries_parquet_v3,
    manifest_tbs,
    merkle_b64,
    verify_md,
)
from mnemolog.eventlog.bundle.report import BundleReport
from mnemolog.eventlog.errors import (
    DecodeError,
    MnemologError,
    NotFound,
    StorageError,
    VerificationError,
)
from mnemolog.eventlog.format import sealing
from mnemolog.eventlog.format.entry import Entry, to_jsonable
from mnemolog.eventlog.format.keys import VerifierKey, verify_signature
from mnemolog.eventlog.format.note import Checkpoint
from mnemolog.eventlog.store.fsio import open_regular
from mnemolog.eventlog.verify.trust import TRUST_GENESIS, KeySchedule, PinnedKey, TrustPolicy, parse_key_arg
from mnemolog.eventlog.witness.cosignature import WitnessPolicy, require_cosignatures

__all__ = [
    "CHECKPOINT",
    "ENTRIES",
    "ENVELOPES",
    "FORMAT",
    "FORMATS",
    "FORMAT_V2",
    "FORMAT_V3",
    "HEADS",
    "HEADS_TYPE",
    "KEYS",
    "LISTED",
    "LISTED_V2",
    "MANIFEST",
    "MANIFEST_DOMAIN",
    "MANIFEST_KEYS",
    "MEMORIES",
    "PARQUET",
    "PARQUET_COLUMNS",
    "PROOFS",
    "TOUCHES",
    "VERIFY_MD",
    "VERIFY_TEMPLATE",
    "BundleInput",
    "BundleReport",
    "build_bundle",
    "entries_parquet",
    "entries_parquet_v3",
    "main",
    "manifest_tbs",
    "merkle_b64",
    "read_members",
    "resign_manifest",
    "trust_policy",
    "verify_bundle",
    "verify_md",
    "verify_members",
]


def _f(message: str, check: str, **where: Any) -> VerificationError:
    return VerificationError(message, check=check, **where)


class _Check:
    """One verification run over the members of an archive, in the documented order."""

    def __init__(
        self, members: dict[str, bytes], policy: TrustPolicy, witnesses: WitnessPolicy | None = None
    ) -> None:
        self.m = members
        self.policy = policy
        self.witnesses = witnesses
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
        if man["format"] not in FORMATS:
            raise _f(
                f"{MANIFEST}: format {man['format']!r}, this verifier reads {' and '.join(FORMATS)}",
                "manifest.format",
                file=MANIFEST,
                expected=list(FORMATS),
                found=man["format"],
            )
        self.done("manifest_decoded")
        # 2. The key history, each key event signed under the history before it.
        key_entries = offline.parse_entries(self.need(KEYS), KEYS)
        keys = offline.key_schedule(key_entries, KEYS)
        self.done("key_history")
        # 3. Trust, then the checkpoint signature by the key valid at its size.
        r.trust = self.policy.check(keys).to_json()
        cp = offline.open_trusted_checkpoint(self.need(CHECKPOINT), keys, CHECKPOINT)
        cp_key = keys.key_at(cp.size)
        r.checkpoint_key = cp_key.vkey()
        self.done("checkpoint_signature")
        if self.witnesses is not None:
            found = require_cosignatures(self.need(CHECKPOINT), self.witnesses, CHECKPOINT)
            r.witnesses = {
                **self.witnesses.describe(),
                "cosignatures": [
                    {"name": c.witness.name, "vkey": c.witness.vkey(), "timestamp": c.timestamp}
                    for c in found
                ],
            }
            self.done("witness_cosignatures")
        # 4. The manifest signature, by the same key, over every field but `sig`.
        self._manifest_signature(man, cp_key)
        self.done("manifest_signature")
        self._manifest_matches(man, cp, keys)
        # 5. No missing, extra or modified file.
        check_files(self.m, man)
        self.done("files")
        # 6. Entries: canonical, signed under the key history, chained where adjacent.
        entries = offline.parse_entries(self.need(ENTRIES), ENTRIES)
        self._entries(man, key_entries, entries, keys, cp)
        self.done("entry_signatures")
        # 7. An inclusion proof for every entry against the signed root.
        check_proofs(self.m, key_entries, entries, cp)
        self.done("inclusion_proofs")
        # 8. Selection, chain and views, recomputed from the entries alone.
        data_keys = self._data_keys(man["format"])
        lookup = data_keys.get if data_keys is not None else None
        views = check_views(self.m, man, key_entries, entries, lookup)
        r.memories, r.envelopes = views.memories, views.envelopes
        r.checks += ["selection", "atomisation_chain", "memory_views", "envelopes"]
        r.sealed = _sealed_memories(self.m)
        # 8b. The context packs these memories went into: re-rendered, hashes and quotes checked.
        r.packs = packview.verify_packs(entries, views.memories, lookup)
        if r.packs:
            r.checks.append("context_packs")
        # 9. (v2) Completeness: the committed heads of every memory are the bundle's newest entries.
        everything = sorted([*key_entries, *entries], key=lambda e: e.seq)
        if man["format"] in (FORMAT_V2, FORMAT_V3, FORMAT_V4):
            r.completeness = check_heads(self.m, man, cp, keys, entries).to_json()
            self.done("completeness")
        # 10. The auditor's tables, recomputed (from v3 the heads entry, checked above, is a row).
        if man["format"] in (FORMAT_V3, FORMAT_V4):
            everything = sorted([*everything, read_heads(self.m)[1]], key=lambda e: e.seq)
        check_tables(self.m, man["format"], everything)
        r.checks.append("parquet")
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

    def _data_keys(self, fmt: str) -> dict[str, bytes] | None:
        """(v4) The data keys the bundle carries; None for older formats, which seal nothing."""
        if fmt != FORMAT_V4:
            return None
        try:
            return sealing.decode_keys(self.need(DATAKEYS), DATAKEYS, whole=True)[1]
        except DecodeError as exc:
            raise _f(exc.message, "datakeys.decode", file=DATAKEYS) from exc

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

    def _manifest_matches(self, man: dict[str, Any], cp: Checkpoint, keys: KeySchedule) -> None:
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

    def _entries(
        self,
        man: dict[str, Any],
        key_entries: list[Entry],
        entries: list[Entry],
        keys: KeySchedule,
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
            keys.check_entry(e, ENTRIES)
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
        try:
            return tarball.read_tar(f, size, limits)
        except OSError as exc:  # a "regular" file that cannot be read: /proc/self/mem, an I/O error
            raise StorageError(f"cannot read {path}: {exc.strerror or exc}", file=str(path)) from exc


def _sealed_memories(members: dict[str, bytes]) -> dict[str, list[str]]:
    """The memories whose views say fields stayed sealed (forgotten, or no key), with those fields."""
    try:
        views = json.loads(members[MEMORIES])["memories"]
    except (KeyError, ValueError, TypeError):
        return {}
    out: dict[str, list[str]] = {}
    for v in views if isinstance(views, list) else []:
        if isinstance(v, dict) and isinstance(v.get("sealed"), list) and isinstance(v.get("id"), str):
            out[v["id"]] = [str(f) for f in v["sealed"]]
    return out


def verify_members(
    members: dict[str, bytes],
    *,
    policy: TrustPolicy,
    witnesses: WitnessPolicy | None = None,
) -> BundleReport:
    """Verify a bundle already read into memory under a trust policy; return the report or raise."""
    try:
        return _Check(members, policy, witnesses).run()
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
    path: Path,
    *,
    policy: TrustPolicy,
    limits: tarball.Limits = tarball.DEFAULT_LIMITS,
    witnesses: WitnessPolicy | None = None,
) -> BundleReport:
    """Verify the bundle at `path` (every check of docs/forensics.md); return a report or raise."""
    members = read_members(path, limits)
    report = verify_members(members, policy=policy, witnesses=witnesses)
    report.file = str(path)
    report.checks.insert(0, "archive")
    return report


def trust_policy(trusted_key: str | None) -> TrustPolicy:
    """The policy of a --trusted-key option: the pinned key, or trust on first use without one."""
    return PinnedKey(parse_key_arg(trusted_key)) if trusted_key is not None else TRUST_GENESIS


# -- the standalone command -------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mnemolog.eventlog.bundle",
        description="Verify a mnemolog forensic bundle offline (needs only cbor2 and pynacl).",
    )
    p.add_argument("bundle", help="the bundle (.tar)")
    p.add_argument("--trusted-key", help="the pinned public key: name+hash+base64, or a file holding one")
    p.add_argument(
        "--witness-key",
        action="append",
        default=[],
        help="a witness's cosigner key (repeatable): the checkpoint must carry its cosignature",
    )
    p.add_argument("--min-witnesses", type=int, default=None, help="how many of them (default: all)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    try:
        policy = WitnessPolicy.parse(args.witness_key, args.min_witnesses)
        report = verify_bundle(Path(args.bundle), policy=trust_policy(args.trusted_key), witnesses=policy)
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


if __name__ == "__main__":
    sys.exit(main())
