"""The errors the client raises."""

from __future__ import annotations

from typing import Optional


class PunctualError(Exception):
    """Anything the client raises about a call: the server's answer or the transport."""


class ApiError(PunctualError):
    """An answer that is not a 2xx: its HTTP status, the stable error code and message of its
    body (docs/API.md, "Errors"), and its Retry-After in seconds (None when absent)."""

    def __init__(self, status: int, code: str, message: str, retry_after: Optional[float] = None,
                 version: Optional[int] = None, fire_at_us: Optional[int] = None):
        super().__init__(f"{status} {code}: {message}" + (f" (retry after {retry_after:g} s)" if retry_after else ""))
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        # A conflict's pending version (409 exists, 409 version_mismatch), and for exists its
        # deadline; None otherwise.
        self.version = version
        self.fire_at_us = fire_at_us

    @property
    def conflict(self) -> bool:
        """A conditional write the key's state refused (409 exists or version_mismatch):
        nothing changed; version names the pending timer."""
        return self.code in ("exists", "version_mismatch")

    @property
    def not_found(self) -> bool:
        """Nothing pending (or no dead letter) under the key. After a retried cancel it may
        mean an earlier attempt removed it."""
        return self.code == "not_found"


class TransportError(PunctualError):
    """No answer: the connection failed, or an attempt ran out of time."""


class WebhookVerificationError(PunctualError):
    """A delivery whose signature does not verify (or whose timestamp is too far off)."""
