"""The server's side of one exchange, without IO (spec §4, §7.2, §7.3, §11): judge
an outer request, find the key, open the request stream, seal the response.

The Python package is a client; this module exists so the shared vectors'
server-side kinds (``exchange``, ``server_request``, ``service_request``) and
in-memory tests can run both ends of an exchange. Every key takes both request
profiles: a 33-character nonce segment led by ``2`` is profile 2 (spec §4.5),
whose record 0 binds the outer Host as parsed. Suite-2 keys (spec/hybrid.md
H3) sit beside the v1 ones under their own key IDs: a fresh request to one
carries the ML-KEM ciphertext before its stream, and a server that holds a
kex key only as suite 2 refuses v1 requests to it (``hybrid_required``).
A short ticket (spec §7.3) is accepted under a ticket key that came with a
kex key still held, and runs under that key's kid."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import inner, outer
from .cert import KeyCert
from .date import DEFAULT_WINDOW, check_date, check_nonce_time, format_date
from .errors import ProtocolError
from .hybrid import CIPHERTEXT_LEN, HybridCert, KemSecret, decapsulate
from .outer import Credential, Mount
from .stream import DEFAULT_MAX_RECORD, Opener, Sealer, host_bytes, open_all, seal_all
from .suite import kid as classical_kid
from .suite import session_key
from .ticket import SHORT_H_LEN, TicketKey


@dataclass
class Limits:
    """Receiver limits (spec §3.6, §4.3, §11.6)."""

    max_record: int = DEFAULT_MAX_RECORD
    max_inner_head: int = inner.DEFAULT_MAX_INNER_HEAD
    max_inner_fields: int = inner.DEFAULT_MAX_INNER_FIELDS
    max_body: int = 16 << 20


@dataclass(frozen=True)
class HybridKey:
    """A suite-2 key: the kex secret, the ML-KEM key pair and the certificate."""

    secret: bytes
    kem: KemSecret
    cert: HybridCert


@dataclass
class ServerKeys:
    """The kex keys ``(secret, cert)``, ticket keys ``(key, expires)`` and
    suite-2 keys held; ``ticket_kids`` names the kex key (v1 or suite-2
    kid) each ticket key came with, by ``tid``: only those take short
    tickets (spec §7.3), which run under that kid."""

    keys: list[tuple[bytes, KeyCert]] = field(default_factory=list)
    tickets: list[tuple[TicketKey, int]] = field(default_factory=list)
    hybrid: list[HybridKey] = field(default_factory=list)
    ticket_kids: dict[bytes, bytes] = field(default_factory=dict)

    def hybrid_key(self, kid: bytes, now: int) -> HybridKey | None:
        """The unexpired suite-2 key with ID ``kid``."""
        for hk in self.hybrid:
            if now <= hk.cert.not_after and hk.cert.kid == kid:
                return hk
        return None

    def _classical_only_hybrid(self, now: int) -> dict[bytes, str]:
        """v1 key IDs of kex keys held only as suite 2."""
        v1 = self.lookup(now)
        return {k: "key" for hk in self.hybrid
                if now <= hk.cert.not_after
                and (k := classical_kid(hk.cert.kex_public)) not in v1}

    def key(self, kid: bytes, now: int) -> tuple[bytes, KeyCert] | None:
        """The unexpired kex key with ID ``kid`` (spec §13 D18)."""
        for secret, cert in self.keys:
            if now <= cert.not_after and cert.kid == kid:
                return secret, cert
        return None

    def ticket_key(self, tid: bytes, now: int) -> TicketKey | None:
        """The unexpired ticket key with ID ``tid``."""
        for tk, expires in self.tickets:
            if now <= expires and tk.tid == tid:
                return tk
        return None

    def ticket_key_for(self, kid: bytes, now: int) -> TicketKey | None:
        """The newest unexpired ticket key that came with the kex key
        ``kid``: the one short tickets of sessions under ``kid`` are issued
        under (spec §7.3)."""
        for tk, expires in reversed(self.tickets):
            if now <= expires and self.ticket_kids.get(tk.tid) == kid:
                return tk
        return None

    def short_ticket_key(self, tid: bytes, now: int) -> tuple[bytes, TicketKey]:
        """The kid and ticket key of short tickets under ``tid``: the ticket
        key must be unexpired and have come with a kex key still held (the
        caller found ``tid`` in :meth:`lookup`). Otherwise ``unknown_key``."""
        tk = self.ticket_key(tid, now)
        kid = self.ticket_kids.get(tid)
        if tk is None or kid is None:
            raise ProtocolError("unknown_key", "no ticket key with a kex key for this tid")
        if self.key(kid, now) is None and self.hybrid_key(kid, now) is None:
            raise ProtocolError("unknown_key", "the short ticket's kex key is gone")
        return kid, tk

    def open_short_ticket(self, tid: bytes, h: bytes, now: int) -> tuple[bytes, bytes]:
        """The kid and key ``k'`` of the short ticket ``(tid, h)`` at ``now``."""
        if len(h) != SHORT_H_LEN:
            raise ProtocolError("bad_cookie", "a short ticket's h is 16 bytes")
        kid, tk = self.short_ticket_key(tid, now)
        return kid, tk.short_key(kid, h)

    def lookup(self, now: int) -> dict[bytes, str]:
        """ID -> kind of every unexpired key (kex keys first)."""
        out: dict[bytes, str] = {}
        for tk, expires in self.tickets:
            if now <= expires:
                out[tk.tid] = "ticket"
        for _, cert in self.keys:
            if now <= cert.not_after:
                out[cert.kid] = "key"
        for hk in self.hybrid:
            if now <= hk.cert.not_after:
                out[hk.cert.kid] = "key"
        return out


@dataclass
class OuterRequest:
    """An outer request parsed from raw HTTP/1.1 bytes (Content-Length
    framing only; ``body`` is everything after the head)."""

    method: str
    target: str
    host: str | None
    cookies: list[str]
    content_length: int | None
    body: bytes
    fields: inner.Fields = field(default_factory=list)  # every outer field, in order

    @classmethod
    def parse(cls, data: bytes) -> OuterRequest:
        """Parses a complete request head and takes the rest as the body."""
        end = data.find(b"\r\n\r\n")
        if end < 0:
            raise ProtocolError("truncated", "incomplete outer request head")
        lines = data[:end].decode("latin-1").split("\r\n")
        m = re.fullmatch(r"([!#$%&'*+\-.^_`|~0-9A-Za-z]+) (\S+) HTTP/1\.[01]", lines[0])
        if m is None:
            raise ProtocolError("truncated", "bad outer request line")
        fields = []
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise ProtocolError("truncated", "bad outer field")
            fields.append((name, value.strip(" \t")))
        cl = inner.field_value(fields, "content-length")
        return cls(
            m.group(1), m.group(2), inner.field_value(fields, "host"),
            [v for n, v in fields if n.lower() == "cookie"],
            int(cl) if cl is not None and cl.isascii() and cl.isdigit() else None,
            data[end + 4:],
            fields,
        )


@dataclass
class Accepted:
    """A request whose key agreement succeeded."""

    kid: bytes
    n0: bytes
    query_stream: bytes | None
    credential: Credential
    session_key: bytes
    profile: int = 1
    host: str = ""  # the outer Host as parsed (bound by profile 2)
    stream_offset: int = 0  # where the POST body's stream starts (after a hybrid ct_M)


def accept(keys: ServerKeys, mount: Mount, req: OuterRequest, limits: Limits,
           now: int) -> Accepted | str:
    """Judges an outer request in the order of spec §11.1. Returns the
    route kind (``outside``, ``options``, …) when it is no HTTPCrypt request."""
    r = None
    try:
        r = outer.route(req.method, req.target, mount)
    except ProtocolError as e:
        route_error: ProtocolError | None = e
    else:
        route_error = None
        if r.kind not in ("post", "get"):
            return r.kind
    if not req.host:
        raise ProtocolError("bad_host", "missing Host")
    if route_error is not None:
        raise route_error
    assert r is not None and r.n0 is not None
    if r.profile == 2:
        host_bytes(req.host)  # bad_host above 65535 bytes (spec §11.1 step 3)
    query_stream = None
    if r.kind == "post":
        if req.content_length is not None and req.content_length > limits.max_body:
            raise ProtocolError("body_too_large", "body above the limit")
    else:
        if req.body:
            raise ProtocolError("bad_query", "GET form with a body")
        query_stream = outer.decode_query(r.query or "", limits.max_body)
    try:
        cred = outer.scan_cookies(req.cookies, keys.lookup(now))
    except ProtocolError as e:
        if e.code != "unknown_key":
            raise
        try:
            outer.scan_cookies(req.cookies, keys._classical_only_hybrid(now))
        except ProtocolError:
            raise e from None
        raise ProtocolError("hybrid_required", "this key takes hybrid requests only") from None
    if cred.kind == "key" and (hk := keys.hybrid_key(cred.id, now)) is not None:
        # spec/hybrid.md H3: ct_M leads the body (or decoded query).
        data = query_stream if query_stream is not None else req.body
        k = decapsulate(hk.secret, hk.kem, cred.value, data[:CIPHERTEXT_LEN])
        if query_stream is not None:
            query_stream = query_stream[CIPHERTEXT_LEN:]
        return Accepted(cred.id, r.n0, query_stream, cred, k, r.profile, req.host,
                        0 if query_stream is not None else CIPHERTEXT_LEN)
    if cred.kind == "key":
        held = keys.key(cred.id, now)
        if held is None:
            raise ProtocolError("unknown_key", "key expired")
        return Accepted(cred.id, r.n0, query_stream, cred, session_key(held[0], cred.value),
                        r.profile, req.host)
    if cred.kind == "short_ticket":
        kid, k = keys.open_short_ticket(cred.id, cred.value, now)
        return Accepted(kid, r.n0, query_stream, cred, k, r.profile, req.host)
    tk = keys.ticket_key(cred.id, now)
    if tk is None:
        raise ProtocolError("unknown_key", "ticket key expired")
    contents = tk.open(cred.value, now)
    if keys.key(contents.kid, now) is None and keys.hybrid_key(contents.kid, now) is None:
        raise ProtocolError("unknown_key", "ticket's key expired")
    return Accepted(contents.kid, r.n0, query_stream, cred, contents.session_key, r.profile,
                    req.host)


def open_request(acc: Accepted, body: bytes, limits: Limits) -> tuple[inner.RequestHead, bytes]:
    """Opens the request stream (body or GET query) and parses the inner request."""
    data = acc.query_stream if acc.query_stream is not None else body[acc.stream_offset:]
    host = acc.host if acc.profile == 2 else None
    plaintext = open_all(Opener.request(acc.session_key, acc.n0, limits.max_record, host), data)
    return inner.decode_request(plaintext, limits.max_inner_head, limits.max_inner_fields)


def check_fresh(acc: Accepted, head: inner.RequestHead, now: int,
                window: int = DEFAULT_WINDOW) -> int:
    """The freshness check of spec §8.1 (``stale``): the inner ``Date`` for
    v1, the time in ``n0`` for profile 2 (whose inner ``Date``, if any, is
    not judged). Returns the request's time."""
    if acc.profile == 2:
        return check_nonce_time(acc.n0, now, window)
    return check_date(inner.field_value(head.fields, "date"), now, window)


def serve_bytes(keys: ServerKeys, mount: Mount, limits: Limits, now: int,
                data: bytes) -> tuple[Accepted, inner.RequestHead, bytes]:
    """The whole server side of one exchange held in memory."""
    req = OuterRequest.parse(data)
    acc = accept(keys, mount, req, limits, now)
    if isinstance(acc, str):
        raise ProtocolError("bad_nonce_path", f"not an HTTPCrypt request ({acc})")
    head, body = open_request(acc, req.body, limits)
    return acc, head, body


PROTOCOL_FIELDS = ("date", "client-random", "random", "ticket")
"""Inner request fields the server consumes (spec §4.3, erratum E1): the
freshness ``Date`` (§8.1), the token fields ``Client-Random`` and ``Random``
(§8.4) and ``Ticket`` (§7.2). They never reach the service."""


@dataclass
class ServiceRequest:
    """What the service is handed (spec §4.3, erratum E1): ``head`` and
    ``body`` built from the inner request alone, and apart from them the
    allow-listed outer fields, which nothing authenticated."""

    head: inner.RequestHead
    body: bytes
    outer_fields: inner.Fields


def service_request(keys: ServerKeys, mount: Mount, limits: Limits, now: int, data: bytes,
                    authority: str | None = None,
                    pass_outer: tuple[str, ...] | list[str] = ()) -> ServiceRequest:
    """Serves the outer request ``data`` and builds the service's request.

    The fields are the inner ones in order but the protocol's own
    (``PROTOCOL_FIELDS``). Where the inner head has no ``Host``, one goes
    first: the outer Host a profile-2 stream binds, else ``authority`` (the
    configured name), else none; an outer Host nothing authenticated never
    reaches the service. ``pass_outer`` names the outer fields handed over
    apart: each name in list order, its values in outer order. No other
    outer field takes part."""
    req = OuterRequest.parse(data)
    acc = accept(keys, mount, req, limits, now)
    if isinstance(acc, str):
        raise ProtocolError("bad_nonce_path", f"not an HTTPCrypt request ({acc})")
    head, body = open_request(acc, req.body, limits)
    fields: inner.Fields = []
    if inner.field_value(head.fields, "host") is None:
        host = acc.host if acc.profile == 2 else authority
        if host is not None:
            fields.append(("Host", host))
    fields += [(n, v) for n, v in head.fields if n.lower() not in PROTOCOL_FIELDS]
    passed = [(n, v) for name in pass_outer for n, v in req.fields
              if n.lower() == name.lower()]
    return ServiceRequest(inner.RequestHead(head.method, head.target, fields), body, passed)


def seal_response(acc: Accepted, n0: bytes, head: inner.ResponseHead, body: bytes, now: int,
                  record_size: int = 16384) -> bytes:
    """The response body for the inner response.

    v1: ``n0 || stream`` (``n0`` 24 bytes); Date and Content-Length are
    added if absent. Profile 2 (``acc.profile == 2``): ``r || stream`` with
    ``n0`` the 16 random bytes ``r``; no Date is added (a ``stale`` answer
    carries it in ``head``), and Content-Length only when the inner response
    does not fit one FINAL record 0 (spec §4.5)."""
    fields = list(head.fields)
    if acc.profile == 2:
        plaintext = inner.ResponseHead(head.status, head.reason, fields).format() + body
        if (len(plaintext) > max(record_size, 1)
                and inner.field_value(fields, "content-length") is None):
            fields.append(("Content-Length", str(len(body))))
            plaintext = inner.ResponseHead(head.status, head.reason, fields).format() + body
        return n0 + seal_all(Sealer.response2(acc.session_key, acc.n0, n0), plaintext,
                             record_size)
    if inner.field_value(fields, "date") is None:
        fields.append(("Date", format_date(now)))
    if inner.field_value(fields, "content-length") is None:
        fields.append(("Content-Length", str(len(body))))
    plaintext = inner.ResponseHead(head.status, head.reason, fields).format() + body
    return n0 + seal_all(Sealer.response(acc.session_key, acc.n0, n0), plaintext, record_size)
