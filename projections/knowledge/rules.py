"""Pure rules of the knowledge loop's read side: project names, confidence, decay.

Owns
- the one canonicalisation function every boundary
  calls (``ProjectRegistry.canonical``): a registered name or any of its
  aliases, in any letter case, becomes the registered name; an unknown name
  passes through unchanged;
- how the registry grows (``with_project``, ``with_alias``: the checks a
  command makes before it writes) and how a replay applies what was written
  (``applied``: total, first writer wins, never raises);
- confidence arithmetic: the base confidence of a memory stored without one,
  reinforcement's capped step, and decay as a pure function of a memory's
  anchor time, reference count and the clock, so a replay at the same clock
  gives the same numbers.

Nothing here touches DuckDB or the log; the fold and the substrate call these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from mnemolog.eventlog.errors import BadInput, Informational, NotFound
from mnemolog.eventlog.vocabulary.knowledge import PERSONAL_KINDS, check_project_name

MAX_DESCRIPTION_CHARS: Final = 2000

# -- project names ----------------------------------------------------------------------


def project_key(name: str) -> str:
    """The lookup key of a project name or alias (case-insensitive)."""
    return name.strip().lower()


def canonical_name(index: Mapping[str, str], name: str) -> str:
    """The registered name ``name`` stands for in ``index`` (key -> name); unknown: stripped, unchanged.

    The one rule every boundary and the fold apply to a project name or alias.
    """
    return index.get(project_key(name), name.strip())


@dataclass(frozen=True, slots=True)
class Project:
    name: str
    description: str = ""
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ProjectRegistry:
    """Registered projects and their aliases, as of some point in the log.

    ``index`` maps the key of every registered name and alias to its project's
    registered name.
    """

    projects: Mapping[str, Project] = field(default_factory=lambda: MappingProxyType({}))
    index: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def canonical(self, name: str | None) -> str:
        """The registered name ``name`` stands for; unknown names come back stripped, unchanged."""
        if name is None:
            return ""
        return canonical_name(self.index, name)

    def resolve(self, name: str) -> Project:
        """The registered project ``name`` (or one of its aliases) names, else NotFound."""
        canonical = self.index.get(project_key(name))
        if canonical is None:
            raise NotFound(
                f"no project {name!r} is registered (mnemolog project add {name})",
                project=name,
            )
        return self.projects[canonical]

    def with_project(
        self, name: str, *, aliases: Iterable[str] = (), description: str = ""
    ) -> ProjectRegistry:
        """The registry after registering ``name``; BadInput on a clash, Informational when known."""
        name = check_project_name(name, allow_empty=False)
        if len(description) > MAX_DESCRIPTION_CHARS:
            raise BadInput(
                f"a project description is at most {MAX_DESCRIPTION_CHARS} characters; "
                f"found {len(description)}",
                field="description",
            )
        existing = self.index.get(project_key(name))
        if existing is not None:
            if existing == name or project_key(existing) == project_key(name):
                raise Informational(f"project {existing!r} is already registered", project=existing)
            raise BadInput(
                f"{name!r} is already an alias of project {existing!r}; pick another name",
                field="project",
                found=name,
                alias_of=existing,
            )
        registry = _add(self, Project(name=name, description=description))
        for alias in aliases:
            registry = registry.with_alias(name, alias)
        return registry

    def with_alias(self, name: str, alias: str) -> ProjectRegistry:
        """The registry after making ``alias`` another name of project ``name``.

        ``name`` may itself be an alias. NotFound when it names no project;
        BadInput when the alias already names another project; Informational
        when it already names this one.
        """
        project = self.resolve(name)
        alias = check_project_name(alias, allow_empty=False, field_name="alias")
        taken = self.index.get(project_key(alias))
        if taken == project.name:
            raise Informational(
                f"{alias!r} already names project {project.name!r}", project=project.name, alias=alias
            )
        if taken is not None:
            raise BadInput(
                f"{alias!r} already names project {taken!r}; an alias names exactly one project",
                field="alias",
                found=alias,
                project=taken,
            )
        return _alias(self, project.name, alias)

    def applied(self, event_type: str, data: Mapping[str, Any]) -> ProjectRegistry:
        """The registry after a ``project.registered`` or ``project.aliased`` read from the log.

        Total over hostile input, as a fold must be: whatever a valid command
        could not have written (a clash, a malformed name) is skipped, and the
        first writer of a name keeps it.
        """
        try:
            if event_type == "project.registered":
                registry = self
                name = check_project_name(str(data.get("name", "")), allow_empty=False)
                if project_key(name) in self.index:
                    return self
                description = data.get("description")
                registry = _add(
                    registry,
                    Project(name=name, description=description if isinstance(description, str) else ""),
                )
                raw_aliases = data.get("aliases")
                for alias in raw_aliases if isinstance(raw_aliases, list) else ():
                    registry = registry._lenient_alias(name, alias)
                return registry
            if event_type == "project.aliased":
                return self._lenient_alias(str(data.get("name", "")), data.get("alias"))
        except BadInput:
            return self
        return self

    def _lenient_alias(self, name: str, alias: object) -> ProjectRegistry:
        canonical = self.index.get(project_key(name))
        if canonical is None or not isinstance(alias, str):
            return self
        try:
            alias = check_project_name(alias, allow_empty=False, field_name="alias")
        except BadInput:
            return self
        if project_key(alias) in self.index:
            return self
        return _alias(self, canonical, alias)


def _add(registry: ProjectRegistry, project: Project) -> ProjectRegistry:
    projects = {**registry.projects, project.name: project}
    index = {**registry.index, project_key(project.name): project.name}
    return ProjectRegistry(MappingProxyType(projects), MappingProxyType(index))


def _alias(registry: ProjectRegistry, canonical: str, alias: str) -> ProjectRegistry:
    old = registry.projects[canonical]
    updated = Project(name=old.name, description=old.description, aliases=(*old.aliases, alias))
    projects = {**registry.projects, canonical: updated}
    index = {**registry.index, project_key(alias): canonical}
    return ProjectRegistry(MappingProxyType(projects), MappingProxyType(index))


# -- confidence -------------------------------------------------------------------------

#: The confidence of a memory stored without one: a person said it, so it counts as certain.
BASE_CONFIDENCE: Final = 1.0
DAY_US: Final = 86_400 * 1_000_000


def base_confidence(confidence: float | None) -> float:
    """A stored confidence, or BASE_CONFIDENCE when the memory was stored without one."""
    return BASE_CONFIDENCE if confidence is None else float(confidence)


def reinforced(confidence: float | None, step: float) -> float:
    """Confidence after one reinforcement: up by ``step``, never above 1.0."""
    return min(1.0, base_confidence(confidence) + step)


@dataclass(frozen=True, slots=True)
class DecayPolicy:
    """When and how fast unreferenced memories lose confidence.

    A memory that has never been referenced decays once it has been idle
    (since its anchor: when it became active or was last changed) for more
    than ``idle_days`` whole days: by ``daily_factor`` for each whole day past
    that grace period. Below ``floor`` it is superseded.

    What a person put there is never retired behind their back, unless the
    home says so: pinned memories (``exempt_pinned``), memories of the
    ``exempt_kinds`` (the personal kinds: who the person is, what they asked
    for) and memories stored directly rather than promoted from an extracted
    candidate (``exempt_stored``) do not decay. Only what the loop proposed
    and promoted does, by default.
    """

    idle_days: int = 30
    daily_factor: float = 0.97
    floor: float = 0.30
    exempt_pinned: bool = True
    exempt_kinds: tuple[str, ...] = PERSONAL_KINDS
    exempt_stored: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.idle_days, bool) or not isinstance(self.idle_days, int) or self.idle_days < 0:
            raise BadInput(f"decay idle_days must be an integer >= 0; found {self.idle_days!r}")
        if not (isinstance(self.daily_factor, float | int) and 0.0 < self.daily_factor <= 1.0):
            raise BadInput(f"decay daily_factor must be in (0, 1]; found {self.daily_factor!r}")
        if not (isinstance(self.floor, float | int) and 0.0 <= self.floor <= 1.0):
            raise BadInput(f"decay floor must be in [0, 1]; found {self.floor!r}")
        for name in ("exempt_pinned", "exempt_stored"):
            if not isinstance(getattr(self, name), bool):
                raise BadInput(f"decay {name} must be true or false; found {getattr(self, name)!r}")
        kinds = self.exempt_kinds
        if not isinstance(kinds, tuple) or not all(isinstance(k, str) and k for k in kinds):
            raise BadInput(f"decay exempt_kinds must be a list of memory kinds; found {kinds!r}")

    def to_data(self) -> dict[str, Any]:
        """The thresholds as recorded in the events that used them."""
        return {
            "idle_days": self.idle_days,
            "daily_factor": self.daily_factor,
            "floor": self.floor,
            "exempt_pinned": self.exempt_pinned,
            "exempt_kinds": list(self.exempt_kinds),
            "exempt_stored": self.exempt_stored,
        }


def decay_days(*, anchor_us: int, reference_count: int, now_us: int, policy: DecayPolicy) -> int:
    """Whole days of decay a memory has accrued at ``now_us`` (0 when referenced or within grace)."""
    if reference_count > 0 or now_us <= anchor_us:
        return 0
    idle_days = (now_us - anchor_us) // DAY_US
    return max(0, idle_days - policy.idle_days)


def decayed_confidence(
    confidence: float | None, *, anchor_us: int, reference_count: int, now_us: int, policy: DecayPolicy
) -> float:
    """The confidence a memory has at ``now_us``: a pure function, so replay agrees with any run."""
    days = decay_days(anchor_us=anchor_us, reference_count=reference_count, now_us=now_us, policy=policy)
    base = base_confidence(confidence)
    if days == 0:
        return base
    return base * policy.daily_factor**days


def decays_out(
    confidence: float | None, *, anchor_us: int, reference_count: int, now_us: int, policy: DecayPolicy
) -> bool:
    """True when decay has begun and taken the memory below the floor: it is to be superseded."""
    days = decay_days(anchor_us=anchor_us, reference_count=reference_count, now_us=now_us, policy=policy)
    if days == 0:
        return False
    value = decayed_confidence(
        confidence, anchor_us=anchor_us, reference_count=reference_count, now_us=now_us, policy=policy
    )
    return value < policy.floor
