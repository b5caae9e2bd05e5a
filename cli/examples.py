"""One worked example per command, shown at the end of its --help.

Kept in one table rather than beside each command so that `mnemolog --help`
and the test that parses every example (tests/cli/test_help.py) see them all
without importing the commands. Keys are command paths as typed after
`mnemolog`; every leaf command has one, and each one parses.
"""

from __future__ import annotations

EXAMPLES: dict[str, str] = {
    # memories
    "store": "mnemolog store 'Prefer pg_repack over ALTER TABLE for large tables.' --kind decision -n ops/db",
    "get": "mnemolog get 01J9Z8K7T3V5W2X4Y6Z8A0B1C2",
    "update": "mnemolog update 01J9Z8K7T3V5W2X4Y6Z8A0B1C2 --title 'Online table rewrites' --tag postgres",
    "archive": "mnemolog archive 01J9Z8K7T3V5W2X4Y6Z8A0B1C2 --reason 'replaced by the runbook'",
    "forget": "mnemolog forget 01J9Z8K7T3V5W2X4Y6Z8A0B1C2 --reason 'the user asked' --dry-run",
    "restore": "mnemolog restore 01J9Z8K7T3V5W2X4Y6Z8A0B1C2 --reason 'still in use'",
    "link": "mnemolog link 01J9Z8K7T3V5W2X4Y6Z8A0B1C2 01J9Z8K7T3V5W2X4Y6Z8A0B1C3 --relation derived_from",
    "unlink": "mnemolog unlink 01J9Z8K7T3V5W2X4Y6Z8A0B1C2 01J9Z8K7T3V5W2X4Y6Z8A0B1C3 --relation derived_from",
    "import": "mnemolog import memories.jsonl --skip-existing",
    "export": "mnemolog export --to basic-memory --namespace team/x ./notes",
    "atomise": "mnemolog atomise 01J9Z8K7T3V5W2X4Y6Z8A0B1C2 --curator rules",
    "policy get": "mnemolog policy get ops",
    "policy set": "mnemolog policy set ops --auto-atomise-mode deferred --threshold 400",
    "policy clear": "mnemolog policy clear ops",
    "worker run": "mnemolog worker run --once",
    # recall
    "recall": "mnemolog recall 'how do we rewrite a big table' --limit 5 --explain",
    "search": "mnemolog search 'pg_repack postgres' --namespace ops",
    "list": "mnemolog list --namespace ops --kind decision --limit 20",
    "embeddings status": "mnemolog embeddings status",
    "embeddings set": "mnemolog embeddings set minilm",
    "embeddings sync": "mnemolog embeddings sync --limit 1000",
    # knowledge
    "capture": "mnemolog capture --prompt 'Why did the polish drift?' --response 'Heat.' --project p04",
    "interactions list": "mnemolog interactions list --project p04 --limit 10",
    "interactions show": "mnemolog interactions show 01J9Z8K7T3V5W2X4Y6Z8A0B1C2",
    "extract": "mnemolog extract --pending --extractor rules",
    "triage": "mnemolog triage --pending --triager rules --dry-run",
    "candidates list": "mnemolog candidates list --status pending --project p04",
    "promote": "mnemolog promote 01J9Z8K7T3V5W2X4Y6Z8A0B1C2 --domain materials",
    "reject": "mnemolog reject 01J9Z8K7T3V5W2X4Y6Z8A0B1C2 --reason 'a one-off'",
    "supersede": (
        "mnemolog supersede 01J9Z8K7T3V5W2X4Y6Z8A0B1C2 --by 01J9Z8K7T3V5W2X4Y6Z8A0B1C3 --reason 'new spec'"
    ),
    "decay run": "mnemolog decay run --dry-run",
    "domains list": "mnemolog domains list",
    "domains migrate-prefixes": "mnemolog domains migrate-prefixes --dry-run",
    "project add": "mnemolog project add p06 --alias lens-polishing --description 'Lens polishing line'",
    "project alias": "mnemolog project alias p06 lens",
    "project list": "mnemolog project list",
    "state get": "mnemolog state get p06",
    "state set": "mnemolog state set p06 constraints max_temp '22 °C ± 0.5'",
    "state invalidate": "mnemolog state invalidate p06 constraints max_temp --reason 'new spec'",
    # context
    "context build": "mnemolog context build 'thermal effects on polishing accuracy' --project p06",
    "context show": "mnemolog context show 01J9Z8K7T3V5W2X4Y6Z8A0B1C2",
    "context why": "mnemolog context why 01J9Z8K7T3V5W2X4Y6Z8A0B1C2",
    "ingest": "mnemolog ingest docs/ --project p06 --glob '*.md'",
    "persona promote": "mnemolog persona promote 01J9Z8K7T3V5W2X4Y6Z8A0B1C2 --file USER.md",
    "vault render": "mnemolog vault render ./vault --agent claude",
    "vault validate": "mnemolog vault validate ./vault",
    "vault import": "mnemolog vault import ./vault --agent claude",
    # audit
    "verify": "mnemolog verify --projections",
    "log verify": "mnemolog log verify --witness-key witness.pub --min-witnesses 1",
    "log show": "mnemolog log show --type memory.stored --limit 20",
    "log tail": "mnemolog log tail -n 5",
    "log prove": "mnemolog log prove 42",
    "log consistency": "mnemolog log consistency 100 250",
    "log checkpoint": "mnemolog log checkpoint",
    "log publish": "mnemolog log publish /srv/www/mnemolog",
    "log append": 'mnemolog log append note.review --data \'{"text": "quarterly review"}\'',
    "log export": "mnemolog log export -o home.log",
    "export-forensic-bundle": (
        "mnemolog export-forensic-bundle --memory-id 01J9Z8K7T3V5W2X4Y6Z8A0B1C2 -o b.tar"
    ),
    "verify-bundle": "mnemolog verify-bundle b.tar --trusted-key home.pub",
    "replay": "mnemolog replay home.log --home ./restored",
    "verify-receipt": "mnemolog verify-receipt erased.receipt --memory-id 01J9Z8K7T3V5W2X4Y6Z8A0B1C2",
    "witness serve": "mnemolog witness serve --dir ./witness --listen 127.0.0.1:8200",
    "witness add": "mnemolog witness add w1 http://127.0.0.1:8200 'w1+1234abcd+AQID'",
    "witness list": "mnemolog witness list",
    "witness remove": "mnemolog witness remove w1",
    "witness sync": "mnemolog witness sync",
    "monitor": "mnemolog monitor https://logs.example/mnemolog/ --state monitor.json --trusted-key log.pub",
    # admin
    "init": "mnemolog init --key-name main",
    "stats": "mnemolog stats",
    "rebuild": "mnemolog rebuild",
    "key show": "mnemolog key show",
    "key rotate": "mnemolog key rotate --name second",
    "migrate status": "mnemolog migrate status",
    "migrate run": "mnemolog migrate run --to v2 --dry-run",
    "migrate snapshots": "mnemolog migrate snapshots",
    "migrate rollback": "mnemolog migrate rollback 3",
    "migrate seal": "mnemolog migrate seal --to ~/.local/share/mnemolog-sealed",
    "mcp": "mnemolog mcp --http 127.0.0.1:8765",
    "serve": "mnemolog serve --listen 127.0.0.1:8100",
    "tenant add": "mnemolog tenant add acme --tenants /srv/mnemolog",
    "tenant list": "mnemolog tenant list --tenants /srv/mnemolog",
    "tenant remove": "mnemolog tenant remove acme --tenants /srv/mnemolog",
    "token create": "mnemolog token create --tenants /srv/m --tenant acme --scope write --namespace agents/a",
    "token list": "mnemolog token list --tenants /srv/mnemolog --tenant acme",
    "token revoke": "mnemolog token revoke 3f9a0c2e7b1d4a56 --tenants /srv/m --tenant acme --reason leaked",
}


def epilog(path: str) -> str | None:
    """The help epilog of the command at `path`: its example, kept as one unwrapped line."""
    example = EXAMPLES.get(path)
    if example is None:
        return None
    # \b stops click from re-flowing the paragraph: a command line must stay one line.
    return f"\b\nExample:\n  {example}"
