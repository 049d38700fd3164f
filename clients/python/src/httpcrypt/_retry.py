"""Retry bookkeeping shared by the drivers (spec §11.5, §14.5): at most one
retry on ``unknown-key``, one on ``stale`` and one on ``token-required``;
one on ``no_cookie`` (a refused short ticket, dropped: spec §7.3);
admission challenges and ``busy`` answers together at most
:data:`ADMISSION_RETRIES` times; none for a streamed body (it cannot be
sent twice); never on ``replay``."""

from __future__ import annotations

from .errors import HTTPCryptError

ADMISSION_RETRIES = 3
MAX_BUSY_WAIT = 5.0
_ADMISSION_CODES = frozenset({"admission_required", "busy"})


class Retries:
    """Counts attempts and allows each retryable error once (the admission
    answers up to three times between them)."""

    def __init__(self, replayable: bool):
        self.replayable = replayable
        self.attempts = 0
        self.admission = 0
        self._used: set[str] = set()

    @property
    def own_date(self) -> bool:
        """After a ``stale`` answer the corrected clock writes ``Date``."""
        return "stale" in self._used

    def next(self) -> int:
        """Starts an attempt; returns its number (from 1)."""
        self.attempts += 1
        return self.attempts

    def allow(self, error: HTTPCryptError) -> float:
        """Returns if ``error`` (unknown_key, stale, token_required, no_cookie,
        admission_required, busy) may be retried, with the seconds to wait
        first (``busy``: ``min(retry_after, 5)``, else 0); otherwise raises it."""
        if not self.replayable:
            raise error
        if error.code in _ADMISSION_CODES:
            if self.admission >= ADMISSION_RETRIES:
                raise error
            self.admission += 1
            wait = getattr(error, "retry_after", None)
            return min(max(wait, 0.0), MAX_BUSY_WAIT) if wait else 0.0
        if error.code in self._used:
            raise error
        self._used.add(error.code)
        return 0.0
