"""The `mnemolog` subcommands, one module per feature: parse, call one function, render."""

__all__: list[str] = []
