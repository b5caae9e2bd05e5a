"""Forensic bundles and replay against a home: selecting entries, proving them, rebuilding elsewhere."""

__all__: list[str] = []
