"""`Session`: one unit of work on a home, and the only way anything is written.

A session holds the projection lock with the tables caught up to the log.
Commands check their preconditions against that state (`get`, `require`,
`policy`), then write with `append(payload)`: the entry's type and tv come
from the payload's class, the entry is durable when it returns, and it is
folded into the tables before the next read. `write_memory` and
`write_link` add governance and the hook chain around a store or a link,
for every memory and edge (atoms included). Post hooks' failures cannot
undo a durable write; they are collected in `warnings`, which the command
returns to its caller.

Commands of other modules (the atomiser, the vault importer, migrations)
take anything with a `session()` method (`Sessions`), not the Substrate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import duckdb

from mnemolog.eventlog.bundle import memview, touching
from mnemolog.eventlog.errors import LogMoved, MnemologError, NotFound, StorageError
from mnemolog.eventlog.format import sealing
from mnemolog.eventlog.store.writer import LogWriter, Receipt
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.projections import erasure as erasure_q
from mnemolog.projections.engine import Projections
from mnemolog.projections.memory import heads as heads_q
from mnemolog.projections.memory import queries
from mnemolog.projections.memory.model import Edge, Links, Memory
from mnemolog.projections.recall import query as q
from mnemolog.substrate.erasure.datakeys import DataKeys
from mnemolog.substrate.hooks import GovernanceRefused, HookChain, HookEvent
from mnemolog.substrate.memory import governance
from mnemolog.substrate.memory.governance import ResolvedPolicy
from mnemolog.substrate.tenancy import scope

if TYPE_CHECKING:
    # The payload models load with the first write (a read-only command builds none).
    from mnemolog.substrate.events import LinkCreated, MemoryStored, Payload

__all__ = ["Follow", "ProjectionBehind", "Session", "Sessions"]

APPEND_ATTEMPTS = 5  # a batch whose seqs moved under it is prepared again at most this often

_Out = TypeVar("_Out", Memory, Edge)

# Events that belong with a store (a deferred atomisation request), chosen once the
# namespace's policy is known; they go into the store's own batch.
Follow = Callable[[ResolvedPolicy], Sequence["Payload"]]


class BeforeAppend(Protocol):
    """Runs on every batch before it is appended (embed-on-insert: substrate.embedding)."""

    def before_append(self, s: Session, payloads: Sequence[Payload]) -> list[Payload]: ...


class ProjectionBehind(StorageError):
    """Entries are durable in the log but could not be folded into the projection.

    The write happened: callers report it as done, with this as a warning. The
    projection is derived data and catches up on the next session (or `mnemolog
    rebuild`).
    """

    slug = "projection_behind"

    def __init__(self, receipts: Sequence[Receipt], cause: BaseException) -> None:
        reason = cause.message if isinstance(cause, MnemologError) else str(cause)
        first, last = receipts[0].seq, receipts[-1].seq
        super().__init__(
            f"entries {first}..{last} are durable in the log, but the projection could not fold them "
            f"({reason}); it catches up on the next command, or run `mnemolog rebuild`",
            first_seq=first,
            last_seq=last,
        )
        self.receipts = list(receipts)


class Session:
    """The projection lock held and the tables caught up; see the module docstring."""

    def __init__(
        self,
        conn: duckdb.DuckDBPyConnection,
        writer: Callable[[], LogWriter],
        projections: Projections,
        hooks: HookChain,
        before_append: BeforeAppend | None = None,
        keys: DataKeys | None = None,
    ) -> None:
        self._conn = conn
        self._keys = keys  # None: a read-only session (as of a log point), which never seals
        self._writer = writer  # opens the home's writer on first use: reads never need it
        self._projections = projections
        self._hooks = hooks
        self._before_append = before_append
        self.warnings: list[str] = []
        # Memories whose text is not embedded when stored, with what to report instead
        # (a synchronous auto-atomise source; a bulk import whose embedder is down).
        self.skip_embedding: dict[str, str] = {}
        # What embed-on-insert did for each memory this session wrote (see substrate.embedding).
        self.embedded: dict[str, str] = {}
        # True while a bulk import writes a batch that is not its last: the catch-up after the
        # append leaves the index compaction to the last batch's (Projections.catch_up `settle`).
        self.defer_settle = False

    @property
    def conn(self) -> duckdb.DuckDBPyConnection:
        """The projection connection, for the named queries of mnemolog.projections."""
        return self._conn

    # -- writing -------------------------------------------------------------------

    def append(self, payload: Payload) -> Receipt:
        """Sign and append one event (type and tv from its class), folded before returning."""
        return self.append_many([payload])[0]

    def append_many(self, payloads: Sequence[Payload]) -> list[Receipt]:
        """Several events in one batch (one sync), folded before returning.

        The receipts are those of `payloads`, in order (a batch may carry one
        more event first: the home's embedder, recorded by its first write).
        """
        # Every model of a type lives in one module (a test holds it), so the payload's own
        # module has registered its type's current tv: no need to import every other domain.
        from mnemolog.substrate.events.base import CURRENT_TV

        n = len(payloads)
        if self._before_append is not None:
            payloads = self._before_append.before_append(self, payloads)
        items = []
        for p in payloads:
            cls = type(p)
            if CURRENT_TV.get(getattr(cls, "TYPE", "")) != cls.TV or not cls.WRITABLE:
                # A programming error, not bad input: only the current model of a type is written.
                raise TypeError(f"{cls.__qualname__} is not the payload model written for its type")
            items.append((cls.TYPE, p.to_data(), cls.TV))
        plain = items
        items = self._seal(items)
        writer = self._writer()
        for attempt in range(APPEND_ATTEMPTS):
            base = self._chain(payloads, items, writer)
            try:
                # The pointers name seqs inside this batch: it must land exactly there.
                receipts = writer.append_many(items, first_seq=base)
                break
            except LogMoved:
                # Another process appended (outside a session: `log append`); nothing was
                # written. Fold what it wrote and fill the pointers again.
                if attempt == APPEND_ATTEMPTS - 1:
                    raise
                self._projections.catch_up(self._conn)
        known = touching.known_heads(self._projections.log)
        if known.learning:
            # The heads just signed, read from the very payloads by the head check's own rule.
            known.signed([memview.payload_touched_ids(t, tv, d) for t, d, tv in items], receipts)
        # What went wrong without failing the write (a derived index, a listener) is reported
        # with the command's result, like a post hook's failure.
        self.warnings += writer.take_warnings()
        # This writer signed what it just appended, and sealed its content: read back byte for
        # byte (the leaf hashes match), those entries need no second signature check, and their
        # boxes hold the values sealed here (the fold takes them instead of opening the boxes).
        opened: dict[int, tuple[bytes, dict[str, Any]]] = {}
        # One receipt per item, in order; were it ever otherwise, nothing is handed over (the
        # fold opens every box), rather than values paired with another entry's receipt.
        pairs = zip(receipts, plain, items, strict=True) if len(receipts) == len(items) else ()
        for r, (t, d, _), (_, sd, _) in pairs:
            if sd is not d:
                values = sealing.sealed_values(t, d, sd)
                if values is not None:
                    opened[r.seq] = (r.leaf, values)
        try:
            self._projections.catch_up(
                self._conn,
                signed_here={r.seq: r.leaf for r in receipts},
                opened_here=opened,
                settle=not self.defer_settle,
            )
        except (MnemologError, OSError, duckdb.Error) as exc:
            # Durable already: the projection is derived and catches up later.
            raise ProjectionBehind(receipts, exc) from exc
        if base is not None and receipts and receipts[0].seq != base:
            self.warnings.append(
                f"another writer appended while entries {receipts[0].seq}..{receipts[-1].seq} were "
                "written: their back-chain pointers to each other are off, and verify-bundle will "
                "report a broken back-chain for the memories they touch"
            )
        return receipts[len(receipts) - n :]

    def _seal(self, items: list[tuple[str, dict[str, Any], int]]) -> list[tuple[str, dict[str, Any], int]]:
        """Each sealing payload's content in boxes under its subject's data key (durable first)."""
        subjects = [s for t, d, tv in items if v.seals(t, tv) for s in sealing.subjects_of(t, d)]
        if not subjects:
            return items
        if self._keys is None:
            raise TypeError("a session without data keys cannot write sealed content")
        keys = self._keys.ensure(subjects)
        return [
            (t, sealing.seal_payload(t, d, keys.__getitem__), tv) if v.seals(t, tv) else (t, d, tv)
            for t, d, tv in items
        ]

    def _chain(
        self, payloads: Sequence[Payload], items: list[tuple[str, dict[str, Any], int]], writer: LogWriter
    ) -> int | None:
        """Fill each touching payload's back-chain pointers; return the seq the batch should start at."""
        from mnemolog.substrate.events.base import Chained

        touched = [
            v.touched_ids(t, d) if isinstance(p, Chained) else []
            for p, (t, d, _) in zip(payloads, items, strict=True)
        ]
        ids = {m for ms in touched for m in ms}
        if not ids:
            return None
        # The tables are caught up and every memory write holds this session's lock, so the
        # newest touch of each memory is in them and the batch starts at the log's end.
        heads = heads_q.memory_heads(self._conn, ids)
        applied = heads_q.applied_size(self._conn)
        # The pointers are signed forever: hold the projection's heads to the log first, so a
        # row deleted from `touches` cannot make this writer sign a pointer that skips an entry.
        # (A memory the projection never saw is taken as new; `log verify` folds every pointer.)
        # What this process checked or signed before is not read again (`touching.KnownHeads`):
        # only the claims it has not seen and the log appended since.
        touching.known_heads(self._projections.log).check(
            self._projections.log, heads, applied, memview.entry_touched_ids
        )
        base = max(applied, writer.size)
        for i, ms in enumerate(touched):
            if ms:
                items[i][1][v.TOUCH_PREV] = {m: heads.get(m, v.FIRST_TOUCH) for m in ms}
                for m in ms:
                    heads[m] = base + i
        return base

    def catch_up(self) -> None:
        """Fold what other processes appended since the session began."""
        self._projections.catch_up(self._conn)

    # -- reading -------------------------------------------------------------------

    def get(self, memory_id: str) -> Memory | None:
        """The memory, or None (also for an id that is not text)."""
        return q.get(self._conn, memory_id) if isinstance(memory_id, str) else None

    def require(self, memory_id: str) -> Memory:
        """The memory, or NotFound (exit 2)."""
        m = self.get(memory_id)
        if m is None:
            gone = erasure_q.erased(self._conn, [memory_id]) if isinstance(memory_id, str) else {}
            if memory_id in gone:
                seq, reason = gone[memory_id]
                why = f" ({reason})" if reason else ""
                raise NotFound(
                    f"memory {memory_id} was erased at seq {seq}{why}", id=memory_id, erased_seq=seq
                )
            raise NotFound(f"no memory with id {memory_id!r}", id=memory_id)
        return m

    def links(self, memory_id: str) -> Links:
        """The edges leaving and entering a memory, oldest first."""
        return q.links_of(self._conn, memory_id)

    def policy(self, namespace: str) -> ResolvedPolicy:
        """The namespace's effective policy (its own, inherited, defaults)."""
        return governance.resolve(
            queries.own_policies(self._conn, governance.ancestors(namespace)), namespace
        )

    def own_policy(self, namespace: str) -> dict[str, Any] | None:
        """The policy the namespace set itself, if any."""
        return queries.own_policies(self._conn, [namespace]).get(namespace)

    def with_warnings(self, value: _Out) -> _Out:
        """`value` with this session's post-hook warnings (if any): a command's per-call report."""
        if self.warnings:
            value["warnings"] = list(self.warnings)
        return value

    # -- governed writes -----------------------------------------------------------------

    def check_write(self, policy: ResolvedPolicy, namespace: str, atom_index: int | None = None) -> None:
        """GovernanceRefused (exit 5) when the namespace's policy accepts no writes, and
        ScopeRefused (exit 5) when a token's scope is applied that may not write there."""
        sc = scope.current()
        if sc is not None and (not sc.allows("write") or not sc.writes_namespace(namespace)):
            raise scope.ScopeRefused(
                f"namespace {namespace!r} is outside this token's scope ({sc.describe()})",
                namespace=namespace,
            )
        if policy["write"] == "none":
            where = f" (atom {atom_index})" if atom_index is not None else ""
            raise GovernanceRefused(
                f"namespace {namespace!r} does not accept writes (policy write = none, set on "
                f"{policy.sources['write']!r}){where}",
                namespace=namespace,
                atom_index=atom_index,
            )

    def write_memory(
        self,
        payload: MemoryStored,
        *,
        atom_index: int | None = None,
        policy: ResolvedPolicy | None = None,
        follow: Follow | None = None,
    ) -> Memory:
        """Governance, pre_store hooks, the event (and what `follow` adds), post_store hooks."""
        policy = policy or self.policy(payload.namespace)
        self.check_write(policy, payload.namespace, atom_index)
        self._hooks.pre(HookEvent("pre_store", payload.namespace, payload.to_data(), atom_index))
        extra = follow(policy) if follow is not None else ()
        self.append_many([payload, *extra])
        mem = self.require(payload.id)
        post = HookEvent("post_store", payload.namespace, dict(mem), atom_index)
        self.warnings += self._hooks.post(post)
        return mem

    def write_memories(
        self, payloads: Sequence[MemoryStored], *, extra: Sequence[Payload] = ()
    ) -> list[Memory]:
        """Several stores in one batch (one sync) with `extra` events after them.

        Governance and pre_store hooks run for every memory before anything is
        written, so a refusal writes nothing; post_store hooks run after.
        """
        for p in payloads:
            self.check_write(self.policy(p.namespace), p.namespace)
            self._hooks.pre(HookEvent("pre_store", p.namespace, p.to_data(), None))
        self.append_many([*payloads, *extra])
        out = [self.require(p.id) for p in payloads]
        for mem in out:
            self.warnings += self._hooks.post(HookEvent("post_store", mem["namespace"], dict(mem), None))
        return out

    def write_link(self, payload: LinkCreated, *, atom_index: int | None = None) -> Edge:
        """Both ends must exist; pre_link hooks, the event, post_link hooks."""
        src = self.require(payload.src)
        self.require(payload.dst)
        data = payload.to_data()
        self._hooks.pre(HookEvent("pre_link", src["namespace"], data, atom_index))
        r = self.append(payload)
        edge: Edge = {
            "src": payload.src,
            "dst": payload.dst,
            "relation": payload.relation,
            "metadata": dict(payload.metadata),
            "seq": r.seq,
            "created_at": r.ts,
        }
        self.warnings += self._hooks.post(HookEvent("post_link", src["namespace"], dict(edge), atom_index))
        return edge


class Sessions(Protocol):
    """Anything that opens sessions on a home (the Substrate does)."""

    def session(self) -> AbstractContextManager[Session]:
        """A session: the projection lock held, tables caught up with the log."""
        ...
