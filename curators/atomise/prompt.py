"""The pinned curator prompt and its fingerprint.

The prompt is part of the audit trail: ``prompt_sha256()`` is recorded in every
``atomisation.completed`` event, so any change to the wording, the user-message
template or the output schema below changes the fingerprint and shows up in the
log. Edit them deliberately, never in passing.
"""

from __future__ import annotations

import hashlib
import json
from string import Template
from typing import Any, Final

#: The system message; ``$max_atom_tokens`` is filled in per call.
CURATOR_SYSTEM_PROMPT: Final = """\
You break one long memory into atoms for an AI agent's long-term memory store.

An atom is a single proposition (one fact, decision, observation, instruction or \
step) that a reader understands on its own, without the other atoms and without \
the original text.

Rules:
1. Produce at least 2 and at most 10 atoms.
2. Keep every atom within $max_atom_tokens tokens (cl100k_base); shorter is better.
3. Make each atom self-contained: write out who or what it is about instead of \
"it", "they", "this" or "the above", and carry over the names, dates, numbers and \
units it depends on.
4. Use the memory's own wording wherever you can. Add nothing the memory does not \
say, and leave out nothing it states as fact.
5. Keep the atoms in the order their content appears in the memory.

Answer with one JSON object and nothing else, no commentary and no code fences:
{"atoms": ["first atom", "second atom"]}
"""

#: The user message; ``$text`` is the memory, inserted verbatim.
CURATOR_USER_TEMPLATE: Final = """\
Split this memory into atoms.

<memory>
$text
</memory>
"""

#: Sent as Ollama's ``format``: the server constrains decoding to this shape.
ATOMS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "atoms": {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 2,
            "maxItems": 10,
        }
    },
    "required": ["atoms"],
}


def render_messages(text: str, max_atom_tokens: int) -> list[dict[str, str]]:
    """The chat messages for one curation; identical on every retry."""
    # Template, not str.format: the prompt holds JSON braces and the memory may
    # hold anything, and substituted values are never re-expanded.
    system = Template(CURATOR_SYSTEM_PROMPT).substitute(max_atom_tokens=max_atom_tokens)
    user = Template(CURATOR_USER_TEMPLATE).substitute(text=text)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def prompt_sha256() -> str:
    """Hex SHA-256 over the unfilled system prompt, user template and output schema."""
    schema = json.dumps(ATOMS_SCHEMA, sort_keys=True, separators=(",", ":"))
    material = "\x00".join((CURATOR_SYSTEM_PROMPT, CURATOR_USER_TEMPLATE, schema))
    return hashlib.sha256(material.encode("utf-8")).hexdigest()
