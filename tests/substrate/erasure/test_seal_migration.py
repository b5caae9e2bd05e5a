"""`migrate seal`: a home written before sealing moves to a new home whose log holds no content in clear.

The old home is written by this code with sealing switched off
(`written_before_sealing`: every sealing type at the tv before it, its
content in clear), which is byte for byte what an older mnemolog wrote: the
sealing tvs' upcaster from the tv before changes nothing.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemolog.eventlog.errors import Informational, VerificationError
from mnemolog.eventlog.format import sealing
from mnemolog.eventlog.verify.verifier import verify_log
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.substrate.erasure import seal_migration as sm
from mnemolog.substrate.home import Home
from mnemolog.substrate.session import Session
from tests.projections.kit import log_digest, new_home, open_sub
from tests.substrate.erasure.test_forget import LONG, scan
from tests.support.cli import Cli

MARKS = {
    "memory": "XQSEALMIGMEMORY",
    "title": "XQSEALMIGTITLE",
    "atom": "XQSEALMIGATOM",
    "prompt": "XQSEALMIGPROMPT",
    "doc": "XQSEALMIGDOC",
    "gone": "XQSEALMIGGONE",
}


@contextlib.contextmanager
def written_before_sealing() -> Iterator[None]:
    """Sessions write every sealing type at the tv before sealing, content in clear."""
    real = Session._seal

    def clear(
        self: Session, items: list[tuple[str, dict[str, Any], int]]
    ) -> list[tuple[str, dict[str, Any], int]]:
        return [(t, d, v.SEALED_SINCE[t] - 1) if v.seals(t, tv) else (t, d, tv) for t, d, tv in items]

    Session._seal = clear  # type: ignore[method-assign]
    try:
        yield
    finally:
        Session._seal = real  # type: ignore[method-assign]


def old_home(root: Path) -> tuple[Home, dict[str, str]]:
    """A home with every kind of content, written before sealing (one memory forgotten already)."""
    home = new_home(root)
    docs = root.parent / "docs-in"
    docs.mkdir(exist_ok=True)
    (docs / "notes.md").write_text(f"# Notes\n\nThe mount supplier {MARKS['doc']} ships in May.\n")
    ids: dict[str, str] = {}
    with written_before_sealing(), open_sub(home) as sub:
        ids["memory"] = sub.store(
            f"The vendor is {MARKS['memory']} for the mounts",
            namespace="ops",
            kind="decision",
            tags=["vendor"],
        )["id"]
        parent = sub.store(
            LONG.replace("connection pool", f"connection pool {MARKS['atom']}"),
            namespace="ops",
            title=MARKS["title"],
            project="p01",
        )
        ids["parent"] = parent["id"]
        sub.atomise(parent["id"], curator="rules")
        sub.link(ids["memory"], parent["id"], relation="related_to")
        sub.ingest([docs])
        sub.build_context("who is the vendor for the mounts")
        i = sub.capture(f"Who is the vendor? {MARKS['prompt']}", "It is decided.", namespace="ops")
        ids["interaction"] = i["id"]
        sub.extract(interaction_ids=[i["id"]], extractor="rules")
        other = sub.store("an ordinary note about deploys", namespace="misc")
        sub.update(other["id"], content="an ordinary note about deploys, updated")
        sub.archive(other["id"], "old")
        gone = sub.store(f"{MARKS['gone']} the secret plan", namespace="ops")
        sub.forget([gone["id"]])
        ids["gone"] = gone["id"]
    return home, ids


def recall_of(home: Home) -> list[list[tuple[str, float]]]:
    with open_sub(home) as sub:
        return [
            [(h["id"], round(h["score"], 9)) for h in sub.recall(q, limit=10)]
            for q in ("vendor mounts", "connection pool", "deploys", "workers time out")
        ]


def test_a_home_written_before_sealing_moves_and_then_forgets_for_good(tmp_path: Path) -> None:
    home, ids = old_home(tmp_path / "old")
    # Before: the old log holds the content in clear, the forgotten memory's included.
    seg = home.log_dir / "00000000000000000000.seg"
    assert MARKS["memory"].encode() in seg.read_bytes() and MARKS["gone"].encode() in seg.read_bytes()
    before = recall_of(home)
    with open_sub(home) as sub:
        listed = sub.list(include_archived=True)
        size = sub.log.refresh()

    report = sm.seal_home(home, tmp_path / "new")
    new = Home(tmp_path / "new")
    assert report["home"] == str(new.root) and report["from"]["size"] == size == report["size"]
    assert report["sealed_from_clear"] > 0 and report["erased_subjects"] >= 1
    # The new log verifies under its own anchor, and says where it came from.
    verify_log(new.log_dir, policy=new.trust_anchor(), high_water=new.high_water_marks())
    with open_sub(new) as sub:
        prov = sm.check_provenance(sub.log)
        assert prov is not None and prov["log_id"] == report["from"]["log_id"] and prov["size"] == size
        # Every entry keeps its seq and ts, and no sealing entry carries content in clear.
        for e in sub.log.iter_entries(1):
            if e.type in v.SEALED:
                assert v.seals(e.type, e.tv) and not set(v.SEALED[e.type].fields) & set(e.data)
        assert sub.list(include_archived=True) == listed
        sub.verify_projections()
    assert recall_of(new) == before
    assert not scan(new.root, [MARKS["gone"]])
    # The old home is as it was (but for the checkpoint the run signed).
    assert MARKS["gone"].encode() in seg.read_bytes()

    # Forgetting works on the migrated home; once the old home is removed, nothing is left.
    with open_sub(new) as sub:
        sub.forget([ids["memory"], ids["parent"]])
        sub.forget(interaction=ids["interaction"])
        sub.forget(namespace="ops")
        with sub.session() as s:
            docs = [
                r[0]
                for r in s.conn.execute("SELECT DISTINCT document_id FROM ctx_document_versions").fetchall()
            ]
        for d in docs:
            sub.forget(document=d)
    shutil.rmtree(home.root)
    shutil.rmtree(tmp_path / "docs-in")  # the user's own files, not a copy the home made
    assert scan(tmp_path, list(MARKS.values())) == []
    verify_log(new.log_dir, policy=new.trust_anchor(), high_water=new.high_water_marks())


def test_a_mixed_log_key_rotation_and_schema_snapshot_carry_over(tmp_path: Path) -> None:
    """Entries before and after sealing, a key rotation, a log-backed schema migration's snapshot."""
    home, _ = old_home(tmp_path / "old")
    with open_sub(home) as sub:
        sealed = sub.store("XQSEALMIGSEALED stored after sealing", namespace="ops")
        erased_sealed = sub.store("XQSEALMIGSEALEDGONE", namespace="ops")
        sub.forget([erased_sealed["id"]])
        with home.open_writer() as w:
            home.rotate_key(w)
        from mnemolog.substrate.migrations.log_backend import LogMigrationBackend

        snap = LogMigrationBackend(sub).snapshot(2)
        sub.store("after the snapshot", namespace="ops")
    report = sm.seal_home(home, tmp_path / "new")
    assert report["not_carried"] == 1 and report["resealed"] > 0
    assert int(snap.snapshot_id) in report["snapshots_checkpointed"]
    new = Home(tmp_path / "new")
    with open_sub(new) as sub:
        assert sub.get(sealed["id"])["content"] == "XQSEALMIGSEALED stored after sealing"
        assert int(snap.snapshot_id) in sub.log.checkpoint_sizes()
        rot = [e for e in sub.log.iter_entries() if e.type == v.LOG_NOT_CARRIED]
        assert [e.data["type"] for e in rot] == ["key.rotated"]
        # The erasure names the keys of its subject, the old (destroyed) ones among them.
        er = [
            e
            for e in sub.log.iter_entries()
            if e.type == v.MEMORY_ERASED and erased_sealed["id"] in e.data["ids"]
        ]
        named = {
            k for e in sub.log.iter_entries() for k in sealing.key_ids(e.type, e.data, {erased_sealed["id"]})
        }
        assert named and named <= set(er[0].data["keys"])
        assert all(sub.keys.get(k) is None for k in named)
    assert not scan(new.root, ["XQSEALMIGSEALEDGONE", MARKS["gone"]])


def test_refusals_lose_nothing(tmp_path: Path) -> None:
    home, _ = old_home(tmp_path / "old")
    digest = log_digest(home)
    # A target that exists (and is not an empty directory).
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("mine")
    with pytest.raises(sm.TargetExists) as te:
        sm.seal_home(home, tmp_path / "taken")
    assert te.value.exit_code == 64 and (tmp_path / "taken" / "file").read_text() == "mine"
    # Inside the home.
    with pytest.raises(sm.UsageError):
        sm.seal_home(home, home.root / "new")

    # A run that stops half way removes what it built; the old home is whole.
    def stop(size: int) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError):
        sm.seal_home(home, tmp_path / "new", _after_batch=stop)
    assert not (tmp_path / "new").exists() and not sm.staging_path(tmp_path / "new").exists()
    # One killed half way leaves its unfinished home: nothing is built over it.
    sm.staging_path(tmp_path / "new").mkdir()
    with pytest.raises(sm.MigrationIncomplete) as mi:
        sm.seal_home(home, tmp_path / "new")
    assert mi.value.exit_code == 6 and "remove" in mi.value.message
    sm.staging_path(tmp_path / "new").rmdir()
    # A corrupt old log is refused before anything is written.
    seg = home.log_dir / "00000000000000000000.seg"
    data = bytearray(seg.read_bytes())
    at = data.index(MARKS["memory"].encode())
    data[at] ^= 0x20
    seg.write_bytes(bytes(data))
    with pytest.raises(VerificationError) as ve:
        sm.seal_home(home, tmp_path / "new")
    assert ve.value.exit_code == 8 and "does not verify" in ve.value.message
    assert not (tmp_path / "new").exists() and not sm.staging_path(tmp_path / "new").exists()
    data[at] ^= 0x20
    seg.write_bytes(bytes(data))
    # Nothing to do for a home that holds no content in clear.
    sealed_home = new_home(tmp_path / "sealed")
    with open_sub(sealed_home) as sub:
        sub.store("sealed from the start")
    with pytest.raises(Informational):
        sm.seal_home(sealed_home, tmp_path / "new2")
    sm.seal_home(sealed_home, tmp_path / "new2", force=True)
    # The old log changed only by checkpoints the runs signed.
    after = log_digest(home)
    assert after[0] >= digest[0]
    assert (home.log_dir / "00000000000000000000.seg").read_bytes() == bytes(data)


def test_provenance_names_the_old_log_and_only_a_migrated_log_has_it(tmp_path: Path) -> None:
    home, _ = old_home(tmp_path / "old")
    with open_sub(home) as sub:
        assert sm.check_provenance(sub.log) is None
        old_id = sub.log.log_id
    sm.seal_home(home, tmp_path / "new")
    with open_sub(Home(tmp_path / "new")) as sub:
        prov = sm.check_provenance(sub.log)
        mf = sub.log.genesis.data[sm.MIGRATED_FROM]
        assert prov is not None and prov["log_id"] == old_id.hex() and mf["log_id"] == old_id
        assert sub.log.log_id != old_id and prov["vkey"].startswith("test+")


def test_the_cli_migrates_verifies_and_refuses_with_exit_codes(cli: Cli, tmp_path: Path) -> None:
    import json

    home, ids = old_home(tmp_path / "old")
    code, out = cli.json(home.root, "migrate", "seal", "--to", str(tmp_path / "new"))
    assert code == 0 and out["home"] == str(tmp_path / "new") and out["sealed_from_clear"] > 0
    code, ver = cli.json(tmp_path / "new", "log", "verify")
    assert code == 0 and ver["ok"] is True
    code, got = cli.json(tmp_path / "new", "get", ids["memory"])
    assert code == 0 and MARKS["memory"] in json.dumps(got)
    code, err = cli.json(home.root, "migrate", "seal", "--to", str(tmp_path / "new"))
    assert code == 64 and err["error"] == "target_exists"
    sm.staging_path(tmp_path / "again").mkdir()
    code, err = cli.json(home.root, "migrate", "seal", "--to", str(tmp_path / "again"))
    assert code == 6 and err["error"] == "migration_incomplete"
