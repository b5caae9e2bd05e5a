"""Memory identifiers: ULIDs (26 Crockford base32 characters, time-ordered).

An id is chosen once, when the command runs, and recorded in the event; replay
never generates one.
"""

from __future__ import annotations

import os
import re
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ID_RE = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")


def new_id(now_ms: int | None = None) -> str:
    """A new ULID: the time in ms, then 80 random bits."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    return encode_128((ms << 80) | int.from_bytes(os.urandom(10), "big"))


def encode_128(value: int) -> str:
    """A 128-bit number as 26 Crockford base32 characters, the form every id has."""
    out = []
    for _ in range(26):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def looks_like_id(text: str) -> bool:
    """Whether `text` has the shape of a ULID (26 Crockford base32 characters)."""
    return bool(ID_RE.match(text))
