"""The Atomic Agents vault: Markdown files with YAML frontmatter projected from the log.

`frontmatter` owns the byte format, `naming` the file names, `schema` the
per-file rules, `validate` the vault-wide rules, `render` writes a vault from
plain records and `read` turns a vault back into records. docs/vault.md
describes the layout and every rule.
"""
