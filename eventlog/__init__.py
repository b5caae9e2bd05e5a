"""mnemolog.eventlog: the signed, hash-chained CBOR log, its proofs, bundles and verifiers.

Imports only the standard library, cbor2 and pynacl (import-linter checks
it), so the offline verifier runs with nothing else installed. The memory
vocabulary every fold shares is `vocabulary`. Import the modules; the
package itself exports nothing.
"""

__all__: list[str] = []
