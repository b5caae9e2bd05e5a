"""The embedding cache: vectors by (model id, SHA-256 of the text), in a SQLite file beside the projection.

Content-addressed and append-only: a text embedded once by a model is never
embedded by it again, whatever memory it belongs to, whether the projection
was rebuilt, or the home switched models and back. `rebuild` keeps this file
(it replaces only the projection database), so a rebuild needs no embedding
server.

SQLite rather than a table in the DuckDB projection: a store looks up and
adds one vector, and a key lookup in DuckDB is a scan of the key column (its
ART index is not used for a two-column key; 10-90 ms at 200k vectors), while
SQLite's B-tree answers in tens of microseconds. The file is in WAL mode
with `synchronous = NORMAL`: a power loss can lose the last vectors added,
which only means they are embedded again. Rows are never updated; a vector
that fails `check` on the way out (a damaged file) is treated as missing.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final

from mnemolog.eventlog.errors import StorageError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vector = npt.NDArray[np.float32]
else:
    from mnemolog.projections.lazymod import numpy as np

CACHE_FILE: Final = "embed-cache.sqlite"
#: Keys per lookup statement (SQLite's default limit on parameters is 32,766).
LOOKUP_CHUNK: Final = 900

_DDL = (
    "CREATE TABLE IF NOT EXISTS cache(model TEXT NOT NULL, sha BLOB NOT NULL, vec BLOB NOT NULL)",
    "CREATE UNIQUE INDEX IF NOT EXISTS cache_key ON cache(model, sha)",
)


class EmbedCache:
    """One home's cache file. Thread-safe; opened lazily, closed with `close`."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / CACHE_FILE
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    @contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        """The connection under the lock; SQLite's failures (a full disk, a damaged file) as StorageError."""
        with self._lock:
            try:
                yield self._conn()
            except sqlite3.Error as exc:
                raise StorageError(
                    f"the embedding cache {self.path} failed: {exc}; it is derived (vectors are "
                    "embedded again when it is gone)",
                    file=str(self.path),
                ) from exc

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30.0)
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            for stmt in _DDL:
                db.execute(stmt)
            self._db = db
        return self._db

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def get_many(self, model_id: str, shas: Iterable[bytes], dim: int) -> dict[bytes, Vector]:
        """The cached vectors of these text hashes (those of `dim` dimensions) under this model."""
        keys = list(dict.fromkeys(shas))
        out: dict[bytes, Vector] = {}
        with self._locked() as db:
            for lo in range(0, len(keys), LOOKUP_CHUNK):
                part = keys[lo : lo + LOOKUP_CHUNK]
                rows = db.execute(
                    f"SELECT sha, vec FROM cache WHERE model = ? AND sha IN ({', '.join('?' * len(part))})",
                    [model_id, *part],
                ).fetchall()
                for sha, blob in rows:
                    if len(blob) == 4 * dim:
                        v = np.frombuffer(blob, dtype=np.float32)
                        if np.isfinite(v).all():
                            out[bytes(sha)] = v
        return out

    def put_many(self, model_id: str, items: Mapping[bytes, Vector] | Sequence[tuple[bytes, Vector]]) -> None:
        """Add vectors (those the cache lacks), in one transaction."""
        pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
        if not pairs:
            return
        rows = [(model_id, sha, np.ascontiguousarray(v, dtype=np.float32).tobytes()) for sha, v in pairs]
        with self._locked() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT OR IGNORE INTO cache VALUES (?, ?, ?)", rows)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def erase(self, shas: Iterable[bytes]) -> int:
        """Delete the vectors of these text hashes under every model, leaving no trace in the file.

        secure_delete zeroes the freed cells, VACUUM rewrites the file without
        free pages, and the WAL is checkpointed and truncated, so no page of
        the forgotten vectors survives anywhere in the cache's files.
        """
        keys = list(dict.fromkeys(shas))
        n = 0
        with self._locked() as db:
            db.execute("PRAGMA secure_delete = ON")
            db.execute("BEGIN IMMEDIATE")
            try:
                for lo in range(0, len(keys), LOOKUP_CHUNK):
                    part = keys[lo : lo + LOOKUP_CHUNK]
                    cur = db.execute(f"DELETE FROM cache WHERE sha IN ({', '.join('?' * len(part))})", part)
                    n += max(cur.rowcount, 0)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.execute("VACUUM")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return n

    def count(self, model_id: str | None = None) -> int:
        with self._locked() as db:
            if model_id is None:
                row = db.execute("SELECT count(*) FROM cache").fetchone()
            else:
                row = db.execute("SELECT count(*) FROM cache WHERE model = ?", [model_id]).fetchone()
        return int(row[0]) if row else 0
