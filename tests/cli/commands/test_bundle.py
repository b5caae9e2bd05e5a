"""The forensic commands end to end: export, verify (both entry points), log export, replay."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from mnemolog.eventlog.bundle.tarball import write_tar
from mnemolog.eventlog.bundle.verifier import LISTED_V2, MANIFEST
from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.substrate.home import Home
from tests.support.cli import Cli
from tests.support.forensic_data import Atomised, atomised_home, members_of


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Atomised:
    return atomised_home(tmp_path_factory.mktemp("cli") / "home")


@pytest.fixture
def world(built: Atomised, tmp_path: Path) -> Atomised:
    root = tmp_path / "home"
    shutil.copytree(built.home.root, root)
    return Atomised(Home(root), built.parent, built.atoms, built.other)


def export(cli: Cli, world: Atomised, tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / "bundle.tar"
    res = cli(
        world.home, "--json", "export-forensic-bundle", "--memory-id", world.parent, "-o", str(out), *extra
    )
    assert res.code == 0, res.output
    return out


def vkey(home: Home) -> str:
    with home.open_log() as log:
        return log.key_history()[0].key.vkey()


def test_export_and_verify(cli: Cli, world: Atomised, tmp_path: Path) -> None:
    out = export(cli, world, tmp_path)
    res = cli(None, "verify-bundle", str(out), "--trusted-key", vkey(world.home))
    assert res.code == 0, res.output
    assert "ok: forensic bundle" in res.output and "pinned key" in res.output
    res = cli(None, "--json", "verify-bundle", str(out))
    data = json.loads(res.output)
    assert data["ok"] is True and data["memory_id"] == world.parent
    assert data["trust"]["anchor"] == "genesis"
    assert sorted(data["memories"]) == sorted([world.parent, *world.atoms])


def test_export_json_summary_and_default_path(
    cli: Cli, world: Atomised, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    res = cli(world.home, "--json", "export-forensic-bundle", "--memory-id", world.atoms[0])
    assert res.code == 0, res.output
    data = json.loads(res.output)
    assert data["path"] == f"bundle-{world.atoms[0]}.tar"
    assert (tmp_path / data["path"]).exists()
    assert data["entries"] == len(data["seqs"]) and data["key_seqs"] == [0]


def test_include_atomisation_chain_false(cli: Cli, world: Atomised, tmp_path: Path) -> None:
    out = export(cli, world, tmp_path, "--include-atomisation-chain=false")
    res = cli(None, "--json", "verify-bundle", str(out))
    data = json.loads(res.output)
    assert data["include_chain"] is False and data["memories"] == [world.parent]
    bad = cli(
        world.home, "export-forensic-bundle", "--memory-id", world.parent, "--include-atomisation-chain=maybe"
    )
    assert bad.code == 64


def test_export_unknown_memory_is_not_found(cli: Cli, world: Atomised, tmp_path: Path) -> None:
    res = cli(world.home, "export-forensic-bundle", "--memory-id", "nope", "-o", str(tmp_path / "x.tar"))
    assert res.code == 2
    assert not (tmp_path / "x.tar").exists()


@pytest.mark.parametrize("name", [MANIFEST, *LISTED_V2])
def test_every_changed_file_exits_8_naming_it(cli: Cli, world: Atomised, tmp_path: Path, name: str) -> None:
    out = export(cli, world, tmp_path)
    members = members_of(out.read_bytes())
    data = members[name]
    members[name] = data[: len(data) // 2] + bytes([data[len(data) // 2] ^ 0x04]) + data[len(data) // 2 + 1 :]
    bad = tmp_path / "bad.tar"
    bad.write_bytes(write_tar(members.items()))
    res = cli(None, "--json", "verify-bundle", str(bad))
    assert res.code == 8
    err = json.loads(res.output)
    assert err["ok"] is False and err["error"] == "verification_failed"
    assert err["details"]["file"] == name
    text = cli(None, "verify-bundle", str(bad))
    assert text.code == 8
    assert f"file={name}" in text.output


def test_removed_renamed_and_extra_files(cli: Cli, world: Atomised, tmp_path: Path) -> None:
    members = members_of(export(cli, world, tmp_path).read_bytes())
    cases = {
        "removed": ({k: v for k, v in members.items() if k != "proofs.cbor"}, "proofs.cbor"),
        "renamed": (
            {
                **{k: v for k, v in members.items() if k != "memories.json"},
                "memories.jsn": members["memories.json"],
            },
            "memories.json",
        ),
        "extra": ({**members, "README": b"hello"}, "README"),
    }
    for what, (files, named) in cases.items():
        path = tmp_path / f"{what}.tar"
        path.write_bytes(write_tar(files.items()))
        res = cli(None, "--json", "verify-bundle", str(path))
        assert res.code == 8, what
        assert json.loads(res.output)["details"]["file"] == named, what


def test_wrong_or_malformed_trusted_key(cli: Cli, world: Atomised, tmp_path: Path) -> None:
    out = export(cli, world, tmp_path)
    stranger = SigningKey.generate("someone").verifier.vkey()
    res = cli(None, "verify-bundle", str(out), "--trusted-key", stranger)
    assert res.code == 8 and "check=trust.key" in res.output
    keyfile = tmp_path / "k.pub"
    keyfile.write_text(vkey(world.home) + "\n")
    assert cli(None, "verify-bundle", str(out), "--trusted-key", str(keyfile)).code == 0
    assert cli(None, "verify-bundle", str(out), "--trusted-key", "not+a+key").code == 64


def hostile(tmp_path: Path) -> dict[str, bytes]:
    def one(info: tarfile.TarInfo, data: bytes = b"") -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
            info.size = len(data) if info.isreg() else 0
            tf.addfile(info, io.BytesIO(data) if info.isreg() else None)
        return buf.getvalue()

    link = tarfile.TarInfo("manifest.cbor")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    hard = tarfile.TarInfo("manifest.cbor")
    hard.type, hard.linkname = tarfile.LNKTYPE, "/etc/passwd"
    dev = tarfile.TarInfo("checkpoint")
    dev.type = tarfile.CHRTYPE
    import gzip

    return {
        "traversal": one(tarfile.TarInfo("../../evil"), b"x"),
        "absolute": one(tarfile.TarInfo("/tmp/evil"), b"x"),
        "symlink": one(link),
        "hardlink": one(hard),
        "device": one(dev),
        "many": write_tar([(f"m{i}", b"") for i in range(1000)]),
        "not-a-tar": b"this is not an archive\n" * 100,
        "truncated": write_tar([("checkpoint", b"x" * 5000)])[:3000],
        "gzip": gzip.compress(bytes(10 * 1024 * 1024)),
    }


def test_hostile_archives_exit_8_cleanly(cli: Cli, tmp_path: Path) -> None:
    for name, data in hostile(tmp_path).items():
        path = tmp_path / f"{name}.tar"
        path.write_bytes(data)
        res = cli(None, "--json", "verify-bundle", str(path))
        assert res.code == 8, (name, res.output)
        err = json.loads(res.output)
        assert err["details"]["check"].startswith("archive."), name
        text = cli(None, "verify-bundle", str(path))
        assert text.code == 8 and text.output.startswith("mnemolog: "), name
    assert not (tmp_path.parent / "evil").exists() and not Path("/tmp/evil").exists()


def test_missing_bundle_is_not_found(cli: Cli, tmp_path: Path) -> None:
    assert cli(None, "verify-bundle", str(tmp_path / "none.tar")).code == 2


def test_module_entry_point(cli: Cli, world: Atomised, tmp_path: Path) -> None:
    out = export(cli, world, tmp_path)
    env = {**os.environ, "PYTHONPATH": ""}
    ok = subprocess.run(
        [sys.executable, "-m", "mnemolog.eventlog.bundle", str(out), "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["ok"] is True
    (tmp_path / "junk.tar").write_bytes(b"\x00" * 511)
    bad = subprocess.run(
        [sys.executable, "-m", "mnemolog.eventlog.bundle", str(tmp_path / "junk.tar")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert bad.returncode == 8 and "Traceback" not in bad.stderr and "check=archive." in bad.stderr


def test_grown_log_keeps_old_bundles_valid(cli: Cli, world: Atomised, tmp_path: Path) -> None:
    out = export(cli, world, tmp_path)
    old = json.loads(cli(None, "--json", "verify-bundle", str(out)).output)
    assert cli(world.home, "store", "later memory").code == 0
    assert cli(world.home, "log", "checkpoint").code == 0
    with world.home.open_log() as log:
        new_size = log.size
    assert new_size > old["tree_size"]
    assert cli(None, "verify-bundle", str(out)).code == 0
    res = cli(world.home, "--json", "log", "consistency", str(old["tree_size"]), str(new_size))
    assert res.code == 0
    assert json.loads(res.output)["old_root"] == old["root"]


def test_log_export_and_replay(cli: Cli, world: Atomised, tmp_path: Path) -> None:
    exp = tmp_path / "log.cbor"
    res = cli(world.home, "--json", "log", "export", "-o", str(exp))
    assert res.code == 0, res.output
    info = json.loads(res.output)
    assert info["start"] == 0 and info["last"] == info["tree_size"] - 1
    new = tmp_path / "new"
    res = cli(
        None,
        "--json",
        "replay",
        str(exp),
        "--home",
        str(new),
        "--trusted-key",
        vkey(world.home),
        "--signing-key",
        str(world.home.signing_key_path),
    )
    assert res.code == 0, res.output
    out = json.loads(res.output)
    assert out["entries"] == info["tree_size"] and out["export"]["trust"]["pinned"] is True
    a = json.loads(cli(world.home, "--json", "get", world.parent).output)
    b = json.loads(cli(Home(new), "--json", "get", world.parent).output)
    assert a == b
    assert cli(Home(new), "log", "verify").code == 0


def test_replay_refusals(cli: Cli, world: Atomised, tmp_path: Path) -> None:
    mid = tmp_path / "mid.cbor"
    assert cli(world.home, "log", "export", "--from", "3", "--to", "8", "-o", str(mid)).code == 0
    res = cli(None, "replay", str(mid), "--home", str(tmp_path / "a"))
    assert res.code == 64 and "starts at seq 3" in res.output
    assert not (tmp_path / "a").exists()
    full = tmp_path / "full.cbor"
    assert cli(world.home, "log", "export", "-o", str(full)).code == 0
    data = bytearray(full.read_bytes())
    data[-10] ^= 0xFF
    full.write_bytes(bytes(data))
    res = cli(None, "--json", "replay", str(full), "--home", str(tmp_path / "b"))
    assert res.code == 8
    assert json.loads(res.output)["error"] == "verification_failed"
    assert not (tmp_path / "b").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert cli(world.home, "log", "export", "--from", "5", "--to", "2", "-o", str(mid)).code == 64
    assert cli(world.home, "log", "export", "--to", "99999", "-o", str(mid)).code == 2
    assert cli(None, "replay", str(tmp_path / "missing.cbor"), "--home", str(tmp_path / "c")).code == 2
