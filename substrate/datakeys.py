"""The home's data keys: one random key per memory, interaction, document, atomised source and pack.

Kept in `<home>/datakeys/keys` (a data-key file of eventlog.sealing, mode
0600, never in the log and never in a bundle's signed bytes), appended
under `datakeys/.lock`. A key is durable (written and synced) before the
first entry it seals is appended, so a crash can lose a key only together
with the entries that would have needed it. Forgetting rewrites the file
without the destroyed keys (a new file renamed over the old one), so no
copy of them stays in the home.

`DataKeys.upcast` is what every reader of the home uses instead of the
vocabulary's `upcast`: it opens sealed content with the keys it has, and
counts what it could not open (`closed`), so a log read without its keys
says so.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mnemolog.eventlog import sealing
from mnemolog.eventlog.errors import DecodeError, StorageError
from mnemolog.eventlog.fsio import FileTooLarge, NotRegularFile, fsync_dir, read_regular
from mnemolog.eventlog.lock import FileLock
from mnemolog.eventlog.vocabulary import SEALED_FIELD, upcast

__all__ = ["DIR_NAME", "DataKeys"]

DIR_NAME = "datakeys"
FILE_NAME = "keys"


class DataKeys:
    """The key store of one home (see the module docstring). Thread-safe."""

    def __init__(self, root: Path, lock_timeout: float = 30.0) -> None:
        self.dir = root / DIR_NAME
        self.path = self.dir / FILE_NAME
        self._lock_timeout = lock_timeout
        self._mutex = threading.RLock()
        self._keys: dict[str, bytes] = {}
        self._ident: tuple[int, int] | None = None  # (inode, size) of what _keys holds
        #: Boxes the readers of this store could not open, since it was made.
        self.closed = 0

    # -- reading ---------------------------------------------------------------------

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {self.path}: {exc.strerror}", file=str(self.path)) from exc
        return (st.st_ino, st.st_size)

    def refresh(self) -> None:
        """Take in keys other processes added, and drop keys they destroyed."""
        with self._mutex:
            ident = self._stat()
            if ident == self._ident:
                return
            if ident is None:
                self._keys, self._ident = {}, None
                return
            try:
                data = read_regular(self.path, sealing.MAX_KEYS_FILE)
            except (FileTooLarge, NotRegularFile, OSError) as exc:
                raise StorageError(
                    f"cannot read the data keys {self.path}: {exc}", file=str(self.path)
                ) from exc
            try:
                _, keys = sealing.decode_keys(data, str(self.path))
            except DecodeError as exc:
                raise StorageError(exc.message, file=str(self.path)) from exc
            self._keys, self._ident = keys, (ident[0], len(data))

    def get(self, subject: str) -> bytes | None:
        """The subject's data key, or None (never had one, or it was destroyed)."""
        key = self._keys.get(subject)
        if key is None:
            self.refresh()
            key = self._keys.get(subject)
        return key

    def has(self, subject: str) -> bool:
        return self.get(subject) is not None

    def all(self) -> dict[str, bytes]:
        """Every key the store holds now."""
        with self._mutex:
            self.refresh()
            return dict(self._keys)

    def upcast(self, type_: str, tv: int, data: dict[str, Any]) -> dict[str, Any]:
        """Open sealed content with this store's keys, then upcast (what readers of the home use)."""
        if SEALED_FIELD in data:
            data = sealing.open_payload(type_, data, self.get)
            closed = data.get(SEALED_FIELD)
            if isinstance(closed, list):
                self.closed += len(closed)
        return upcast(type_, tv, data)

    # -- writing ---------------------------------------------------------------------

    def _file_lock(self) -> FileLock:
        return FileLock(self.dir / ".lock", self._lock_timeout, "data key lock")

    def ensure(self, subjects: Iterable[str]) -> dict[str, bytes]:
        """The keys of `subjects`, creating (durably) those that have none yet."""
        wanted = [s for s in dict.fromkeys(subjects) if s]
        with self._mutex:
            missing = [s for s in wanted if s not in self._keys]
            if missing:
                self.refresh()
                missing = [s for s in missing if s not in self._keys]
            if missing:
                self._create(missing)
            return {s: self._keys[s] for s in wanted}

    def _create(self, subjects: list[str]) -> None:
        self.dir.mkdir(mode=0o700, exist_ok=True)
        with self._file_lock():
            self.refresh()
            fresh = {s: sealing.new_key() for s in subjects if s not in self._keys}
            if not fresh:
                return
            new_file = not self.path.exists()
            data = (sealing.keys_header() if new_file else b"") + b"".join(
                sealing.encode_key_record(s, k) for s, k in fresh.items()
            )
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                if new_file:
                    fsync_dir(self.dir)
            except OSError as exc:
                raise StorageError(
                    f"cannot write the data keys {self.path}: {exc.strerror}", file=str(self.path)
                ) from exc
            self._keys.update(fresh)
            ident = self._stat()
            self._ident = ident

    def add(self, keys: Mapping[str, bytes]) -> int:
        """Take in keys from elsewhere (an export's); a subject that has a key keeps it. Returns how many."""
        with self._mutex:
            self.refresh()
            fresh = {s: k for s, k in keys.items() if s not in self._keys}
            if not fresh:
                return 0
            self._rewrite({**self._keys, **fresh})
            return len(fresh)

    def destroy(self, subjects: Iterable[str]) -> list[str]:
        """Destroy the keys of `subjects`; returns the subjects that had one."""
        gone = set(subjects)
        with self._mutex:
            self.dir.mkdir(mode=0o700, exist_ok=True)
            with self._file_lock():
                self.refresh()
                hit = sorted(s for s in gone if s in self._keys)
                if hit:
                    self._rewrite({s: k for s, k in self._keys.items() if s not in gone}, locked=True)
                return hit

    def _rewrite(self, keys: dict[str, bytes], *, locked: bool = False) -> None:
        if not locked:
            self.dir.mkdir(mode=0o700, exist_ok=True)
            with self._file_lock():
                self._rewrite(keys, locked=True)
            return
        tmp = self.dir / f".{FILE_NAME}.{os.getpid()}.tmp"
        data = sealing.encode_keys(keys)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            fsync_dir(self.dir)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise StorageError(
                f"cannot write the data keys {self.path}: {exc.strerror}", file=str(self.path)
            ) from exc
        self._keys = dict(keys)
        self._ident = self._stat()
