"""Forgetting: the data keys that seal content, and erasure by destroying them, with receipts and
retention.
"""

__all__: list[str] = []
