"""The engine's per-host state (:class:`HostState`), one outer request it
planned (:class:`Attempt`), and what a middlebox saw of an exchange
(:class:`ExchangeInfo`): the data :class:`~httpcrypt.client.Engine` works
on."""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass, field

from .cert import DiscoveredKey
from .exchange import Credential, PreparedRequest
from .short import HeldShort
from .suite import KexKey
from .ticket import Ticket


@dataclass
class HostState:
    """What the engine keeps per host (authority)."""

    keys: list[DiscoveredKey] = field(default_factory=list)
    fetched: float = 0.0
    max_age: int = 0
    secret: KexKey | None = None
    ticket: tuple[Ticket, bytes] | None = None
    token: tuple[str, bytes] | None = None
    clock_offset: int = 0
    admit: tuple[bytes, float] | None = None  # admission cookie, when received
    ticket_suite: int = 1  # the suite of the session the ticket came from
    short: HeldShort | None = None  # the last short ticket (spec §7.3), apart from the v1 one
    pin_until: int = 0  # suite 2 is pinned through this time (spec/hybrid.md H5)
    skip_pq: bool = False  # this discovery found no suite 2: ask OPTIONS {mount}/ next


@dataclass
class ExchangeInfo:
    """What a middlebox saw of an exchange, attached to responses."""

    method: str
    url: str
    request_headers: list[tuple[str, str]]
    credential: Credential
    status: int = 0
    attempts: int = 1
    admission: int | None = None  # difficulty of the admission echo sent, if one was
    profile: int = 1  # 2 for a compact request (spec §4.5)
    suite: int = 1  # 2 for a hybrid session (spec/hybrid.md), fresh or resumed


@dataclass
class Attempt:
    """One outer request to send. ``body`` is bytes, a (sync or async)
    iterable of sealed chunks, or None (GET form)."""

    scheme: str
    authority: str
    prepared: PreparedRequest
    method: str
    url: str
    headers: list[tuple[str, str]]
    body: bytes | Iterable[bytes] | AsyncIterable[bytes] | None
    content_length: int | None
    inner_method: str
    admission: int | None = None
    suite: int = 1

    def info(self, attempts: int) -> ExchangeInfo:
        """The outer view of this attempt."""
        return ExchangeInfo(self.method, self.url, list(self.headers),
                            self.prepared.credential, attempts=attempts,
                            admission=self.admission, profile=self.prepared.profile,
                            suite=self.suite)
