"""Memory reads beyond recall: the store as of an earlier seq, a memory's signed history, namespace
governance, bulk import from JSON Lines.
"""

__all__: list[str] = []
