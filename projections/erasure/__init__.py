"""Erasure: what a `forget` selects and what was forgotten.

`selection.py` reads from the projection what a selector erases (the
selection and its cascade); `fold.py` keeps the record of what was
forgotten (`erasures`). Every room's fold drops its own rows of an erasure;
this room keeps only the record.
"""

from mnemolog.projections.erasure.selection import (
    Selection,
    erased,
    erased_keys,
    namespace_ages,
    older_than,
    sealing_seqs,
    select,
)

__all__ = ["Selection", "erased", "erased_keys", "namespace_ages", "older_than", "sealing_seqs", "select"]
