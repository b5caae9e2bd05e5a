"""mnemolog.projections: everything read is a projection rebuilt from the log.

`engine` keeps the DuckDB file in step with the log, running each room's
fold (`<room>/fold.py`, under the contract in `fold`) to turn entries into
rows, `schema` owns the tables' DDL, `recall` and `queries` are the named
reads (no SQL lives outside this package), `memories` the Memory type,
`vault` the Markdown projection. Import the modules; the package itself
exports nothing.
"""

__all__: list[str] = []
