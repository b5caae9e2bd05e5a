"""The context packs' configuration: the ``[context]`` table of a home's config.toml.

Its own module so that the agent folder (persona files follow `[context]`'s persona
settings) reads the table without importing the context service.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mnemolog.eventlog.errors import BadInput, UsageError
from mnemolog.projections.context.config import PackConfig


def pack_config(raw: Mapping[str, Any]) -> PackConfig:
    """`[context]` in config.toml (defaults when absent)."""
    t = raw.get("context", {})
    if not isinstance(t, Mapping):
        raise BadInput("config.toml: [context] must be a table", field="context")
    try:
        return PackConfig.from_mapping(t)
    except UsageError as exc:
        raise BadInput(f"config.toml: [context]: {exc.message}", **exc.details) from None
