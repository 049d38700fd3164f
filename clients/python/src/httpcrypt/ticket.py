"""Session tickets (spec §7.2).

    ticket = tid(10) || n(24) || Seal(ticket_key, n, k || kid || u32 expiry, AD = tid)

The client keeps a ticket with the session key it held when it received it
and presents ``ticket[10..]`` in its cookie. Sealing and opening (the
server's side) are here too, for tests and the vectors."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from . import b64
from .errors import ProtocolError
from .suite import KID_LEN, NONCE_LEN, TAG_LEN, XChaCha

PLAIN_LEN = 32 + KID_LEN + 4
SEALED_LEN = NONCE_LEN + PLAIN_LEN + TAG_LEN
TICKET_LEN = KID_LEN + SEALED_LEN
TICKET_FIELD = "Ticket"


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
