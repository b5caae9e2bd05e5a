"""mnemolog.cli: the `mnemolog` command (parse, call one function, render) and the MCP server."""

__all__: list[str] = []
