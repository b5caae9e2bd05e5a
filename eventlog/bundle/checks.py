"""The checks of a forensic bundle that need no key: its file set, its proofs, its views.

Each function takes the archive's members (and what earlier checks
established), raises the first failure as a VerificationError naming the
check, the file and the seq, and otherwise returns what it verified. The
order in which `bundle.verify_members` runs them, and the checks that need
the key history, are in `bundle.py`.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from mnemolog.eventlog.bundle import memview, offline
from mnemolog.eventlog.bundle.format import (
    ENTRIES,
    ENVELOPES,
    FORMAT_V3,
    FORMAT_V4,
    HEADS,
    HEADS_KEYS,
    HEADS_TYPE,
    MANIFEST,
    MEMORIES,
    PARQUET,
    PROOFS,
    TOUCHES,
    entries_parquet,
    entries_parquet_v3,
    sha256,
    touches_parquet,
)
from mnemolog.eventlog.bundle.format import listed as bundle_files
from mnemolog.eventlog.errors import VerificationError
from mnemolog.eventlog.format import merkle, sealing
from mnemolog.eventlog.format.entry import Entry, to_jsonable
from mnemolog.eventlog.format.heads import HeadProof, verify_head
from mnemolog.eventlog.format.note import Checkpoint
from mnemolog.eventlog.verify.trust import KeySchedule
from mnemolog.eventlog.vocabulary import events as vocabulary


def fail(message: str, check: str, **where: Any) -> VerificationError:
    return VerificationError(message, check=check, **where)


def need(members: dict[str, bytes], name: str) -> bytes:
    data = members.get(name)
    if data is None:
        raise fail(f"the bundle has no {name}", "bundle.missing_file", file=name)
    return data


class Views(NamedTuple):
    """What the views check established: the memories with views and their envelopes."""

    memories: list[str]
    envelopes: dict[str, Any]


def check_files(members: dict[str, bytes], man: dict[str, Any]) -> None:
    """No file missing, extra or modified: sizes and SHA-256 as the signed manifest lists them."""
    files = bundle_files(man["format"])
    listed: dict[str, dict[str, Any]] = {}
    for f in man["files"]:
        if not isinstance(f, dict) or set(f) != {"name", "size", "sha256"}:
            raise fail(f"{MANIFEST}: a malformed file record", "manifest.decode", file=MANIFEST)
        name = offline.as_str(f["name"], "file name", MANIFEST, "manifest.decode")
        if name in listed:
            raise fail(f"{MANIFEST}: {name} is listed twice", "manifest.files", file=name)
        listed[name] = f
    for name in sorted(listed):
        if name not in files:
            raise fail(
                f"{MANIFEST}: lists {name!r}, which is not a bundle v1 file",
                "manifest.files",
                file=name,
            )
    for name in files:
        if name not in listed:
            raise fail(f"{MANIFEST}: does not list {name}", "manifest.files", file=name)
        if name not in members:
            raise fail(f"{name} is listed in the manifest but missing", "bundle.missing_file", file=name)
    for name in sorted(members):
        if name != MANIFEST and name not in listed:
            raise fail(f"{name} is in the archive but not in the manifest", "bundle.extra_file", file=name)
    for name in files:
        data, f = members[name], listed[name]
        if len(data) != f["size"]:
            raise fail(
                f"{name} is {len(data)} bytes, the manifest says {f['size']}",
                "bundle.file_size",
                file=name,
                expected=f["size"],
                found=len(data),
            )
        digest = sha256(data)
        if digest != f["sha256"]:
            raise fail(
                f"{name} has been modified: its SHA-256 differs from the signed manifest",
                "bundle.file_hash",
                file=name,
                expected=to_jsonable(f["sha256"]),
                found=digest.hex(),
            )


def check_proofs(
    members: dict[str, bytes], key_entries: list[Entry], entries: list[Entry], cp: Checkpoint
) -> None:
    """One RFC 9162 inclusion proof for exactly each entry, each leading to the signed root."""
    pf = offline.decode_map(need(members, PROOFS), PROOFS, "proofs.decode")
    offline.require_keys(pf, {"tree_size", "proofs"}, PROOFS, "proofs.decode")
    if pf["tree_size"] != cp.size:
        raise fail(
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
            raise fail(f"{PROOFS}: a proof is [seq, [hash, ...]]", "proofs.decode", file=PROOFS)
        seq = offline.as_int(item[0], "seq", PROOFS, "proofs.decode")
        if seq in got:
            raise fail(f"{PROOFS}: two proofs for entry {seq}", "proofs.decode", seq=seq, file=PROOFS)
        got[seq] = item[1]
    if sorted(got) != sorted(leaves):
        missing = sorted(set(leaves) - set(got))
        raise fail(
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
            raise fail(
                f"{PROOFS}: {exc.message}",
                exc.check,
                seq=seq,
                file=PROOFS,
                expected=exc.expected,
                found=exc.found,
            ) from exc
        except TypeError as exc:
            raise fail(
                f"{PROOFS}: proof hashes must be bytes", "proofs.decode", seq=seq, file=PROOFS
            ) from exc


def check_views(
    members: dict[str, bytes],
    man: dict[str, Any],
    key_entries: list[Entry],
    entries: list[Entry],
    keys: sealing.KeyLookup | None = None,
) -> Views:
    """Selection, atomisation chain and every view, recomputed from the entries alone."""
    target = man["memory_id"]
    ids = man["memories"]
    if ids != sorted(set(ids)) or not all(isinstance(i, str) for i in ids):
        raise fail(f"{MANIFEST}: memories must be sorted, unique ids", "manifest.decode", file=MANIFEST)
    if target not in ids:
        raise fail(f"{MANIFEST}: the memory {target!r} has no view", "selection.target", file=MANIFEST)
    wanted = set(ids)
    closure = memview.chain_closure(target, entries) if man["include_chain"] else {target}
    # A member of the chain without a view (a candidate's interaction) selects entries too.
    selecting = wanted | closure
    for e in entries:
        if not selecting.intersection(memview.entry_touched_ids(e)):
            raise fail(
                f"{ENTRIES}: entry {e.seq} ({e.type}) touches none of the bundle's memories",
                "selection.extra_entry",
                seq=e.seq,
                file=ENTRIES,
            )
    stored = memview.stored_ids(entries)
    unstored = set(man["unstored"])
    if man["unstored"] != sorted(unstored) or unstored & wanted:
        raise fail(f"{MANIFEST}: unstored must be sorted ids without views", "manifest.decode", file=MANIFEST)
    for mid in sorted(closure | wanted | unstored):
        if mid in unstored:
            if mid in stored or mid not in closure:
                raise fail(
                    f"{MANIFEST}: {mid} is listed as never stored, but the entries disagree",
                    "chain.unstored",
                    file=MANIFEST,
                )
        elif mid not in stored:
            raise fail(
                f"the atomisation chain names memory {mid}, but the bundle has no memory.stored for it "
                "(an entry was removed from the bundle)",
                "chain.missing_memory",
                file=ENTRIES,
                expected=mid,
            )
        elif mid not in closure or mid not in wanted:
            raise fail(
                f"{MANIFEST}: the memory set differs from the atomisation chain at {mid}",
                "chain.members",
                file=MANIFEST,
                expected=sorted(closure - unstored),
                found=ids,
            )
    everything = sorted([*key_entries, *entries], key=lambda e: e.seq)
    views = memview.fold_views(everything, ids, keys=keys)
    want = memview.render_views(views)
    if need(members, MEMORIES) != want:
        # A bundle exported before views mirrored the atomisation archive into metadata:
        # the same entries, folded as that release did, must give its memories.json.
        legacy = memview.render_views(memview.fold_views(everything, ids, mirror=False, keys=keys))
        if need(members, MEMORIES) == legacy:
            want = legacy
    same(members, MEMORIES, want, "view.memories")
    envelopes = {k: memview.envelope(v) for k, v in views.items()}
    same(members, ENVELOPES, memview.render_envelopes(views), "view.envelopes")
    if man["envelopes"] != envelopes:
        raise fail(
            f"{MANIFEST}: the envelopes differ from what the entries imply",
            "view.envelopes",
            file=MANIFEST,
            expected=envelopes,
            found=to_jsonable(man["envelopes"]),
        )
    return Views(list(ids), envelopes)


def same(members: dict[str, bytes], name: str, want: bytes, check: str) -> None:
    """The derived file `name` must be exactly `want`; else name the first differing memory."""
    have = need(members, name)
    if have == want:
        return
    detail = ""
    if name not in (PARQUET, TOUCHES):
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
    raise fail(f"{name} differs from what the entries imply{detail}", check, file=name)


class Completeness(NamedTuple):
    """What the committed heads and the back-chains prove, per memory id of the bundle.

    `heads[m]`: the seq of m's newest entry among the first `as_of` (None: none);
    `proven_from[m]`: every entry about m from this seq on is in the bundle (0:
    all of them; higher when older entries predate back-chains).
    """

    as_of: int  # the heads cover the first `as_of` entries of the log
    heads_seq: int  # the heads.committed entry
    root: bytes
    heads: dict[str, int | None]
    proven_from: dict[str, int]
    tree_size: int = 0  # the checkpoint's: the bundle's entries are proven in this tree

    @property
    def complete(self) -> bool:
        return all(s == 0 for s in self.proven_from.values())

    @property
    def uncovered(self) -> int:
        """Signed entries of the tree outside the claim: seqs as_of..tree_size-1 but the heads entry.

        A claim as of L says nothing about them: any of them may touch these
        memories and be missing from the bundle. Zero when the heads entry is
        the checkpoint's last entry and commits to everything before it.
        """
        return max(0, self.tree_size - self.as_of - 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "as_of_tree_size": self.as_of,
            "heads_seq": self.heads_seq,
            "root": self.root.hex(),
            "complete": self.complete,
            "heads": dict(sorted(self.heads.items())),
            "proven_from": dict(sorted(self.proven_from.items())),
            "tree_size": self.tree_size,
            "uncovered_entries": self.uncovered,
        }


def check_back_chains(entries: list[Entry], ids: list[str]) -> dict[str, int]:
    """For each id, the seq from which its bundle entries provably include every entry about it.

    Walking down from the newest entry about m, each entry that carries the
    back-chain must point (`touch_prev[m]`) at exactly the next older bundle
    entry about m, or say it is m's first (-1) when there is none. An entry
    of a type version from before back-chains ends the proof there: the
    entries below it are present or not on the exporter's word alone.
    """
    about: dict[str, list[Entry]] = {m: [] for m in ids}
    for e in entries:
        for m in memview.entry_touched_ids(e):
            if m in about:
                about[m].append(e)
    out: dict[str, int] = {}
    for m, es in about.items():
        proven = 0
        for i in range(len(es) - 1, -1, -1):
            e = es[i]
            if not vocabulary.chained(e.type, e.tv):
                proven = e.seq
                break
            prev = vocabulary.read_touch_prev(e.data).get(m)
            older = es[i - 1].seq if i > 0 else None
            if (
                prev is None
                or (prev == vocabulary.FIRST_TOUCH) != (older is None)
                or (older is not None and prev != older)
            ):
                if prev is None:
                    what = "carries no back-chain pointer for it"
                elif prev == vocabulary.FIRST_TOUCH:
                    what = f"says it is the first entry about it, but the bundle holds entry {older}"
                else:
                    what = f"points back to entry {prev}, which is " + (
                        "not in the bundle"
                        if all(x.seq != prev for x in es)
                        else f"not the one before it ({older})"
                    )
                raise fail(
                    f"entry {e.seq} ({e.type}) about {m} {what}: incomplete bundle or broken chain",
                    "completeness.back_chain",
                    seq=e.seq,
                    file=ENTRIES,
                    expected=older,
                    found=prev,
                )
        out[m] = proven
    return out


def read_heads(members: dict[str, bytes]) -> tuple[dict[str, Any], Entry]:
    """heads.cbor decoded, and the one entry it carries (not yet checked against anything)."""
    hf = offline.decode_map(need(members, HEADS), HEADS, "heads.decode")
    offline.require_keys(hf, HEADS_KEYS, HEADS, "heads.decode")
    raw = hf["entry"]
    if not isinstance(raw, bytes):
        raise fail(f"{HEADS}: entry must be the entry's bytes", "heads.decode", file=HEADS)
    items = offline.parse_entries(raw, HEADS)
    if len(items) != 1:
        raise fail(f"{HEADS}: entry must be exactly one entry", "heads.decode", file=HEADS)
    return hf, items[0]


def check_tables(members: dict[str, bytes], fmt: str, everything: list[Entry]) -> None:
    """entries.parquet (and, from v3, touches.parquet) equal what the entries give, byte for byte.

    From v3 the heads entry is a row of entries.parquet too: `everything` is then
    the key history, the entries and the heads entry, already checked.
    """
    if fmt not in (FORMAT_V3, FORMAT_V4):
        same(members, PARQUET, entries_parquet(everything), "view.parquet")
        return
    same(members, PARQUET, entries_parquet_v3(everything), "view.parquet")
    same(members, TOUCHES, touches_parquet(everything), "view.touches")


def check_heads(
    members: dict[str, bytes],
    man: dict[str, Any],
    cp: Checkpoint,
    keys: KeySchedule,
    entries: list[Entry],
) -> Completeness:
    """The bundle holds, for each of its ids, every entry about it among the first L entries.

    heads.cbor carries a `heads.committed` entry of the log (signed under the
    key history and proven in the checkpoint's tree), which commits to the
    Merkle map of every memory's newest touching entry among the first L
    entries, and a proof from that map for each id of the bundle. The newest
    bundle entry touching each id below L must be that head; an id the map
    proves untouched must have no bundle entry below L.
    """
    hf, he = read_heads(members)
    if he.type != HEADS_TYPE:
        raise fail(
            f"{HEADS}: entry {he.seq} is a {he.type!r}, not {HEADS_TYPE}",
            "heads.type",
            seq=he.seq,
            file=HEADS,
        )
    if he.seq >= cp.size:
        raise fail(
            f"{HEADS}: entry {he.seq} is beyond the checkpoint of size {cp.size}",
            "heads.beyond_checkpoint",
            seq=he.seq,
            file=HEADS,
        )
    keys.check_entry(he, HEADS)
    d = he.data
    as_of = offline.as_int(d.get("size"), "heads size", HEADS, "heads.decode")
    root = offline.as_hash(d.get("root"), "heads root", HEADS, "heads.decode")
    if as_of > he.seq:
        raise fail(
            f"{HEADS}: entry {he.seq} commits heads of {as_of} entries, more than came before it",
            "heads.decode",
            seq=he.seq,
            file=HEADS,
        )
    inclusion = offline.as_list(hf["inclusion"], "inclusion", HEADS, "heads.decode")
    try:
        merkle.verify_inclusion(he.seq, cp.size, he.leaf, inclusion, cp.root)
    except VerificationError as exc:
        raise fail(f"{HEADS}: {exc.message}", exc.check, seq=he.seq, file=HEADS) from exc
    except TypeError as exc:
        raise fail(f"{HEADS}: proof hashes must be bytes", "heads.decode", file=HEADS) from exc
    proofs = [
        HeadProof.from_cbor(p, HEADS) for p in offline.as_list(hf["proofs"], "proofs", HEADS, "heads.decode")
    ]
    ids = sorted({*man["memories"], *man["unstored"]})
    if [p.memory_id for p in proofs] != ids:
        raise fail(
            f"{HEADS}: the head proofs must cover exactly the bundle's memory ids, sorted",
            "heads.coverage",
            file=HEADS,
            expected=ids,
            found=[p.memory_id for p in proofs],
        )
    newest: dict[str, int] = {}
    for e in entries:
        if e.seq < as_of:
            for m in memview.entry_touched_ids(e):
                newest[m] = e.seq
    heads: dict[str, int | None] = {}
    for p in proofs:
        try:
            head = verify_head(p, root)
        except VerificationError as exc:
            raise fail(
                f"{HEADS}: {exc.message}", exc.check, file=HEADS, expected=exc.expected, found=exc.found
            ) from exc
        have = newest.get(p.memory_id)
        if head != have:
            raise fail(
                f"the newest entry about {p.memory_id} among the first {as_of} is "
                + (f"entry {head}" if head is not None else "none (never touched)")
                + ", but the bundle's newest is "
                + (f"entry {have}" if have is not None else "none")
                + " (the bundle is incomplete)",
                "completeness.head",
                file=ENTRIES,
                seq=head,
                expected=head,
                found=have,
            )
        heads[p.memory_id] = head
    return Completeness(as_of, he.seq, root, heads, check_back_chains(entries, ids), cp.size)
