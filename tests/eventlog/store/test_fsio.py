"""The read guard: nothing read from disk may be a FIFO, a device or a directory, or exceed its bound."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from mnemolog.eventlog.store.fsio import (
    FileTooLarge,
    NotRegularFile,
    NotReplaceable,
    atomic_write,
    check_replaceable,
    open_regular,
    read_regular,
)


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"abc")
    assert read_regular(p, 3) == b"abc"
    with open_regular(p) as f:
        assert f.read() == b"abc"


def test_beyond_the_bound_is_refused_before_reading(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"x" * 11)
    with pytest.raises(FileTooLarge) as caught:
        read_regular(p, 10)
    assert caught.value.filename == str(p) and isinstance(caught.value, OSError)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    done: list[BaseException] = []

    def attempt() -> None:
        try:
            read_regular(fifo, 100)
        except BaseException as exc:
            done.append(exc)

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(30)
    if t.is_alive():  # unblock the thread before failing
        with open(fifo, "wb"):
            pass
        pytest.fail("reading a FIFO blocked")
    assert isinstance(done[0], NotRegularFile) and "FIFO" in str(done[0])


@pytest.mark.parametrize(("path", "kind"), [("/dev/zero", "character device"), ("/", "directory")])
def test_devices_and_directories_are_refused(path: str, kind: str) -> None:
    with pytest.raises(NotRegularFile, match=kind):
        read_regular(path, 1 << 20)
    with pytest.raises(NotRegularFile):
        open_regular(path)


def test_a_missing_file_is_the_ordinary_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "nothing", 10)


def test_a_symlink_to_a_regular_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"ok")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    assert read_regular(tmp_path / "link", 10) == b"ok"


def test_a_generous_bound_allocates_only_what_the_file_holds(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"small")
    assert read_regular(p, 1 << 40) == b"small"


# -- writes never replace a special file ------------------------------------------------


def _special_targets(tmp_path: Path) -> list[tuple[Path, str]]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "dir").mkdir()
    # A link to a device, not the device: if the guard failed, the rename would replace
    # the link, never /dev/null itself (the tests may run as root).
    (tmp_path / "to-null").symlink_to("/dev/null")
    return [(fifo, "FIFO"), (tmp_path / "dir", "directory"), (tmp_path / "to-null", "character device")]


def test_atomic_write_refuses_a_target_that_is_not_a_regular_file(tmp_path: Path) -> None:
    for target, kind in _special_targets(tmp_path):
        before = os.lstat(target)
        with pytest.raises(NotReplaceable, match=kind) as caught:
            atomic_write(target, b"data")
        assert caught.value.filename == str(target) and isinstance(caught.value, OSError)
        after = os.lstat(target)
        assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_check_replaceable_allows_absent_regular_and_dangling(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"old")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for p in (tmp_path / "absent", tmp_path / "f", tmp_path / "dangling", tmp_path / "f" / "below"):
        check_replaceable(p)
    atomic_write(tmp_path / "f", b"new")
    assert (tmp_path / "f").read_bytes() == b"new"
