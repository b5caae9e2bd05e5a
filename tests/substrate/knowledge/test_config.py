"""The [knowledge] table of config.toml."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from mnemolog.eventlog.errors import BadInput
from mnemolog.eventlog.vocabulary.knowledge import DOMAINS
from mnemolog.substrate.knowledge.config import KnowledgeSettings, parse_knowledge

FULL = """
[knowledge]
domains = ["nutrition", "health"]
extractor = "ollama"
triager = "ollama"
promote_confidence = 0.9
duplicate_similarity = 0.95
max_retries = 1

[knowledge.reinforce]
min_share = 0.6
long_after = 20
long_min_overlap = 10
long_min_share = 0.3
step = 0.05

[knowledge.decay]
idle_days = 14
daily_factor = 0.9
floor = 0.25
exempt_pinned = false
exempt_kinds = ["user"]
exempt_stored = false
"""


def test_defaults() -> None:
    settings = parse_knowledge({})
    assert settings == KnowledgeSettings()
    assert settings.domains == DOMAINS
    assert (settings.extractor, settings.triager, settings.max_retries) == ("rules", "rules", 3)
    assert settings.triage.promote_confidence == 0.8
    assert settings.decay.to_data() == {
        "idle_days": 30,
        "daily_factor": 0.97,
        "floor": 0.30,
        "exempt_pinned": True,
        "exempt_kinds": ["user", "feedback"],
        "exempt_stored": True,
    }


def test_every_setting() -> None:
    settings = parse_knowledge(tomllib.loads(FULL))
    assert settings.domains == (*DOMAINS, "nutrition", "health")
    assert (settings.extractor, settings.triager, settings.max_retries) == ("ollama", "ollama", 1)
    assert settings.triage.to_data() == {"promote_confidence": 0.9, "duplicate_similarity": 0.95}
    assert settings.reinforce.to_data() == {
        "min_share": 0.6,
        "long_after": 20,
        "long_min_overlap": 10,
        "long_min_share": 0.3,
        "step": 0.05,
    }
    assert settings.decay.to_data() == {
        "idle_days": 14,
        "daily_factor": 0.9,
        "floor": 0.25,
        "exempt_pinned": False,
        "exempt_kinds": ["user"],
        "exempt_stored": False,
    }


@pytest.mark.parametrize(
    "raw",
    [
        {"knowledge": "on"},
        {"knowledge": {"domains": "nutrition"}},
        {"knowledge": {"domains": ["Nutrition"]}},
        {"knowledge": {"extractor": "magic"}},
        {"knowledge": {"triager": 1}},
        {"knowledge": {"promote_confidence": "high"}},
        {"knowledge": {"promote_confidence": 1.5}},
        {"knowledge": {"max_retries": 99}},
        {"knowledge": {"max_retries": True}},
        {"knowledge": {"colour": "blue"}},
        {"knowledge": {"reinforce": {"step": 2}}},
        {"knowledge": {"reinforce": {"long_after": 1.5}}},
        {"knowledge": {"reinforce": {"share": 0.5}}},
        {"knowledge": {"decay": {"floor": -1}}},
        {"knowledge": {"decay": []}},
        {"knowledge": {"decay": {"exempt_pinned": "yes"}}},
        {"knowledge": {"decay": {"exempt_kinds": "user"}}},
        {"knowledge": {"decay": {"exempt_kinds": [1]}}},
    ],
)
def test_malformed_settings_are_bad_input(raw: dict[str, Any]) -> None:
    with pytest.raises(BadInput) as info:
        parse_knowledge(raw)
    assert info.value.exit_code == 65
