"""The knowledge loop's configuration: the ``[knowledge]`` table of a home's config.toml.

    [knowledge]
    domains = ["nutrition"]          # added after the ten built-in domains
    extractor = "rules"              # default for `extract` (rules | ollama)
    triager = "rules"                # default for `triage` (rules | ollama); rules runs offline
    promote_confidence = 0.8         # auto-promote at or above (with a promote verdict, no duplicate)
    duplicate_similarity = 0.92      # embedding similarity that counts as a duplicate
    max_retries = 3                  # model retries after the first attempt

    [knowledge.reinforce]
    min_share = 0.70                 # short mode: share of the memory's terms echoed
    long_after = 15                  # memories with more terms than this may match in long mode
    long_min_overlap = 12            # long mode: terms echoed ...
    long_min_share = 0.35            # ... making up at least this share
    step = 0.02                      # confidence added per reinforcement (capped at 1.0)

    [knowledge.decay]
    idle_days = 30                   # grace period for never-referenced memories
    daily_factor = 0.97              # confidence multiplier per idle day past the grace period
    floor = 0.30                     # below this, decay supersedes the memory
    exempt_pinned = true             # pinned memories never decay
    exempt_kinds = ["user", "feedback"]  # nor memories of these kinds
    exempt_stored = true             # nor memories stored directly (not promoted candidates)

    [knowledge.schedule]             # what long-lived processes (mcp, serve) run by themselves
    enabled = true                   # extraction, then triage, of what is pending
    at = "03:00"                     # every day at this time (UTC, HH:MM)

Owns parsing that table into ``KnowledgeSettings`` (refusing malformed values
with BadInput, exit 65, naming the key). The thresholds are recorded in every
event that uses them, so the log says which settings decided what.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from mnemolog.curators.knowledge.triage import TriagePolicy
from mnemolog.eventlog.errors import BadInput
from mnemolog.eventlog.vocabulary.knowledge import DOMAINS, domain_vocabulary
from mnemolog.projections.knowledge.match import ReinforcePolicy
from mnemolog.projections.knowledge.rules import DecayPolicy

TABLE: Final = "knowledge"
EXTRACTORS: Final = ("rules", "ollama")
# The first is the default: a fresh home triages offline, as it extracts offline.
TRIAGERS: Final = ("rules", "ollama")
MAX_RETRIES_LIMIT: Final = 10
_HHMM: Final = re.compile(r"([0-9]{2}):([0-9]{2})")


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a long-lived process extracts, then triages, what is pending (minutes past 00:00 UTC)."""

    enabled: bool = True
    at_minute: int = 3 * 60


def _schedule(table: Mapping[str, Any], here: str) -> Schedule:
    _known(table, {"enabled", "at"}, here)
    enabled = table.get("enabled", True)
    if not isinstance(enabled, bool):
        raise BadInput(f"{here}.enabled must be true or false; found {enabled!r}", field=f"{here}.enabled")
    at = table.get("at", "03:00")
    m = _HHMM.fullmatch(at) if isinstance(at, str) else None
    if m is None or int(m.group(1)) > 23 or int(m.group(2)) > 59:
        raise BadInput(f"{here}.at must be a UTC time HH:MM; found {at!r}", field=f"{here}.at")
    return Schedule(enabled, int(m.group(1)) * 60 + int(m.group(2)))


@dataclass(frozen=True, slots=True)
class KnowledgeSettings:
    domains: tuple[str, ...] = DOMAINS
    extractor: str = "rules"
    triager: str = "rules"
    max_retries: int = 3
    triage: TriagePolicy = field(default_factory=TriagePolicy)
    reinforce: ReinforcePolicy = field(default_factory=ReinforcePolicy)
    decay: DecayPolicy = field(default_factory=DecayPolicy)
    schedule: Schedule = field(default_factory=Schedule)


def _table(raw: Mapping[str, Any], name: str, where: str) -> Mapping[str, Any]:
    value = raw.get(name, {})
    if not isinstance(value, Mapping):
        raise BadInput(f"{where}: [{name}] must be a table", field=name)
    return value


def _number(table: Mapping[str, Any], key: str, default: float, where: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadInput(f"{where}.{key} must be a number; found {value!r}", field=f"{where}.{key}")
    return float(value)


def _integer(table: Mapping[str, Any], key: str, default: int, where: str) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"{where}.{key} must be an integer; found {value!r}", field=f"{where}.{key}")
    return value


def _choice(table: Mapping[str, Any], key: str, options: tuple[str, ...], where: str) -> str:
    value = table.get(key, options[0])
    if value not in options:
        raise BadInput(
            f"{where}.{key} must be one of {', '.join(options)}; found {value!r}", field=f"{where}.{key}"
        )
    return str(value)


def _flag(table: Mapping[str, Any], key: str, default: bool, where: str) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise BadInput(f"{where}.{key} must be true or false; found {value!r}", field=f"{where}.{key}")
    return value


def _names(table: Mapping[str, Any], key: str, default: tuple[str, ...], where: str) -> tuple[str, ...]:
    value = table.get(key, list(default))
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise BadInput(f"{where}.{key} must be a list of names; found {value!r}", field=f"{where}.{key}")
    return tuple(dict.fromkeys(value))


def _known(table: Mapping[str, Any], keys: set[str], where: str) -> None:
    unknown = sorted(set(table) - keys)
    if unknown:
        raise BadInput(
            f"{where}: unknown key(s) {', '.join(unknown)}; expected some of {', '.join(sorted(keys))}",
            field=where,
        )


def parse_knowledge(raw: Mapping[str, Any], where: str = "config.toml") -> KnowledgeSettings:
    """The settings in ``raw`` (a parsed config.toml), defaults for what it leaves out."""
    table = _table(raw, TABLE, where)
    here = f"{where}: knowledge"
    reinforce_t = _table(table, "reinforce", here)
    decay_t = _table(table, "decay", here)
    schedule_t = _table(table, "schedule", here)
    _known(
        table,
        {"domains", "extractor", "triager", "promote_confidence", "duplicate_similarity", "max_retries"}
        | {"reinforce", "decay", "schedule"},
        here,
    )
    _known(reinforce_t, set(ReinforcePolicy().to_data()), f"{here}.reinforce")
    _known(decay_t, set(DecayPolicy().to_data()), f"{here}.decay")
    extra = table.get("domains", [])
    if not isinstance(extra, list):
        raise BadInput(f"{here}.domains must be a list of names; found {extra!r}", field="knowledge.domains")
    max_retries = _integer(table, "max_retries", 3, here)
    if not 0 <= max_retries <= MAX_RETRIES_LIMIT:
        raise BadInput(f"{here}.max_retries must be in 0..{MAX_RETRIES_LIMIT}; found {max_retries}")
    defaults_r = ReinforcePolicy()
    defaults_d = DecayPolicy()
    return KnowledgeSettings(
        domains=domain_vocabulary(extra),
        extractor=_choice(table, "extractor", EXTRACTORS, here),
        triager=_choice(table, "triager", TRIAGERS, here),
        max_retries=max_retries,
        triage=TriagePolicy(
            promote_confidence=_number(table, "promote_confidence", TriagePolicy().promote_confidence, here),
            duplicate_similarity=_number(
                table, "duplicate_similarity", TriagePolicy().duplicate_similarity, here
            ),
        ),
        reinforce=ReinforcePolicy(
            min_share=_number(reinforce_t, "min_share", defaults_r.min_share, f"{here}.reinforce"),
            long_after=_integer(reinforce_t, "long_after", defaults_r.long_after, f"{here}.reinforce"),
            long_min_overlap=_integer(
                reinforce_t, "long_min_overlap", defaults_r.long_min_overlap, f"{here}.reinforce"
            ),
            long_min_share=_number(
                reinforce_t, "long_min_share", defaults_r.long_min_share, f"{here}.reinforce"
            ),
            step=_number(reinforce_t, "step", defaults_r.step, f"{here}.reinforce"),
        ),
        decay=DecayPolicy(
            idle_days=_integer(decay_t, "idle_days", defaults_d.idle_days, f"{here}.decay"),
            daily_factor=_number(decay_t, "daily_factor", defaults_d.daily_factor, f"{here}.decay"),
            floor=_number(decay_t, "floor", defaults_d.floor, f"{here}.decay"),
            exempt_pinned=_flag(decay_t, "exempt_pinned", defaults_d.exempt_pinned, f"{here}.decay"),
            exempt_kinds=_names(decay_t, "exempt_kinds", defaults_d.exempt_kinds, f"{here}.decay"),
            exempt_stored=_flag(decay_t, "exempt_stored", defaults_d.exempt_stored, f"{here}.decay"),
        ),
        schedule=_schedule(schedule_t, f"{here}.schedule"),
    )
