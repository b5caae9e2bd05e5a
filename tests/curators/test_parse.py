"""Finding the atom list in a model's reply."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemolog.curators.parse import MalformedOutput, extract_atoms

ATOMS = ["The disk filled up.", "The job failed."]


@pytest.mark.parametrize(
    "content",
    [
        json.dumps({"atoms": ATOMS}),
        json.dumps(ATOMS),
        "\ufeff  " + json.dumps({"atoms": ATOMS}) + "\n",
        "```json\n" + json.dumps({"atoms": ATOMS}, indent=2) + "\n```",
        "```JSON " + json.dumps({"atoms": ATOMS}) + "```",
        "Here you go:\n```\n" + json.dumps(ATOMS) + "\n```\nAnything else?",
        "I think {maybe} this: " + json.dumps({"atoms": ATOMS}),
        json.dumps({"note": "first"}) + " then " + json.dumps({"atoms": ATOMS}),
        '{"atoms": ' + json.dumps(ATOMS) + ', "confidence": 0.9}',
    ],
)
def test_accepted_shapes(content: str) -> None:
    assert extract_atoms(content) == ATOMS


def test_atoms_keep_their_text_exactly() -> None:
    tricky = ["  padded  ", "with {braces} and [brackets]", 'quote " and ```fence```', ""]
    assert extract_atoms(json.dumps({"atoms": tricky})) == tricky


@pytest.mark.parametrize(
    ("content", "found"),
    [
        ("", "no JSON value"),
        ("I cannot help with that.", "no JSON value"),
        ('{"atoms": "one string"}', "holding str, not a list"),
        ('{"atoms": ["ok", 3]}', "int at index 1"),
        ('{"facts": ["a", "b"]}', "no 'atoms'"),
        ("42", "holding int"),
        ('{"atoms": ["unterminated"', "no JSON value"),
    ],
)
def test_malformed_output_says_what_it_found(content: str, found: str) -> None:
    with pytest.raises(MalformedOutput) as caught:
        extract_atoms(content)
    assert found in str(caught.value)
    assert "expected a JSON object" in str(caught.value)


def test_bracket_bombs_are_bounded() -> None:
    started = time.monotonic()
    with pytest.raises(MalformedOutput):
        extract_atoms("[" * 50_000 + "{" * 50_000)
    assert time.monotonic() - started < 5.0


prose = st.text(alphabet=st.characters(blacklist_characters='{}[]`"\\'), max_size=80)


@given(st.lists(st.text(max_size=40), max_size=12), prose, prose, st.booleans())
def test_any_atom_list_survives_prose_around_it(
    atoms: list[str], before: str, after: str, bare: bool
) -> None:
    payload = json.dumps(atoms if bare else {"atoms": atoms})
    assert extract_atoms(before + payload + after) == atoms
