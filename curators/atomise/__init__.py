"""Atomisation: turning one long memory into 2..10 self-contained atoms.

The deterministic offline curator (``rules``), the Ollama-backed one
(``ollama``) with its pinned prompt (``prompt``), and how a source is cut to
fit a token budget (``budget``). The result types and errors they share with
the other curators are in ``mnemolog.curators.base``.
"""
