"""The one exception root of mnemolog and the error classes the log layer raises.

Every error carries its exit code (the README's table) and a stable slug; the CLI maps
errors to output in one place and never inspects messages. Other packages
subclass these (curator, governance, atomisation errors) rather than defining
roots of their own, so `except MnemologError` catches everything we raise.
"""

from __future__ import annotations

from typing import Any, ClassVar


class MnemologError(Exception):
    """Root of every error mnemolog raises on purpose."""

    exit_code: ClassVar[int] = 6
    slug: ClassVar[str] = "error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = {k: v for k, v in details.items() if v is not None}

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": False,
            "error": self.slug,
            "message": self.message,
            "exit_code": self.exit_code,
            "details": self.details,
        }


class Informational(MnemologError):
    """Nothing to do; not a failure (exit 1)."""

    exit_code = 1
    slug = "nothing_to_do"


class NotFound(MnemologError):
    exit_code = 2
    slug = "not_found"


class StorageError(MnemologError):
    """I/O failure, lock timeout, or a store that cannot be opened (exit 6)."""

    exit_code = 6
    slug = "storage_error"


class LockTimeout(StorageError):
    slug = "lock_timeout"


class SignerError(MnemologError):
    """A key that is missing, unreadable, too permissive or malformed (exit 6)."""

    exit_code = 6
    slug = "signer_error"


class HomeMissing(StorageError):
    slug = "home_missing"


class LogMoved(StorageError):
    """Another process appended between reading the log's end and writing: nothing was written.

    A batch whose back-chain pointers name its own seqs (`expect_seq`) is
    refused rather than signed at other seqs; the caller refreshes and retries.
    """

    slug = "log_moved"


class UsageError(MnemologError):
    exit_code = 64
    slug = "usage"


class BadInput(MnemologError):
    """Malformed input data: a file, JSON, frontmatter or CBOR we were handed (exit 65)."""

    exit_code = 65
    slug = "bad_input"


class DecodeError(BadInput):
    """Bytes that are not a canonical format-v1 structure."""

    slug = "decode_error"


class VerificationError(MnemologError):
    """Tampered bytes, a broken chain, a bad signature or proof (exit 8).

    `check` names the failed check (a stable identifier such as
    `entry.signature`); `seq`, `file`, `expected` and `found` say where and what.
    """

    exit_code = 8
    slug = "verification_failed"

    def __init__(
        self,
        message: str,
        *,
        check: str,
        seq: int | None = None,
        file: str | None = None,
        expected: Any = None,
        found: Any = None,
        **details: Any,
    ) -> None:
        super().__init__(message, check=check, seq=seq, file=file, expected=expected, found=found, **details)
        self.check = check
        self.seq = seq
        self.file = file
        self.expected = expected
        self.found = found

    def restated(self, message: str) -> VerificationError:
        """The same failure (check, where, what) told in the words of the caller that met it."""
        details = {k: v for k, v in self.details.items() if k not in ("check",)}
        return VerificationError(message, check=self.check, **details)
