"""Session tickets (spec §7.2) and short tickets (spec §7.3).

    ticket = tid(10) || n(24) || Seal(ticket_key, n, k || kid || u32 expiry, AD = tid)

The client keeps a ticket with the session key it held when it received it
and presents ``ticket[10..]`` in its cookie. Sealing and opening (the
server's side) are here too, for tests and the vectors.

A short ticket is a project extension the client asks for with the inner
request field ``Ticket: short``: the server draws ``h`` and derives
``k' = SHA3-256("hc1-short-ticket" || ticket_key || tid || kid || h)``; the
``Ticket`` field carries ``tid || h || k'`` (78 characters, where a v1 ticket
has 128), the cookie only ``tid`` and ``h``, and requests presenting it are
sealed under ``k'``."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from . import b64
from .errors import ProtocolError
from .suite import KID_LEN, NONCE_LEN, TAG_LEN, XChaCha, sha3_256

PLAIN_LEN = 32 + KID_LEN + 4
SEALED_LEN = NONCE_LEN + PLAIN_LEN + TAG_LEN
TICKET_LEN = KID_LEN + SEALED_LEN
TICKET_FIELD = "Ticket"
SHORT_H_LEN = 16  # a short ticket's random part h (the cookie value)
SHORT_TICKET_LEN = KID_LEN + SHORT_H_LEN + 32  # tid || h || k' as the field carries it
ASK_SHORT = "short"  # the inner request field Ticket: short asks for one
DECLINE = "none"  # Ticket: none declines any ticket: a one-shot client (spec §7.3)
_SHORT_LABEL = b"hc1-short-ticket"


@dataclass(frozen=True)
class Ticket:
    """A ticket as the server issued it (96 bytes)."""

    raw: bytes

    @property
    def tid(self) -> bytes:
        """The ticket-key ID (the cookie name)."""
        return self.raw[:KID_LEN]

    @property
    def sealed(self) -> bytes:
        """``ticket[10..]`` (the cookie value)."""
        return self.raw[KID_LEN:]

    def to_field(self) -> str:
        """The inner ``Ticket`` field value."""
        return b64.encode(self.raw)

    @classmethod
    def from_field(cls, value: str) -> Ticket:
        """Parses an inner ``Ticket`` value (128 characters)."""
        return cls(b64.decode_exact(value, TICKET_LEN))


@dataclass(frozen=True)
class TicketContents:
    """What a ticket carries."""

    session_key: bytes
    kid: bytes
    expiry: int


@dataclass(frozen=True)
class TicketKey:
    """A server's ticket key."""

    tid: bytes
    key: bytes

    def seal(self, contents: TicketContents, n: bytes) -> Ticket:
        """Seals ``contents`` under nonce ``n``."""
        plain = contents.session_key + contents.kid + struct.pack(">I", contents.expiry)
        return Ticket(self.tid + n + XChaCha(self.key).seal(n, plain, self.tid))

    def short_key(self, kid: bytes, h: bytes) -> bytes:
        """The key ``k'`` of the short ticket ``(tid, h)`` issued for a
        session under ``kid`` (spec §7.3)."""
        return sha3_256(_SHORT_LABEL, self.key, self.tid, kid, h)

    def issue_short(self, kid: bytes, h: bytes) -> ShortTicket:
        """A short ticket with the random part ``h`` (fresh per ticket) for
        a session under ``kid``."""
        return ShortTicket(self.tid, h, self.short_key(kid, h))

    def open(self, sealed: bytes, now: int) -> TicketContents:
        """Opens ``ticket[10..]``; any failure or expiry is ``unknown_key``."""
        if len(sealed) != SEALED_LEN:
            raise ProtocolError("unknown_key", "ticket of the wrong length")
        n = sealed[:NONCE_LEN]
        try:
            plain = XChaCha(self.key).open(n, sealed[NONCE_LEN:], self.tid)
        except ProtocolError:
            raise ProtocolError("unknown_key", "ticket does not open") from None
        (expiry,) = struct.unpack(">I", plain[32 + KID_LEN:])
        if now > expiry:
            raise ProtocolError("unknown_key", "ticket expired")
        return TicketContents(plain[:32], plain[32:32 + KID_LEN], expiry)


@dataclass(frozen=True)
class ShortTicket:
    """A short ticket as the client holds it (spec §7.3): the cookie parts
    ``tid`` and ``h``, and the key ``k'`` requests presenting it are sealed
    under (never shown by ``repr``)."""

    tid: bytes
    h: bytes
    key: bytes = field(repr=False)

    def to_field(self) -> str:
        """The inner ``Ticket`` field value: ``b64u(tid || h || k')``."""
        return b64.encode(self.tid + self.h + self.key)

    @classmethod
    def from_field(cls, value: str) -> ShortTicket:
        """Parses a short ``Ticket`` value (78 characters)."""
        raw = b64.decode_exact(value, SHORT_TICKET_LEN)
        return cls(raw[:KID_LEN], raw[KID_LEN:KID_LEN + SHORT_H_LEN],
                   raw[KID_LEN + SHORT_H_LEN:])


def parse_ticket_field(value: str) -> Ticket | ShortTicket:
    """A ``Ticket`` response field of either form; its length tells which
    (78 characters: short, spec §7.3; otherwise a v1 ticket, §7.2)."""
    if len(value) == b64.encoded_len(SHORT_TICKET_LEN):
        return ShortTicket.from_field(value)
    return Ticket.from_field(value)


def suite2_tid(tid: bytes) -> bytes:
    """The ID under which a server's suite-2 key table holds the ticket key
    ``tid`` for short tickets (spec/hybrid.md, spec §7.3): a short ticket
    names no kid, so the suite-2 ID must differ from the suite-1 one."""
    return sha3_256(b"hc1-short-ticket-suite2", tid)[:KID_LEN]
