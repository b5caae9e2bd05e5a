"""The context pack's configuration: budget, unit, tier shares, trim order and ranking weights.

Defaults are the five-tier layout: 3,000 characters split 20% trusted
project state, 5% identity and preferences, 25% project memories, 10%
domain knowledge, 40% retrieved chunks; trimmed chunks first, then domain
knowledge, project memories, identity, and project state last. Every value
can be set in the home's `config.toml` under `[context]` (and the domain
vocabulary under `[context.domain_terms]`); `PackConfig.to_json` is what a
`context.built` event records, so a pack can be re-explained later without
the config file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from mnemolog.eventlog.bundle.packview import TIERS
from mnemolog.eventlog.errors import UsageError

Unit = Literal["chars", "tokens"]
UNITS: Final = ("chars", "tokens")

DEFAULT_BUDGET: Final = 3000
#: Upper bounds keep a recorded pack far below the log's entry size limit.
MAX_BUDGET: Final = {"chars": 400_000, "tokens": 100_000}
DEFAULT_SHARES: Final = {"state": 0.20, "identity": 0.05, "project": 0.25, "domain": 0.10, "chunks": 0.40}
DEFAULT_TRIM_ORDER: Final = ("chunks", "domain", "project", "identity", "state")
#: Memory kinds that describe the operator (identity) and how to work with them (preferences).
DEFAULT_IDENTITY_KINDS: Final = ("user", "feedback")
#: Recall candidates fetched per ranked tier; more than any tier's share can hold.
DEFAULT_CANDIDATES: Final = 20
#: Domains whose memories are private to the person: they enter only packs that ask for them
#: (`personal`), and such a pack holds no project data. Only "finance" is a built-in knowledge
#: domain (eventlog.vocabulary_knowledge.DOMAINS); "health" and "personal" are names a home
#: adds with `[knowledge] domains`, and until it does no memory carries them.
DEFAULT_PERSONAL_DOMAINS: Final = ("health", "finance", "personal")

#: Words that make a query evoke a domain. A domain's own name always counts;
#: these are the subjects each domain covers (CTE being a thermal-expansion
#: coefficient, a thermal query evokes materials as well as physics).
DEFAULT_DOMAIN_TERMS: Final[Mapping[str, tuple[str, ...]]] = {
    "physics": (
        "physical",
        "optical",
        "wave",
        "propagation",
        "diffraction",
        "thermal",
        "heat",
        "temperature",
    ),
    "materials": (
        "material",
        "cte",
        "expansion",
        "thermal",
        "stress",
        "strain",
        "zerodur",
        "glass",
        "ceramic",
        "alloy",
    ),
    "optics": ("optical", "lens", "mirror", "aberration", "wavefront", "wfe", "zernike", "focal"),
    "mechanics": (
        "mechanical",
        "structural",
        "fea",
        "support",
        "kinematic",
        "kinematics",
        "load",
        "stiffness",
    ),
    "manufacturing": ("polishing", "polish", "grinding", "machining", "process", "fabrication"),
    "metrology": ("measurement", "measure", "interferometry", "interferometer", "calibration", "accuracy"),
    "controls": ("control", "pid", "servo", "force", "tuning", "loop", "real-time"),
    "software": ("code", "architecture", "testing", "test", "deployment", "api", "bug"),
    "math": ("numerical", "optimization", "statistics", "statistical", "algorithm", "fit"),
    "finance": ("cost", "budget", "procurement", "price", "pricing", "vendor"),
}


def _bad(message: str, **details: Any) -> UsageError:
    return UsageError(message, **details)


def check_budget(budget: int, unit: str) -> int:
    if unit not in UNITS:
        raise _bad(f"unit must be chars or tokens, found {unit!r}", field="unit", found=unit)
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise _bad(f"budget must be an integer, found {budget!r}", field="budget", found=repr(budget))
    top = MAX_BUDGET[unit]
    if not 1 <= budget <= top:
        raise _bad(
            f"budget must be between 1 and {top} {unit}, found {budget}",
            field="budget",
            expected=f"[1, {top}]",
            found=budget,
        )
    return budget


def _weight(name: str, value: Any, top: float = 100.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad(f"{name} must be a number, found {value!r}", field=name)
    if not 0.0 <= float(value) <= top:
        raise _bad(f"{name} must be in [0, {top:g}], found {value}", field=name, found=value)
    return float(value)


@dataclass(frozen=True)
class PackConfig:
    """Everything but the query and the project that decides a pack."""

    budget: int = DEFAULT_BUDGET
    unit: Unit = "chars"
    shares: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_SHARES))
    trim_order: tuple[str, ...] = DEFAULT_TRIM_ORDER
    identity_kinds: tuple[str, ...] = DEFAULT_IDENTITY_KINDS
    #: Added to a domain memory's relevance (0-1) per domain of it that the query evokes.
    domain_weight: float = 0.5
    #: A chunk of the project in scope has its relevance multiplied by 1 + project_boost.
    project_boost: float = 0.5
    candidates: int = DEFAULT_CANDIDATES
    domain_terms: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_DOMAIN_TERMS))
    personal_domains: tuple[str, ...] = DEFAULT_PERSONAL_DOMAINS
    #: The pack asked for the personal scope (per call, like the budget): its personal-domain
    #: memories may enter, and nothing of any project does.
    personal: bool = False

    def __post_init__(self) -> None:
        check_budget(self.budget, self.unit)
        shares = dict(self.shares)
        if set(shares) != set(TIERS):
            raise _bad(
                f"shares must name exactly the tiers {', '.join(TIERS)}; found {', '.join(sorted(shares))}",
                field="shares",
            )
        for t in TIERS:
            shares[t] = _weight(f"shares.{t}", shares[t], 1.0)
        total = sum(shares.values())
        if total > 1.0 + 1e-9:
            raise _bad(f"the shares add up to {total:g}; at most 1", field="shares", found=total)
        object.__setattr__(self, "shares", {t: shares[t] for t in TIERS})
        order = tuple(self.trim_order)
        if sorted(order) != sorted(TIERS):
            raise _bad(
                f"trim_order must list each of {', '.join(TIERS)} once; found {list(order)}",
                field="trim_order",
            )
        object.__setattr__(self, "trim_order", order)
        kinds = tuple(self.identity_kinds)
        if not all(isinstance(k, str) and k for k in kinds):
            raise _bad("identity_kinds must be memory kinds", field="identity_kinds")
        object.__setattr__(self, "identity_kinds", kinds)
        personal = tuple(self.personal_domains)
        if not all(isinstance(d, str) and d.strip() for d in personal):
            raise _bad("personal_domains must be a list of domain names", field="personal_domains")
        object.__setattr__(self, "personal_domains", tuple(sorted({d.strip().lower() for d in personal})))
        if not isinstance(self.personal, bool):
            raise _bad("personal must be true or false", field="personal")
        object.__setattr__(self, "domain_weight", _weight("domain_weight", self.domain_weight))
        object.__setattr__(self, "project_boost", _weight("project_boost", self.project_boost))
        if isinstance(self.candidates, bool) or not isinstance(self.candidates, int):
            raise _bad("candidates must be an integer", field="candidates")
        if not 1 <= self.candidates <= 1000:
            raise _bad(f"candidates must be in [1, 1000], found {self.candidates}", field="candidates")
        terms: dict[str, tuple[str, ...]] = {}
        raw: dict[Any, Any] = dict(self.domain_terms)
        for domain, words in raw.items():
            if not isinstance(domain, str) or not domain.strip():
                raise _bad(f"a domain name must be text, found {domain!r}", field="domain_terms")
            if isinstance(words, str) or not all(isinstance(w, str) and w.strip() for w in words):
                raise _bad(f"domain_terms.{domain} must be a list of words", field="domain_terms")
            terms[domain] = tuple(sorted({w.strip().lower() for w in words}))
        object.__setattr__(self, "domain_terms", dict(sorted(terms.items())))

    def with_request(
        self, budget: int | None = None, unit: str | None = None, personal: bool | None = None
    ) -> PackConfig:
        """This configuration with a per-call budget, unit and scope (validated)."""
        u = unit if unit is not None else self.unit
        b = budget if budget is not None else self.budget
        check_budget(b, u)
        p = self.personal if personal is None else personal
        return replace(self, budget=b, unit=u, personal=p)  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "unit": self.unit,
            "shares": dict(self.shares),
            "trim_order": list(self.trim_order),
            "identity_kinds": list(self.identity_kinds),
            "domain_weight": self.domain_weight,
            "project_boost": self.project_boost,
            "candidates": self.candidates,
            "personal_domains": list(self.personal_domains),
            "personal": self.personal,
        }

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> PackConfig:
        """From a `[context]` table; unknown keys are refused so a typo never passes silently."""
        known = {
            "budget",
            "unit",
            "shares",
            "trim_order",
            "identity_kinds",
            "domain_weight",
            "project_boost",
            "candidates",
            "domain_terms",
            "personal_domains",
        }
        unknown = sorted(set(m) - known)
        if unknown:
            raise _bad(f"unknown [context] setting(s): {', '.join(unknown)}", field=unknown[0])
        kw: dict[str, Any] = {}
        for key in ("budget", "unit", "domain_weight", "project_boost", "candidates"):
            if key in m:
                kw[key] = m[key]
        if "shares" in m:
            shares = m["shares"]
            if not isinstance(shares, Mapping):
                raise _bad("[context] shares must be a table of tier = fraction", field="shares")
            kw["shares"] = {**DEFAULT_SHARES, **shares}
        for key in ("trim_order", "identity_kinds", "personal_domains"):
            if key in m:
                v = m[key]
                if isinstance(v, str) or not isinstance(v, Sequence):
                    raise _bad(f"[context] {key} must be a list", field=key)
                kw[key] = tuple(v)
        if "domain_terms" in m:
            extra = m["domain_terms"]
            if not isinstance(extra, Mapping):
                raise _bad("[context.domain_terms] must be a table of domain = [words]", field="domain_terms")
            merged = dict(DEFAULT_DOMAIN_TERMS)
            for domain, words in extra.items():
                if isinstance(words, str) or not isinstance(words, Sequence):
                    raise _bad(f"domain_terms.{domain} must be a list of words", field="domain_terms")
                merged[domain] = tuple(merged.get(domain, ())) + tuple(words)
            kw["domain_terms"] = merged
        return cls(**kw)
