"""The recall policy (mode, query embedding, fallback, ranking) every caller shares, and the recall-hit
ledger decay reads.
"""

__all__: list[str] = []
