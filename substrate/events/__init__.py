"""Event payloads: one frozen pydantic model per (type, tv), one module per domain.

Names are past-tense facts and stable once written. Commands build payloads
through these models, whose validators hold every limit (see `limits`), so a
malformed command never reaches the log. Replay reads payloads as plain maps
and `upcast` (from mnemolog.eventlog.vocabulary.events) brings an old `tv` up to the
current shape without ever rewriting what was written.

Each module of this package defines the events of one domain, and defining a
payload class registers it in REGISTRY. Importing the package imports none
of them (building the models is most of a short command's start-up, and
`get` needs none); a name below imports its module when first asked for,
and REGISTRY, CURRENT_TV and payload_class import every module first, so
they always hold every payload. A new domain is a new module here: nothing
else to edit.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

from mnemolog.eventlog.vocabulary.events import KINDS, RELATIONS, upcast

if TYPE_CHECKING:
    from mnemolog.substrate.events.atomisation import (
        AtomisationCompleted,
        AtomisationFailed,
        AtomisationRequested,
    )
    from mnemolog.substrate.events.base import CURRENT_TV, REGISTRY, Payload, payload_class
    from mnemolog.substrate.events.embedding import EmbedderConfigured
    from mnemolog.substrate.events.links import LinkRemoved
    from mnemolog.substrate.events.memory import (
        Kind,
        LinkCreated,
        MemoryArchived,
        MemoryRestored,
        MemoryStored,
        MemoryUpdated,
        Relation,
    )
    from mnemolog.substrate.events.migration import (
        MigrationCompleted,
        MigrationRecorded,
        MigrationRefused,
        MigrationRolledBack,
        MigrationStarted,
    )
    from mnemolog.substrate.events.policy import AutoAtomiseMode, Policy, PolicySet, PolicySetV1

__all__ = [
    "CURRENT_TV",
    "KINDS",
    "REGISTRY",
    "RELATIONS",
    "AtomisationCompleted",
    "AtomisationFailed",
    "AtomisationRequested",
    "AutoAtomiseMode",
    "EmbedderConfigured",
    "Kind",
    "LinkCreated",
    "LinkRemoved",
    "MemoryArchived",
    "MemoryRestored",
    "MemoryStored",
    "MemoryUpdated",
    "MigrationCompleted",
    "MigrationRecorded",
    "MigrationRefused",
    "MigrationRolledBack",
    "MigrationStarted",
    "Payload",
    "Policy",
    "PolicySet",
    "PolicySetV1",
    "Relation",
    "payload_class",
    "upcast",
]

# Where each name of __all__ is defined (the rest are imported above).
_HOME = {
    **dict.fromkeys(("AtomisationCompleted", "AtomisationFailed", "AtomisationRequested"), "atomisation"),
    **dict.fromkeys(("CURRENT_TV", "REGISTRY", "Payload", "payload_class"), "base"),
    "EmbedderConfigured": "embedding",
    "LinkRemoved": "links",
    **dict.fromkeys(
        (
            "Kind",
            "LinkCreated",
            "MemoryArchived",
            "MemoryRestored",
            "MemoryStored",
            "MemoryUpdated",
            "Relation",
        ),
        "memory",
    ),
    **dict.fromkeys(
        (
            "MigrationCompleted",
            "MigrationRecorded",
            "MigrationRefused",
            "MigrationRolledBack",
            "MigrationStarted",
        ),
        "migration",
    ),
    **dict.fromkeys(("AutoAtomiseMode", "Policy", "PolicySet", "PolicySetV1"), "policy"),
}
# Names that speak for every payload: every domain module is imported before they are handed out.
_WHOLE = frozenset({"CURRENT_TV", "REGISTRY", "payload_class"})
_all_loaded = False


def _load_all() -> None:
    global _all_loaded
    if not _all_loaded:
        for m in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{m.name}")
        _all_loaded = True


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in _WHOLE:
        _load_all()
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups are plain module attributes
    return value
