"""The pinned extraction prompt, its output schema and its fingerprint.

The prompt is part of the audit trail: ``prompt_sha256(domains)`` is recorded
in every ``candidate.extracted`` and ``extraction.failed`` event. It covers the
system prompt as sent (with the domain list filled in, so extending the
domains by configuration changes it too), the user-message template and the
output schema. Change the wording deliberately, never in passing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from string import Template
from typing import Any, Final

from mnemolog.curators.knowledge.extract import MAX_CANDIDATES
from mnemolog.eventlog.vocabulary.knowledge import DOMAIN_DESCRIPTIONS, DOMAINS

#: The quality bar every extraction and triage prompt states.
QUALITY_BAR: Final = (
    "Would a competent engineer need experience to know this, or could they find it in 30 seconds?"
)

EXTRACTION_SYSTEM_PROMPT: Final = """\
You read one exchange between a person and an AI agent and decide what, if \
anything, deserves to become a long-term memory.

Keep earned insight, not information. Ask of every statement: "$quality_bar" \
Keep it only if experience was needed. Most exchanges contain nothing worth \
keeping; then answer with an empty list.

Worth keeping (earned)                         | Not worth keeping (look-up)
-----------------------------------------------|------------------------------------------
"The nightly import times out once the staging | "An index speeds up database lookups."
table passes about 2M rows: without the        |
composite index the upsert falls back to a     |
full scan."                                    |
"Anodised 6061 mounts shifted 4 um after the   | "Aluminium expands when heated."
first thermal cycle; a 24 h soak at 60 C       |
before final alignment removed the drift."     |
"The force loop oscillates above 800 Hz        | "A PID controller has proportional,
because the load cell's filter adds 0.4 ms of  | integral and derivative terms."
lag."                                          |
"Quotes above 50 kEUR need the procurement     | "Large purchases often need approval."
officer's sign-off, which adds about two       |
weeks."                                        |

Each memory is one of three types:
- "project": applied knowledge of the project this exchange belongs to (a \
decision and its reason, a requirement, a constraint, a measured result). Set \
"project" to the project's name and "domain" to the closest domain or "".
- "knowledge": generalisable insight earned in this work that would help on \
any project. Set "project" to "" and "domain" to exactly one domain below.
- "preference": who the person is or how they want to work. Set "project" and \
"domain" to "".
One statement may be both: emit a "project" memory for how it shaped this \
project AND a "knowledge" memory for the general insight, worded separately.

Domains:
$domains

Write every memory so it stands alone: name the thing, material, tool or \
system instead of "it" or "this", keep the numbers and units, give the reason \
when the exchange gives one. One fact per memory, at most two sentences. Do \
not keep greetings, questions, plans not yet decided, temporary status ("the \
build is running"), or anything the exchange does not state. Set "confidence" \
between 0 and 1: how sure you are it is true and worth keeping. At most \
$max_candidates memories.

Answer with one JSON object and nothing else, no commentary and no code fences:
{"candidates": [{"type": "project", "content": "...", "project": "...", \
"domain": "", "confidence": 0.6}]}
"""

#: The user message; each value is inserted verbatim.
EXTRACTION_USER_TEMPLATE: Final = """\
Project: $project

<prompt>
$prompt
</prompt>

<response>
$response
</response>
"""

#: Each side of the exchange is shown to the model up to this many characters:
#: the head and the tail, with the cut marked, so a long log paste cannot crowd
#: out the instructions.
SHOWN_CHARS: Final = 32_000
_TAIL_CHARS: Final = 8_000

CANDIDATE_TYPES: Final[tuple[str, ...]] = ("project", "knowledge", "preference")


def extraction_schema(domains: Sequence[str] = DOMAINS) -> dict[str, Any]:
    """Sent as Ollama's ``format``: the server constrains decoding to this shape."""
    return {
        "type": "object",
        "properties": {
            "candidates": {
                "type": "array",
                "maxItems": MAX_CANDIDATES,
                "items": {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string", "enum": list(CANDIDATE_TYPES)},
                        "content": {"type": "string"},
                        "project": {"type": "string"},
                        "domain": {"type": "string", "enum": [*domains, ""]},
                        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                    },
                    "required": ["type", "content", "project", "domain", "confidence"],
                },
            }
        },
        "required": ["candidates"],
    }


def domain_lines(domains: Sequence[str]) -> str:
    """One line per domain, with what qualifies for the built-in ones."""
    return "\n".join(
        f"- {d}: {DOMAIN_DESCRIPTIONS[d]}" if d in DOMAIN_DESCRIPTIONS else f"- {d}" for d in domains
    )


def system_prompt(domains: Sequence[str] = DOMAINS) -> str:
    return Template(EXTRACTION_SYSTEM_PROMPT).substitute(
        quality_bar=QUALITY_BAR, domains=domain_lines(domains), max_candidates=MAX_CANDIDATES
    )


def shown(text: str) -> str:
    """``text`` as the model sees it: whole when short, else head and tail with the cut marked."""
    if len(text) <= SHOWN_CHARS:
        return text
    head = SHOWN_CHARS - _TAIL_CHARS
    omitted = len(text) - SHOWN_CHARS
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[-_TAIL_CHARS:]}"


def render_messages(
    prompt: str, response: str, project: str, domains: Sequence[str] = DOMAINS
) -> list[dict[str, str]]:
    """The chat messages for one extraction; identical on every retry."""
    user = Template(EXTRACTION_USER_TEMPLATE).substitute(
        project=project or "(none)", prompt=shown(prompt), response=shown(response)
    )
    return [{"role": "system", "content": system_prompt(domains)}, {"role": "user", "content": user}]


def prompt_sha256(domains: Sequence[str] = DOMAINS) -> str:
    """Hex SHA-256 over the system prompt as sent, the user template and the output schema."""
    schema = json.dumps(extraction_schema(domains), sort_keys=True, separators=(",", ":"))
    material = "\x00".join((system_prompt(domains), EXTRACTION_USER_TEMPLATE, schema))
    return hashlib.sha256(material.encode("utf-8")).hexdigest()
