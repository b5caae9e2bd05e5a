"""The home's data keys: random keys named by random ids, handed out to the subjects whose content they seal.

Kept in `<home>/datakeys/keys` (a data-key file of eventlog.sealing, mode
0600, never in the log), appended under `datakeys/.lock`. Keys are made in
blocks and synced before any is handed out (`ensure`), so a key is durable
before the first entry it seals is appended, and a batch of stores costs no
sync of its own once a block is made (blocks grow fourfold from 8 up to 4,096
keys per process: a bulk import of 10,000 memories pays seven syncs of the
key file, where doubling to 1,024 paid seventeen, about 5 µs a memory on this
machine; a process leaves at most one block unused, ≤ 4,096 × 70 bytes).
Within a process a subject keeps the key it was given; every
entry names the key that sealed it, so another process (or this one after
a restart) may seal the same subject's later entries under another key.
Forgetting destroys every key the subject's entries name: the file is
rewritten without them (a new file renamed over the old one), so no copy
of them stays in the home.

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

from mnemolog.eventlog.errors import DecodeError, StorageError
from mnemolog.eventlog.format import sealing
from mnemolog.eventlog.store.fsio import (
    FileTooLarge,
    NotRegularFile,
    atomic_write,
    fsync_dir,
    read_regular,
    write_all,
)
from mnemolog.eventlog.store.lock import FileLock
from mnemolog.eventlog.vocabulary.events import SEALED, SEALED_FIELD, upcast

__all__ = ["DIR_NAME", "DataKeys"]

DIR_NAME = "datakeys"
FILE_NAME = "keys"
FIRST_BLOCK = 8
MAX_BLOCK = 4096
BLOCK_GROWTH = 4


class DataKeys:
    """The key store of one home (see the module docstring). Thread-safe."""

    def __init__(self, root: Path, lock_timeout: float = 30.0) -> None:
        self.dir = root / DIR_NAME
        self.path = self.dir / FILE_NAME
        self._lock_timeout = lock_timeout
        self._mutex = threading.RLock()
        self._keys: dict[str, bytes] = {}
        self._ident: tuple[int, int] | None = None  # (inode, size) of what _keys holds
        self._pool: list[str] = []  # key ids made and synced by this process, not handed out yet
        self._block = FIRST_BLOCK
        self._given: dict[str, str] = {}  # subject -> the key id this process seals it under
        #: Fields the readers of this store could not open, since it was made.
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

    def get(self, key_id: str) -> bytes | None:
        """The key of this id, or None (never made here, or destroyed)."""
        key = self._keys.get(key_id)
        if key is None:
            self.refresh()
            key = self._keys.get(key_id)
        return key

    def has(self, key_id: str) -> bool:
        return self.get(key_id) is not None

    def all(self) -> dict[str, bytes]:
        """Every key the store holds now."""
        with self._mutex:
            self.refresh()
            return dict(self._keys)

    def upcast(self, type_: str, tv: int, data: dict[str, Any]) -> dict[str, Any]:
        """Open sealed content with this store's keys, then upcast (what readers of the home use)."""
        if type_ in SEALED:
            data = sealing.open_payload(type_, data, self.get)
            closed = data.get(SEALED_FIELD)
            if isinstance(closed, list):
                self.closed += len(closed)
        return upcast(type_, tv, data)

    # -- writing ---------------------------------------------------------------------

    def _file_lock(self) -> FileLock:
        return FileLock(self.dir / ".lock", self._lock_timeout, "data key lock")

    def ensure(self, subjects: Iterable[str]) -> dict[str, tuple[str, bytes]]:
        """The (key id, key) each subject's content is sealed under now (durable before it is returned)."""
        wanted = [s for s in dict.fromkeys(subjects) if s]
        with self._mutex:
            out: dict[str, tuple[str, bytes]] = {}
            for s in wanted:
                kid = self._given.get(s)
                if kid is None or kid not in self._keys:
                    if not self._pool:
                        self._refill(len(wanted))
                    kid = self._pool.pop()
                    self._given[s] = kid
                out[s] = (kid, self._keys[kid])
            return out

    def _refill(self, at_least: int) -> None:
        n = max(self._block, at_least)
        self._block = min(self._block * BLOCK_GROWTH, MAX_BLOCK)
        fresh = sealing.new_keys(n)
        self.dir.mkdir(mode=0o700, exist_ok=True)
        with self._file_lock():
            self.refresh()
            new_file = not self.path.exists()
            data = (sealing.keys_header() if new_file else b"") + b"".join(
                sealing.encode_key_record(k, v) for k, v in fresh.items()
            )
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    write_all(fd, data)
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
            self._ident = self._stat()
        self._pool.extend(fresh)

    def add(self, keys: Mapping[str, bytes]) -> int:
        """Take in keys from elsewhere (an export's); an id that has a key keeps it. Returns how many."""
        with self._mutex:
            self.refresh()
            fresh = {s: k for s, k in keys.items() if s not in self._keys}
            if not fresh:
                return 0
            self._rewrite({**self._keys, **fresh})
            return len(fresh)

    def destroy(self, key_ids: Iterable[str]) -> list[str]:
        """Destroy these keys; returns the ids that were there."""
        gone = set(key_ids)
        with self._mutex:
            self.dir.mkdir(mode=0o700, exist_ok=True)
            with self._file_lock():
                self.refresh()
                hit = sorted(s for s in gone if s in self._keys)
                if hit:
                    self._rewrite({s: k for s, k in self._keys.items() if s not in gone}, locked=True)
                self._pool = [k for k in self._pool if k not in gone]
                self._given = {s: k for s, k in self._given.items() if k not in gone}
                return hit

    def forget_subjects(self, subjects: Iterable[str]) -> None:
        """This process seals these subjects under new keys from now on (their old keys are going)."""
        with self._mutex:
            for s in subjects:
                self._given.pop(s, None)

    def _rewrite(self, keys: dict[str, bytes], *, locked: bool = False) -> None:
        if not locked:
            self.dir.mkdir(mode=0o700, exist_ok=True)
            with self._file_lock():
                self._rewrite(keys, locked=True)
            return
        try:
            atomic_write(self.path, sealing.encode_keys(keys), 0o600)
        except OSError as exc:
            raise StorageError(
                f"cannot write the data keys {self.path}: {exc.strerror}", file=str(self.path)
            ) from exc
        self._keys = dict(keys)
        self._ident = self._stat()
