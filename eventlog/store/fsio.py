"""Small file primitives shared by the log, keys, checkpoints, bundles and vaults.

Writes are durable (`atomic_write`, `fsync_dir`) and never replace a FIFO, a
device or a directory (`check_replaceable`). Reads go through one guard,
`open_regular`: nothing mnemolog reads from disk may be a FIFO (opening one
blocks until a writer comes), a device (`/dev/zero` never ends) or a
directory, and `read_regular` never reads more than its bound. The errors are
OSError subclasses naming the path, so every caller's existing "unreadable"
handling applies to them. Standard library only: the standalone verifier uses
this module.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from pathlib import Path
from typing import BinaryIO

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)


class NotRegularFile(OSError):
    """A path to read holds a FIFO, a device, a socket or a directory (``kind`` says which)."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file ({kind})", os.fspath(path))
        self.kind = kind


class NotReplaceable(OSError):
    """A path to write holds a FIFO, a device, a socket or a directory: it is never replaced.

    Writing renames a finished temp file over the target, which would turn a
    FIFO or a device node (``-o /dev/full``) into a regular file.
    """

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        super().__init__(
            errno.EEXIST,
            f"exists and is not a regular file ({kind}); refusing to replace it",
            os.fspath(path),
        )
        self.kind = kind


class FileTooLarge(OSError):
    """A file to read is larger than the bound its reader set.

    ``size`` is the file's size, or, for a file that grew while it was read,
    the bytes read when the bound was passed.
    """

    def __init__(self, path: str | os.PathLike[str], limit: int, size: int, *, grew: bool = False) -> None:
        what = f"larger than {limit} bytes" if grew else f"larger than {limit} bytes ({size} bytes)"
        super().__init__(errno.EFBIG, what, os.fspath(path))
        self.limit = limit
        self.size = size


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def open_regular_fd(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of `path`, which must be a regular file; never blocks.

    O_NONBLOCK makes opening a FIFO return at once instead of waiting for a
    writer; fstat on the descriptor then decides on the file actually opened
    (no race with a rename between a stat and the open).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, _kind(st.st_mode))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """`path` opened for binary reading, refused unless it is a regular file."""
    return os.fdopen(open_regular_fd(path), "rb")


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file `path`, refused (FileTooLarge) beyond `limit` bytes."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise FileTooLarge(path, limit, size)
        # Sized by the file, not the bound: a generous bound must not allocate itself.
        chunks = [f.read(size)]
        total = len(chunks[0])
        while chunk := f.read(min(1 << 20, limit + 1 - total)):
            chunks.append(chunk)  # it grew while we read
            total += len(chunk)
            if total > limit:
                raise FileTooLarge(path, limit, total, grew=True)
    return b"".join(chunks) if len(chunks) > 1 else chunks[0]


def check_replaceable(path: str | os.PathLike[str]) -> None:
    """Refuse (NotReplaceable) to write over `path` unless it is absent or a regular file.

    The target is followed through symbolic links: a link to a device is
    refused; a dangling link, or a link to a regular file, is replaced by the
    new file as rename always does.
    """
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    if not stat.S_ISREG(st.st_mode):
        raise NotReplaceable(path, _kind(st.st_mode))


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a create, a rename) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_TEMP_NAME = re.compile(r"^\.(?P<target>.+)\.(?P<pid>\d+)\.tmp$")


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (one we may not signal still exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    return True


def stale_temps(directory: Path) -> list[tuple[Path, str]]:
    """`atomic_write` temp files in `directory` whose writer is gone: (temp, the file it was for).

    A writer killed between creating its temp file and renaming it leaves the
    temp behind; its name carries the writer's pid, so a later writer can
    tell a leftover from a write in progress.
    """
    out: list[tuple[Path, str]] = []
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return out
    for name in sorted(names):
        m = _TEMP_NAME.match(name)
        if m and not pid_alive(int(m["pid"])):
            out.append((directory / name, m["target"]))
    return out


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data`; os.write may write less than asked."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write `data` to `path` so a crash leaves either the old file or the new one.

    temp file in the same directory, fsync, rename over, fsync the directory.
    An existing target that is not a regular file is refused (NotReplaceable)
    before anything is written.
    """
    check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        # A full disk or a kill between open and rename must not leave the temp file.
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError) and exc.filename is None:
            # os.write names no file: say which one could not be written.
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise
    fsync_dir(path.parent)
