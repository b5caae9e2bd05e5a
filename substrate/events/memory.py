"""Memory events: stored, updated, archived, restored, and links between memories.

Every limit a memory has is checked here, in the models' validators, so a
store, an update, an atom or an imported note are held to the same rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from mnemolog.eventlog.errors import BadInput
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.eventlog.vocabulary.knowledge import check_project_name
from mnemolog.substrate.events.base import Chained
from mnemolog.substrate.events.limits import (
    check_confidence,
    check_content,
    check_domain_names,
    check_kind,
    check_metadata,
    check_namespace,
    check_relation,
    check_source,
    check_tags,
    check_text,
    check_title,
)
from mnemolog.substrate.ids import new_id

__all__ = [
    "Kind",
    "LinkCreated",
    "MemoryArchived",
    "MemoryRestored",
    "MemoryStored",
    "MemoryUpdated",
    "Relation",
]

Kind = Literal["observation", "user", "feedback", "project", "decision", "reference", "knowledge"]
Relation = Literal["related_to", "supersedes", "contradicts", "derived_from", "derives_from", "reflects_on"]


class _MemoryFields(Chained):
    """The checks shared by a store and an update (in an update, None means "not given")."""

    PARTIAL: ClassVar[bool] = False

    @field_validator("namespace", mode="before", check_fields=False)
    @classmethod
    def _namespace(cls, ns: Any) -> Any:
        return None if ns is None and cls.PARTIAL else check_namespace(ns)

    @field_validator("kind", mode="before", check_fields=False)
    @classmethod
    def _kind(cls, kind: Any) -> Any:
        return None if kind is None and cls.PARTIAL else check_kind(kind)

    @field_validator("title", mode="before", check_fields=False)
    @classmethod
    def _title(cls, title: Any) -> Any:
        return check_title(title)

    @field_validator("content", mode="before", check_fields=False)
    @classmethod
    def _content(cls, content: Any) -> Any:
        return None if content is None and cls.PARTIAL else check_content(content)

    @field_validator("tags", mode="before", check_fields=False)
    @classmethod
    def _tags(cls, tags: Any) -> Any:
        return None if tags is None and cls.PARTIAL else check_tags(tags)

    @field_validator("confidence", mode="before", check_fields=False)
    @classmethod
    def _confidence(cls, c: Any) -> Any:
        return check_confidence(c)

    @field_validator("source", mode="before", check_fields=False)
    @classmethod
    def _source(cls, source: Any) -> Any:
        return check_source(source)

    @field_validator("metadata", mode="before", check_fields=False)
    @classmethod
    def _metadata(cls, meta: Any) -> Any:
        return None if meta is None and cls.PARTIAL else check_metadata(meta)

    @field_validator("project", mode="before", check_fields=False)
    @classmethod
    def _project(cls, project: Any) -> Any:
        return None if project is None and cls.PARTIAL else check_project_name(project)

    @field_validator("domains", mode="before", check_fields=False)
    @classmethod
    def _domains(cls, domains: Any) -> Any:
        return None if domains is None and cls.PARTIAL else check_domain_names(domains)


class MemoryStored(_MemoryFields):
    """`memory.stored` tv 4: a new memory (also every atom, which carries atom_of).

    tv 4 carries the content fields sealed (eventlog.sealing; the model holds
    them in clear, Session.append seals them).

    tv 2 added the back-chain (`touch_prev`); tv 3 the knowledge fields: the
    canonical `project` ("" = every project), the `domains` it is tagged
    with, and `status` ("candidate" for a candidate an extraction proposed,
    else "active"). Older payloads read as active, project-less and untagged.
    """

    TYPE = v.MEMORY_STORED
    TV = 4

    id: str
    namespace: str
    kind: Kind = "observation"
    title: str | None = None
    content: str
    tags: list[str] = Field(default_factory=list)
    confidence: float | None = None
    source: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: int | None = None  # µs; only when the memory predates its store (imports)
    last_seen: int | None = None
    atom_of: str | None = None
    source_span: list[int] | None = None  # [start, end) of the atom's text in the parent
    project: str = ""
    domains: list[str] = Field(default_factory=list)
    status: Literal["candidate", "active"] = "active"

    @classmethod
    def new(
        cls,
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
        status: str = "active",
    ) -> MemoryStored:
        """A store's payload, with a new id unless one is given; raises what a limit refuses."""
        return cls.model_validate(
            {
                "id": memory_id or new_id(),
                "namespace": namespace,
                "kind": kind,
                "title": title or None,
                "content": content,
                "tags": tags,
                "confidence": confidence,
                "source": source,
                "metadata": metadata,
                "created_at": created_at,
                "last_seen": last_seen,
                "atom_of": atom_of,
                "source_span": list(source_span) if source_span is not None else None,
                "project": project,
                "domains": list(domains),
                "status": status,
            }
        )


class MemoryUpdated(_MemoryFields):
    """`memory.updated` tv 4: fields given replace; metadata keys merge (null removes).

    tv 4 carries the content fields it changes sealed (eventlog.sealing).

    tv 3 may also change `project` and `domains` (older updates could not).

    Its fields besides `id` and `migration_run` are exactly the vocabulary's
    MUTABLE_FIELDS: what `Substrate.update` accepts comes from here.
    """

    TYPE = v.MEMORY_UPDATED
    TV = 4
    PARTIAL = True

    id: str
    title: str | None = None
    content: str | None = None
    kind: Kind | None = None
    namespace: str | None = None
    tags: list[str] | None = None
    confidence: float | None = None
    source: str | None = None
    metadata: dict[str, Any] | None = None
    last_seen: int | None = None
    project: str | None = None
    domains: list[str] | None = None
    migration_run: str | None = None  # set by a log-backed migration; rollbacks undo these


class _WithReason(Chained):
    """An event about one memory with an optional reason (short text)."""

    id: str
    reason: str | None = None

    @field_validator("reason", mode="before")
    @classmethod
    def _reason(cls, reason: Any) -> Any:
        return check_text(reason, "reason")


class MemoryArchived(_WithReason):
    """`memory.archived` tv 2; `by` says whose signal it is (vocabulary.ARCHIVE_BY)."""

    TYPE = v.MEMORY_ARCHIVED
    TV = 2

    by: Literal["operator", "atomisation", "reatomisation"] = "operator"
    atomised_into: int | None = None


class MemoryRestored(_WithReason):
    """`memory.restored` tv 2: both archive signals cleared."""

    TYPE = v.MEMORY_RESTORED
    TV = 2


class LinkCreated(Chained):
    """`link.created` tv 2: an edge; derives_from from an atom to its parent is the signed edge."""

    TYPE = v.LINK_CREATED
    TV = 2

    src: str
    dst: str
    relation: Relation
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("relation", mode="before")
    @classmethod
    def _relation(cls, relation: Any) -> Any:
        return check_relation(relation)

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata(cls, meta: Any) -> Any:
        return check_metadata(meta)

    @model_validator(mode="after")
    def _not_to_itself(self) -> LinkCreated:
        if self.src == self.dst:
            # An edge from a memory to itself relates nothing (and a supersedes loop hides it).
            raise BadInput(f"a link from {self.src} to itself relates nothing", field="dst", found=self.dst)
        return self
