"""Namespace governance: policies set per namespace, resolved leaf-first.

A namespace `a/b/c` inherits, field by field, from `a/b`, then `a`, then the
root policy (namespace ""), then the built-in defaults: the first level that
sets a field decides it. Policies are `policy.set` events, so their whole
history is in the log. Resolution is a pure function of the policies the
namespaces set themselves (the session reads those from the projection).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mnemolog.eventlog.errors import BadInput
from mnemolog.substrate.events.limits import ROOT_NAMESPACE, check_namespace

__all__ = [
    "DEFAULTS",
    "MODE_RETRIES",
    "ROOT",
    "PolicyConflict",
    "ResolvedPolicy",
    "ancestors",
    "check_atomisable",
    "check_namespace",
    "legacy_read",
    "resolve",
]

ROOT = ROOT_NAMESPACE

DEFAULTS: dict[str, Any] = {
    "write": "any",
    "auto_atomise_mode": "off",
    "auto_atomise_threshold_cl100k": 500,
    "auto_atomise_max_atom_tokens": 200,
    "auto_atomise_max_retries": None,  # None: the mode's default (deferred 3, synchronous 1)
    "curator": "rules",
    "retention_days": None,  # None: kept until forgotten
}
MODE_RETRIES = {"deferred": 3, "synchronous": 1, "manual": 1}


def ancestors(ns: str) -> list[str]:
    """Leaf first: a/b/c, a/b, a, and the root ""."""
    parts = ns.split("/") if ns else []
    out = ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]
    out.append(ROOT)
    return out


@dataclass(frozen=True)
class ResolvedPolicy:
    """A namespace's effective policy, and for each field the namespace that decided it."""

    namespace: str
    values: dict[str, Any]
    sources: dict[str, str]  # field -> namespace that set it ("(default)" if none)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def retries_for(self, mode: str) -> int:
        explicit = self.values.get("auto_atomise_max_retries")
        # The deferred path always uses its own budget (docs/curators.md, modes and
        # retry budgets); the
        # per-namespace override applies to synchronous and manual runs.
        if mode == "deferred" or explicit is None:
            return MODE_RETRIES.get(mode, 1)
        return int(explicit)

    def to_json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "policy": self.values, "sources": self.sources}


#: The boolean the first atomising stores set before `auto_atomise_mode` existed.
LEGACY_AUTO_ATOMISE = "auto_atomise"


def legacy_read(policy: Mapping[str, Any]) -> dict[str, Any]:
    """A namespace's own policy with the legacy ``auto_atomise`` boolean read as a mode.

    The atomisation contract (docs/curators.md): a peer that knows no
    ``auto_atomise_mode`` falls back to the boolean, and ``auto_atomise:
    true`` meant "enqueue a curator pass after the store returns", which is
    the ``deferred`` mode (false: ``off``). A
    mode set beside it wins; a value that is not a boolean means nothing.
    """
    out = {k: v for k, v in policy.items() if k != LEGACY_AUTO_ATOMISE}
    legacy = policy.get(LEGACY_AUTO_ATOMISE)
    if isinstance(legacy, bool) and out.get("auto_atomise_mode") is None:
        out["auto_atomise_mode"] = "deferred" if legacy else "off"
    return out


def resolve(own: Mapping[str, Mapping[str, Any]], ns: str) -> ResolvedPolicy:
    """The policy of `ns` from the policies its ancestors set themselves (`own`, by namespace)."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for level in ancestors(ns):
        for k, v in legacy_read(own.get(level) or {}).items():
            if v is not None and k not in values:
                values[k] = v
                sources[k] = level
    for k, v in DEFAULTS.items():
        if k not in values:
            values[k] = v
            sources[k] = "(default)"
    return ResolvedPolicy(ns, values, sources)


class PolicyConflict(BadInput):
    """A policy whose fields contradict each other once inherited (exit 65)."""

    slug = "policy_conflict"


def check_atomisable(own: Mapping[str, Mapping[str, Any]], namespaces: Sequence[str]) -> None:
    """Refuse policies under which automatic atomisation could only fail.

    A memory is atomised when it has at least the threshold's tokens, and split
    only when it is longer than one atom: a threshold at or below the atom
    budget would queue memories that fit in one atom, each ending as a
    `too_small` failure. `own` holds the policies as they would be after the
    change (by namespace); every namespace in `namespaces` is checked.
    """
    for name in sorted(set(namespaces)):
        p = resolve(own, name)
        if p["auto_atomise_mode"] == "off":
            continue
        threshold = int(p["auto_atomise_threshold_cl100k"])
        budget = int(p["auto_atomise_max_atom_tokens"])
        if threshold <= budget:
            where = "root" if name == ROOT else repr(name)
            raise PolicyConflict(
                f"policy of {where}: auto_atomise_threshold_cl100k={threshold} (set on "
                f"{p.sources['auto_atomise_threshold_cl100k']!r}) must be above "
                f"auto_atomise_max_atom_tokens={budget} (set on "
                f"{p.sources['auto_atomise_max_atom_tokens']!r}): a memory at the threshold fits in "
                f"one atom, so {p['auto_atomise_mode']} atomisation would fail as too small; raise the "
                "threshold or lower the atom budget",
                field="auto_atomise_threshold_cl100k",
                namespace=name,
                expected=f"> {budget}",
                found=threshold,
            )
