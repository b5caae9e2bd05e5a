"""The standalone verifier installs alone: packaging/verifier builds a wheel of mnemolog.eventlog.

The wheel is built offline (`pip wheel --no-deps --no-build-isolation`, the
in-tree backend needs nothing but the standard library) into a temporary
directory, installed with `--no-deps --no-index` into a fresh venv that has
no pip and no site-packages of its own but links to the installed cbor2 and
pynacl (and cffi's `_cffi_backend`), and its `mnemolog-verify-bundle`
command and `python -m mnemolog.eventlog.bundle` verify a real bundle there,
where mnemolog's other packages, DuckDB, pyarrow, pydantic and click cannot
be imported. The wheel's version and dependencies are the main package's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.eventlog.bundle.test_standalone import ALLOWED, METADATA, bundle_file

REPO = Path(__file__).resolve().parents[3]
PACKAGING = REPO / "packaging" / "verifier"
__all__ = ["bundle_file"]  # a fixture shared with test_bundle_standalone


def _pyproject(path: Path) -> dict[str, object]:
    with path.open("rb") as f:
        project: dict[str, object] = tomllib.load(f)["project"]
    return project


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    cmd = [sys.executable, "-m", "pip", "wheel", str(PACKAGING), "--no-deps", "--no-build-isolation"]
    proc = subprocess.run(
        [*cmd, "-w", str(out)], capture_output=True, text=True, env=env, check=False, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (whl,) = out.glob("mnemolog_verifier-*-py3-none-any.whl")
    return whl


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    root = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    py = root / "bin" / "python"
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    pip = [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index"]
    proc = subprocess.run(
        [*pip, str(wheel)], capture_output=True, text=True, env=env, check=False, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in sorted(site.iterdir()):
        if entry.name.split(".")[0] in ALLOWED or entry.name.startswith(METADATA):
            (Path(purelib) / entry.name).symlink_to(entry)
    return root


def run(venv: Path, *cmd: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "PYTHONNOUSERSITE": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=venv, check=False, timeout=120)


def test_the_wheel_is_the_eventlog_package_and_needs_only_cbor2_and_pynacl(wheel: Path) -> None:
    main, verifier = _pyproject(REPO / "pyproject.toml"), _pyproject(PACKAGING / "pyproject.toml")
    assert verifier["version"] == main["version"]
    assert verifier["requires-python"] == main["requires-python"]
    deps = verifier["dependencies"]
    assert isinstance(deps, list) and isinstance(main["dependencies"], list)
    assert sorted(deps) == sorted(d for d in main["dependencies"] if d.startswith(("cbor2", "pynacl")))
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(f"mnemolog_verifier-{verifier['version']}.dist-info/METADATA").decode()
    modules = {n.removeprefix("mnemolog/eventlog/") for n in names if n.startswith("mnemolog/eventlog/")}
    src = REPO / "eventlog"
    expected = {
        p.relative_to(src).as_posix()
        for p in src.rglob("*")
        if "__pycache__" not in p.parts and (p.suffix == ".py" or p.name == "py.typed")
    }
    assert modules == expected
    assert all(n.startswith(("mnemolog/eventlog/", "mnemolog_verifier-")) for n in names)
    requires = [ln.split(": ", 1)[1] for ln in meta.splitlines() if ln.startswith("Requires-Dist: ")]
    assert requires == deps


def test_the_installed_wheel_verifies_a_bundle_with_nothing_else(
    venv: Path, bundle_file: tuple[Path, str]
) -> None:
    py = str(venv / "bin" / "python")
    for mod in ("duckdb", "pyarrow", "pydantic", "click", "mnemolog.substrate", "mnemolog.projections"):
        assert run(venv, py, "-c", f"import {mod}").returncode != 0, mod
    where = run(venv, py, "-c", "import mnemolog.eventlog.bundle.verifier as b; print(b.__file__)")
    assert where.returncode == 0, where.stderr
    assert where.stdout.startswith(str(venv)), where.stdout
    path, vkey = bundle_file
    proc = run(venv, str(venv / "bin" / "mnemolog-verify-bundle"), str(path), "--trusted-key", vkey, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ok"] is True and out["trust"]["pinned"] is True
    proc = run(venv, py, "-m", "mnemolog.eventlog.bundle.verifier", str(path))
    assert proc.returncode == 0, proc.stderr
    bad = venv / "bad.tar"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    bad.write_bytes(bytes(data))
    assert run(venv, py, "-m", "mnemolog.eventlog.bundle.verifier", str(bad)).returncode == 8


def test_the_docs_say_how_with_the_current_names() -> None:
    """README and docs/forensics.md §12 give the build, install and run lines of this wheel."""
    project = _pyproject(PACKAGING / "pyproject.toml")
    scripts = project["scripts"]
    assert isinstance(scripts, dict)
    assert scripts == {"mnemolog-verify-bundle": "mnemolog.eventlog.bundle.verifier:main"}
    lines = (
        "pip wheel packaging/verifier --no-deps --no-build-isolation -w dist/\n"
        f"python -m venv audit && audit/bin/pip install dist/mnemolog_verifier-{project['version']}"
        "-py3-none-any.whl\n"
        "audit/bin/mnemolog-verify-bundle BUNDLE.tar --trusted-key 'NAME+HASH+BASE64' [--json]\n"
    )
    forensics = (REPO / "docs" / "forensics.md").read_text("utf-8")
    assert lines in (REPO / "README.md").read_text("utf-8")
    assert lines in forensics
    assert "## 12. The verifier alone: the `mnemolog-verifier` wheel" in forensics
