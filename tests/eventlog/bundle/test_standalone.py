"""The offline verifier runs where only cbor2 and pynacl are installed.

`python -S` (no site-packages at all) runs `python -m mnemolog.eventlog.bundle`
with PYTHONPATH pointing at a temporary tree that holds only
`mnemolog/eventlog` and links to the installed cbor2 and pynacl (with cffi's
`_cffi_backend`, which pynacl's compiled module loads): any other import
(DuckDB, pyarrow, pydantic, click, another mnemolog package) would fail. The
tree is made from what the test environment has installed, so the test needs
no network and no second venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.substrate.api import Substrate
from mnemolog.substrate.forensics import service as forensics
from tests.support.forensic_data import atomised_home

REPO = Path(__file__).resolve().parents[3]
#: What the verifier may import besides the standard library (names in site-packages,
#: a compiled module's suffix aside), and the metadata of the two distributions.
ALLOWED = {"cbor2", "nacl", "_cffi_backend"}
METADATA = ("cbor2-", "pynacl-")


@pytest.fixture(scope="module")
def verifier_python() -> Path:
    return Path(sys.executable)


@pytest.fixture(scope="module")
def only_eventlog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("standalone")
    (root / "mnemolog").mkdir()
    (root / "mnemolog" / "eventlog").symlink_to(REPO / "eventlog", target_is_directory=True)
    site = Path(sysconfig.get_paths()["purelib"])
    linked = []
    for entry in sorted(site.iterdir()):
        stem = entry.name.split(".")[0]
        if stem in ALLOWED or entry.name.startswith(METADATA):
            (root / entry.name).symlink_to(entry)
            linked.append(stem)
    assert set(linked) >= ALLOWED, f"not all of {sorted(ALLOWED)} installed in {site}"
    return root


@pytest.fixture(scope="module")
def bundle_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    d = tmp_path_factory.mktemp("bundle")
    a = atomised_home(d / "home")
    with Substrate.open(a.home, long_lived=False) as sub:
        ex = forensics.export_bundle(sub, a.atoms[0])
        vkey = sub.log.key_history()[0].key.vkey()
    path = d / "bundle.tar"
    path.write_bytes(ex.data)
    yield path, vkey


def run(python: Path, tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin"), "PYTHONPATH": str(tree), "PYTHONNOUSERSITE": "1"}
    return subprocess.run(
        [str(python), "-S", "-m", "mnemolog.eventlog.bundle", *args],  # -S: no site-packages at all
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
        check=False,
        timeout=120,
    )


def test_the_tree_really_lacks_the_heavy_packages(verifier_python: Path, only_eventlog: Path) -> None:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(only_eventlog)}

    def imports(mod: str) -> bool:
        cmd = [str(verifier_python), "-S", "-c", f"import {mod}"]
        return (
            subprocess.run(cmd, capture_output=True, env=env, cwd=only_eventlog, check=False).returncode == 0
        )

    assert imports("cbor2") and imports("nacl.signing") and imports("mnemolog.eventlog.bundle.verifier")
    for mod in ("duckdb", "pyarrow", "pydantic", "click", "mnemolog.substrate", "mnemolog.projections"):
        assert not imports(mod), mod


def test_standalone_verifier_passes(
    verifier_python: Path, only_eventlog: Path, bundle_file: tuple[Path, str]
) -> None:
    path, vkey = bundle_file
    proc = run(verifier_python, only_eventlog, str(path), "--trusted-key", vkey, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ok"] is True and out["trust"]["pinned"] is True
    assert "parquet" in out["checks"] and "inclusion_proofs" in out["checks"]
    text = run(verifier_python, only_eventlog, str(path))
    assert text.returncode == 0, text.stderr
    assert "NOT pinned" in text.stdout


def test_standalone_verifier_fails_with_exit_8(
    verifier_python: Path, only_eventlog: Path, bundle_file: tuple[Path, str], tmp_path: Path
) -> None:
    path, _ = bundle_file
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    bad = tmp_path / "bad.tar"
    bad.write_bytes(bytes(data))
    proc = run(verifier_python, only_eventlog, str(bad), "--json")
    assert proc.returncode == 8, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ok"] is False and out["exit_code"] == 8
    assert out["details"]["check"]
    assert "Traceback" not in proc.stderr
    stranger = SigningKey.generate("x").verifier.vkey()
    proc = run(verifier_python, only_eventlog, str(path), "--trusted-key", stranger)
    assert proc.returncode == 8
    assert "check=trust.key" in proc.stderr
    garbage = tmp_path / "garbage.tar"
    garbage.write_bytes(b"\x1f\x8b" + bytes(2000))
    proc = run(verifier_python, only_eventlog, str(garbage))
    assert proc.returncode == 8 and "Traceback" not in proc.stderr
    assert "compress" in proc.stderr


def test_standalone_verifier_re_renders_the_packs_of_a_memory(
    verifier_python: Path, only_eventlog: Path, tmp_path: Path
) -> None:
    from mnemolog.substrate.home import init_home

    init_home(tmp_path / "home")
    with Substrate.open(tmp_path / "home", long_lived=False) as sub:
        mid = sub.store("Zerodur CTE gradient dominates thermal WFE", kind="knowledge")["id"]
        pack = sub.build_context("thermal effects on polishing accuracy")
        ex = forensics.export_bundle(sub, mid)
    path = tmp_path / "bundle.tar"
    path.write_bytes(ex.data)
    proc = run(verifier_python, only_eventlog, str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert "context_packs" in out["checks"]
    assert [(p["pack_id"], p["sha256"], p["memories_checked"]) for p in out["packs"]] == [
        (pack["pack_id"], pack["sha256"], [mid])
    ]
