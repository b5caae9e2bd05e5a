"""Durability policies and the group-commit queue: appends batched into one sync.

`fsync` mode writes and syncs each append in its caller's thread. `group`
mode queues appends into batches of at most `max_entries` entries or
`max_ms` milliseconds; a committer thread hands each batch to the writer's
`commit` function (one sync for the batch) and wakes all of its waiters.

The queue and the committer share one condition variable, and every state
change — queueing, closing — happens under it: an append that races
`close()` is either queued before the close (and committed by the draining
committer) or refused with "closed", never left waiting forever.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from mnemolog.eventlog.errors import DecodeError, StorageError
from mnemolog.eventlog.format.entry import check_type_name, encode_payload
from mnemolog.eventlog.format.keys import SigningKey
from mnemolog.eventlog.store.segments import MAX_ENTRY_BYTES

IDLE_SLICE = 0.0002  # seconds without a new append that end a group-commit wait
MAX_PAYLOAD_BYTES = MAX_ENTRY_BYTES - 4096  # room for the envelope and a long type name


@dataclass(frozen=True)
class Durability:
    """`fsync`: each append is synced before it returns. `group`: appends are
    batched (at most `max_entries` or `max_ms`) and acknowledged after one sync."""

    mode: Literal["fsync", "group"] = "fsync"
    max_entries: int = 512
    max_ms: float = 5.0

    def __post_init__(self) -> None:
        if self.mode not in ("fsync", "group"):
            raise StorageError(f"unknown durability mode {self.mode!r} (fsync or group)")
        if self.max_entries < 1 or self.max_ms < 0:
            raise StorageError("group commit needs max_entries >= 1 and max_ms >= 0")


@dataclass(frozen=True, slots=True)
class Receipt:
    seq: int
    ts: int
    type: str
    leaf: bytes


class Pending:
    """One append, checked and encoded by the submitting thread.

    The work overlaps the committer's signing (libsodium runs without the
    GIL), and a bad payload fails in its caller before anything is queued.
    """

    __slots__ = ("data", "data_enc", "expect_seq", "new_key", "tv", "type")

    def __init__(self, type_: str, tv: int, data: dict[str, Any], new_key: SigningKey | None = None) -> None:
        check_type_name(type_)
        if isinstance(tv, bool) or not isinstance(tv, int) or not 0 <= tv < 2**32:
            raise DecodeError("an event type version is an unsigned integer", field="tv")
        self.type = type_
        self.tv = tv
        self.data = data
        self.new_key = new_key
        # The seq this entry must get, when its payload names it (back-chain pointers to
        # earlier entries of its own batch): the writer refuses rather than sign it elsewhere.
        self.expect_seq: int | None = None
        self.data_enc = encode_payload(data)
        if len(self.data_enc) > MAX_PAYLOAD_BYTES:
            # Readers and recovery take anything longer than an entry can be for damage.
            raise DecodeError(
                f"payload of {len(self.data_enc)} bytes is larger than an entry may carry "
                f"({MAX_PAYLOAD_BYTES} bytes)",
                field="data",
            )


class Batch:
    """Appends committed together: one sync, one wake-up for all their waiters."""

    __slots__ = ("closed", "done", "error", "first_at", "items", "receipts")

    def __init__(self, items: list[Pending] | None = None) -> None:
        self.items: list[Pending] = items if items is not None else []
        self.receipts: list[Receipt] = []
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.first_at = 0.0
        self.closed = False


class Ticket:
    """The handle `submit` returns; `result()` blocks until the entry is durable."""

    __slots__ = ("_batch", "_i")

    def __init__(self, batch: Batch, i: int) -> None:
        self._batch = batch
        self._i = i

    def result(self, timeout: float | None = None) -> Receipt:
        if not self._batch.done.wait(timeout):
            raise StorageError("timed out waiting for an append to become durable")
        if self._batch.error is not None:
            raise self._batch.error
        return self._batch.receipts[self._i]

    def done(self) -> bool:
        return self._batch.done.is_set()


def run_batch(batch: Batch, commit: Callable[[list[Pending]], list[Receipt]]) -> None:
    """Commit one batch and wake its waiters, whatever happens."""
    try:
        batch.receipts = commit(batch.items)
    except BaseException as exc:
        batch.error = exc
        if not isinstance(exc, Exception):
            batch.done.set()
            raise
    batch.done.set()


class GroupCommit:
    """The queue of batches and the committer thread that drains it."""

    def __init__(self, durability: Durability, commit: Callable[[list[Pending]], list[Receipt]]) -> None:
        self.max_entries = durability.max_entries
        self.max_wait = durability.max_ms / 1000.0
        self._commit = commit
        self._cond = threading.Condition()
        self._batches: list[Batch] = []
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="mnemolog-group-commit", daemon=True)
        self._thread.start()

    def enqueue(self, items: list[Pending]) -> list[Ticket]:
        tickets: list[Ticket] = []
        wake = False
        with self._cond:
            # Checked under the lock `close()` takes: once closed, nothing is queued.
            if self._closed:
                raise StorageError("the log writer is closed")
            for p in items:
                b = self._batches[-1] if self._batches else None
                if b is None or b.closed or len(b.items) >= self.max_entries:
                    b = Batch()
                    b.first_at = time.monotonic()
                    self._batches.append(b)
                    wake = True
                tickets.append(Ticket(b, len(b.items)))
                b.items.append(p)
                # Entries after a rotation need the new key: they start a new batch.
                if p.new_key is not None:
                    b.closed = True
                    wake = True
                elif len(b.items) >= self.max_entries:
                    wake = True
            # The committer polls a filling batch; waking it per append only
            # costs the GIL hand-offs that slow both threads down.
            if wake:
                self._cond.notify()
        return tickets

    def _run(self) -> None:
        max_n, max_wait = self.max_entries, self.max_wait
        while True:
            with self._cond:
                while not self._batches and not self._closed:
                    self._cond.wait()
                if not self._batches:
                    return
                b = self._batches[0]
                # Wait for the batch to fill, for at most max_ms, and no longer
                # than appends keep arriving: a lull means every waiting caller
                # has submitted, so syncing now costs no one anything.
                while not (b.closed or len(b.items) >= max_n or self._closed):
                    left = b.first_at + max_wait - time.monotonic()
                    if left <= 0:
                        break
                    n0 = len(b.items)
                    self._cond.wait(min(left, IDLE_SLICE))
                    if len(b.items) == n0:
                        break
                self._batches.pop(0)
            run_batch(b, self._commit)

    def flush(self) -> None:
        """Wait until everything queued so far is durable (or failed)."""
        with self._cond:
            last = self._batches[-1] if self._batches else None
        if last is not None:
            last.done.wait()

    def close(self) -> None:
        """Refuse new appends, commit what is queued, stop the committer."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()
