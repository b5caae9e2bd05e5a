"""mnemolog.substrate: commands become events, reads come from projections.

`api.Substrate` is the agent-facing API; `session.Session` the only way to
write; `events` the payload models and their limits; `atomise`, `vault`,
`migrations`, `forensics` the longer jobs. Import the modules (importing
the package does not load DuckDB); the package itself exports nothing.
"""

__all__: list[str] = []
