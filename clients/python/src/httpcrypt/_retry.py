"""Retry bookkeeping shared by the drivers (spec §11.5): at most one retry
on ``unknown-key``, one on ``stale`` and one on ``token-required``; none
for a streamed body (it cannot be sent twice); never on ``replay``."""

from __future__ import annotations

from .errors import HTTPCryptError


class Retries:
    """Counts attempts and allows each retryable error once."""

    def __init__(self, replayable: bool):
        self.replayable = replayable
        self.attempts = 0
        self._used: set[str] = set()

    @property
    def own_date(self) -> bool:
        """After a ``stale`` answer the corrected clock writes ``Date``."""
        return "stale" in self._used

    def next(self) -> int:
        """Starts an attempt; returns its number (from 1)."""
        self.attempts += 1
        return self.attempts

    def allow(self, error: HTTPCryptError) -> None:
        """Returns if ``error`` (unknown_key, stale, token_required) may be
        retried; otherwise raises it."""
        if error.code in self._used or not self.replayable:
            raise error
        self._used.add(error.code)
