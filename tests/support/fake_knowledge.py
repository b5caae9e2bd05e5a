"""Replies a model gives in the knowledge loop, for the fake Ollama server.

Builders for well-formed extraction and triage answers, and ``Computed``
replies that answer a triage request from what it asks about, so a test can
script "promote anything mentioning Zerodur" without knowing the order in
which candidates are triaged.

    with FakeOllama() as server:
        server.push(candidates_json([project("CTE analysis drove the pad layout", "p04-gigabit")]))
        server.push(verdict_json("promote", 0.9, "A measured limit."))
        server.push(verdict_by_content({"Zerodur": verdict_json("promote", 0.9, "Earned.")},
                                       default=verdict_json("needs_human", 0.5, "Unsure.")))
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tests.support.fake_ollama import Computed, Script

__all__ = [
    "candidates_json",
    "domain",
    "preference",
    "project",
    "triaged_content",
    "verdict_by_content",
    "verdict_json",
]


def project(content: str, name: str, *, domain: str = "", confidence: float = 0.6) -> dict[str, Any]:
    return {
        "type": "project",
        "content": content,
        "project": name,
        "domain": domain,
        "confidence": confidence,
    }


def domain(content: str, name: str, *, confidence: float = 0.6) -> dict[str, Any]:
    return {"type": "knowledge", "content": content, "project": "", "domain": name, "confidence": confidence}


def preference(content: str, *, confidence: float = 0.7) -> dict[str, Any]:
    return {"type": "preference", "content": content, "project": "", "domain": "", "confidence": confidence}


def candidates_json(candidates: Sequence[Mapping[str, Any]]) -> str:
    """What a well-behaved model answers to the extraction prompt."""
    return json.dumps({"candidates": [dict(c) for c in candidates]})


def verdict_json(
    verdict: str,
    confidence: float,
    reason: str,
    *,
    project: str = "",
    domains: Sequence[str] = (),
    conflicts_with: str = "",
) -> str:
    """What a well-behaved model answers to the triage prompt."""
    return json.dumps(
        {
            "verdict": verdict,
            "confidence": confidence,
            "reason": reason,
            "project": project,
            "domains": list(domains),
            "conflicts_with": conflicts_with,
        }
    )


def triaged_content(request: Mapping[str, Any]) -> str:
    """The candidate text a triage request asks about (between the <candidate> tags)."""
    messages = request.get("messages") or []
    user = next((m.get("content", "") for m in messages if m.get("role") == "user"), "")
    start, end = user.find("<candidate>"), user.find("</candidate>")
    return user[start + len("<candidate>") : end].strip() if start >= 0 and end > start else ""


def verdict_by_content(rules: Mapping[str, Script], *, default: Script) -> Computed:
    """A reply chosen by the first key found in the candidate's text (else ``default``)."""

    def reply(request: dict[str, Any]) -> Script:
        text = triaged_content(request)
        for needle, answer in rules.items():
            if needle in text:
                return answer
        return default

    return Computed(reply)
