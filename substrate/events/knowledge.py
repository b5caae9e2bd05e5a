"""Knowledge-loop events: projects, trusted state, captured interactions, extraction, triage,
promotion and rejection, reinforcement and supersession.

Everything a model produced is in the event that used it (raw replies,
prompt fingerprints, token counts), and every threshold that decided
something is recorded beside the decision, so replay never calls a model
and an auditor sees which settings were in force. Candidates themselves are
`memory.stored` events with status "candidate", written in the same batch as
the `candidate.extracted` that names them.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from mnemolog.eventlog.errors import BadInput
from mnemolog.eventlog.vocabulary import knowledge as vk
from mnemolog.eventlog.vocabulary.knowledge import check_category, check_project_name
from mnemolog.substrate.events.base import Chained, Payload
from mnemolog.substrate.events.limits import (
    MAX_CONTENT_BYTES,
    MAX_SOURCE_CHARS,
    check_content,
    check_text,
)
from mnemolog.substrate.events.memory import DomainsField, OccurredAtField, OptionalReasonField, ProjectField

__all__ = [
    "MAX_KEY_CHARS",
    "MAX_MESSAGE_CHARS",
    "MAX_RESPONSE_BYTES",
    "MAX_VALUE_CHARS",
    "CandidateExtracted",
    "CandidateTriaged",
    "ExtractionFailed",
    "InteractionCaptured",
    "MemoryPromoted",
    "MemoryReinforced",
    "MemoryRejected",
    "MemorySuperseded",
    "ProjectAliased",
    "ProjectRegistered",
    "StateInvalidated",
    "StateSet",
    "TriageFailed",
]

MAX_KEY_CHARS: Final = 200
MAX_VALUE_CHARS: Final = 4096
MAX_LABEL_CHARS: Final = 200  # client, session, extractor and model names
#: Each raw model reply kept in an event (a reply longer than this is cut and marked).
MAX_RESPONSE_BYTES: Final = MAX_CONTENT_BYTES
MAX_RESPONSES: Final = 16
MAX_WARNINGS: Final = 64
MAX_CANDIDATES_PER_EVENT: Final = 64
#: A failure's message (longer than a reason: it may quote the model).
MAX_MESSAGE_CHARS: Final = 8192


def _label(value: Any, what: str) -> Any:
    return check_text(value, what, MAX_LABEL_CHARS)


def _reason(value: Any) -> Any:
    return check_text(value, "reason")


def _message(value: Any) -> Any:
    return check_text(value, "message", MAX_MESSAGE_CHARS)


ReasonField = Annotated[str, BeforeValidator(_reason)]
MessageField = Annotated[str, BeforeValidator(_message)]


def clip_response(text: str) -> str:
    """A model reply as an event keeps it: whole, or cut at MAX_RESPONSE_BYTES with the cut marked."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_RESPONSE_BYTES:
        return text
    head = data[: MAX_RESPONSE_BYTES - 64].decode("utf-8", "ignore")
    return f"{head}\n[... {len(data)} bytes in all; cut ...]"


class _ModelOutput(Chained):
    """What a curator call leaves behind: who answered, with which instructions, and what it said."""

    responses: list[str] = Field(default_factory=list)
    attempts: int = Field(default=1, ge=0, le=64)
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    warnings: list[str] = Field(default_factory=list)
    # Who started the call: "cron" for a long-lived process's scheduled run. Absent (the
    # payload drops None) when a person or an agent asked, so those entries are unchanged.
    trigger: Literal["cron"] | None = None

    @field_validator("responses", mode="before", check_fields=False)
    @classmethod
    def _responses(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            if len(value) > MAX_RESPONSES:
                raise ValueError(f"at most {MAX_RESPONSES} responses")
            return [clip_response(r) if isinstance(r, str) else r for r in value]
        return value

    @field_validator("warnings", mode="before", check_fields=False)
    @classmethod
    def _warnings(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return [check_text(w, "warnings") for w in list(value)[:MAX_WARNINGS]]
        return value


# -- projects ---------------------------------------------------------------------------


class ProjectRegistered(Payload):
    """`project.registered` tv 1: a project name, with aliases and a description."""

    TYPE = vk.PROJECT_REGISTERED
    TV = 1

    name: str
    aliases: list[str] = Field(default_factory=list)
    description: str = ""

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, name: Any) -> Any:
        return check_project_name(name, allow_empty=False)

    @field_validator("aliases", mode="before")
    @classmethod
    def _aliases(cls, aliases: Any) -> Any:
        if not isinstance(aliases, list | tuple):
            return aliases
        return [check_project_name(a, allow_empty=False, field_name="alias") for a in aliases]

    @field_validator("description", mode="before")
    @classmethod
    def _description(cls, text: Any) -> Any:
        return check_text(text, "description") or ""


class ProjectAliased(Payload):
    """`project.aliased` tv 1: ``alias`` now names project ``name`` (old rows resolve too)."""

    TYPE = vk.PROJECT_ALIASED
    TV = 1

    name: str
    alias: str

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, name: Any) -> Any:
        return check_project_name(name, allow_empty=False)

    @field_validator("alias", mode="before")
    @classmethod
    def _alias(cls, alias: Any) -> Any:
        return check_project_name(alias, allow_empty=False, field_name="alias")


# -- trusted project state --------------------------------------------------------------


class _StateKey(Payload):
    project: str
    category: str
    key: str

    @field_validator("project", mode="before", check_fields=False)
    @classmethod
    def _p(cls, project: Any) -> Any:
        return check_project_name(project, allow_empty=False)

    @field_validator("category", mode="before", check_fields=False)
    @classmethod
    def _c(cls, category: Any) -> Any:
        return check_category(category)

    @field_validator("key", mode="before", check_fields=False)
    @classmethod
    def _k(cls, key: Any) -> Any:
        text = check_text(key, "key", MAX_KEY_CHARS)
        if text is None or not text.strip():
            raise ValueError("a state key is 1..200 characters of text")
        return text


class StateSet(_StateKey):
    """`state.set` tv 1: upsert of one trusted entry (project, category, key) = value."""

    TYPE = vk.STATE_SET
    TV = 1

    value: str
    source: str | None = None

    @field_validator("value", mode="before")
    @classmethod
    def _value(cls, value: Any) -> Any:
        text = check_text(value, "value", MAX_VALUE_CHARS)
        if text is None or not text.strip():
            raise ValueError(f"a state value is 1..{MAX_VALUE_CHARS} characters of text")
        return text

    @field_validator("source", mode="before")
    @classmethod
    def _source(cls, source: Any) -> Any:
        return check_text(source, "source", MAX_SOURCE_CHARS)


class StateInvalidated(_StateKey):
    """`state.invalidated` tv 1: the entry no longer holds (its history stays)."""

    TYPE = vk.STATE_INVALIDATED
    TV = 1

    reason: OptionalReasonField = None


# -- capture ----------------------------------------------------------------------------


class InteractionCaptured(Chained):
    """`interaction.captured` tv 3: one prompt and response, as the agent saw them.

    tv 3 added `occurred_at`: when the interaction happened, if not when it was
    captured (the candidates extracted from it are dated by it).

    Capture changes no memory, state or chunk by itself; ``reinforce`` says
    whether the capture asked for reinforcement (whose events follow it).
    """

    TYPE = vk.INTERACTION_CAPTURED
    TV = 3

    id: str
    namespace: str = "default"
    project: ProjectField = ""
    prompt: str
    response: str = ""
    client: str | None = None
    session: str | None = None
    context_id: str | None = None
    reinforce: bool = False
    occurred_at: OccurredAtField = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt(cls, prompt: Any) -> Any:
        return check_content(prompt, "prompt")

    @field_validator("response", mode="before")
    @classmethod
    def _response(cls, response: Any) -> Any:
        if response in (None, ""):
            return ""
        return check_content(response, "response")

    @field_validator("client", "session", "context_id", mode="before")
    @classmethod
    def _labels(cls, value: Any) -> Any:
        return _label(value, "client/session/context_id")


# -- extraction -------------------------------------------------------------------------


class CandidateExtracted(_ModelOutput):
    """`candidate.extracted` tv 1: an extraction's answer (possibly no candidate at all).

    The candidates are the `memory.stored` events (status candidate) of the
    same batch; ``candidate_ids`` names them, in the extractor's order, and
    ``candidates`` keeps what the extractor said about each (layer, rule,
    source side) beside the memory fields.
    """

    TYPE = vk.CANDIDATE_EXTRACTED
    TV = 2

    interaction_id: str
    candidate_ids: list[str] = Field(default_factory=list, max_length=MAX_CANDIDATES_PER_EVENT)
    candidates: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_CANDIDATES_PER_EVENT)
    extractor: str
    version: str
    model: str | None = None
    prompt_sha256: str
    domains: list[str] = Field(default_factory=list)

    @field_validator("extractor", "version", "model", "prompt_sha256", mode="before")
    @classmethod
    def _labels(cls, value: Any) -> Any:
        return _label(value, "extractor/version/model/prompt_sha256")

    @model_validator(mode="after")
    def _ids_match(self) -> CandidateExtracted:
        if [c.get("id") for c in self.candidates] != self.candidate_ids:
            raise BadInput(
                "candidate.extracted: candidates must list the candidate_ids, in order", field="candidates"
            )
        return self


class ExtractionFailed(_ModelOutput):
    """`extraction.failed` tv 1: no usable answer; the interaction stays pending."""

    TYPE = vk.EXTRACTION_FAILED
    TV = 2

    interaction_id: str
    extractor: str
    version: str
    model: str | None = None
    prompt_sha256: str
    reason: str
    message: MessageField

    @field_validator("extractor", "version", "model", "prompt_sha256", "reason", mode="before")
    @classmethod
    def _labels(cls, value: Any) -> Any:
        return _label(value, "extractor/version/model/prompt_sha256/reason")


# -- triage -----------------------------------------------------------------------------


class _Triaged(_ModelOutput):
    """The fields of every version of `candidate.triaged`."""

    id: str
    triager: str
    version: str
    model: str | None = None
    prompt_sha256: str
    verdict: vk.Verdict
    confidence: float = Field(ge=0.0, le=1.0)
    reason: ReasonField
    project: ProjectField = ""
    domains: DomainsField = Field(default_factory=list)
    conflicts_with: str | None = None
    duplicate_of: str | None = None
    thresholds: dict[str, Any] = Field(default_factory=dict)
    action: vk.Action
    why: ReasonField

    @field_validator("triager", "version", "model", "prompt_sha256", mode="before")
    @classmethod
    def _labels(cls, value: Any) -> Any:
        return _label(value, "triager/version/model/prompt_sha256")


class CandidateTriagedV1(_Triaged):
    """`candidate.triaged` tv 1 (written until tv 2 existed): no embedding similarity.

    Kept to document the old shape; read through the vocabulary's upcaster.
    """

    TYPE = vk.CANDIDATE_TRIAGED
    TV = 1
    WRITABLE = False


class CandidateTriaged(_Triaged):
    """`candidate.triaged` tv 2: a verdict, the thresholds it met, and what it led to.

    ``action`` is the decision (promote, reject, wait) and ``why`` its reason;
    a promotion or rejection it led to follows in the same batch.
    ``similar_to`` and ``similarity`` are the active memory whose embedding is
    nearest the candidate's and their cosine (None when the home does not
    embed, or either has no vector yet); at or above the
    ``duplicate_similarity`` threshold it is the ``duplicate_of``.
    ``dry_run`` marks nothing: a dry run writes no event at all.
    """

    TYPE = vk.CANDIDATE_TRIAGED
    TV = 3

    similarity: float | None = Field(default=None, ge=-1.0, le=1.0)
    similar_to: str | None = None


class TriageFailed(_ModelOutput):
    """`triage.failed` tv 1: no verdict could be had; the candidate stays queued and is counted."""

    TYPE = vk.TRIAGE_FAILED
    TV = 2

    id: str
    triager: str
    version: str
    model: str | None = None
    prompt_sha256: str
    reason: str
    message: MessageField

    @field_validator("triager", "version", "model", "prompt_sha256", "reason", mode="before")
    @classmethod
    def _labels(cls, value: Any) -> Any:
        return _label(value, "triager/version/model/prompt_sha256/reason")


class MemoryPromoted(Chained):
    """`memory.promoted` tv 1: a candidate becomes active, by triage or by a person.

    ``project`` and ``domains`` are the memory's from now on (a triager may
    move a candidate to another project or retag it).
    """

    TYPE = vk.MEMORY_PROMOTED
    TV = 1

    id: str
    by: Literal["triage", "person"]
    project: ProjectField = ""
    domains: DomainsField = Field(default_factory=list)
    reason: OptionalReasonField = None


class MemoryRejected(Chained):
    """`memory.rejected` tv 1: a candidate becomes invalid, by triage or by a person."""

    TYPE = vk.MEMORY_REJECTED
    TV = 1

    id: str
    by: Literal["triage", "person"]
    reason: str

    @field_validator("reason", mode="before")
    @classmethod
    def _reason(cls, value: Any) -> Any:
        text = check_text(value, "reason")
        if text is None or not text.strip():
            raise ValueError("a rejection needs a reason")
        return text


# -- reinforcement and supersession ------------------------------------------------------


class MemoryReinforced(Chained):
    """`memory.reinforced` tv 1: a captured response echoed the memory.

    The match (terms shared, the memory's term count, short or long mode),
    the confidence before and after, and the matcher's thresholds are kept.
    """

    TYPE = vk.MEMORY_REINFORCED
    TV = 1

    id: str
    interaction_id: str
    overlap: int = Field(ge=0)
    size: int = Field(ge=1)
    mode: Literal["short", "long"]
    confidence_before: float = Field(ge=0.0, le=1.0)
    confidence: float = Field(ge=0.0, le=1.0)
    policy: dict[str, Any] = Field(default_factory=dict)


class MemorySuperseded(Chained):
    """`memory.superseded` tv 1: an active memory no longer holds.

    ``by`` is "decay" (with the decayed ``confidence``, the clock ``now`` it
    was computed at, and the decay ``policy``), "person", or "memory" (with
    ``superseded_by``, the memory that replaces it).
    """

    TYPE = vk.MEMORY_SUPERSEDED
    TV = 1

    id: str
    by: Literal["decay", "person", "memory"]
    reason: OptionalReasonField = None
    superseded_by: str | None = None
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    now: int | None = None
    policy: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _coherent(self) -> MemorySuperseded:
        # An after-validator runs outside the base class's error mapping: raise the user's error.
        if self.by == "memory" and not self.superseded_by:
            raise BadInput("a supersession by a memory names it (superseded_by)", field="superseded_by")
        if self.by == "decay" and (self.confidence is None or self.now is None):
            raise BadInput("a supersession by decay records the decayed confidence and the clock", field="by")
        if self.by != "decay" and not (self.reason and self.reason.strip()):
            raise BadInput("a supersession by a person or a memory says why (reason)", field="reason")
        return self


class MemoryReinstated(Chained):
    """`memory.reinstated` tv 1: a person brings a superseded memory back; it is active again.

    It undoes a supersession (by decay above all) without rewriting it: the
    log keeps both. Bringing a memory back is a use of it, so it counts as a
    reference, and decay leaves a referenced memory alone.
    """

    TYPE = vk.MEMORY_REINSTATED
    TV = 1

    id: str
    by: Literal["person"] = "person"
    reason: OptionalReasonField = None
