"""A PEP 517 build backend for the mnemolog-verifier wheel, standard library only.

It builds one pure-Python wheel (py3-none-any) holding the repository's
`eventlog/` as `mnemolog/eventlog/` (its `.py` files and `py.typed`), with the
metadata of `pyproject.toml` beside this file: name, version, Requires-Python,
the dependencies and the console scripts. The archive is deterministic (sorted
names, fixed timestamps), so two builds of one tree are the same bytes.

No sdist: the wheel is built from a checkout of the repository.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tomllib
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parents[1] / "eventlog"
TARGET = "mnemolog/eventlog"
DATE = (1980, 1, 1, 0, 0, 0)


def _project() -> dict[str, Any]:
    with (HERE / "pyproject.toml").open("rb") as f:
        project: dict[str, Any] = tomllib.load(f)["project"]
    return project


def _dist_name(project: dict[str, Any]) -> str:
    return str(project["name"]).replace("-", "_")


def _metadata(project: dict[str, Any]) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project['description']}",
        f"License: {project['license']}",
        f"Requires-Python: {project['requires-python']}",
    ]
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    return "\n".join(lines) + "\n"


def _entry_points(project: dict[str, Any]) -> str:
    scripts = project.get("scripts", {})
    if not scripts:
        return ""
    return "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(scripts.items())) + "\n"


def _sources() -> list[Path]:
    # The package and its rooms (format/, store/, verify/, bundle/, ...), never caches.
    files = [
        p
        for p in SOURCE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and (p.suffix == ".py" or p.name == "py.typed")
    ]
    return sorted(files, key=lambda p: p.relative_to(SOURCE).as_posix())


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, DATE)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, data)


def _dist_info_files(project: dict[str, Any]) -> dict[str, bytes]:
    files = {
        "METADATA": _metadata(project).encode(),
        "WHEEL": b"Wheel-Version: 1.0\nGenerator: mnemolog verifier_backend\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    ep = _entry_points(project)
    if ep:
        files["entry_points.txt"] = ep.encode()
    return files


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    return []


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: dict[str, Any] | None = None
) -> str:
    project = _project()
    dist_info = f"{_dist_name(project)}-{project['version']}.dist-info"
    out = Path(metadata_directory) / dist_info
    out.mkdir(parents=True, exist_ok=True)
    for name, data in _dist_info_files(project).items():
        (out / name).write_bytes(data)
    return dist_info


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    project = _project()
    base = f"{_dist_name(project)}-{project['version']}"
    wheel_name = f"{base}-py3-none-any.whl"
    members = {f"{TARGET}/{p.relative_to(SOURCE).as_posix()}": p.read_bytes() for p in _sources()}
    if f"{TARGET}/__init__.py" not in members:
        raise RuntimeError(f"{SOURCE} is not the mnemolog eventlog package")
    members |= {f"{base}.dist-info/{k}": v for k, v in _dist_info_files(project).items()}
    record_name = f"{base}.dist-info/RECORD"
    record = "".join(_record_line(n, d) + "\n" for n, d in members.items()) + f"{record_name},,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            _write(zf, name, data)
        _write(zf, record_name, record.encode())
    Path(wheel_directory, wheel_name).write_bytes(buf.getvalue())
    return wheel_name
