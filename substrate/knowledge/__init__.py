"""The knowledge loop as commands: projects, trusted state, capture, extraction, triage, promotion,
decay; and its configuration.
"""

__all__: list[str] = []
