"""The memory service: storing, changing, linking, archiving and reading memories one by one,
namespace policies, and memories in bulk (JSON Lines and other tools' exports, in and out).

Every write runs inside a projection session (the projection lock, with the
tables caught up to the log), checks its preconditions against that state,
appends its event, and folds it before returning, so a stored memory is
recallable the moment `store` returns. Reads that select memories by a
question or by filters are the recall service's (substrate/recall).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pydantic import ValidationError

from mnemolog.eventlog.bundle import memview
from mnemolog.eventlog.errors import BadInput, NotFound, UsageError
from mnemolog.eventlog.store import fsio
from mnemolog.eventlog.vocabulary.events import MUTABLE_FIELDS
from mnemolog.eventlog.vocabulary.knowledge import DEFAULT_STATUS
from mnemolog.projections.memory import queries
from mnemolog.projections.memory.model import MEMORY_FIELDS, Edge, Memory
from mnemolog.projections.recall import query as q
from mnemolog.substrate.events.limits import check_namespace
from mnemolog.substrate.ids import looks_like_id
from mnemolog.substrate.memory import governance
from mnemolog.substrate.memory.governance import ResolvedPolicy
from mnemolog.substrate.memory.importer import (
    BATCH,
    ImportFailed,
    ImportReport,
    check_records,
    import_jsonl,
    write_checked,
)
from mnemolog.substrate.session import ProjectionBehind, Session
from mnemolog.substrate.tenancy import scope

if TYPE_CHECKING:
    from mnemolog.substrate.api import Substrate
    from mnemolog.substrate.events import (
        MemoryStored,
        Payload,
    )

__all__ = ["Memories"]


class Memories:
    """Memories one by one and in bulk over an open home (`Substrate.memories`)."""

    def __init__(self, sub: Substrate) -> None:
        self.sub = sub

    def store(
        self,
        content: str,
        *,
        namespace: str = "default",
        kind: str = "observation",
        title: str | None = None,
        tags: Sequence[str] = (),
        confidence: float | None = None,
        source: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        created_at: int | None = None,
        last_seen: int | None = None,
        atom_of: str | None = None,
        source_span: Sequence[int] | None = None,
        memory_id: str | None = None,
        project: str = "",
        domains: Sequence[str] = (),
        occurred_at: int | str | None = None,
    ) -> Memory:
        """Store a memory; returns it as recall would show it.

        ``occurred_at`` is when what it says happened, if not now: µs since the
        epoch or ISO 8601 text (`2023-05-08`, `2023-05-08T14:30Z`). The memory's
        date, indexed as words for recall, is this one when given, else its
        ``created_at``.

        ``project`` is canonicalised (a registered name or alias becomes the
        registered name; "" means every project); ``domains`` must be domains
        of the home's vocabulary.

        Under an auto-atomise policy the response also carries `atomise_mode` and
        `atomise_outcome`: "requested" (deferred: a worker will atomise it),
        "atomised" / "skipped_below_threshold" / "skipped_already_atomic" /
        "failed" (synchronous: the curator ran before this returned).

        `memory_id` makes the store idempotent: an id is stored at most once. A
        retry with the same id and the same memory returns the stored one with
        `already_stored: true` (nothing is written); different content under an
        id already stored is refused (BadInput, exit 65). Once the entry is
        durable the store succeeds: a projection that cannot fold it is a
        warning (the memory is then read from the log).
        """
        from mnemolog.substrate.events import MemoryStored

        if memory_id is not None and (not isinstance(memory_id, str) or not looks_like_id(memory_id)):
            raise BadInput(
                f"a memory id is a ULID (26 characters of Crockford base32), found {memory_id!r}",
                field="id",
                found=repr(memory_id)[:80],
            )
        payload = MemoryStored.new(
            content,
            namespace=namespace,
            kind=kind,
            title=title,
            tags=tags,
            confidence=confidence,
            source=source,
            metadata=metadata,
            created_at=created_at,
            last_seen=last_seen,
            atom_of=atom_of,
            source_span=source_span,
            memory_id=memory_id,
            project=project,
            domains=self.sub.knowledge.domains(domains),
            occurred_at=occurred_at,
        )
        self.sub.require_writer()  # after the checks: bad input is refused before any file is touched
        planned: list[tuple[str, str | None]] = []

        def follow(policy: ResolvedPolicy) -> Sequence[Payload]:
            mode, action, extra = self.sub.atomiser.plan(policy, payload)
            planned.append((mode, action))
            if action == "synchronous":
                # Its atoms are embedded, not the source (decompose, then embed).
                s.skip_embedding[payload.id] = "skipped_synchronous_atomise"
            return extra

        try:
            with self.sub.session() as s:
                if payload.project:
                    payload = payload.model_copy(
                        update={"project": self.sub.knowledge.canonical_project(s, payload.project)}
                    )
                existing = s.get(payload.id) if memory_id is not None else None
                if existing is not None:
                    return self._already_stored(existing, payload)
                if payload.atom_of is not None and s.get(payload.atom_of) is None:
                    # An atom's back-pointer is a foreign key (seed 000): a dangling one would
                    # be signed into the log for good, and its derives_from edge could never exist.
                    raise NotFound(
                        f"atom_of names no stored memory: {payload.atom_of} does not exist",
                        field="atom_of",
                        expected="the id of a stored memory",
                        found=payload.atom_of,
                    )
                mem = s.with_warnings(s.write_memory(payload, follow=follow))
                embedded = s.embedded.get(payload.id, "off")
                if embedded != "off":  # only where embeddings are in play, like the atomise_* keys
                    mem["embedding"] = embedded
        except ProjectionBehind as exc:
            return self._from_log(payload, exc)
        mode, action = planned[0]
        if action == "requested":
            self.sub.atomiser.wake()
        if action is None:
            return mem
        if action == "below":
            mem["atomise_mode"], mem["atomise_outcome"] = mode, "skipped_below_threshold"
            return mem
        if action == "requested":
            mem["atomise_mode"], mem["atomise_outcome"] = mode, "requested"
            return mem
        # Synchronous: the curator runs outside the projection lock, before we return.
        extra = self.sub.atomiser.synchronous(mem["id"])
        out = self.get(mem["id"])
        out.update(extra)  # type: ignore[typeddict-item]
        if "embedding" in mem:
            out["embedding"] = mem["embedding"]
            if extra.get("atomise_outcome") != "atomised":
                # Not atomised after all: the source is a memory like any other and gets its vector.
                out["embedding"] = self.sub.embedding.embed_memory(mem["id"])
        if "warnings" in mem:
            out["warnings"] = mem["warnings"]
        return out

    #: What makes two stores of one id the same memory: the fields a client chooses, which are
    #: the payload's but for the id itself, the writer's back-chain, the status the command sets,
    #: times the store may fill in, and an atom's span (its parent decides it).
    @staticmethod
    @functools.cache
    def same_store() -> tuple[str, ...]:
        """The fields compared (read from the payload model when a retry first needs them)."""
        from mnemolog.substrate.events import MemoryStored

        return tuple(
            f
            for f in MemoryStored.model_fields
            if f not in {"id", "touch_prev", "status", "created_at", "last_seen", "source_span"}
        )

    def _already_stored(self, existing: Memory, payload: MemoryStored) -> Memory:
        """A retried store: the stored memory if the retry asks for the same one, else BadInput."""
        original = self.sub.log.entry(existing["stored_seq"])
        first = self.sub.keys.upcast(original.type, original.tv, original.data)
        asked = payload.to_data()
        differ = [f for f in self.same_store() if first.get(f) != asked.get(f)]
        if differ:
            raise BadInput(
                f"memory {payload.id} is already stored with a different {', '.join(differ)}; an id "
                "stores at most one memory (choose a new id, or `update` the memory)",
                field=differ[0],
                id=payload.id,
                differ=differ,
            )
        existing["already_stored"] = True
        return existing

    def _from_log(self, payload: MemoryStored, exc: ProjectionBehind) -> Memory:
        """A durable store whose projection failed: the memory as the log has it, with a warning."""
        self.sub.log.refresh()
        entries = [self.sub.log.entry(r.seq) for r in exc.receipts]
        view = memview.fold_views(entries, [payload.id], keys=self.sub.keys.get)[payload.id]
        # The bundle view knows the log's memory fields; the knowledge loop's are the
        # stored payload's own (a memory just stored was never promoted or referenced).
        view.update(
            project=payload.project,
            domains=list(payload.domains),
            status=payload.status,
            promoted_at=None,
            reference_count=0,
            last_referenced_at=None,
        )
        mem = cast(Memory, {k: view.get(k) for k in MEMORY_FIELDS})
        mem["warnings"] = [exc.message]
        return mem

    def update(
        self,
        memory_id: str,
        *,
        title: str | None = None,
        content: str | None = None,
        kind: str | None = None,
        namespace: str | None = None,
        tags: Sequence[str] | None = None,
        confidence: float | None = None,
        source: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        last_seen: int | None = None,
        project: str | None = None,
        domains: Sequence[str] | None = None,
        occurred_at: int | str | None = None,
    ) -> Memory:
        """Change fields of a memory (a `memory.updated`): given fields replace, metadata keys merge.

        The fields are the `memory.updated` model's (MUTABLE_FIELDS); None means
        "leave as it is", and the model holds every limit a store has.
        `occurred_at` (µs or ISO 8601 text, as for `store`) puts a memory's date
        right: its date words in the index follow. It can be changed, not removed.
        """
        from mnemolog.substrate.events import MemoryUpdated

        given = dict(
            zip(
                MUTABLE_FIELDS,
                (
                    title,
                    content,
                    kind,
                    namespace,
                    tags,
                    confidence,
                    source,
                    metadata,
                    last_seen,
                    project,
                    self.sub.knowledge.domains(domains) if domains is not None else None,
                    occurred_at,
                ),
                strict=True,
            )
        )
        fields = {k: v for k, v in given.items() if v is not None}
        if not fields:
            raise UsageError("nothing to update: give at least one field")
        payload = MemoryUpdated.model_validate({"id": memory_id, **fields})
        self.sub.require_writer()
        with self.sub.session() as s:
            if payload.project:
                payload = payload.model_copy(
                    update={"project": self.sub.knowledge.canonical_project(s, payload.project)}
                )
            before = s.require(memory_id)
            policy = s.policy(payload.namespace or before["namespace"])
            s.check_write(policy, before["namespace"])
            s.append(payload)
            out = s.with_warnings(s.require(memory_id))
            if s.embedded.get(memory_id, "off") != "off":
                out["embedding"] = s.embedded[memory_id]
            return out

    def link(
        self,
        src: str,
        dst: str,
        relation: str = "related_to",
        metadata: Mapping[str, Any] | None = None,
    ) -> Edge:
        """Draw an edge src -> dst (both must exist, and differ).

        An edge src -> dst of this relation that exists already is returned as it
        is, with `already_linked: true` (nothing is written; the CLI exits 1).
        """
        from mnemolog.substrate.events import LinkCreated

        payload = LinkCreated.model_validate(
            {"src": src, "dst": dst, "relation": relation, "metadata": metadata}
        )
        self.sub.require_writer()
        with self.sub.session() as s:
            s.require(payload.src)
            for edge in s.links(payload.src)["outgoing"]:
                if edge["dst"] == payload.dst and edge["relation"] == payload.relation:
                    edge["already_linked"] = True
                    return edge
            return s.with_warnings(s.write_link(payload))

    def unlink(
        self, src: str, dst: str, relation: str = "related_to", reason: str | None = None
    ) -> dict[str, Any]:
        """Take back the edge src -> dst of this relation: a signed `link.removed` (NotFound if none)."""
        from mnemolog.substrate.events import LinkRemoved

        payload = LinkRemoved.model_validate({"src": src, "dst": dst, "relation": relation, "reason": reason})
        self.sub.require_writer()
        with self.sub.session() as s:
            m = s.require(payload.src)
            gone = [
                e
                for e in s.links(payload.src)["outgoing"]
                if e["dst"] == payload.dst and e["relation"] == payload.relation
            ]
            if not gone:
                raise NotFound(
                    f"no {payload.relation} link from {payload.src} to {payload.dst}",
                    src=payload.src,
                    dst=payload.dst,
                    relation=payload.relation,
                )
            s.check_write(s.policy(m["namespace"]), m["namespace"])
            r = s.append(payload)
            return {"removed": gone, "seq": r.seq, "src": payload.src, "dst": payload.dst,
                    "relation": payload.relation}  # fmt: skip

    def archive(self, memory_id: str, reason: str | None = None) -> Memory:
        """Hide a memory from recall (it stays in the log); archiving twice writes nothing."""
        from mnemolog.substrate.events import MemoryArchived

        payload = MemoryArchived(id=memory_id, reason=reason) if isinstance(memory_id, str) else None
        with self.sub.session() as s:
            m = s.require(memory_id)
            if m["archived_at"] is not None or payload is None:
                return m
            s.append(payload)
            return s.require(memory_id)

    def restore(self, memory_id: str, reason: str | None = None) -> Memory:
        """Undo an archive (the operator's or atomisation's) and a supersession (decay's above all).

        A superseded memory becomes active again by a signed `memory.reinstated`
        (the supersession stays in the log); an archived one visible again by
        `memory.restored`; both in one batch when both apply. A visible,
        active memory is returned as it is.
        """
        from mnemolog.substrate.events import MemoryRestored
        from mnemolog.substrate.events.knowledge import MemoryReinstated

        payload = MemoryRestored(id=memory_id, reason=reason) if isinstance(memory_id, str) else None
        reinstate = MemoryReinstated(id=memory_id, reason=reason) if isinstance(memory_id, str) else None
        with self.sub.session() as s:
            m = s.require(memory_id)
            events: list[Payload] = []
            if m["status"] == "superseded" and reinstate is not None:
                events.append(reinstate)
            archived = m["archived_at"] is not None or m["atomisation_archived_at"] is not None
            if archived and payload is not None:
                events.append(payload)
            if not events:
                return m
            s.append_many(events)
            return s.require(memory_id)

    def set_policy(
        self,
        namespace: str,
        unset: Sequence[str] = (),
        *,
        write: str | None = None,
        auto_atomise_mode: str | None = None,
        auto_atomise_threshold_cl100k: int | None = None,
        auto_atomise_max_atom_tokens: int | None = None,
        auto_atomise_max_retries: int | None = None,
        curator: str | None = None,
        retention_days: int | None = None,
    ) -> dict[str, Any]:
        """Set fields of a namespace's own policy (and drop `unset` ones: they inherit again)."""
        from mnemolog.substrate.events import Policy, PolicySet

        check_namespace(namespace, allow_root=True)
        try:
            policy = Policy.model_validate(
                {
                    "write": write,
                    "auto_atomise_mode": auto_atomise_mode,
                    "auto_atomise_threshold_cl100k": auto_atomise_threshold_cl100k,
                    "auto_atomise_max_atom_tokens": auto_atomise_max_atom_tokens,
                    "auto_atomise_max_retries": auto_atomise_max_retries,
                    "curator": curator,
                    "retention_days": retention_days,
                }
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(x) for x in first.get("loc", ()))
            raise BadInput(f"policy: {loc}: {first.get('msg')}", field=loc) from exc
        unknown = [f for f in unset if f not in Policy.model_fields]
        if unknown:
            raise UsageError(f"unknown policy field(s) {unknown}", field="unset")
        changes = policy.model_dump(exclude_none=True)
        if not changes and not unset:
            raise UsageError("nothing to change: give a field to set or to unset")
        payload = PolicySet(namespace=namespace, changes=changes, unset=list(unset))
        self.sub.require_writer()
        with self.sub.session() as s:
            after = {**(s.own_policy(namespace) or {}), **changes}
            for name in unset:
                after.pop(name, None)
            self._check_atomisable(s, namespace, after)
            s.append(payload)
            return s.policy(namespace).to_json()

    @staticmethod
    def _check_atomisable(s: Session, namespace: str, after: dict[str, Any] | None) -> None:
        """Refuse a policy change that leaves this namespace or one below it unable to atomise."""
        own: dict[str, Any] = queries.all_own_policies(s.conn)
        if after is None:
            own.pop(namespace, None)
        else:
            own[namespace] = after
        below = [n for n in own if namespace in governance.ancestors(n)]
        governance.check_atomisable(own, [namespace, *below])

    def clear_policy(self, namespace: str) -> dict[str, Any]:
        """Drop a namespace's own policy: every field inherits again."""
        from mnemolog.substrate.events import PolicySet

        check_namespace(namespace, allow_root=True)
        with self.sub.session() as s:
            if s.own_policy(namespace) is None:
                raise NotFound(f"namespace {namespace!r} has no policy of its own")
            self._check_atomisable(s, namespace, None)
            s.append(PolicySet(namespace=namespace, clear=True))
            return s.policy(namespace).to_json()

    def get_policy(self, namespace: str) -> dict[str, Any]:
        """The effective policy, where each field comes from, and the namespace's own policy."""
        check_namespace(namespace, allow_root=True)
        with self.sub.session() as s:
            out = s.policy(namespace).to_json()
            out["own"] = s.own_policy(namespace)
            return out

    def get(self, memory_id: str) -> Memory:
        """One memory with its links (NotFound, exit 2, for an unknown id)."""
        with self.sub.session() as s:
            m = s.require(memory_id)
            links = s.links(memory_id)
            sc = scope.current()
            if sc is not None and sc.bound:
                # An edge to a memory outside the scope would name it: only edges within it.
                f = scope.everything(sc)
                ends = [e["dst"] for e in links["outgoing"]] + [e["src"] for e in links["incoming"]]
                ok = q.allowed_ids(s.conn, ends, f)
                links = {
                    "outgoing": [e for e in links["outgoing"] if e["dst"] in ok],
                    "incoming": [e for e in links["incoming"] if e["src"] in ok],
                }
            m["links"] = links
            return m

    def import_jsonl(
        self,
        path: str | Path,
        *,
        skip_existing: bool = False,
        progress: bool | None = None,
        batch: int = BATCH,
    ) -> ImportReport:
        """Store every memory of a JSON Lines file (substrate.importer): all checked, then written in batches.

        Raises ImportFailed (exit 65, or 5 for governance) listing the bad
        lines by number; nothing is written then.
        """
        report, warnings = import_jsonl(
            Path(path),
            self.sub,
            self.sub.embedding,
            self.sub.hooks,
            self.sub.atomiser.plan,
            skip_existing=skip_existing,
            batch=batch,
            progress=progress,
            normalise=self._imported_knowledge,
        )
        if report["atomisation_requested"]:
            self.sub.atomiser.wake()
        if warnings:
            report["warnings"] = warnings
        return report

    def _imported_knowledge(self, s: Session) -> Callable[[MemoryStored], MemoryStored]:
        """Imported lines' project and domains, as `store` makes them (see importer.Normalise);
        the project registry is read once for the whole check."""
        registry = self.sub.knowledge.registry(s)

        def made(p: MemoryStored) -> MemoryStored:
            project = self.sub.knowledge.canonical_project(s, p.project, registry) if p.project else ""
            return p.model_copy(update={"project": project, "domains": self.sub.knowledge.domains(p.domains)})

        return made

    def import_from(
        self,
        fmt: str,
        path: str | Path,
        *,
        trust: bool = False,
        dry_run: bool = False,
        progress: bool | None = None,
        batch: int = BATCH,
    ) -> dict[str, Any]:
        """Store the items of another tool's export (substrate.importers) through the JSON Lines path.

        Candidates unless `trust` (then active). Ids derive from each item's
        source pointer and stored ids are skipped, so a re-import adds
        nothing. `dry_run` checks everything and returns the mapping
        (`mapping`: one entry per item, `exists` for those stored already)
        without writing. ImportFailed (65, or 5 for governance) names each
        bad item by its number and source; nothing is written then.
        """
        path = Path(path)
        from mnemolog.substrate.importers import read_source, relation_links

        records = read_source(fmt, path)
        status = "active" if trust else "candidate"
        checked = check_records(
            records,
            self.sub,
            self.sub.hooks,
            skip_existing=True,
            status=status,
            normalise=self._imported_knowledge,
        )
        if checked.bad_count:
            for b in checked.bad:
                src = records[b["line"] - 1].get("source")
                b["message"] = f"item {b['line']} ({src}): {b['message']}"
            raise ImportFailed(path, checked.bad, checked.bad_count)
        # basic-memory relations between notes of this import become links (related_to, the
        # note's relation type in the link's metadata); link() skips an edge drawn already.
        links = relation_links(records) if fmt == "basic-memory" else []
        if dry_run:
            new = {p.id for _n, p in checked.payloads}
            return {
                "format": fmt,
                "file": str(path),
                "status": status,
                "dry_run": True,
                "items": len(records),
                "new": len(new),
                "skipped_existing": checked.skipped,
                "mapping": [
                    {
                        "id": r["id"],
                        "namespace": r["namespace"],
                        "kind": r.get("kind", "observation"),
                        "title": r.get("title"),
                        "source": r.get("source"),
                        "created_at": r.get("created_at"),
                        "tags": r.get("tags", []),
                        "content": r["content"][:200],
                        "exists": r["id"] not in new,
                    }
                    for r in records
                ],
                "links": [{"src": src, "dst": dst, "type": kind} for src, dst, kind in links],
            }
        report, warnings = write_checked(
            path,
            checked,
            self.sub,
            self.sub.embedding,
            self.sub.hooks,
            self.sub.atomiser.plan,
            batch=batch,
            progress=progress,
        )
        if report["atomisation_requested"]:
            self.sub.atomiser.wake()
        drawn = 0
        for src, dst, kind in links:
            edge = self.link(src, dst, "related_to", {"type": kind, "from": "basic-memory"})
            drawn += "already_linked" not in edge
        out: dict[str, Any] = {"format": fmt, "status": status, "dry_run": False, **report, "links": drawn}
        out["items"] = out.pop("lines")
        if warnings:
            out["warnings"] = warnings
        return out

    def export_memories(self, fmt: str, out: str | Path, *, namespace: str | None = None) -> dict[str, Any]:
        """Write the active memories (of `namespace` and below) as `jsonl` or a `basic-memory` folder.

        jsonl: one file in exactly the format `import` reads, replaced
        atomically (an existing OUT must be a regular file). basic-memory: a
        folder of notes, built beside OUT and renamed into place, so OUT
        appears whole or not at all (an existing OUT must be an empty folder).
        """
        from mnemolog.substrate.importers.export import EXPORT_FORMATS, basic_memory_notes, jsonl_bytes

        if fmt not in EXPORT_FORMATS:
            raise UsageError(f"unknown export format {fmt!r}; one of {', '.join(EXPORT_FORMATS)}", field="to")
        out = Path(out)
        f = self.sub.retrieval.filters(namespace, True, (), (), False, (DEFAULT_STATUS,), None, ())
        with self.sub.session() as s:  # one session: the pages are of one state of the home
            memories = self.sub.retrieval.listed(s, f)
        memories.reverse()  # oldest first, the order they were stored in
        try:
            if fmt == "jsonl":
                if out.is_dir():
                    raise UsageError(f"{out} is a directory; a jsonl export writes one file", file=str(out))
                fsio.atomic_write(out, jsonl_bytes(memories))
                files = 1
            else:
                files = _write_folder(out, basic_memory_notes(memories))
        except fsio.NotReplaceable as exc:
            raise UsageError(f"{out} {exc.strerror}", file=str(out)) from exc
        except OSError as exc:
            raise UsageError(f"cannot write {out}: {exc.strerror}", file=str(out)) from exc
        return {
            "format": fmt,
            "out": str(out),
            "namespace": namespace,
            "memories": len(memories),
            "files": files,
        }


def _write_folder(out: Path, notes: list[tuple[str, bytes]]) -> int:
    """Write `notes` (relative paths) as the folder `out`, which must be absent or empty.

    The notes go into a hidden sibling first and the folder is renamed into
    place, so a failure (a full disk) leaves no half-written export.
    """
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UsageError(
            f"{out} exists and is not a folder; a basic-memory export writes a folder", file=str(out)
        )
    if out.is_dir() and any(out.iterdir()):
        raise UsageError(
            f"{out} is not empty; a basic-memory export writes a new or empty folder", file=str(out)
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    # A fresh name (mkdtemp), never a guessed one that might be someone's folder to delete;
    # mkdtemp makes it 0700, so the export is private to its owner until they share it.
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        for rel, data in notes:
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as fh:
                fh.write(data)
                os.fsync(fh.fileno())
        if out.is_dir():
            out.rmdir()  # empty, checked above
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsio.fsync_dir(out.parent)
    return len(notes)
