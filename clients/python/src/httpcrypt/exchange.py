"""One exchange on the client's side, without IO or state (spec §4, §7.2,
§7.3): :class:`PreparedRequest` derives ``k`` (or takes it from a ticket or
a short ticket), formats
the cookie and the targets, seals the request and opens the response
(whole, or incrementally with :class:`ResponseReader`); the chunk sealers
turn a caller's body into request records as it is read. The
:class:`~httpcrypt.client.Engine` plans attempts with them; the vectors pin
them."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Literal

from . import inner, outer
from .errors import ConfigError
from .hybrid import KemPublic, combine
from .inner import ResponseDecoder, ResponseHead
from .outer import Mount
from .stream import DEFAULT_MAX_RECORD, Opener, Sealer, host_bytes, open_all, seal_records
from .suite import NONCE_LEN, KexKey, hybrid_kid, kid
from .ticket import ShortTicket, Ticket

Credential = Literal["key", "ticket", "short_ticket"]
"""What a request's cookie presents: a public key, a v1 ticket, a short ticket."""


class PreparedRequest:
    """Everything one exchange needs: ``n0``, ``k`` and the cookie; for
    profile 2 also the outer Host that record 0 binds; for a fresh hybrid
    request the ML-KEM ciphertext ``ct_m`` that goes before the stream."""

    def __init__(self, n0: bytes, key: bytes, cookie: str,
                 credential: Credential, host: str | None = None,
                 ct_m: bytes = b""):
        self.n0 = n0
        self.session_key = key
        self.cookie = cookie
        self.credential = credential
        self.host = host
        self.profile = 1 if host is None else 2
        self.ct_m = ct_m

    @classmethod
    def for_key(cls, server_public: bytes, n0: bytes, name_pad: str = "", value_pad: str = "",
                *, client_secret: bytes | KexKey | None = None, ticket: Ticket | None = None,
                ticket_key: bytes | None = None, short_ticket: ShortTicket | None = None,
                host: str | None = None) -> PreparedRequest:
        """Derives ``k`` against the server key with ``client_secret``, or
        takes it from a ticket (``ticket_key`` is the session key it carries)
        or a short ticket (``k'``, spec §7.3). With ``host`` (the outer Host
        value to send) the request uses profile 2 (spec §4.5)."""
        if len(n0) != NONCE_LEN:
            raise ConfigError("n0 must be 24 bytes")
        if host is not None:
            host_bytes(host)  # bad_host above 65535 bytes
        if short_ticket is not None:
            cookie = outer.format_cookie(short_ticket.tid, short_ticket.h, name_pad, value_pad)
            return cls(n0, short_ticket.key, cookie, "short_ticket", host)
        if ticket is not None and ticket_key is not None:
            cookie = outer.format_cookie(ticket.tid, ticket.sealed, name_pad, value_pad)
            return cls(n0, ticket_key, cookie, "ticket", host)
        if client_secret is None:
            raise ConfigError("need a client secret or a ticket")
        ck = client_secret if isinstance(client_secret, KexKey) else KexKey(client_secret)
        k = ck.session_key(server_public)
        cookie = outer.format_cookie(kid(server_public), ck.public, name_pad, value_pad)
        return cls(n0, k, cookie, "key", host)

    @classmethod
    def for_hybrid(cls, kex_public: bytes, kem: KemPublic, n0: bytes, name_pad: str = "",
                   value_pad: str = "", *, client_secret: bytes | KexKey,
                   encapsulation: tuple[bytes, bytes] | None = None,
                   host: str | None = None) -> PreparedRequest:
        """A fresh hybrid request (spec/hybrid.md H1, H3) to the kex key
        ``kex_public`` and the checked encapsulation key ``kem``: ML-KEM
        encapsulation (``encapsulation`` gives ``(ct_m, ss_m)`` explicitly,
        as the vectors do), X25519 with ``client_secret`` (its public key is
        ``ct_X``, the cookie value), then the combiner."""
        if len(n0) != NONCE_LEN:
            raise ConfigError("n0 must be 24 bytes")
        if host is not None:
            host_bytes(host)
        ct_m, ss_m = encapsulation if encapsulation is not None else kem.encapsulate()
        ck = client_secret if isinstance(client_secret, KexKey) else KexKey(client_secret)
        k = combine(ss_m, ck.agree(kex_public), ck.public, kex_public)
        cookie = outer.format_cookie(hybrid_kid(kex_public, kem.hash), ck.public, name_pad,
                                     value_pad)
        return cls(n0, k, cookie, "key", host, bytes(ct_m))

    def sealer(self) -> Sealer:
        """A sealer for the request stream."""
        return Sealer.request(self.session_key, self.n0, self.host)

    def response_opener(self, max_record: int = DEFAULT_MAX_RECORD) -> Opener:
        """An opener for the response body."""
        return Opener.response(self.session_key, self.n0, max_record, self.profile)

    def nonce_path(self, mount: Mount) -> str:
        """The POST target: ``{mount}/{b64u(n0)}`` or ``{mount}/2{b64u(n0)}``."""
        return mount.nonce_path(self.n0, self.profile)

    def get_target(self, mount: Mount, stream: bytes) -> str:
        """The GET-form target: the nonce path, ``?``, ``b64u(ct_m || stream)``."""
        return mount.get_target(self.n0, self.ct_m + stream, self.profile)

    def encode_outer(self, form: Literal["post", "get"], mount: Mount, host: str,
                     stream: bytes) -> bytes:
        """The complete outer request in the canonical layout."""
        if self.host is not None and host != self.host:
            raise ConfigError("a profile-2 request must be sent with the Host it binds")
        if form == "post":
            body = self.ct_m + stream
            return outer.encode_request_head("post", self.nonce_path(mount), host,
                                             self.cookie, len(body)) + body
        return outer.encode_request_head("get", self.get_target(mount, stream), host,
                                         self.cookie)

    def open_response(self, body: bytes, max_record: int = DEFAULT_MAX_RECORD,
                      request_method: str = "GET") -> tuple[ResponseHead, bytes]:
        """Opens a whole response body and parses the inner response to a
        ``request_method`` request."""
        return inner.decode_response(open_all(self.response_opener(max_record), body),
                                     request_method=request_method)


class ResponseReader:
    """Feeds outer response bytes through the opener and the inner decoder;
    only verified plaintext comes out."""

    def __init__(self, prepared: PreparedRequest, max_record: int = DEFAULT_MAX_RECORD,
                 max_inner_head: int = inner.DEFAULT_MAX_INNER_HEAD,
                 max_inner_fields: int = inner.DEFAULT_MAX_INNER_FIELDS,
                 request_method: str = "GET"):
        self._opener = prepared.response_opener(max_record)
        self._decoder = ResponseDecoder(max_inner_head, max_inner_fields, request_method)
        self.head: ResponseHead | None = None
        self._body: list[bytes] = []

    def push(self, chunk: bytes) -> None:
        """Receives outer body bytes."""
        for plaintext in self._opener.feed(chunk):
            self._decoder.receive(plaintext)
            self._drain()

    def _drain(self) -> None:
        while (ev := self._decoder.pull()) is not None:
            if isinstance(ev, ResponseHead):
                self.head = ev
            else:
                self._body.append(ev)

    def take(self) -> list[bytes]:
        """Verified body chunks received so far."""
        out, self._body = self._body, []
        return out

    def end(self) -> None:
        """The outer body ended: the stream and the message must be complete."""
        self._opener.finish()
        self._drain()
        self._decoder.finish()


def seal_chunks_exact(sealer: Sealer, chunks: Iterable[bytes], record_size: int,
                      prefix: bytes, ct_m: bytes = b"") -> Iterator[bytes]:
    """Seals ``prefix`` then ``chunks`` into full records of ``record_size``
    (the FINAL one takes the rest), yielding records as they fill, so the
    outer length is known in advance from the plaintext length. A hybrid
    request's ML-KEM ciphertext ``ct_m`` goes first, as it is."""
    if ct_m:
        yield ct_m
    pending = bytearray(prefix)
    for chunk in chunks:
        if not chunk:
            continue
        pending += chunk
        if len(pending) > record_size:
            yield _seal_full(sealer, pending, record_size)
    yield sealer.finish(bytes(pending))


async def aseal_chunks(sealer: Sealer, chunks: AsyncIterable[bytes], record_size: int,
                       prefix: bytes, ct_m: bytes = b"") -> AsyncIterator[bytes]:
    """:func:`seal_chunks_exact` for an async body."""
    if ct_m:
        yield ct_m
    pending = bytearray(prefix)
    async for chunk in chunks:
        if not chunk:
            continue
        pending += chunk
        if len(pending) > record_size:
            yield _seal_full(sealer, pending, record_size)
    yield sealer.finish(bytes(pending))


def _seal_full(sealer: Sealer, pending: bytearray, record_size: int) -> bytes:
    """Seals the full records of ``pending`` (leaving 1..record_size bytes)."""
    records, taken = seal_records(sealer, pending, record_size, final=False)
    del pending[:taken]
    return b"".join(records)


__all__ = ["PreparedRequest", "ResponseReader", "aseal_chunks", "seal_chunks_exact"]
