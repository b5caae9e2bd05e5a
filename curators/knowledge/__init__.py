"""The knowledge loop's curators: candidates from interactions, verdicts on candidates.

Extraction (``extract`` and its rules, Ollama, prompt and parsing modules)
and triage (``triage`` likewise) share one way to choose a curator
(``choice``) and one failure type (``mnemolog.curators.outcome``). Triage's
rules reuse extraction's sentence and number reading, which is why both live
in this room.
"""
