"""The pinned prompt and its fingerprint."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from mnemolog.curators.atomise import prompt
from mnemolog.curators.atomise.prompt import (
    ATOMS_SCHEMA,
    CURATOR_SYSTEM_PROMPT,
    CURATOR_USER_TEMPLATE,
    prompt_sha256,
    render_messages,
)


def test_system_prompt_states_the_envelope() -> None:
    system = render_messages("x", 321)[0]["content"]
    assert "at least 2 and at most 10 atoms" in system
    assert "321 tokens" in system
    assert '{"atoms": [' in system
    assert "$" not in system


def test_the_memory_is_inserted_verbatim() -> None:
    text = "Costs: $5 and ${HOME} and {braces} and $text itself."
    user = render_messages(text, 200)[1]
    assert user["role"] == "user"
    assert text in user["content"]


def test_messages_are_identical_across_calls() -> None:
    assert render_messages("same", 200) == render_messages("same", 200)


def test_schema_asks_for_a_list_of_strings() -> None:
    atoms = ATOMS_SCHEMA["properties"]["atoms"]
    assert atoms["items"] == {"type": "string"}
    assert (atoms["minItems"], atoms["maxItems"]) == (2, 10)


def test_fingerprint_covers_prompt_template_and_schema() -> None:
    schema = json.dumps(ATOMS_SCHEMA, sort_keys=True, separators=(",", ":"))
    material = f"{CURATOR_SYSTEM_PROMPT}\x00{CURATOR_USER_TEMPLATE}\x00{schema}"
    assert prompt_sha256() == hashlib.sha256(material.encode()).hexdigest()
    assert re.fullmatch(r"[0-9a-f]{64}", prompt_sha256())


def test_fingerprint_changes_with_the_wording(monkeypatch: pytest.MonkeyPatch) -> None:
    before = prompt_sha256()
    monkeypatch.setattr(prompt, "CURATOR_SYSTEM_PROMPT", CURATOR_SYSTEM_PROMPT + " ")
    assert prompt_sha256() != before
