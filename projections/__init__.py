"""mnemolog.projections: everything read is a projection rebuilt from the log.

`engine` keeps the DuckDB file in step with the log, `fold` turns entries
into rows, `schema` owns the tables, `recall` and `queries` are the named
reads (no SQL lives outside this package), `memories` the Memory type,
`vault` the Markdown projection. Import the modules; the package itself
exports nothing.
"""

__all__: list[str] = []
