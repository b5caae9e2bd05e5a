"""Event payloads: one frozen pydantic model per (type, tv), one module per domain.

Names are past-tense facts and stable once written. Commands build payloads
through these models, whose validators hold every limit (see `limits`), so a
malformed command never reaches the log. Replay reads payloads as plain maps
and `upcast` (from mnemolog.eventlog.vocabulary.events) brings an old `tv` up to the
current shape without ever rewriting what was written.

Each module of this package defines the events of one domain; importing the
package imports them all, and defining a payload class registers it in
REGISTRY. A new domain is a new module here: nothing else to edit.
"""

from __future__ import annotations

import importlib
import pkgutil

from mnemolog.eventlog.vocabulary.events import KINDS, RELATIONS, upcast
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

# Every domain module, so REGISTRY holds every payload whichever module was imported first.
for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")
