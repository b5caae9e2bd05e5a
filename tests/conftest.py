"""Settings shared by every test.

The suite runs with embeddings off (MNEMOLOG_EMBED=off, inherited by the
CLI subprocesses too): most tests assert exactly what BM25 recall returns,
and a home that embeds recalls in hybrid mode, which also ranks the nearest
vectors. The tests of embeddings and hybrid recall pass an embedder to the
Substrate (`embedder=`, which wins over the variable) or clear the variable.
"""

from __future__ import annotations

import os

os.environ["MNEMOLOG_EMBED"] = "off"
