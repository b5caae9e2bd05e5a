"""What a model-backed curator call gives back when it yields nothing usable.

Extraction and triage ask a model the same way (``ollama_ask``) and fail the
same ways, so one type carries a failure for both: why (a curator failure
reason), which curator and prompt, and every raw reply seen, as evidence for
the ``extraction.failed`` / ``triage.failed`` events.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mnemolog.curators.base import FailureReason


@dataclass(frozen=True, slots=True)
class ModelFailure:
    """No usable answer. ``reason`` is a curator failure reason; ``responses`` keep the evidence."""

    reason: FailureReason
    message: str
    #: The name of the extractor or triager that asked.
    curator: str
    version: str
    model: str | None
    prompt_sha256: str
    attempts: int = 0
    responses: tuple[str, ...] = ()
    details: dict[str, object] = field(default_factory=dict)


__all__ = ["ModelFailure"]
