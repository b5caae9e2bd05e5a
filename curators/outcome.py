"""What a model-backed curator call gives back: the record of the call, and its failure.

Extraction and triage ask a model the same way (``ollama_ask``), so what a
call records of the model (``ModelCall``: curator version, model, prompt
fingerprint, warnings, attempts, raw replies, token counts) is one base that
an ``Extraction`` and a ``TriageVerdict`` extend with their answer, and they
fail the same ways, so one type carries a failure for both (``ModelFailure``:
why, which curator and prompt, and every raw reply seen, as evidence for the
``extraction.failed`` / ``triage.failed`` events).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mnemolog.curators.base import FailureReason


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCall:
    """The model-call fields of a curator's answer (``model`` is None for the rules curators)."""

    version: str
    model: str | None
    prompt_sha256: str
    warnings: tuple[str, ...] = ()
    attempts: int = 1
    #: Every raw reply, in order (the last one is the answer).
    responses: tuple[str, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0


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


__all__ = ["ModelCall", "ModelFailure"]
