"""`python -m mnemolog.eventlog.bundle`: the standalone verifier (standard library, cbor2 and pynacl only)."""

from __future__ import annotations

import sys

from mnemolog.eventlog.bundle.verifier import main

sys.exit(main())
