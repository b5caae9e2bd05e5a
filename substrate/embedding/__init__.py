"""The home's embedder at work: which model (a logged choice), embed-on-insert and the vectors still owed."""

__all__: list[str] = []
