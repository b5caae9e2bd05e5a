"""The offline verifier: every file, every signature, every proof and every view is checked.

Tampering is done to members (then re-archived), so each failure is about
the file changed rather than the tar framing. Some tests re-sign the
manifest with the log's own key: they show which checks hold even against
the key holder (selection, chain, views), beyond the signatures.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemolog.eventlog.bundle import format as bundle_format
from mnemolog.eventlog.bundle import verifier as bundle
from mnemolog.eventlog.bundle.offline import split_sequence
from mnemolog.eventlog.bundle.tarball import write_tar
from mnemolog.eventlog.bundle.verifier import (
    CHECKPOINT,
    ENTRIES,
    ENVELOPES,
    KEYS,
    LISTED_V2,
    MANIFEST,
    MEMORIES,
    PARQUET,
    PROOFS,
    VERIFY_MD,
    resign_manifest,
    verify_bundle,
    verify_members,
)
from mnemolog.eventlog.errors import MnemologError, UsageError, VerificationError
from mnemolog.eventlog.format import codec
from mnemolog.eventlog.format.keys import SigningKey, load_private_key
from mnemolog.eventlog.verify.trust import TRUST_GENESIS, PinnedKey, parse_key_arg
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.forensics import service as forensics
from mnemolog.substrate.home import Home
from tests.support.forensic_data import Atomised, atomised_home, members_of, rotated_home


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Atomised, bytes]]:
    a = atomised_home(tmp_path_factory.mktemp("verify") / "home")
    with Substrate.open(a.home, long_lived=False) as sub:
        ex = forensics.export_bundle(sub, a.parent)
    yield a, ex.data


@pytest.fixture
def members(world: tuple[Atomised, bytes]) -> dict[str, bytes]:
    return members_of(world[1])


@pytest.fixture(scope="module")
def key(world: tuple[Atomised, bytes]) -> SigningKey:
    return load_private_key(world[0].home.signing_key_path)


def fails(members: dict[str, bytes], check: str | None = None, **kw: Any) -> VerificationError:
    with pytest.raises(VerificationError) as info:
        verify_members(members, **{"policy": TRUST_GENESIS, **kw})
    if check is not None:
        assert info.value.check == check, (info.value.check, info.value.message)
    return info.value


def flip(data: bytes, i: int) -> bytes:
    return data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]


def entries_of(members: dict[str, bytes], name: str = ENTRIES) -> list[bytes]:
    return [raw for raw, _ in split_sequence(members[name], name)]


# -- the good case ------------------------------------------------------------


def test_valid_bundle_verifies(world: tuple[Atomised, bytes], members: dict[str, bytes]) -> None:
    a, _ = world
    r = verify_members(members, policy=TRUST_GENESIS)
    assert r.memory_id == a.parent
    assert set(r.memories) == {a.parent, *a.atoms}
    assert r.trust["anchor"] == "genesis" and r.trust["pinned"] is False
    assert r.checks[-2:] == ["completeness", "parquet"]
    env = r.envelopes[a.parent]
    assert env == {
        "memory_id": a.parent,
        "atomised_into": 3,
        "archived_at": env["archived_at"],
        "atom_ids": a.atoms,
        "atom_of": None,
    }
    assert isinstance(env["archived_at"], int)
    for atom in a.atoms:
        assert r.envelopes[atom]["atom_of"] == a.parent
        assert r.envelopes[atom]["atom_ids"] == []
    assert set(members) == {MANIFEST, *bundle_format.LISTED_V4}


def test_pinned_key_is_reported(
    world: tuple[Atomised, bytes], members: dict[str, bytes], key: SigningKey
) -> None:
    r = verify_members(members, policy=PinnedKey(key.verifier))
    want = {"anchor": "pinned", "key": key.verifier.vkey(), "pinned": True, "epoch_from_seq": 0}
    assert want.items() <= r.trust.items()
    assert "pinned key" in r.text()


def test_wrong_trusted_key_fails(members: dict[str, bytes]) -> None:
    stranger = SigningKey.generate("test-key").verifier
    err = fails(members, "trust.key", policy=PinnedKey(stranger))
    assert err.expected == stranger.vkey()


def test_trusted_key_parsing(tmp_path: Path, key: SigningKey) -> None:
    path = tmp_path / "k.pub"
    path.write_text(key.verifier.vkey() + "\n")
    assert parse_key_arg(str(path)) == key.verifier
    assert parse_key_arg(key.verifier.vkey()) == key.verifier
    assert bundle.trust_policy(None) is TRUST_GENESIS
    assert bundle.trust_policy(key.verifier.vkey()) == PinnedKey(key.verifier)
    huge = tmp_path / "huge.pub"
    huge.write_bytes(b"x" * 100_000)
    binary = tmp_path / "binary.pub"
    binary.write_bytes(b"\xff\xfe+\x00")
    for bad in (
        "nonsense",
        "a+b+c",
        key.verifier.vkey()[:-4],
        str(tmp_path / "missing.pub"),
        str(tmp_path),
        str(huge),
        str(binary),
    ):
        with pytest.raises(UsageError):
            parse_key_arg(bad)


# -- one byte changed, removed, renamed, added ------------------------------------


@pytest.mark.parametrize("name", [MANIFEST, *LISTED_V2])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_one_byte_changed_names_the_file(members: dict[str, bytes], name: str, where: str) -> None:
    data = members[name]
    i = {"first": 0, "middle": len(data) // 2, "last": len(data) - 1}[where]
    err = fails({**members, name: flip(data, i)})
    assert err.file == name, (err.check, err.message)
    assert err.exit_code == 8


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_any_byte_changed_is_caught(members: dict[str, bytes], data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(members)))
    i = data.draw(st.integers(0, len(members[name]) - 1))
    value = data.draw(st.integers(0, 255).filter(lambda v: v != members[name][i]))
    changed = {**members, name: members[name][:i] + bytes([value]) + members[name][i + 1 :]}
    with pytest.raises(VerificationError) as info:
        verify_members(changed, policy=TRUST_GENESIS)
    assert info.value.file == name


@pytest.mark.parametrize("name", [MANIFEST, *LISTED_V2])
def test_removed_file_is_named(members: dict[str, bytes], name: str) -> None:
    rest = {k: v for k, v in members.items() if k != name}
    err = fails(rest)
    assert err.file == name
    assert err.check in ("bundle.missing_file",)


@pytest.mark.parametrize("name", LISTED_V2)
def test_renamed_file_is_named(members: dict[str, bytes], name: str) -> None:
    rest = {k: v for k, v in members.items() if k != name}
    rest["renamed-" + name] = members[name]
    err = fails(rest)
    assert err.file == name


def test_extra_file_is_named(members: dict[str, bytes]) -> None:
    err = fails({**members, "notes.txt": b"trust me"}, "bundle.extra_file")
    assert err.file == "notes.txt"


def test_extra_file_in_a_resigned_manifest_is_still_refused(
    members: dict[str, bytes], key: SigningKey
) -> None:
    err = fails(resign_manifest({**members, "notes.txt": b"x"}, key), "manifest.files")
    assert err.file == "notes.txt"


def test_manifest_signed_by_another_key(members: dict[str, bytes]) -> None:
    other = SigningKey.generate("test-key")
    err = fails(resign_manifest(members, other), "manifest.kid")
    assert err.file == MANIFEST


def test_manifest_with_a_bad_signature(members: dict[str, bytes]) -> None:
    m = codec.decode(members[MANIFEST])
    m["sig"] = bytes(64)
    fails({**members, MANIFEST: codec.encode(m)}, "manifest.signature")


def test_manifest_with_an_unsigned_extra_field(members: dict[str, bytes]) -> None:
    m = codec.decode(members[MANIFEST])
    m["comment"] = "added later"
    err = fails({**members, MANIFEST: codec.encode(m)}, "manifest.decode")
    assert "comment" in err.message


def test_manifest_format_version(members: dict[str, bytes], key: SigningKey) -> None:
    fails(resign_manifest(members, key, format="mnemolog/forensic-bundle/v9"), "manifest.format")


def test_manifest_not_canonical(members: dict[str, bytes]) -> None:
    import cbor2

    m = codec.decode(members[MANIFEST])
    loose = cbor2.dumps(dict(reversed(list(m.items()))), canonical=False)
    assert loose != members[MANIFEST]
    err = fails({**members, MANIFEST: loose}, "manifest.decode")
    assert "canonical" in err.message


def test_manifest_claims_another_root(members: dict[str, bytes], key: SigningKey) -> None:
    fails(resign_manifest(members, key, root=bytes(32)), "manifest.mismatch")


# -- entries, proofs, key history ---------------------------------------------------


def test_entry_removed_while_the_envelope_still_names_it(
    world: tuple[Atomised, bytes], members: dict[str, bytes], key: SigningKey
) -> None:
    a, _ = world
    raws = entries_of(members)
    m = codec.decode(members[MANIFEST])
    victim = next(i for i, r in enumerate(raws) if a.atoms[1].encode() in r and b"memory.stored" in r)
    kept = [r for i, r in enumerate(raws) if i != victim]
    seqs = [s for i, s in enumerate(m["seqs"]) if i != victim]
    proofs = codec.decode(members[PROOFS])
    proofs["proofs"] = [p for p in proofs["proofs"] if p[0] != m["seqs"][victim]]
    tampered = {**members, ENTRIES: b"".join(kept), PROOFS: codec.encode(proofs)}
    err = fails(resign_manifest(tampered, key, seqs=seqs), "chain.missing_memory")
    assert err.expected == a.atoms[1]


def test_entry_removed_without_resigning(members: dict[str, bytes]) -> None:
    raws = entries_of(members)
    err = fails({**members, ENTRIES: b"".join(raws[1:])}, "bundle.file_size")
    assert err.file == ENTRIES


def test_entries_that_do_not_match_the_manifest(members: dict[str, bytes], key: SigningKey) -> None:
    raws = entries_of(members)
    err = fails(resign_manifest({**members, ENTRIES: b"".join(raws[:-1])}, key), "entries.selection")
    assert err.file == ENTRIES


def test_an_unrelated_entry_smuggled_in(world: tuple[Atomised, bytes], key: SigningKey) -> None:
    a, _ = world
    with Substrate.open(a.home, long_lived=False) as sub:
        other = forensics.export_bundle(sub, a.other, include_chain=False)
        full = forensics.export_bundle(sub, a.parent)
    mine, theirs = members_of(full.data), members_of(other.data)
    extra = [raw for raw in entries_of(theirs) if raw not in entries_of(mine)]
    assert extra, "the other memory has entries of its own"
    target = codec.decode(extra[0])["seq"]
    raws = sorted([*entries_of(mine), extra[0]], key=lambda r: codec.decode(r)["seq"])
    proofs = codec.decode(mine[PROOFS])
    theirs_proofs = {p[0]: p for p in codec.decode(theirs[PROOFS])["proofs"]}
    proofs["proofs"] = sorted([*proofs["proofs"], theirs_proofs[target]])
    m = codec.decode(mine[MANIFEST])
    tampered = {**mine, ENTRIES: b"".join(raws), PROOFS: codec.encode(proofs)}
    err = fails(resign_manifest(tampered, key, seqs=sorted([*m["seqs"], target])), "selection.extra_entry")
    assert err.seq == target


def test_entry_with_a_forged_signature(members: dict[str, bytes], key: SigningKey) -> None:
    raws = entries_of(members)
    e = codec.decode(raws[0])
    e["sig"] = bytes(64)
    forged = [codec.encode(e), *raws[1:]]
    err = fails(resign_manifest({**members, ENTRIES: b"".join(forged)}, key), "entry.signature")
    assert err.seq == e["seq"] and err.file == ENTRIES


def test_entry_resigned_by_a_key_outside_the_history(members: dict[str, bytes], key: SigningKey) -> None:
    from mnemolog.eventlog.format.entry import make_entry

    raws = entries_of(members)
    e = codec.decode(raws[0])
    imposter = SigningKey.generate("test-key")
    forged = make_entry(
        seq=e["seq"], ts=e["ts"], type_=e["type"], tv=e["tv"], data=e["data"], prev=e["prev"], signer=imposter
    )
    tampered = {**members, ENTRIES: b"".join([forged.raw, *raws[1:]])}
    err = fails(resign_manifest(tampered, key), "entry.kid")
    assert err.seq == e["seq"]


def test_entry_changed_and_resigned_by_the_log_key_breaks_its_proof(
    members: dict[str, bytes], key: SigningKey
) -> None:
    from mnemolog.eventlog.format.entry import make_entry

    raws = entries_of(members)
    i = next(i for i, r in enumerate(raws) if codec.decode(r)["type"] == "memory.updated")
    e = codec.decode(raws[i])
    data = {**e["data"], "confidence": 0.01}
    rewritten = make_entry(
        seq=e["seq"], ts=e["ts"], type_=e["type"], tv=e["tv"], data=data, prev=e["prev"], signer=key
    )
    raws[i] = rewritten.raw
    err = fails(resign_manifest({**members, ENTRIES: b"".join(raws)}, key))
    # The key holder can sign a new entry, but not fit it into the signed tree (or the chain).
    assert err.check in ("inclusion.root", "entry.prev"), err.check
    assert err.seq in (e["seq"], e["seq"] + 1)


def test_non_canonical_entry(members: dict[str, bytes], key: SigningKey) -> None:
    import cbor2

    raws = entries_of(members)
    loose = cbor2.dumps(dict(reversed(list(codec.decode(raws[0]).items()))), canonical=False)
    assert loose != raws[0]
    err = fails(resign_manifest({**members, ENTRIES: b"".join([loose, *raws[1:]])}, key))
    assert err.check in ("entry.canonical", "entry.decode")


def test_proof_hash_changed(members: dict[str, bytes], key: SigningKey) -> None:
    proofs = codec.decode(members[PROOFS])
    seq, path = proofs["proofs"][2]
    path[0] = flip(path[0], 5)
    err = fails(resign_manifest({**members, PROOFS: codec.encode(proofs)}, key), "inclusion.root")
    assert err.seq == seq and err.file == PROOFS


def test_proof_missing(members: dict[str, bytes], key: SigningKey) -> None:
    proofs = codec.decode(members[PROOFS])
    dropped = proofs["proofs"].pop(1)[0]
    err = fails(resign_manifest({**members, PROOFS: codec.encode(proofs)}, key), "proofs.coverage")
    assert err.seq == dropped


def test_proofs_for_another_size(members: dict[str, bytes], key: SigningKey) -> None:
    proofs = codec.decode(members[PROOFS])
    proofs["tree_size"] += 1
    fails(resign_manifest({**members, PROOFS: codec.encode(proofs)}, key), "proofs.size")


def test_genesis_missing_from_the_key_history(members: dict[str, bytes], key: SigningKey) -> None:
    err = fails(resign_manifest({**members, KEYS: b""}, key), "keys.genesis")
    assert err.file == KEYS


def test_checkpoint_from_another_log(members: dict[str, bytes], tmp_path: Path) -> None:
    from tests.support.forensic_data import make_home

    other = make_home(tmp_path / "other")
    with other.open_log() as log:
        _, raw = log.latest_checkpoint()
    err = fails({**members, CHECKPOINT: raw}, "checkpoint.origin")
    assert err.file == CHECKPOINT


def test_checkpoint_signed_by_a_stranger(members: dict[str, bytes]) -> None:
    from mnemolog.eventlog.format.note import peek_checkpoint

    cp = peek_checkpoint(members[CHECKPOINT])
    stranger = SigningKey.generate("test-key")
    err = fails({**members, CHECKPOINT: cp.sign(stranger)})
    assert err.check in ("checkpoint.signer", "checkpoint.signature")
    assert err.file == CHECKPOINT


# -- views -------------------------------------------------------------------------


def test_memory_view_edited_and_resigned(
    world: tuple[Atomised, bytes], members: dict[str, bytes], key: SigningKey
) -> None:
    a, _ = world
    views = json.loads(members[MEMORIES])
    views["memories"][a.parent]["content"] = "nothing to see here"
    edited = (json.dumps(views, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()
    err = fails(resign_manifest({**members, MEMORIES: edited}, key), "view.memories")
    assert a.parent in err.message and err.file == MEMORIES


def test_envelope_edited_and_resigned(
    world: tuple[Atomised, bytes], members: dict[str, bytes], key: SigningKey
) -> None:
    a, _ = world
    envs = json.loads(members[ENVELOPES])
    envs["envelopes"][a.parent]["atomised_into"] = 2
    edited = (json.dumps(envs, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()
    fails(resign_manifest({**members, ENVELOPES: edited}, key), "view.envelopes")


def test_manifest_envelopes_edited_and_resigned(
    world: tuple[Atomised, bytes], members: dict[str, bytes], key: SigningKey
) -> None:
    a, _ = world
    envs = codec.decode(members[MANIFEST])["envelopes"]
    envs[a.parent]["atom_ids"] = a.atoms[:2]
    err = fails(resign_manifest(members, key, envelopes=envs), "view.envelopes")
    assert err.file == MANIFEST


def test_parquet_edited_and_resigned(members: dict[str, bytes], key: SigningKey) -> None:
    edited = members[PARQUET].replace(b"memory.updated", b"memory.updatex", 1)
    assert edited != members[PARQUET]
    err = fails(resign_manifest({**members, PARQUET: edited}, key), "view.parquet")
    assert err.file == PARQUET


def test_memory_set_shrunk_and_resigned(
    world: tuple[Atomised, bytes], members: dict[str, bytes], key: SigningKey
) -> None:
    a, _ = world
    m = codec.decode(members[MANIFEST])
    ids = [i for i in m["memories"] if i != a.atoms[2]]
    err = fails(resign_manifest(members, key, memories=ids))
    assert err.check in ("chain.members", "view.memories")


def test_verify_md_is_covered_by_the_manifest(members: dict[str, bytes]) -> None:
    err = fails({**members, VERIFY_MD: members[VERIFY_MD] + b"\nAll good, no need to check.\n"})
    assert err.check == "bundle.file_size" and err.file == VERIFY_MD


def test_verify_md_quotes_the_manifests_format_and_digests_are_over_raw_bytes(
    members: dict[str, bytes],
) -> None:
    """docs/forensics.md §2 and §6: VERIFY.md names the format; `files` hashes each member's bytes."""
    import hashlib

    man = codec.decode(members["manifest.cbor"])
    assert man["format"] == bundle.FORMAT_V4
    assert f"(format `{man['format']}`)".encode() in members[VERIFY_MD]
    for f in man["files"]:
        raw = members[f["name"]]
        assert (f["size"], f["sha256"]) == (len(raw), hashlib.sha256(raw).digest())


def test_the_exporters_heads_cover_every_entry_before_them(world: tuple[Atomised, bytes]) -> None:
    """format.md §13, what a commitment covers: L = the heads entry's seq; each id, its newest seq."""
    from mnemolog.eventlog.bundle import memview
    from mnemolog.eventlog.bundle.offline import parse_entries
    from mnemolog.eventlog.format.heads import HeadsMap
    from mnemolog.eventlog.store.log import Log

    heads = codec.decode(members_of(world[1])["heads.cbor"])
    (e,) = parse_entries(heads["entry"], "heads.cbor")
    assert e.type == "heads.committed" and e.data["size"] == e.seq
    newest: dict[str, int] = {}
    with Log(world[0].home.log_dir) as log:
        for x in log.iter_entries(0, e.data["size"]):
            for m in memview.entry_touched_ids(x):
                newest[m] = x.seq
    assert e.data["count"] == len(newest) and e.data["root"] == HeadsMap(newest).root


# -- key rotation -------------------------------------------------------------------


@pytest.fixture(scope="module")
def rotated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Home, str, list[str], bytes]:
    home, parent, atoms = rotated_home(tmp_path_factory.mktemp("rot") / "home")
    with Substrate.open(home, long_lived=False) as sub:
        data = forensics.export_bundle(sub, atoms[0]).data
    return home, parent, atoms, data


def test_bundle_across_rotations(rotated: tuple[Home, str, list[str], bytes]) -> None:
    home, parent, atoms, data = rotated
    members = members_of(data)
    with home.open_log() as log:
        epochs = log.key_history()
    assert len(epochs) == 3
    r = verify_members(members, policy=TRUST_GENESIS)
    assert set(r.memories) == {parent, *atoms}
    assert r.key_entries == 3
    assert r.checkpoint_key == epochs[-1].key.vkey()
    # Any key of the history can be pinned: trust flows along the signed rotations.
    for i, ep in enumerate(epochs):
        rr = verify_members(members, policy=PinnedKey(ep.key))
        assert rr.trust["epoch_from_seq"] == ep.first_seq, i


def test_rotation_dropped_from_the_key_history(
    rotated: tuple[Home, str, list[str], bytes],
) -> None:
    home, _, _, data = rotated
    members = members_of(data)
    raws = entries_of(members, KEYS)
    err = fails({**members, KEYS: b"".join(raws[:2])})
    # Without the last rotation the checkpoint's signer is not the key the history implies.
    assert err.check in ("checkpoint.signer", "checkpoint.signature")
    last_key = load_private_key(home.signing_key_path)
    err = fails(resign_manifest({**members, KEYS: b"".join(raws[:2])}, last_key))
    assert err.check in ("checkpoint.signer", "checkpoint.signature")


# -- files on disk -------------------------------------------------------------------


def test_verify_bundle_from_disk(world: tuple[Atomised, bytes], tmp_path: Path) -> None:
    _, data = world
    path = tmp_path / "b.tar"
    path.write_bytes(data)
    r = verify_bundle(path, policy=TRUST_GENESIS)
    assert r.file == str(path) and r.checks[0] == "archive"
    with pytest.raises(MnemologError) as info:
        verify_bundle(tmp_path / "absent.tar", policy=TRUST_GENESIS)
    assert info.value.exit_code == 2


def test_members_rearchived_in_another_order_still_verify(members: dict[str, bytes], tmp_path: Path) -> None:
    path = tmp_path / "again.tar"
    path.write_bytes(write_tar(reversed(list(members.items()))))
    assert verify_bundle(path, policy=TRUST_GENESIS).memory_id
