"""Memory events: stored, updated, archived, restored, and links between memories.

Every limit a memory has is checked here, by the field types its payloads
are declared with (the checks themselves are events.limits'), so a store,
an update, an atom or an imported note are held to the same rules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

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
    check_occurred_at,
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


def _given(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`check` for an update's field, where None means "not given" and stays None."""

    def given(value: Any) -> Any:
        return None if value is None else check(value)

    return given


# The memory fields, each with its check (every limit lives in events.limits); an update's
# variant passes None through.
NamespaceField = Annotated[str, BeforeValidator(check_namespace)]
KindField = Annotated[Kind, BeforeValidator(check_kind)]
TitleField = Annotated[str | None, BeforeValidator(check_title)]
ContentField = Annotated[str, BeforeValidator(check_content)]
TagsField = Annotated[list[str], BeforeValidator(check_tags)]
ConfidenceField = Annotated[float | None, BeforeValidator(check_confidence)]
SourceField = Annotated[str | None, BeforeValidator(check_source)]
MetadataField = Annotated[dict[str, Any], BeforeValidator(check_metadata)]
#: A project name; "" is a memory of no project.
ProjectField = Annotated[str, BeforeValidator(check_project_name)]
DomainsField = Annotated[list[str], BeforeValidator(check_domain_names)]
#: When what a memory says happened (µs, UTC), when not when it was stored.
OccurredAtField = Annotated[int | None, BeforeValidator(check_occurred_at)]
OptionalReasonField = Annotated[str | None, BeforeValidator(lambda r: check_text(r, "reason"))]

GivenNamespace = Annotated[str | None, BeforeValidator(_given(check_namespace))]
GivenKind = Annotated[Kind | None, BeforeValidator(_given(check_kind))]
GivenContent = Annotated[str | None, BeforeValidator(_given(check_content))]
GivenTags = Annotated[list[str] | None, BeforeValidator(_given(check_tags))]
GivenMetadata = Annotated[dict[str, Any] | None, BeforeValidator(_given(check_metadata))]
GivenProject = Annotated[str | None, BeforeValidator(_given(check_project_name))]
GivenDomains = Annotated[list[str] | None, BeforeValidator(_given(check_domain_names))]


class MemoryStored(Chained):
    """`memory.stored` tv 5: a new memory (also every atom, which carries atom_of).

    tv 5 added `occurred_at`: when what the memory says happened, if not when
    it was stored (its date is indexed as words in its place). Older payloads
    read with none.

    tv 4 carries the content fields sealed (eventlog.sealing; the model holds
    them in clear, Session.append seals them).

    tv 2 added the back-chain (`touch_prev`); tv 3 the knowledge fields: the
    canonical `project` ("" = every project), the `domains` it is tagged
    with, and `status` ("candidate" for a candidate an extraction proposed,
    else "active"). Older payloads read as active, project-less and untagged.
    """

    TYPE = v.MEMORY_STORED
    TV = 5

    id: str
    namespace: NamespaceField
    kind: KindField = "observation"
    title: TitleField = None
    content: ContentField
    tags: TagsField = Field(default_factory=list)
    confidence: ConfidenceField = None
    source: SourceField = None
    metadata: MetadataField = Field(default_factory=dict)
    created_at: int | None = None  # µs; only when the memory predates its store (imports)
    last_seen: int | None = None
    atom_of: str | None = None
    source_span: list[int] | None = None  # [start, end) of the atom's text in the parent
    project: ProjectField = ""
    domains: DomainsField = Field(default_factory=list)
    status: Literal["candidate", "active"] = "active"
    occurred_at: OccurredAtField = None

    @classmethod
    def new(cls, content: str, *, memory_id: str | None = None, **fields: Any) -> MemoryStored:
        """A store's payload, with a new id unless `memory_id` is given; raises what a limit refuses.

        `fields` are the model's own, by the names `Substrate.store` takes (a test holds `store`
        to this model's field list): nothing here declares them again.
        """
        data: dict[str, Any] = {"namespace": "default", **fields}
        data.update(id=memory_id or new_id(), content=content, title=data.get("title") or None)
        for name in ("source_span", "domains"):
            if data.get(name) is not None:
                data[name] = list(data[name])
        return cls.model_validate(data)


class MemoryUpdated(Chained):
    """`memory.updated` tv 5: fields given replace; metadata keys merge (null removes).

    tv 5 may change `occurred_at` (when what the memory says happened; its date words follow).

    tv 4 carries the content fields it changes sealed (eventlog.sealing).

    tv 3 may also change `project` and `domains` (older updates could not).

    Its fields besides `id` and `migration_run` are exactly the vocabulary's
    MUTABLE_FIELDS: what `Substrate.update` accepts comes from here.
    """

    TYPE = v.MEMORY_UPDATED
    TV = 5

    id: str
    title: TitleField = None
    content: GivenContent = None
    kind: GivenKind = None
    namespace: GivenNamespace = None
    tags: GivenTags = None
    confidence: ConfidenceField = None
    source: SourceField = None
    metadata: GivenMetadata = None
    last_seen: int | None = None
    project: GivenProject = None
    domains: GivenDomains = None
    occurred_at: OccurredAtField = None
    migration_run: str | None = None  # set by a log-backed migration; rollbacks undo these


class _WithReason(Chained):
    """An event about one memory with an optional reason (short text)."""

    id: str
    reason: OptionalReasonField = None


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
    relation: Annotated[Relation, BeforeValidator(check_relation)]
    metadata: MetadataField = Field(default_factory=dict)

    @model_validator(mode="after")
    def _not_to_itself(self) -> LinkCreated:
        if self.src == self.dst:
            # An edge from a memory to itself relates nothing (and a supersedes loop hides it).
            raise BadInput(f"a link from {self.src} to itself relates nothing", field="dst", found=self.dst)
        return self
