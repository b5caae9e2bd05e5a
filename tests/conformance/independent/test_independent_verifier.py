"""The independent verifier (written from the docs alone) against what the current writer produces.

Homes are built with the CLI (stores, updates, links, an atomisation, a key rotation, bundle
exports, a witness cosignature from `mnemolog witness serve`); the verifier must accept them and
reject each kind of damage: flipped bytes, a dropped entry, a forged signature, a false
`touch_prev`, a wrong heads root, a bad cosignature. The worked examples of docs/format.md §11 and
docs/forensics.md §10 are checked from the documents' own bytes.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cbor2
import pytest
from nacl.signing import SigningKey

from tests.conformance.independent import verifier as iv
from tests.support.cli import Cli

ROOT = Path(__file__).resolve().parents[3]
POST_MORTEM = (ROOT / "examples" / "post-mortem.txt").read_text()


@dataclass(frozen=True)
class Built:
    home: Path
    a: str
    b: str
    genesis_vkey: str
    current_vkey: str
    bundle_a: bytes
    prove: dict[str, Any]
    consistency: dict[str, Any]


@pytest.fixture(scope="module")
def built(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A home of stores, an update, a link and a key rotation, and a bundle of its first memory.

    Segments are kept at the smallest size the writer takes, and an import in batches fills
    several of them (a writer rolls to a new segment at a batch boundary).
    """
    base = tmp_path_factory.mktemp("indep")
    home = base / "home"
    cli.ok(home, "init")
    config = home / "config.toml"
    config.write_text(re.sub(r"(?m)^segment_bytes = .*$", "segment_bytes = 4096", config.read_text()))
    bulk = base / "bulk.jsonl"
    lines = [
        json.dumps({"content": f"bulk memory {i}: " + "the tide tables of the harbour " * 30})
        for i in range(9)
    ]
    bulk.write_text("\n".join(lines) + "\n")
    cli.ok(home, "import", str(bulk), "--batch", "3")
    a = cli.ok(home, "store", "alpha: the harbour opens at six")["memory"]["id"]
    b = cli.ok(home, "store", "beta: the ferry leaves at seven", "--title", "ferry")["memory"]["id"]
    cli.ok(home, "update", a, "--content", "alpha: the harbour opens at half past six")
    cli.ok(home, "link", a, b)
    genesis_vkey = cli.ok(home, "key", "show")["vkey"]
    cli.ok(home, "key", "rotate", "--name", "second")
    current_vkey = cli.ok(home, "key", "show")["vkey"]
    cli.ok(home, "update", b, "--content", "beta: the ferry leaves at eight")
    cli.ok(home, "context", "build", "when does the harbour open")
    cli.ok(home, "export-forensic-bundle", "--memory-id", a, "-o", str(base / "a.tar"))
    size = len(iv.read_entries(home / "log")[0])
    prove = cli.ok(home, "log", "prove", "2")
    consistency = cli.ok(home, "log", "consistency", "3", str(size))
    return Built(home, a, b, genesis_vkey, current_vkey, (base / "a.tar").read_bytes(), prove, consistency)


@dataclass(frozen=True)
class Chain:
    home: Path
    parent: str
    atom: str
    bundle: bytes
    promoted: str
    promoted_bundle: bytes


@pytest.fixture(scope="module")
def chain(cli: Cli, built: Built, tmp_path_factory: pytest.TempPathFactory) -> Chain:
    """The home again, with a memory atomised by the rules curator, an interaction captured with
    its candidates extracted and one promoted (the knowledge loop's ids are in the heads map
    too), a link taken back, and the bundle of one atom."""
    base = tmp_path_factory.mktemp("chain")
    home = base / "home"
    shutil.copytree(built.home, home)
    parent = cli.ok(home, "store", POST_MORTEM, "--title", "Checkout outage post-mortem")["memory"]["id"]
    atom = _atom_ids(cli.ok(home, "atomise", parent, "--curator", "rules"), parent)[0]
    cli.ok(
        home,
        "capture",
        "--prompt",
        "When does the harbour open?",
        "--response",
        "We decided the harbour opens at half past six. Always check the tide tables first.",
    )
    cli.ok(home, "extract", "--pending", "--extractor", "rules")
    candidates = re.findall(r'"id": "([0-9A-Z]{26})"', json.dumps(cli.ok(home, "candidates", "list")))
    promoted = candidates[0]
    cli.ok(home, "promote", promoted, "--project", "harbour", "--domain", "software")
    cli.ok(home, "unlink", built.a, built.b)
    cli.ok(home, "export-forensic-bundle", "--memory-id", atom, "-o", str(base / "atom.tar"))
    cli.ok(home, "export-forensic-bundle", "--memory-id", promoted, "-o", str(base / "promoted.tar"))
    return Chain(
        home, parent, atom, (base / "atom.tar").read_bytes(), promoted, (base / "promoted.tar").read_bytes()
    )


def _atom_ids(out: dict[str, Any], parent: str) -> list[str]:
    """The atoms' ids in `atomise --json`, wherever the object puts them."""
    found = re.findall(r'"([0-9A-Z]{26})"', json.dumps(out))
    ids = [i for i in dict.fromkeys(found) if i != parent]
    assert ids, out
    return ids


def copy_home(built: Built, tmp_path: Path) -> Path:
    home = tmp_path / "home"
    shutil.copytree(built.home, home, ignore=shutil.ignore_patterns("projections"))
    return home


def fails(check: str | None, fn: Callable[[], object]) -> iv.Failure:
    with pytest.raises(iv.Failure) as info:
        fn()
    if check is not None:
        assert info.value.check == check, str(info.value)
    return info.value


def test_the_verifier_imports_only_the_standard_library_cbor2_and_pynacl() -> None:
    import ast

    tree = ast.parse(Path(iv.__file__).read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    allowed = set(sys.stdlib_module_names) | {"__future__", "cbor2", "nacl"}
    assert {n for n in names if n.split(".")[0] not in allowed} == set()


# ---------------------------------------------------------------- the documents' worked examples


def _doc_block(doc: str, name: str) -> str:
    text = (ROOT / "docs" / doc).read_text()
    m = re.search(rf"<!-- example: {re.escape(name)} -->\n```[a-z]*\n(.*?)```", text, re.S)
    assert m, name
    return m.group(1)


def _hex(doc: str, name: str) -> bytes:
    return bytes.fromhex("".join(_doc_block(doc, name).split()))


def test_the_worked_example_of_format_md_verifies_byte_for_byte() -> None:
    key = SigningKey(bytes(range(32)))
    pk = bytes(key.verify_key)
    key_block = _doc_block("format.md", "key")
    assert pk.hex() in key_block and iv.key_id(pk).hex() in key_block
    vkey = iv.VerifierKey("example", 1, pk).text
    assert vkey in key_block and iv.parse_vkey(vkey).public_key == pk

    e0 = iv.decode_entry(_hex("format.md", "entry0"), 0)
    assert e0.leaf == _hex("format.md", "leaf0")
    history = iv.genesis_history(e0)
    iv.check_signed(e0, history)
    table = (
        (ROOT / "docs" / "format.md")
        .read_text()
        .split("<!-- example: entry1-parts -->\n")[1]
        .split("\n\n")[0]
    )
    parts = re.findall(r"^\| ((?:`[0-9a-f]+` ?)+) \|", table, re.M)
    raw1 = bytes.fromhex("".join(p.replace("`", "").replace(" ", "") for p in parts))
    e1 = iv.decode_entry(raw1, 1)
    assert len(raw1) == 180 and e1.value["prev"] == e0.leaf
    assert iv.to_be_signed(e1) == _hex("format.md", "tbs1") == iv.to_be_signed_cut(raw1)
    iv.check_signed(e1, history)
    assert e1.leaf == _hex("format.md", "leaf1")
    assert iv.mth([e0.leaf, e1.leaf]) == _hex("format.md", "root2")

    cp = iv.parse_checkpoint(_doc_block("format.md", "checkpoint2").encode())
    assert (cp.origin, cp.size, cp.root) == (history.origin, 2, _hex("format.md", "root2"))
    iv.check_note_signature(cp.note, "example", pk, "checkpoint")

    cosigned = iv.parse_checkpoint(_doc_block("forensics.md", "cosigned-checkpoint").encode())
    witness = _doc_block("forensics.md", "cosignature").split()[2]
    assert iv.parse_vkey(witness, (4,)).public_key == bytes(SigningKey(bytes(range(32, 64))).verify_key)
    report = iv.check_cosignatures(cosigned, [witness])
    assert report.witnesses == [{"name": "witness.example", "timestamp": 1700000100}]
    message = _doc_block("forensics.md", "cosignature-message").encode()
    assert message == b"cosignature/v1\ntime 1700000100\n" + cosigned.note.text


def test_canonical_cbor_rules() -> None:
    assert iv.encode(1.5) == bytes.fromhex("f93e00") and iv.encode(1.0) == bytes.fromhex("f93c00")
    assert iv.encode({"bb": 1, "a": 2, "c": 3}) == bytes.fromhex("a3") + b"aa\x02ac\x03bbb\x01"
    for bad in (b"\x18\x05", b"\x5f\x41\x00\xff", b"\xc1\x00", b"\xf7", b"\xa2aa\x01aa\x02", b"\x01\x01"):
        fails(None, lambda bad=bad: iv.decode_canonical(bad, "x"))
    deep: Any = []
    for _ in range(33):
        deep = [deep]
    fails(None, lambda: iv.encode({"data": deep}))


# ---------------------------------------------------------------- a real home accepted


def test_the_writers_home_verifies(built: Built) -> None:
    report = iv.verify_home(built.home)
    assert report.anchor == "home anchor"
    assert [e["name"] for e in report.epochs] == [report.origin, "second"]
    assert report.pointers_checked > 0 and report.pointers_missing == 0
    assert report.heads_commitments_checked == 1  # the second export reuses the log's last entry (§13)
    for key in (built.genesis_vkey, built.current_vkey):
        assert iv.verify_log(built.home / "log", trusted_key=key).anchor.startswith("pinned key")
    assert iv.verify_log(built.home / "log").anchor == "trust on first use"
    for e in iv.read_entries(built.home / "log")[0]:  # format.md §2's shortcut, on every entry
        assert iv.to_be_signed_cut(e.raw) == iv.to_be_signed(e)


def test_the_writers_segments_are_contiguous(built: Built) -> None:
    names = sorted(p.name for p in (built.home / "log").glob("*.seg"))
    assert len(names) > 2 and names[0] == "0" * 20 + ".seg"
    entries, torn = iv.read_entries(built.home / "log")
    assert torn == 0 and [e.seq for e in entries] == list(range(len(entries)))


def test_the_writers_index_is_as_documented(built: Built) -> None:
    entries, _ = iv.read_entries(built.home / "log")
    assert iv.index_disagreements(built.home / "log", entries) == []


def test_a_pinned_key_not_in_the_history_is_refused(built: Built) -> None:
    other = iv.VerifierKey("second", 1, bytes(SigningKey.generate().verify_key)).text
    fails("trust.key", lambda: iv.verify_log(built.home / "log", trusted_key=other))
    renamed = iv.VerifierKey("renamed", 1, iv.parse_vkey(built.current_vkey).public_key).text
    fails("trust.key", lambda: iv.verify_log(built.home / "log", trusted_key=renamed))


def test_prove_and_consistency_json_verify_by_rfc_9162(built: Built) -> None:
    d = base64.b64decode
    p = built.prove
    cp = iv.parse_checkpoint(p["checkpoint"].encode())
    assert d(p["root"]) == cp.root and p["tree_size"] == cp.size
    entries, _ = iv.read_entries(built.home / "log")
    assert d(p["leaf_hash"]) == entries[p["seq"]].leaf
    assert iv.verify_inclusion(
        p["seq"], p["tree_size"], d(p["leaf_hash"]), [d(h) for h in p["proof"]], cp.root
    )
    c = built.consistency
    roots = iv.roots_at([e.leaf for e in entries], [c["old_size"], c["new_size"]])
    assert d(c["old_root"]) == roots[c["old_size"]] and d(c["new_root"]) == roots[c["new_size"]]
    proof = [d(h) for h in c["proof"]]
    assert iv.verify_consistency(
        c["old_size"], c["new_size"], roots[c["old_size"]], roots[c["new_size"]], proof
    )
    assert not iv.verify_consistency(c["old_size"], c["new_size"], roots[c["old_size"]], b"\x00" * 32, proof)


def test_the_writers_bundle_verifies(built: Built) -> None:
    report = iv.verify_bundle(built.bundle_a, trusted_key=built.genesis_vkey)
    assert report.format == "mnemolog/forensic-bundle/v4"
    assert report.memory_id == built.a and report.memories == [built.a]
    assert report.complete_as_of is not None and report.uncovered_entries == 0
    assert report.packs == 1  # the context pack the memory went into, re-rendered to its hash
    assert iv.verify_bundle(built.bundle_a).anchor == "trust on first use"


def opened_entries(files: dict[str, bytes], name: str = "entries.cbor") -> list[iv.Entry]:
    """A v4 bundle's entries with their sealed fields opened by its datakeys.cbor."""
    entries = [iv.decode_entry(i) for i in iv.split_sequence(files[name], "x")[0]]
    return iv.opened(entries, iv.read_datakeys(files["datakeys.cbor"]))


def test_a_pack_that_does_not_render_to_its_hash_or_misquotes_is_refused(built: Built) -> None:
    files = untar(built.bundle_a)
    entries = opened_entries(files)
    pack = next(e for e in entries if e.type == "context.built")
    quoted = next(x for t in pack.data["tiers"] for x in t["included"] if x["id"] == built.a)

    def with_pack(data: dict[str, Any]) -> list[iv.Entry]:
        return [iv.Entry(e.raw, {**e.value, "data": data}, e.leaf) if e is pack else e for e in entries]

    altered = json.loads(json.dumps(pack.data))
    next(x for t in altered["tiers"] for x in t["included"] if x["id"] == built.a)["text"] += "!"
    fails("context.sha256", lambda: iv.check_packs(with_pack(altered), [built.a]))
    assert iv.check_packs(entries, [built.a]) == 1
    assert quoted["text"].startswith("alpha")
    older = [e for e in entries if e.type != "memory.updated"]  # the quote is the updated text
    fails("context.source", lambda: iv.check_packs(older, [built.a]))


def test_the_knowledge_loop_entries_chain_and_commit(chain: Chain) -> None:
    entries, _ = iv.read_entries(chain.home / "log")
    types = {e.type for e in entries}
    assert {"interaction.captured", "candidate.extracted", "link.removed", "atomisation.completed"} <= types
    assert "memory.promoted" in types
    assert iv.index_disagreements(chain.home / "log", entries) == []
    report = iv.verify_home(chain.home)
    assert report.pointers_missing == 0 and report.pointers_checked > 20


def test_a_promoted_candidates_bundle_holds_its_interaction(chain: Chain) -> None:
    report = iv.verify_bundle(chain.promoted_bundle)
    assert report.memories == [chain.promoted]
    files = untar(chain.promoted_bundle)
    manifest = cbor2.loads(files["manifest.cbor"])
    assert len(manifest["unstored"]) == 1  # the interaction: a chain member without a view
    view = json.loads(files["memories.json"])["memories"][chain.promoted]
    assert view["knowledge"]["status"] == "active" and view["knowledge"]["project"] == "harbour"


def test_the_writers_chain_bundle_verifies(chain: Chain) -> None:
    report = iv.verify_bundle(chain.bundle)
    assert chain.parent in report.memories and chain.atom in report.memories and len(report.memories) > 2
    assert set(report.proven_from) == set(report.memories)
    assert iv.verify_home(chain.home).heads_commitments_checked == 2


# ---------------------------------------------------------------- logs rejected


def _segment(home: Path) -> Path:
    return home / "log" / ("0" * 20 + ".seg")


@pytest.mark.parametrize("where", [0.02, 0.3, 0.55, 0.97])
def test_a_flipped_byte_in_a_segment_is_refused(built: Built, tmp_path: Path, where: float) -> None:
    home = copy_home(built, tmp_path)
    seg = _segment(home)
    raw = bytearray(seg.read_bytes())
    raw[int(len(raw) * where)] ^= 0x01
    seg.write_bytes(bytes(raw))
    fails(None, lambda: iv.verify_home(home))


def _segments(home: Path) -> list[Path]:
    return sorted((home / "log").glob("*.seg"))


def rewrite(home: Path, raws: list[bytes]) -> None:
    """The log's entries as one segment (the split into segments is not signed)."""
    for p in _segments(home):
        p.unlink()
    _segment(home).write_bytes(b"".join(raws))


def test_segment_rules(built: Built, tmp_path: Path) -> None:
    home = copy_home(built, tmp_path / "renamed")
    segs = _segments(home)
    segs[1].rename(segs[1].with_name(f"{int(segs[1].name[:20]) + 1:020d}.seg"))
    fails("segments.name", lambda: iv.verify_log(home / "log"))
    home = copy_home(built, tmp_path / "emptied")
    _segments(home)[1].write_bytes(b"")
    fails("segments.empty", lambda: iv.verify_log(home / "log"))
    home = copy_home(built, tmp_path / "first")
    _segments(home)[0].unlink()
    fails("segments.name", lambda: iv.verify_log(home / "log"))


def test_a_torn_tail_is_reported_and_ignored_but_garbage_is_not(built: Built, tmp_path: Path) -> None:
    home = copy_home(built, tmp_path / "torn")
    entries, _ = iv.read_entries(home / "log")
    last = _segments(home)[-1]
    last.write_bytes(last.read_bytes() + entries[-1].raw[:57])
    assert iv.verify_home(home).torn_tail == 57
    home = copy_home(built, tmp_path / "garbage")
    last = _segments(home)[-1]
    last.write_bytes(last.read_bytes() + b"\xa1\x61")  # a map that is not an entry's a9
    fails("entry.decode", lambda: iv.verify_home(home))
    home = copy_home(built, tmp_path / "middle")
    first = _segments(home)[0]
    first.write_bytes(first.read_bytes() + entries[-1].raw[:57])  # not in the last segment
    fails("entry.decode", lambda: iv.verify_home(home))


def test_a_dropped_entry_is_refused(built: Built, tmp_path: Path) -> None:
    home = copy_home(built, tmp_path)
    entries, _ = iv.read_entries(home / "log")
    rewrite(home, [e.raw for i, e in enumerate(entries) if i != 3])
    fails("entry.seq", lambda: iv.verify_home(home))
    rewrite(home, [e.raw for e in entries[:-1]])
    fails("log.truncated", lambda: iv.verify_log(home / "log"))


def test_a_forged_entry_signature_is_refused(built: Built, tmp_path: Path) -> None:
    home = copy_home(built, tmp_path)
    entries, _ = iv.read_entries(home / "log")
    target = entries[4]
    forged = dict(target.value, sig=SigningKey.generate().sign(iv.to_be_signed(target)).signature)
    raw = iv.encode(forged)
    assert len(raw) == len(target.raw)
    rewrite(home, [raw if e.seq == 4 else e.raw for e in entries])
    fails("entry.signature", lambda: iv.verify_home(home))


def test_a_forged_checkpoint_signature_is_refused(built: Built, tmp_path: Path) -> None:
    home = copy_home(built, tmp_path)
    path = sorted((home / "log" / "checkpoints").iterdir())[-1]
    cp = iv.parse_checkpoint(path.read_bytes())
    line = cp.note.lines[0]
    bad = line.raw[:4] + SigningKey.generate().sign(cp.note.text).signature
    path.write_bytes(cp.note.text + f"\n\u2014 {line.name} {base64.b64encode(bad).decode()}\n".encode())
    fails("checkpoint.signature", lambda: iv.verify_log(home / "log"))


# A key holder lying when it writes: entries re-signed with the home's own keys, checkpoints too.


def _signer(path: Path) -> SigningKey:
    text = path.read_text().strip()
    parts = text.split("+", 4)
    assert parts[:2] == ["PRIVATE", "KEY"] and len(parts) == 5, "signer key: PRIVATE+KEY+name+hash+b64"
    raw = base64.b64decode(parts[4])
    assert raw[0] == 1 and len(raw) == 33
    return SigningKey(raw[1:])


def _keys_by_kid(home: Path) -> dict[bytes, SigningKey]:
    paths = [home / "keys" / "signing.key", *(home / "keys" / "retired").glob("*.key")]
    keys = {}
    for p in paths:
        k = _signer(p)
        keys[iv.key_id(bytes(k.verify_key))] = k
    return keys


def resign(home: Path, mutate: Callable[[int, dict[str, Any]], None]) -> None:
    """Rewrite the log with `mutate` applied to each entry's map, re-chained and re-signed, and
    one fresh checkpoint of the whole log (older ones removed), as a forger holding the keys would."""
    entries, _ = iv.read_entries(home / "log")
    history = iv.check_chain(entries)
    keys = _keys_by_kid(home)
    prev, out = iv.ZERO32, []
    for e in entries:
        value = dict(e.value, data=dict(e.data), prev=prev)
        mutate(e.seq, value)
        epoch = history.at(e.seq)
        body = {k: v for k, v in value.items() if k != "sig"}
        value["sig"] = keys[epoch.kid].sign(iv.ENTRY_TAG + iv.encode(body)).signature
        raw = iv.encode(value)
        out.append(raw)
        prev = iv.leaf_hash(raw)
    rewrite(home, out)
    for p in (home / "log" / "checkpoints").iterdir():
        p.unlink()
    n = len(out)
    root = iv.mth([iv.leaf_hash(r) for r in out])
    text = f"{history.origin}\n{n}\n{base64.b64encode(root).decode()}\n".encode()
    epoch = history.at(n)
    sig = iv.note_key_hash(epoch.name, 1, epoch.public_key) + keys[epoch.kid].sign(text).signature
    note = text + f"\n\u2014 {epoch.name} {base64.b64encode(sig).decode()}\n".encode()
    (home / "log" / "checkpoints" / f"{n:020d}").write_bytes(note)


def _seq_of(home: Path, pred: Callable[[iv.Entry], bool]) -> int:
    entries, _ = iv.read_entries(home / "log")
    return next(e.seq for e in reversed(entries) if pred(e))


def test_resigning_unchanged_verifies(built: Built, tmp_path: Path) -> None:
    home = copy_home(built, tmp_path)
    resign(home, lambda seq, value: None)
    iv.verify_log(home / "log", trusted_key=built.genesis_vkey)


def test_a_false_touch_prev_is_refused(built: Built, tmp_path: Path) -> None:
    home = copy_home(built, tmp_path)
    target = _seq_of(home, lambda e: e.type == "memory.updated" and e.data.get("id") == built.a)

    def lie(seq: int, value: dict[str, Any]) -> None:
        if seq == target:
            value["data"]["touch_prev"] = {built.a: -1}

    resign(home, lie)
    err = fails("backchain.pointer", lambda: iv.verify_log(home / "log"))
    assert err.seq == target


def test_a_wrong_heads_root_or_count_is_refused(built: Built, tmp_path: Path) -> None:
    for field, wrong in (("root", b"\x07" * 32), ("count", 1)):
        home = copy_home(built, tmp_path / field)
        target = _seq_of(home, lambda e: e.type == "heads.committed")

        def lie(
            seq: int, value: dict[str, Any], field: str = field, wrong: object = wrong, target: int = target
        ) -> None:
            if seq == target:
                value["data"][field] = wrong

        resign(home, lie)
        err = fails("heads.committed", lambda home=home: iv.verify_log(home / "log"))
        assert err.seq == target and f"data.{field}" in str(err)


# ---------------------------------------------------------------- bundles rejected


def untar(raw: bytes) -> dict[str, bytes]:
    return iv.read_tar(raw)


def retar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(files[name]), 0o644
            tar.addfile(info, io.BytesIO(files[name]))
    return buf.getvalue()


def resign_manifest(files: dict[str, bytes], home: Path, **changes: Any) -> None:
    """Re-list every file and re-sign the manifest with the home's key: a forger holding the key."""
    manifest = cbor2.loads(files["manifest.cbor"])
    manifest.update(changes)
    manifest["files"] = [
        {"name": n, "size": len(files[n]), "sha256": iv.sha256(files[n])}
        for n in sorted(files)
        if n != "manifest.cbor"
    ]
    key = _keys_by_kid(home)[manifest["kid"]]
    body = {k: v for k, v in manifest.items() if k != "sig"}
    manifest["sig"] = key.sign(iv.MANIFEST_TAG + iv.encode(body)).signature
    files["manifest.cbor"] = iv.encode(manifest)


def test_the_repacking_helpers_keep_a_bundle_valid(built: Built) -> None:
    files = untar(built.bundle_a)
    resign_manifest(files, built.home)
    iv.verify_bundle(retar(files))


@pytest.mark.parametrize(
    "member", ["entries.cbor", "memories.json", "heads.cbor", "touches.parquet", "VERIFY.md"]
)
def test_a_flipped_byte_in_a_bundle_member_is_refused(built: Built, member: str) -> None:
    files = untar(built.bundle_a)
    raw = bytearray(files[member])
    raw[len(raw) // 2] ^= 0x20
    files[member] = bytes(raw)
    fails("files.sha256", lambda: iv.verify_bundle(retar(files)))


def test_flipped_bytes_anywhere_in_the_archive_are_refused(built: Built) -> None:
    raw = built.bundle_a
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        # The zero padding after each member's data carries nothing and is not checked.
        meaningful = [o for m in tar.getmembers() for o in range(m.offset, m.offset_data + m.size)]
    for off in meaningful[::97]:
        damaged = bytearray(raw)
        damaged[off] ^= 0x04
        if bytes(damaged) != raw:
            fails(None, lambda d=bytes(damaged): iv.verify_bundle(d))


def test_an_entry_dropped_from_a_resigned_bundle_is_refused(built: Built) -> None:
    files = untar(built.bundle_a)
    items, _ = iv.split_sequence(files["entries.cbor"], "x")
    entries = [iv.decode_entry(i) for i in items]
    proofs = cbor2.loads(files["proofs.cbor"])
    link = next(e for e in entries if e.type == "link.created")
    # The update is not dropped: the context pack quoting its text would tell first (context.source).
    for drop in (link, entries[-1]):  # one in the middle (a back-chain gap) and the newest (a head)
        kept = [e for e in entries if e is not drop]
        f = dict(files)
        f["entries.cbor"] = b"".join(e.raw for e in kept)
        pr = {"tree_size": proofs["tree_size"], "proofs": [p for p in proofs["proofs"] if p[0] != drop.seq]}
        f["proofs.cbor"] = iv.encode(pr)
        resign_manifest(f, built.home, seqs=[e.seq for e in kept])
        fails("view.memories", lambda f=f: iv.verify_bundle(retar(f)))
        # The forger folds the views again too: only completeness is left to catch it.
        keys = [iv.decode_entry(i) for i in iv.split_sequence(files["keys.cbor"], "x")[0]]
        datakeys = iv.read_datakeys(files["datakeys.cbor"])
        f["memories.json"] = iv.render_json(iv.fold_views(iv.opened([*keys, *kept], datakeys), [built.a]))
        resign_manifest(f, built.home, seqs=[e.seq for e in kept])
        want = "completeness.back_chain" if drop is link else "completeness.head"
        fails(want, lambda f=f: iv.verify_bundle(retar(f)))


def test_tables_that_disagree_with_the_entries_are_refused(built: Built) -> None:
    files = untar(built.bundle_a)
    # Another memory's id, same length, in touches.parquet: a table that lies about the entries.
    other = built.b.encode()
    f = {**files, "touches.parquet": files["touches.parquet"].replace(built.a.encode(), other)}
    resign_manifest(f, built.home)
    fails("view.touches", lambda: iv.verify_bundle(retar(f)))
    cols = iv.read_parquet(files["entries.parquet"])
    # Content is sealed in the entries (format.md §17), so the sealed box's column is the target.
    content = next(c for c in cols["p_sealed"] if c)
    f = {**files, "entries.parquet": files["entries.parquet"].replace(content, content.upper())}
    resign_manifest(f, built.home)
    fails("view.parquet", lambda: iv.verify_bundle(retar(f)))


def test_a_forged_bundle_signature_is_refused(built: Built) -> None:
    files = untar(built.bundle_a)
    manifest = cbor2.loads(files["manifest.cbor"])
    manifest["sig"] = SigningKey.generate().sign(b"x").signature
    files["manifest.cbor"] = iv.encode(manifest)
    fails("manifest.signature", lambda: iv.verify_bundle(retar(files)))


def test_a_bad_heads_proof_in_a_bundle_is_refused(built: Built) -> None:
    files = untar(built.bundle_a)
    heads = cbor2.loads(files["heads.cbor"])
    m, head, siblings, other, other_head = heads["proofs"][0]
    heads["proofs"][0] = [m, head + 1, siblings, other, other_head]
    files["heads.cbor"] = iv.encode(heads)
    resign_manifest(files, built.home)
    fails("heads.root", lambda: iv.verify_bundle(retar(files)))


def test_members_of_the_wrong_shape_are_refused_under_a_resigned_manifest(built: Built) -> None:
    files = untar(built.bundle_a)
    shapes = [b"", iv.encode([]), iv.encode({}), iv.encode(None), b"\xff\xfe"]
    # VERIFY.md is instructions (signed, never parsed: the writer's verifier takes any text too).
    for name in sorted(set(files) - {"VERIFY.md"}):
        for shape in [files[name][: len(files[name]) // 2], *shapes]:
            f = {**files, name: shape}
            if name != "manifest.cbor":
                resign_manifest(f, built.home)
            fails(None, lambda f=f: iv.verify_bundle(retar(f)))
    manifest = cbor2.loads(files["manifest.cbor"])
    for key in sorted(manifest):
        for wrong in (None, 5, "x", [5], {"a": 1}):
            f = dict(files)
            f["manifest.cbor"] = iv.encode({**manifest, key: wrong})
            if key not in ("sig", "kid", "files"):  # re-signing would list the files again
                resign_manifest(f, built.home)
            fails(None, lambda f=f: iv.verify_bundle(retar(f)))


def test_hostile_archives_are_refused(built: Built) -> None:
    files = untar(built.bundle_a)
    fails("archive.compressed", lambda: iv.verify_bundle(b"\x1f\x8b" + built.bundle_a))
    fails(None, lambda: iv.verify_bundle(built.bundle_a[:-1024]))
    fails(None, lambda: iv.verify_bundle(built.bundle_a + b"x"))
    fails("files.set", lambda: iv.verify_bundle(retar({**files, "extra": b""})))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        tar.addfile(tarfile.TarInfo("../manifest.cbor"), io.BytesIO(b""))
    fails("archive.name", lambda: iv.verify_bundle(buf.getvalue()))


# ---------------------------------------------------------------- log exports


def test_the_writers_log_exports_verify_and_damage_is_refused(cli: Cli, built: Built, tmp_path: Path) -> None:
    home = copy_home(built, tmp_path)  # an export signs a checkpoint: not in the shared home
    size = len(iv.read_entries(home / "log")[0])
    for lo, hi in ((0, size - 1), (0, 4), (3, 3), (5, size - 2), (size - 1, size - 1)):
        out = tmp_path / f"{lo}-{hi}.cbor"
        cli.ok(home, "log", "export", "--from", str(lo), "--to", str(hi), "-o", str(out))
        report = iv.verify_export(out.read_bytes(), trusted_key=built.genesis_vkey)
        assert (report.start, report.count) == (lo, hi - lo + 1)
    raw = (tmp_path / f"5-{size - 2}.cbor").read_bytes()
    items, _ = iv.split_sequence(raw, "x")
    header = cbor2.loads(items[0])
    fails("export.count", lambda: iv.verify_export(b"".join(items[:-1])))
    fails(
        "export.range_proof",
        lambda: iv.verify_export(iv.encode({**header, "range_proof": []}) + b"".join(items[1:])),
    )
    flipped = bytearray(raw)
    flipped[len(items[0]) + 40] ^= 0x01
    fails(None, lambda: iv.verify_export(bytes(flipped)))
    # Entries shifted by one (another range under the same header): the range proof fails.
    shifted = iv.encode({**header, "start": 4}) + b"".join(items[1:])
    fails(None, lambda: iv.verify_export(shifted))


# ---------------------------------------------------------------- cosignatures from a local witness


@pytest.fixture(scope="module")
def witnessed(cli: Cli, built: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    base = tmp_path_factory.mktemp("witnessed")
    home = base / "home"
    shutil.copytree(built.home, home)
    origin = iv.verify_log(home / "log").origin
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "mnemolog.cli.main", "witness", "serve", "--dir", str(base / "w")]
    cmd += ["--listen", "127.0.0.1:0", "--log", f"{origin}={built.current_vkey}", "--name", "w.example"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        url = re.search(r"(http://127\.0\.0\.1:\d+)", first)
        assert url, first
        wvkey = (base / "w" / "witness.vkey").read_text().strip()
        cli.ok(home, "witness", "add", "w", url.group(1), wvkey)
        cli.ok(home, "store", "gamma: witnessed")
        cli.ok(home, "log", "checkpoint")
        yield home, wvkey
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_witness_cosignature_verifies(witnessed: tuple[Path, str]) -> None:
    home, wvkey = witnessed
    report = iv.verify_home(home, witness_keys=[wvkey])
    assert [w["name"] for w in report.witnesses] == ["w.example"]
    as_ed25519 = iv.VerifierKey("w.example", 1, iv.parse_vkey(wvkey, (4,)).public_key).text
    assert iv.verify_home(home, witness_keys=[as_ed25519]).witnesses


def test_a_bad_or_missing_cosignature_is_refused(witnessed: tuple[Path, str], tmp_path: Path) -> None:
    src, wvkey = witnessed
    home = tmp_path / "home"
    shutil.copytree(src, home, ignore=shutil.ignore_patterns("projections"))
    path = sorted((home / "log" / "checkpoints").iterdir())[-1]
    text = path.read_bytes()
    line = text.rstrip(b"\n").split(b"\n")[-1]
    name, b64 = line.decode().removeprefix("\u2014 ").split(" ")
    assert name == "w.example"
    raw = bytearray(base64.b64decode(b64))
    raw[-1] ^= 0x01
    path.write_bytes(text.replace(line, f"\u2014 {name} {base64.b64encode(bytes(raw)).decode()}".encode()))
    fails("witness.signature", lambda: iv.verify_home(home, witness_keys=[wvkey]))
    other = iv.VerifierKey("w.other", 4, bytes(SigningKey.generate().verify_key)).text
    fails("witness.quorum", lambda: iv.verify_home(src, witness_keys=[wvkey, other]))
    assert iv.verify_home(src, witness_keys=[wvkey, other], min_witnesses=1).witnesses


# ---------------------------------------------------------------- sealed content and erasure (format.md §17)


@dataclass(frozen=True)
class Forgotten:
    home: Path
    bundle_b: bytes
    bundle_a: bytes
    receipt: bytes


@pytest.fixture(scope="module")
def forgotten(cli: Cli, built: Built, tmp_path_factory: pytest.TempPathFactory) -> Forgotten:
    """The home again with memory b forgotten (a receipt written), and bundles of b and of a."""
    base = tmp_path_factory.mktemp("forgotten")
    home = base / "home"
    shutil.copytree(built.home, home)
    cli.ok(home, "context", "build", "when does the ferry leave")
    cli.ok(home, "forget", built.b, "--reason", "the user asked", "--receipt", str(base / "b.receipt"))
    cli.ok(home, "export-forensic-bundle", "--memory-id", built.b, "-o", str(base / "b.tar"))
    cli.ok(home, "export-forensic-bundle", "--memory-id", built.a, "-o", str(base / "a.tar"))
    return Forgotten(
        home, (base / "b.tar").read_bytes(), (base / "a.tar").read_bytes(), (base / "b.receipt").read_bytes()
    )


def test_a_bundle_of_a_forgotten_memory_verifies_with_its_content_absent(
    built: Built, forgotten: Forgotten
) -> None:
    report = iv.verify_bundle(forgotten.bundle_b)
    files = untar(forgotten.bundle_b)
    view = json.loads(files["memories.json"])["memories"][built.b]
    assert view["erased"]["reason"] == "the user asked"
    assert view["content"] == "" and view["title"] is None and view["sealed"]
    assert built.b in report.sealed
    erased = [e for e in opened_entries(files) if e.type == "memory.erased"]
    assert len(erased) == 1 and erased[0].data["ids"] == [built.b]
    assert erased[0].seq == view["erased"]["seq"]
    # No key the erasure destroyed travels in the bundle (the pack's own key may).
    assert erased[0].data["keys"] and not set(erased[0].data["keys"]) & set(
        iv.read_datakeys(files["datakeys.cbor"])
    )
    # The pack built before the forgetting quoted b: it re-renders with a gap, its hash unchecked.
    assert report.packs >= 1 and [built.b] in report.pack_gaps.values()
    # A bundle of a memory beside it (linked to it, quoted in the same packs) still verifies.
    other = iv.verify_bundle(forgotten.bundle_a)
    assert other.sealed == [] and built.a in other.memories


def test_an_erasure_receipt_verifies_and_names_the_memory(
    cli: Cli, built: Built, forgotten: Forgotten
) -> None:
    report = iv.verify_receipt(forgotten.receipt, trusted_key=built.genesis_vkey, memory_id=built.b)
    assert report.memories == [built.b] and report.reason == "the user asked"
    assert report.seq < report.tree_size
    view = json.loads(untar(forgotten.bundle_b)["memories.json"])["memories"][built.b]
    assert view["erased"]["seq"] == report.seq
    fails("receipt.memory", lambda: iv.verify_receipt(forgotten.receipt, memory_id=built.a))
    # A log export of another entry is no receipt, however well it verifies.
    export = forgotten.home.parent / "one.export"
    cli.ok(forgotten.home, "log", "export", "--from", "2", "--to", "2", "-o", str(export), "--no-keys")
    assert iv.verify_export(export.read_bytes()).count == 1
    fails("receipt.entry", lambda: iv.verify_receipt(export.read_bytes()))
    items = iv.split_sequence(forgotten.receipt, "x")[0]
    tampered = items[0] + items[1].replace(built.b.encode(), built.a.encode())
    fails("entry.signature", lambda: iv.verify_receipt(tampered))
    fails("export.decode", lambda: iv.verify_receipt(forgotten.receipt[:40]))


def test_a_sealed_field_swapped_between_memories_is_refused(built: Built) -> None:
    """The box is bound to its type, subject and field names (format.md §17): moved to another
    memory, or another event type, it does not open even with every key at hand."""
    entries, _ = iv.read_entries(built.home / "log")
    keys = iv.read_datakeys((built.home / "datakeys" / "keys").read_bytes())
    store = {e.data["id"]: e for e in entries if e.type == "memory.stored"}
    a, b = store[built.a], store[built.b]
    assert iv.open_payload(a, keys)[1] == [] and iv.open_payload(a, keys)[0]["content"].startswith("alpha")
    moved = iv.Entry(a.raw, {**a.value, "data": {**a.data, "sealed": b.data["sealed"]}}, a.leaf)
    data, left = iv.open_payload(moved, keys)
    assert left == sorted(b.data["sealed"]["fields"]) and "content" not in data
    update = next(e for e in entries if e.type == "memory.updated" and e.data["id"] == built.a)
    retyped = iv.Entry(
        update.raw, {**update.value, "data": {**update.data, "sealed": a.data["sealed"]}}, update.leaf
    )
    assert iv.open_payload(retyped, keys)[1] != []
    # In a bundle, the view folded from such an entry is not the signed memories.json.
    files = untar(built.bundle_a)
    ents = [iv.decode_entry(i) for i in iv.split_sequence(files["entries.cbor"], "x")[0]]
    swapped = [moved if e.seq == a.seq else e for e in ents]
    bundle_keys = iv.read_datakeys(files["datakeys.cbor"])
    assert iv.render_json(iv.fold_views(iv.opened(swapped, bundle_keys), [built.a])) != files["memories.json"]
    assert iv.render_json(iv.fold_views(iv.opened(ents, bundle_keys), [built.a])) == files["memories.json"]
    # A forger who edits the entry bytes loses the signature first.
    forged = iv.encode({**a.value, "data": {**a.data, "sealed": b.data["sealed"]}})
    f = {**files, "entries.cbor": files["entries.cbor"].replace(a.raw, forged)}
    resign_manifest(f, built.home)
    fails("entry.signature", lambda: iv.verify_bundle(retar(f)))


def test_an_edited_or_hostile_key_file_is_refused(built: Built) -> None:
    files = untar(built.bundle_a)
    keys = iv.read_datakeys(files["datakeys.cbor"])
    header = iv.encode({"format": "mnemolog/data-keys/v1"})
    wrong = header + b"".join(iv.encode([k, bytes(32)]) for k in sorted(keys))
    cases = {
        "view.memories": wrong,  # every box fails: the views read sealed
        "datakeys.decode": iv.encode({"format": "other"}),
    }
    for check, raw in [
        *cases.items(),
        ("datakeys.decode", b""),
        ("datakeys.decode", header + iv.encode([1, 2])),
    ]:
        f = {**files, "datakeys.cbor": raw}
        resign_manifest(f, built.home)
        fails(check, lambda f=f: iv.verify_bundle(retar(f)))
    # A record cut short at the end is ignored in a key file that is appended to, and refused in a
    # bundle's, which is written in one piece (format.md §17): whichever keys the cut drops.
    torn = files["datakeys.cbor"] + iv.encode(["ab" * 16, bytes(32)])[:-3]
    assert iv.read_datakeys(torn) == keys
    for raw in (torn, files["datakeys.cbor"][:-1]):
        f = {**files, "datakeys.cbor": raw}
        resign_manifest(f, built.home)
        fails("datakeys.decode", lambda f=f: iv.verify_bundle(retar(f)))


def test_an_export_opens_with_its_keys_file_and_the_log_checks_its_erasure(
    cli: Cli, built: Built, forgotten: Forgotten
) -> None:
    home = forgotten.home
    size = len(iv.read_entries(home / "log")[0])
    out = home.parent / "whole.export"
    cli.ok(home, "log", "export", "--from", "0", "--to", str(size - 1), "-o", str(out))
    entries, closed = iv.open_export(out.read_bytes(), (home.parent / "whole.export.keys").read_bytes())
    store = {e.data["id"]: e for e in entries if e.type == "memory.stored"}
    assert store[built.a].data["content"].startswith("alpha")
    assert "content" not in store[built.b].data and store[built.b].data["sealed"] and closed >= 1
    erasure = next(e for e in entries if e.type == "memory.erased")
    assert iv.verify_home(home).erasures == [erasure.seq]
    # Another log's key file is refused (its log_id differs).
    other = iv.encode({"format": "mnemolog/data-keys/v1", "log_id": bytes(16)})
    fails("datakeys.decode", lambda: iv.open_export(out.read_bytes(), other))


def test_a_v3_bundle_still_verifies_and_has_no_keys_to_open_with(built: Built) -> None:
    """A v3 manifest over the same files without datakeys.cbor: the format is still accepted, its
    views are folded without keys (sealed content reads as sealed), so the v4 views are refused."""
    files = untar(built.bundle_a)
    v3 = {k: v for k, v in files.items() if k != "datakeys.cbor"}
    resign_manifest(v3, built.home, format="mnemolog/forensic-bundle/v3")
    fails("view.memories", lambda: iv.verify_bundle(retar(v3)))
    keys = [iv.decode_entry(i) for i in iv.split_sequence(files["keys.cbor"], "x")[0]]
    entries = [iv.decode_entry(i) for i in iv.split_sequence(files["entries.cbor"], "x")[0]]
    v3["memories.json"] = iv.render_json(iv.fold_views(iv.opened([*keys, *entries], {}), [built.a]))
    resign_manifest(v3, built.home, format="mnemolog/forensic-bundle/v3")
    report = iv.verify_bundle(retar(v3))
    assert report.format == "mnemolog/forensic-bundle/v3" and report.sealed == [built.a]
    # A v3 manifest that still carries datakeys.cbor lists a file its format does not have.
    extra = dict(files)
    resign_manifest(extra, built.home, format="mnemolog/forensic-bundle/v3")
    fails("files.listed", lambda: iv.verify_bundle(retar(extra)))


def test_a_malformed_erasure_is_refused(forgotten: Forgotten) -> None:
    e = iv.decode_entry(iv.split_sequence(forgotten.receipt, "x")[0][1])
    iv.check_erased(e)
    bad: list[dict[str, Any]] = [
        {"ids": []},
        {"ids": [f"M{i}" for i in range(501)]},
        {"ids": "M"},
        {"subjects": []},
        {"keys": ["not hex"]},
        {"content": "the text itself"},
        {"reason": 5},
        {"selector": ["ids"]},
    ]
    for change in bad:
        data = {**e.data, **change}
        if "ids" in change and isinstance(change["ids"], list):
            data["subjects"] = change["ids"]
        forged = iv.Entry(e.raw, {**e.value, "data": data}, e.leaf)
        fails("erased.shape", lambda f=forged: iv.check_erased(f))


def test_the_command_line_verifies_a_receipt(
    built: Built, forgotten: Forgotten, capsys: pytest.CaptureFixture[str]
) -> None:
    path = forgotten.home.parent / "cli.receipt"
    path.write_bytes(forgotten.receipt)
    assert iv.main(["receipt", str(path), "--memory-id", built.b]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["memories"] == [built.b]
    assert iv.main(["receipt", str(path), "--memory-id", built.a]) == 8
    assert json.loads(capsys.readouterr().out)["check"] == "receipt.memory"


def test_a_migrated_home_verifies_with_its_hand_off(cli: Cli, built: Built, tmp_path: Path) -> None:
    """format.md §17, a migrated log: the new home verifies and names the old log it came from."""
    old = copy_home(built, tmp_path)
    r = cli(old, "migrate", "seal", "--to", str(tmp_path / "new"), "--force", json=True)
    assert r.code == 0, r.stdout
    old_report = iv.verify_home(old)
    assert old_report.migrated_from is None
    report = iv.verify_home(tmp_path / "new")
    assert report.migrated_from is not None
    assert report.migrated_from["log_id"] == old_report.origin.removeprefix("mnemolog/")
    assert report.migrated_from["vkey"] == built.current_vkey
    assert report.origin != old_report.origin
    ours = cli.ok(tmp_path / "new", "log", "verify")
    assert ours["migrated_from"]["log_id"] == report.migrated_from["log_id"]
    assert ours["migrated_from"]["size"] == report.migrated_from["size"]


@pytest.mark.parametrize("forge", ["signer", "new_key", "origin"])
def test_a_forged_hand_off_is_refused(tmp_path: Path, forge: str) -> None:
    from mnemolog.eventlog.format.keys import SigningKey as Key
    from mnemolog.eventlog.format.note import peek_checkpoint
    from mnemolog.eventlog.store.writer import LogWriter
    from mnemolog.eventlog.verify.provenance import MIGRATED_FROM, handoff_message

    old_id, new_id = bytes(range(16)), bytes(range(16, 32))
    old_key, new_key = Key(bytes([1]) * 32, "old"), Key(bytes([2]) * 32, "new")
    other = Key(bytes([3]) * 32, "x")
    _, note = LogWriter.create(tmp_path / "old", old_key, log_id=bytes(16) if forge == "origin" else old_id)
    cp = peek_checkpoint(note)
    signer = other if forge == "signer" else old_key
    named = other if forge == "new_key" else new_key
    prov = {
        "log_id": old_id,
        "checkpoint": note,
        "vkey": old_key.verifier.vkey(),
        "handoff": signer.sign(handoff_message(old_id, cp.size, cp.root, new_id, named.public_key)),
        "migrated_at": 1,
    }
    LogWriter.create(tmp_path / "new", new_key, log_id=new_id, extra={MIGRATED_FROM: prov})
    fails("migration.provenance", lambda: iv.verify_log(tmp_path / "new"))
