"""Forensic bundles and log exports: their format, how they are built, and the
offline verifier (`python -m mnemolog.eventlog.bundle`), with the pure folds
(memory views, packs) they ship.
"""
