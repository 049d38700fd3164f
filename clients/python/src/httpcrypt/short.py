"""When a client asks for a short ticket (spec §7.3), without IO or locks:
:class:`ShortPolicy` (R requests, T seconds) and :class:`ShortUse`, the
count and clock of the short ticket a client holds for a host.
:class:`~httpcrypt.client.Engine` holds the state and calls these.

The client asks (inner field ``Ticket: short``) on its first request to a
host, presents the short ticket it holds on later ones, and asks again on
the request that uses it for the R-th time or once T seconds have passed
since its first use. A new ticket starts the count again, and so does the
ask itself, so requests sent before the new ticket arrives (concurrent
ones) present the held ticket without asking too. Requests that present
one ticket are linkable to each other, as requests under one reused key
pair are: R and T bound that set."""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import ConfigError
from .ticket import ShortTicket

SHORT_TICKET_REUSE = 16  # R: requests per short ticket
SHORT_TICKET_MAX_AGE = 600.0  # T: seconds after its first use


@dataclass(frozen=True)
class ShortPolicy:
    """When to ask for a new short ticket: ``reuse`` requests per ticket (at
    least 1; 1 asks on every request, so no two requests share a ticket),
    ``max_age`` seconds after its first use."""

    reuse: int = SHORT_TICKET_REUSE
    max_age: float = SHORT_TICKET_MAX_AGE

    def __post_init__(self) -> None:
        if self.reuse < 1:
            raise ConfigError("short_ticket_reuse must be at least 1")
        if self.max_age < 0:
            raise ConfigError("short_ticket_max_age must not be negative")


@dataclass
class ShortUse:
    """How much a held short ticket has been used: requests that presented
    it since it arrived or was last asked about, and when that count
    started (its first use, or the last request that asked)."""

    uses: int = 0
    first_used: float | None = None

    def asks(self, policy: ShortPolicy, now: float) -> bool:
        """Whether a request at ``now`` asks for a new ticket: on the
        ticket's last use, or once it is ``max_age`` old."""
        return (self.uses + 1 >= policy.reuse
                or (self.first_used is not None and now >= self.first_used + policy.max_age))

    def used(self, now: float) -> None:
        """Counts one request at ``now`` that presented the ticket."""
        self.uses += 1
        if self.first_used is None:
            self.first_used = now

    def asked(self, now: float) -> None:
        """Notes that a request at ``now`` asked for a new ticket: the count
        starts again, so the requests sent before the new ticket arrives
        present this one without asking too."""
        self.uses = 0
        self.first_used = now


@dataclass
class HeldShort:
    """A short ticket a client holds, the suite of the session it came from
    (a hybrid session's ticket resumes it as hybrid), and its use."""

    ticket: ShortTicket
    suite: int
    use: ShortUse = field(default_factory=ShortUse)


def asks(held: HeldShort | None, policy: ShortPolicy, now: float) -> bool:
    """Whether the next request at ``now`` asks for a short ticket: when
    none is held, or when the held one is due under ``policy``."""
    return held is None or held.use.asks(policy, now)


__all__ = ["SHORT_TICKET_MAX_AGE", "SHORT_TICKET_REUSE", "HeldShort", "ShortPolicy", "ShortUse",
           "asks"]
