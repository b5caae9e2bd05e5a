"""The knowledge loop's curators: candidates from interactions, verdicts on candidates.

Extraction (``extract`` and its rules, Ollama and prompt modules) and triage
(``triage`` likewise) share one factory (``choice``), one reader of a
model's answer (``answer``), and one model-call record and failure type
(``mnemolog.curators.outcome``). Triage's
rules reuse extraction's sentence and number reading, which is why both live
in this room.
"""
