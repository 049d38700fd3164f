"""Retry bookkeeping shared by the drivers (spec §11.5): at most one retry
on ``unknown-key``, one on ``stale`` and one on ``token-required``; none
for a streamed body (it cannot be sent twice); never on ``replay``."""

from __future__ import annotations

from typing import Literal

from .errors import ProtocolError

Reason = Literal["unknown_key", "stale", "token"]
_CODES = {"unknown_key": "unknown_key", "stale": "stale", "token": "token_required"}


class Retries:
    """Counts attempts and allows each retry reason once."""

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

    def allow(self, reason: Reason) -> None:
        """Returns if ``reason`` may be retried, else raises its error."""
        if reason in self._used or not self.replayable:
            raise ProtocolError(_CODES[reason], f"{_CODES[reason]} (no further retry)")
        self._used.add(reason)
