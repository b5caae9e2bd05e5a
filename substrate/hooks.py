"""The hook chain: pre_store, post_store, pre_link, post_link.

Hooks are Python callables named in configuration ("package.module:function")
or passed to `Substrate.open`. Each receives a `HookEvent`. A pre hook
refuses by returning False or a reason string (or by raising): the write does
not happen and the caller gets GovernanceRefused (exit 5). Post hooks run
after the entry is durable; their failures cannot undo it and are reported
as warnings. The chain fires for every memory and every edge, atoms included.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mnemolog.eventlog.errors import BadInput, MnemologError

HOOK_POINTS = ("pre_store", "post_store", "pre_link", "post_link")


class GovernanceRefused(MnemologError):
    """A policy or a pre hook refused the write (exit 5); nothing was written."""

    exit_code = 5
    slug = "governance_refused"


@dataclass(frozen=True)
class HookEvent:
    """What a hook receives: the hook point, the namespace, the payload or stored memory/edge."""

    point: str
    namespace: str
    payload: dict[str, Any]
    atom_index: int | None = None  # set when the write is one atom of an atomisation
    extra: dict[str, Any] = field(default_factory=dict)


Hook = Callable[[HookEvent], Any]


def load_hook(name: str) -> Hook:
    """The callable a 'package.module:function' name refers to (BadInput if there is none)."""
    module, _, attr = name.partition(":")
    if not module or not attr:
        raise BadInput(f"hook {name!r} must be 'package.module:function'", field="hooks")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise BadInput(f"cannot load hook {name!r}: {exc}", field="hooks") from exc
    if not callable(fn):
        raise BadInput(f"hook {name!r} is not callable", field="hooks")
    return fn  # type: ignore[no-any-return]


class HookChain:
    """The hooks of a home (from configuration) and of the process, run in that order."""

    def __init__(
        self,
        names: Mapping[str, Sequence[str]] | None = None,
        callables: Mapping[str, Sequence[Hook]] | None = None,
    ) -> None:
        self._names = {k: list(v) for k, v in (names or {}).items()}
        self._hooks: dict[str, list[tuple[str, Hook]]] | None = None
        self._extra = {k: list(v) for k, v in (callables or {}).items()}

    def _loaded(self) -> dict[str, list[tuple[str, Hook]]]:
        if self._hooks is None:
            hooks: dict[str, list[tuple[str, Hook]]] = {p: [] for p in HOOK_POINTS}
            for point, names in self._names.items():
                hooks[point] += [(n, load_hook(n)) for n in names]
            for point, fns in self._extra.items():
                hooks[point] += [(getattr(f, "__qualname__", repr(f)), f) for f in fns]
            self._hooks = hooks
        return self._hooks

    def __bool__(self) -> bool:
        return any(self._loaded().values())

    def pre(self, event: HookEvent) -> None:
        for name, fn in self._loaded().get(event.point, []):
            try:
                verdict = fn(event)
            except GovernanceRefused:
                raise
            except Exception as exc:
                raise GovernanceRefused(
                    f"{event.point} hook {name} failed, so the write is refused: {exc}",
                    hook=name,
                    point=event.point,
                    atom_index=event.atom_index,
                ) from exc
            if verdict is False or isinstance(verdict, str):
                reason = verdict if isinstance(verdict, str) else "refused"
                where = f" (atom {event.atom_index})" if event.atom_index is not None else ""
                raise GovernanceRefused(
                    f"{event.point} hook {name} refused the write{where}: {reason}",
                    hook=name,
                    point=event.point,
                    atom_index=event.atom_index,
                    reason=reason,
                )

    def post(self, event: HookEvent) -> list[str]:
        warnings = []
        for name, fn in self._loaded().get(event.point, []):
            try:
                fn(event)
            except Exception as exc:
                warnings.append(f"{event.point} hook {name} failed after the write: {exc}")
        return warnings
