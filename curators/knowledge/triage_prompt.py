"""The pinned triage prompt, its output schema and its fingerprint.

``prompt_sha256(domains)`` is recorded in every ``candidate.triaged`` event;
it covers the system prompt as sent (domain list filled in), the user
template and the schema.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from string import Template
from typing import Any, Final

from mnemolog.curators.knowledge.extract_prompt import QUALITY_BAR, domain_lines, shown
from mnemolog.curators.knowledge.triage import Neighbour
from mnemolog.eventlog.vocabulary.knowledge import DOMAINS, VERDICTS

TRIAGE_SYSTEM_PROMPT: Final = """\
You review one candidate memory that was extracted from a conversation, \
before it joins an AI agent's long-term memory. You decide whether it is \
worth keeping.

The bar: "$quality_bar" Keep earned insight: a measured limit, a cause found \
the hard way, a decision with its reason, a person's stated preference. \
Reject what anyone could look up in 30 seconds (textbook facts, definitions), \
passing states that will not be true tomorrow ("the build is running"), \
vague or unsupported statements, and restatements of a memory that already \
exists.

Verdicts:
- "promote": worth keeping as it is.
- "reject": not worth keeping.
- "needs_human": you cannot tell; a person should decide.
- "contradicts": it conflicts with one of the existing memories listed; put \
that memory's id in "conflicts_with".

Set "confidence" between 0 and 1 (how sure you are of the verdict), give the \
reason in one sentence, and suggest the project ("" when the memory holds on \
every project) and the domains it belongs to, from this list:
$domains

Answer with one JSON object and nothing else, no commentary and no code fences:
{"verdict": "promote", "confidence": 0.9, "reason": "...", "project": "", \
"domains": ["software"], "conflicts_with": ""}
"""

TRIAGE_USER_TEMPLATE: Final = """\
Candidate ($layer, kind $kind, project "$project", domains [$domains], \
extractor confidence $confidence):
<candidate>
$content
</candidate>

Existing memories most like it:
$neighbours
"""


def triage_schema(domains: Sequence[str] = DOMAINS) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "verdict": {"type": "string", "enum": list(VERDICTS)},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "reason": {"type": "string"},
            "project": {"type": "string"},
            "domains": {"type": "array", "items": {"type": "string", "enum": list(domains)}},
            "conflicts_with": {"type": "string"},
        },
        "required": ["verdict", "confidence", "reason", "project", "domains", "conflicts_with"],
    }


def system_prompt(domains: Sequence[str] = DOMAINS) -> str:
    return Template(TRIAGE_SYSTEM_PROMPT).substitute(quality_bar=QUALITY_BAR, domains=domain_lines(domains))


def neighbour_lines(neighbours: Sequence[Neighbour]) -> str:
    if not neighbours:
        return "(none)"
    return "\n".join(
        f'- id {n.id} (project "{n.project}"): {" ".join(n.content.split())[:600]}' for n in neighbours
    )


def render_messages(
    *,
    content: str,
    layer: str,
    kind: str,
    project: str,
    domains: Sequence[str],
    confidence: float,
    neighbours: Sequence[Neighbour],
    vocabulary: Sequence[str] = DOMAINS,
) -> list[dict[str, str]]:
    user = Template(TRIAGE_USER_TEMPLATE).substitute(
        layer=layer,
        kind=kind,
        project=project,
        domains=", ".join(domains),
        confidence=f"{confidence:.2f}",
        content=shown(content),
        neighbours=neighbour_lines(neighbours),
    )
    return [{"role": "system", "content": system_prompt(vocabulary)}, {"role": "user", "content": user}]


def prompt_sha256(domains: Sequence[str] = DOMAINS) -> str:
    schema = json.dumps(triage_schema(domains), sort_keys=True, separators=(",", ":"))
    material = "\x00".join((system_prompt(domains), TRIAGE_USER_TEMPLATE, schema))
    return hashlib.sha256(material.encode("utf-8")).hexdigest()
