"""Namespace governance: policies set per namespace, resolved leaf-first.

A namespace `a/b/c` inherits, field by field, from `a/b`, then `a`, then the
root policy (namespace ""), then the built-in defaults: the first level that
sets a field decides it. Policies are `policy.set` events, so their whole
history is in the log.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import duckdb

from mnemolog.eventlog.errors import BadInput

NAMESPACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}(/[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}){0,15}$")
ROOT = ""

DEFAULTS: dict[str, Any] = {
    "write": "any",
    "auto_atomise_mode": "off",
    "auto_atomise_threshold_cl100k": 500,
    "auto_atomise_max_atom_tokens": 200,
    "auto_atomise_max_retries": None,  # None: the mode's default (deferred 3, synchronous 1)
    "curator": "rules",
}
MODE_RETRIES = {"deferred": 3, "synchronous": 1, "manual": 1}


def check_namespace(ns: str, *, allow_root: bool = False) -> str:
    if allow_root and ns == ROOT:
        return ns
    if not isinstance(ns, str) or not NAMESPACE_RE.match(ns):
        raise BadInput(
            f"namespace {ns!r} must be path segments of letters, digits, '_', '.', '-' "
            "separated by '/' (e.g. team/project), at most 16 levels",
            field="namespace",
            found=ns,
        )
    return ns


def ancestors(ns: str) -> list[str]:
    """Leaf first: a/b/c, a/b, a, and the root ""."""
    parts = ns.split("/") if ns else []
    out = ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]
    out.append(ROOT)
    return out


@dataclass(frozen=True)
class ResolvedPolicy:
    namespace: str
    values: dict[str, Any]
    sources: dict[str, str]  # field -> namespace that set it ("(default)" if none)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def retries_for(self, mode: str) -> int:
        explicit = self.values.get("auto_atomise_max_retries")
        # The deferred path always uses its own budget (the seed's rule); the
        # per-namespace override applies to synchronous and manual runs.
        if mode == "deferred" or explicit is None:
            return MODE_RETRIES.get(mode, 1)
        return int(explicit)

    def to_json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "policy": self.values, "sources": self.sources}


class PolicyConflict(BadInput):
    """A policy whose fields contradict each other once inherited (exit 65)."""

    slug = "policy_conflict"


def resolve(
    conn: duckdb.DuckDBPyConnection, ns: str, overrides: Mapping[str, Mapping[str, Any] | None] | None = None
) -> ResolvedPolicy:
    """The effective policy of `ns`; `overrides` replaces namespaces' own policies (None: no policy)."""
    chain = ancestors(ns)
    raw = dict(
        conn.execute(
            f"SELECT namespace, policy FROM policies WHERE namespace IN ({', '.join('?' * len(chain))})",
            chain,
        ).fetchall()
    )
    rows: dict[str, Mapping[str, Any]] = {k: json.loads(v) for k, v in raw.items()}
    for level, own in (overrides or {}).items():
        if own is None:
            rows.pop(level, None)
        else:
            rows[level] = own
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for level in chain:
        if level not in rows:
            continue
        for k, v in rows[level].items():
            if v is not None and k not in values:
                values[k] = v
                sources[k] = level
    for k, v in DEFAULTS.items():
        if k not in values:
            values[k] = v
            sources[k] = "(default)"
    return ResolvedPolicy(ns, values, sources)


def get_policy(conn: duckdb.DuckDBPyConnection, ns: str) -> dict[str, Any] | None:
    row = conn.execute("SELECT policy FROM policies WHERE namespace = ?", [ns]).fetchone()
    return json.loads(row[0]) if row else None


def check_atomisable(conn: duckdb.DuckDBPyConnection, ns: str, own: Mapping[str, Any] | None) -> None:
    """Refuse a policy under which automatic atomisation could only fail.

    A memory is atomised when it has at least the threshold's tokens, and split
    only when it is longer than one atom; a threshold at or below the atom budget
    would queue memories that fit in one atom, each ending as a `too_small`
    failure. Checked for `ns` and every namespace below it with a policy of its
    own, as they would resolve with `own` as the policy of `ns`.
    """
    below = [n for (n,) in conn.execute("SELECT namespace FROM policies").fetchall() if ns in ancestors(n)]
    for name in sorted({ns, *below}):
        p = resolve(conn, name, {ns: own})
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
