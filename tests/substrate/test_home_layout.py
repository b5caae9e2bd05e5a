"""A damaged home layout ends in exit 6 or 8 naming the path; init either makes a home or leaves nothing."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mnemolog.eventlog.errors import StorageError
from mnemolog.substrate import home as home_module
from mnemolog.substrate.home import init_home
from tests.projections.kit import new_home
from tests.support.cli import Cli


@pytest.fixture(scope="module")
def base(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("layout") / "home"
    new_home(home)
    assert cli(home, "store", "a memory about harbours").code == 0
    return home


@pytest.fixture
def home(base: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "home"
    shutil.copytree(base, copy, ignore=shutil.ignore_patterns(".lock", ".want-*"))
    return copy


def replace_with_file(path: Path) -> None:
    shutil.rmtree(path)
    path.write_text("not a directory\n")


def replace_with_dir(path: Path) -> None:
    path.unlink()
    path.mkdir()


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "checkpoints a file": (lambda h: replace_with_file(h / "log" / "checkpoints"), "log/checkpoints"),
    "projections a file": (lambda h: replace_with_file(h / "projections"), "projections"),
    "segment a directory": (
        lambda h: replace_with_dir(h / "log" / "00000000000000000000.seg"),
        "00000000000000000000.seg",
    ),
    "index a file": (lambda h: replace_with_file(h / "log" / "index"), "log/index"),
    "database a directory": (
        lambda h: replace_with_dir(h / "projections" / "mnemolog.duckdb"),
        "mnemolog.duckdb",
    ),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
@pytest.mark.parametrize("command", [["store", "one more"], ["recall", "harbours"], ["stats"], ["rebuild"]])
def test_a_damaged_layout_names_the_path(cli: Cli, home: Path, case: str, command: list[str]) -> None:
    damage, named = DAMAGE[case]
    damage(home)
    ran = cli(home, *command)
    code, out = ran.code, ran.output
    if case in ("projections a file", "database a directory", "index a file") and command == [
        "log",
        "verify",
    ]:
        return
    assert code in (6, 8), out
    assert named in out and "Traceback" not in out and "internal error" not in out


def test_log_verify_needs_neither_projections_nor_index(cli: Cli, home: Path) -> None:
    replace_with_file(home / "projections")
    replace_with_file(home / "log" / "index")
    assert cli(home, "log", "verify").code == 0


def test_init_on_a_dangling_symlink(cli: Cli, tmp_path: Path) -> None:
    link = tmp_path / "home"
    link.symlink_to(tmp_path / "nowhere")
    ran = cli(link, "init")
    code, out = ran.code, ran.output
    assert code == 6 and str(link) in out and "does not exist" in out
    assert not (tmp_path / "nowhere").exists()


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def enospc(*_: Any, **__: Any) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device", "/injected")


@pytest.mark.parametrize(
    "step",
    ["atomic_write", "write_private_key", "write_public_key", "LogWriter.create", "SigningKey.generate"],
)
@pytest.mark.parametrize("existing", ["nothing", "empty root", "root with a file and empty log"])
def test_a_failed_init_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, existing: str
) -> None:
    root = tmp_path / "parent" / "home"
    if existing != "nothing":
        root.mkdir(parents=True)
    if existing == "root with a file and empty log":
        (root / "notes.txt").write_text("mine\n")
        (root / "log").mkdir()
    before = listing(tmp_path)
    if step == "LogWriter.create":
        monkeypatch.setattr(home_module.LogWriter, "create", enospc)
    elif step == "SigningKey.generate":
        monkeypatch.setattr(home_module.SigningKey, "generate", enospc)
    else:
        monkeypatch.setattr(home_module, step, enospc)
    with pytest.raises(StorageError) as caught:
        init_home(root, key_name="k")
    assert caught.value.exit_code == 6 and "No space left on device" in caught.value.message
    assert listing(tmp_path) == before
    monkeypatch.undo()
    init_home(root, key_name="k")  # and it can simply be run again
    assert (root / "log" / "00000000000000000000.seg").is_file()


def test_a_failure_inside_the_log_writer_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mnemolog.eventlog.store import writer

    real = writer.atomic_write

    def checkpoint_fails(path: Path, data: bytes, mode: int = 0o644) -> None:
        if "checkpoints" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, data, mode)

    monkeypatch.setattr(writer, "atomic_write", checkpoint_fails)
    root = tmp_path / "home"
    with pytest.raises(StorageError):
        init_home(root, key_name="k")
    assert not root.exists()


def test_init_makes_private_directories_under_any_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        init_home(tmp_path / "home", key_name="k")
    finally:
        os.umask(old)
    for d in ("", "keys", "projections"):
        assert (tmp_path / "home" / d).stat().st_mode & 0o077 == 0, d
    assert (tmp_path / "home" / "config.toml").stat().st_mode & 0o077 == 0
