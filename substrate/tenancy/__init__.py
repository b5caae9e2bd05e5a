"""Many homes under one root (tenants) and the scoped tokens that say what a caller may read and write."""

__all__: list[str] = []
