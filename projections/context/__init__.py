"""Context packs and the documents behind them.

`chunker` cuts a document's text into heading-aware chunks, `decode` turns a
file's bytes into that text under the documented encodings, `config` holds
the pack's configuration (budget, shares, trim order, weights) and
`assemble` builds a pack from plain rows (state entries, memories and chunks
with their scores): the five tiers in trust order under one budget. The
pack's bytes are `mnemolog.eventlog.bundle.packview`'s, so the standalone bundle
verifier can render them too. `fold` keeps the documents, chunks and
recorded packs from the log; `store` reads them. docs/context.md describes
all of it.
"""
