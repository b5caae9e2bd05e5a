"""The knowledge loop's words: knowledge domains, state categories, verdicts, project names.

One home for the closed sets the loop writes into events (and the checks that
keep anything else out), in the bottom layer so the curators (which tag
domains), the projections (which fold statuses) and the substrate (which
validates commands) all read the same tuples. The event names, statuses and
status transitions are the vocabulary's (re-exported here).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final, Literal

from mnemolog.eventlog.errors import BadInput, UsageError

# The event names, statuses and status transitions live in the vocabulary (standard library
# only, for the offline verifier); they are re-exported here beside the loop's other words.
from mnemolog.eventlog.vocabulary.events import (
    CANDIDATE_EXTRACTED,
    CANDIDATE_TRIAGED,
    DEFAULT_STATUS,
    EXTRACTION_FAILED,
    INTERACTION_CAPTURED,
    MEMORY_PROMOTED,
    MEMORY_REINFORCED,
    MEMORY_REINSTATED,
    MEMORY_REJECTED,
    MEMORY_SUPERSEDED,
    PROJECT_ALIASED,
    PROJECT_REGISTERED,
    STATE_INVALIDATED,
    STATE_SET,
    STATUSES,
    TRANSITIONS,
    TRIAGE_FAILED,
    Status,
    status_after,
)

#: Kinds whose global (project-less) memories describe the person rather than a
#: project: identity and preferences. Reinforcement always considers them, and
#: context packs put them in their own tier.
PERSONAL_KINDS: Final[tuple[str, ...]] = ("user", "feedback")

# -- knowledge domains ------------------------------------------------------------------

#: The built-in domains of cross-project knowledge, each with what qualifies.
#: A home extends the list by configuration (``[knowledge] domains = [...]``).
DOMAIN_DESCRIPTIONS: Final[dict[str, str]] = {
    "physics": "wave and optical physics, diffraction, heat transfer, thermal effects",
    "materials": "material behaviour in use: expansion, stress limits, fatigue, ageing",
    "optics": "lens and mirror design, aberrations, optical tolerancing",
    "mechanics": "structures, supports, kinematics, vibration, finite-element insight",
    "manufacturing": "polishing, grinding, machining, process control and yield",
    "metrology": "measurement systems, interferometry, calibration, uncertainty",
    "controls": "feedback loops, tuning, servo and force control, real-time limits",
    "software": "architecture, testing, deployment, operations, tooling",
    "math": "numerical methods, optimisation, statistics, estimation",
    "finance": "cost models, procurement, budgets, pricing",
}
DOMAINS: Final[tuple[str, ...]] = tuple(DOMAIN_DESCRIPTIONS)

#: What a domain name may look like (also for configured extensions).
DOMAIN_NAME: Final = re.compile(r"[a-z][a-z0-9_-]{0,31}")

# -- projects -------------------------------------------------------------------------

#: ASCII only, so letter case folds the same in Python (``str.lower``) and SQL
#: (``lower``): the fold canonicalises stored rows with the same rule.
PROJECT_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_project_name(name: str, *, allow_empty: bool = True, field_name: str = "project") -> str:
    """``name`` stripped when it is a valid project name ("" = no project when allowed), else BadInput."""
    if not isinstance(name, str):
        raise BadInput(f"a project name must be a string; found {type(name).__name__}", field=field_name)
    stripped = name.strip()
    if stripped == "" and allow_empty:
        return ""
    if PROJECT_NAME.fullmatch(stripped) is None:
        raise BadInput(
            f"a project name is 1-64 characters of ASCII letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit; found {name!r}",
            field=field_name,
            expected=PROJECT_NAME.pattern,
            found=repr(name)[:100],
        )
    return stripped


# -- trusted project state --------------------------------------------------------------

StateCategory = Literal["status", "decision", "requirement", "contact", "milestone", "fact", "config"]
STATE_CATEGORIES: Final[tuple[str, ...]] = (
    "status",
    "decision",
    "requirement",
    "contact",
    "milestone",
    "fact",
    "config",
)

# -- triage -----------------------------------------------------------------------------

Verdict = Literal["promote", "reject", "needs_human", "contradicts"]
VERDICTS: Final[tuple[str, ...]] = ("promote", "reject", "needs_human", "contradicts")
#: What a verdict leads to: a promotion, a rejection, or a wait for a person.
Action = Literal["promote", "reject", "wait"]
ACTIONS: Final[tuple[str, ...]] = ("promote", "reject", "wait")


def domain_vocabulary(extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The built-in domains followed by the configured ``extra`` ones (deduplicated, in order).

    A malformed extension is a configuration error (BadInput, exit 65): a
    domain name is lowercase ASCII, starts with a letter, at most 32 characters.
    """
    out = list(DOMAINS)
    for raw in extra:
        if not isinstance(raw, str) or DOMAIN_NAME.fullmatch(raw) is None:
            raise BadInput(
                f"a configured knowledge domain must match {DOMAIN_NAME.pattern}; found {raw!r}",
                field="knowledge.domains",
                expected=DOMAIN_NAME.pattern,
                found=repr(raw),
            )
        if raw not in out:
            out.append(raw)
    return tuple(out)


def check_domains(values: Iterable[str], vocabulary: Iterable[str] = DOMAINS) -> tuple[str, ...]:
    """``values`` lowercased, stripped and deduplicated in order, or BadInput naming the unknown one."""
    known = tuple(vocabulary)
    out: list[str] = []
    for raw in values:
        name = raw.strip().lower() if isinstance(raw, str) else raw
        if name not in known:
            raise BadInput(
                f"unknown knowledge domain {raw!r}; expected one of {', '.join(known)} "
                f"(extend the list with [knowledge] domains in config.toml)",
                field="domain",
                expected=list(known),
                found=repr(raw),
            )
        if name not in out:
            out.append(name)
    return tuple(out)


def check_category(value: str) -> str:
    """``value`` when it is a state category, else BadInput (exit 65)."""
    if value not in STATE_CATEGORIES:
        raise BadInput(
            f"unknown state category {value!r}; expected one of {', '.join(STATE_CATEGORIES)}",
            field="category",
            expected=list(STATE_CATEGORIES),
            found=repr(value),
        )
    return value


def check_statuses(values: Iterable[str]) -> tuple[str, ...]:
    """A status filter, deduplicated in order; an unknown status is a usage error (exit 64)."""
    out: list[str] = []
    for value in values:
        if value not in STATUSES:
            raise UsageError(
                f"unknown memory status {value!r}; expected one of {', '.join(STATUSES)}",
                expected=list(STATUSES),
                found=repr(value),
            )
        if value not in out:
            out.append(value)
    return tuple(out)


__all__ = [
    "ACTIONS",
    "CANDIDATE_EXTRACTED",
    "CANDIDATE_TRIAGED",
    "DEFAULT_STATUS",
    "DOMAINS",
    "DOMAIN_DESCRIPTIONS",
    "DOMAIN_NAME",
    "EXTRACTION_FAILED",
    "INTERACTION_CAPTURED",
    "MEMORY_PROMOTED",
    "MEMORY_REINFORCED",
    "MEMORY_REINSTATED",
    "MEMORY_REJECTED",
    "MEMORY_SUPERSEDED",
    "PERSONAL_KINDS",
    "PROJECT_ALIASED",
    "PROJECT_NAME",
    "PROJECT_REGISTERED",
    "STATE_CATEGORIES",
    "STATE_INVALIDATED",
    "STATE_SET",
    "STATUSES",
    "TRANSITIONS",
    "TRIAGE_FAILED",
    "VERDICTS",
    "Action",
    "StateCategory",
    "Status",
    "Verdict",
    "check_category",
    "check_domains",
    "check_project_name",
    "check_statuses",
    "domain_vocabulary",
    "status_after",
]
