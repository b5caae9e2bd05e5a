"""Documents and context packs as commands: reading files for ingest, building, showing and explaining
packs.
"""

__all__: list[str] = []
