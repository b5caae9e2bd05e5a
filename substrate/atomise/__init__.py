"""The atomise engine: a long memory split into atoms, every step a signed event, resumable after a crash."""

__all__: list[str] = []
