"""The Markdown vault and the agent folder, rendered from the log; vaults imported as events."""

__all__: list[str] = []
