"""Short tickets on the client's side (spec §7.3) without a network: the
policy (``httpcrypt.short``), then the engine, the httpx transports and the
requests adapter against the package's server side issuing short tickets
when asked, as the Rust server does. Ask on the first request, present on
later ones, ask again on the R-th use and after T seconds, no ask from a
request sent after an ask and before its answer, drop and retry with a key
after a refusal; the v1 behaviour with short tickets off; suite 2 and
profile 2; a token that comes with a short ticket bound to its key ``k'``."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from httpcrypt import b64, hybrid, inner, outer, server, token
from httpcrypt._retry import Retries
from httpcrypt.cert import KeyCert
from httpcrypt.client import Attempt, Engine
from httpcrypt.errors import ConfigError, ProtocolError, RefusedError, TokenRequiredError
from httpcrypt.httpx_transport import AsyncHTTPCryptTransport, HTTPCryptTransport
from httpcrypt.inner import ResponseHead
from httpcrypt.short import HeldShort, ShortPolicy, ShortUse, asks
from httpcrypt.suite import ed25519_public, x25519_public
from httpcrypt.ticket import ShortTicket, TicketContents, TicketKey, suite2_tid

from .live import DRIVERS
from .test_pq import serve_fake

A = "h.test"
NOW = 1_700_000_000.0


# ---- the policy alone ----

def test_policy_asks_on_the_rth_use_and_after_t_seconds() -> None:
    policy = ShortPolicy(reuse=3, max_age=600)
    assert asks(None, policy, NOW), "none held: ask"
    held = HeldShort(ShortTicket(b"t" * 10, b"h" * 16, b"k" * 32), 1)
    # Uses 1 and 2 do not ask; use 3 (the last) does.
    for at, want in ((NOW, False), (NOW + 1, False), (NOW + 2, True)):
        assert asks(held, policy, at) is want, at
        held.use.used(at)
    # Age counts from the first use.
    fresh = ShortUse()
    fresh.used(NOW)
    assert not fresh.asks(ShortPolicy(16, 600), NOW + 599.9)
    assert fresh.asks(ShortPolicy(16, 600), NOW + 600)
    # An ask starts the count and the clock again.
    fresh.asked(NOW + 600)
    assert fresh == ShortUse(0, NOW + 600)
    assert not fresh.asks(ShortPolicy(16, 600), NOW + 1199)
    # R = 1: every request asks, so no two requests share a ticket.
    assert ShortUse().asks(ShortPolicy(1, 600), NOW)
    with pytest.raises(ConfigError):
        ShortPolicy(reuse=0)
    with pytest.raises(ConfigError):
        Engine(short_ticket_max_age=-1)


def test_repr_hides_the_key() -> None:
    t = ShortTicket(b"t" * 10, b"h" * 16, b"secret-key-bytes" * 2)
    assert "secret" not in repr(t) and "key" not in repr(t)


# ---- an in-memory server that issues short tickets ----

class ShortFake:
    """One kex key and its ticket key (paired, so short tickets work), as
    v1 (``suite=1``) or suite-2 (``suite=2``, the ticket key held under
    ``suite2_tid`` for the hybrid kid) keys. Issues a short ticket when the
    request asks, else a v1 ticket unless it presented a short one (spec
    §7.3); a ``Random`` token for every ``Client-Random``, bound to the
    short ticket's key ``k'`` when the answer issues one, else to the
    request's key (spec §7.3, §8.4); with ``require_token``, an unsafe
    request without a token for its key is answered 425 ``token-required``."""

    def __init__(self, now: float = NOW, suite: int = 1, version: int = 1) -> None:
        self.now = int(now)
        self.suite = suite
        self.version = version
        self.seed = os.urandom(32)
        self.token_secret = os.urandom(32)
        self.require_token = False
        self.mount = outer.Mount("/hc")
        self.seen: list[tuple[server.Accepted, inner.RequestHead]] = []
        self.issued: list[ShortTicket] = []
        self.rotate(7)

    def rotate(self, serial: int, ticket_key_only: bool = False) -> None:
        """A new ticket key (and kex key): tickets of the old one are unknown."""
        if not ticket_key_only:
            self.secret = os.urandom(32)
            pub = x25519_public(self.secret)
            self.cert = KeyCert.sign(self.seed, serial, self.now - 60, self.now + 7200, pub,
                                     self.version)
            self.kem = hybrid.KemSecret(os.urandom(64))
            self.hcert = hybrid.HybridCert.sign(self.seed, serial, self.now - 60,
                                                self.now + 7200, pub, self.kem.public.hash,
                                                self.version)
        self.tk = TicketKey(os.urandom(10), os.urandom(32))
        exp = self.now + 7200
        if self.suite == 1:
            self.keys = server.ServerKeys([(self.secret, self.cert)], [(self.tk, exp)],
                                          ticket_kids={self.tk.tid: self.cert.kid})
        else:
            short = TicketKey(suite2_tid(self.tk.tid), self.tk.key)
            self.keys = server.ServerKeys(
                [], [(self.tk, exp), (short, exp)],
                [server.HybridKey(self.secret, self.kem, self.hcert)],
                ticket_kids={short.tid: self.hcert.kid})

    @property
    def identity(self) -> bytes:
        return ed25519_public(self.seed)

    def options(self, path: str) -> tuple[int, bytes]:
        if self.suite == 2:
            if path != "/hc/pq":
                return 404, b""
            return 200, hybrid.format_cert_list([self.hcert], [self.kem.public]).encode()
        if path != "/hc/":
            return 404, b""
        return 200, (self.cert.to_text() + "\n").encode()

    def serve(self, raw: bytes) -> tuple[int, bytes]:
        try:
            acc, head, body = server.serve_bytes(self.keys, self.mount, server.Limits(),
                                                 self.now, raw)
        except ProtocolError as e:
            if e.code == "unknown_key":
                certs = [self.cert.to_text()] if self.suite == 1 else []
                hcerts = [self.hcert.to_text()] if self.suite == 2 else None
                return 400, outer.format_problem("urn:httpcrypt:unknown-key", 400, "x",
                                                 certs, hcerts)
            return 400, outer.format_problem("urn:httpcrypt:malformed", 400, e.code)
        self.seen.append((acc, head))
        k = acc.session_key
        token_key = k
        fields: list[tuple[str, str]] = []
        if inner.field_value(head.fields, "ticket") == "short":
            tk = self.keys.ticket_key_for(acc.kid, self.now)
            assert tk is not None
            t = tk.issue_short(acc.kid, os.urandom(16))
            self.issued.append(t)
            fields.append(("Ticket", t.to_field()))
            token_key = t.key  # the client presents the ticket next
        elif acc.credential.kind != "short_ticket" and \
                inner.field_value(head.fields, "ticket") != "none":
            t1 = self.tk.seal(TicketContents(k, acc.kid, self.now + 7200), os.urandom(24))
            fields.append(("Ticket", t1.to_field()))
        cr = inner.field_value(head.fields, "client-random")
        if cr is not None:
            fields.append(("Random", token.random_field(self.token_secret, token_key,
                                                        b64.decode(cr))))
        nonce = os.urandom(16 if acc.profile == 2 else 24)
        if self.require_token and head.method not in ("GET", "HEAD"):
            r = inner.field_value(head.fields, "random")
            try:
                token.verify_random(self.token_secret, k, r or "")
            except ProtocolError:
                doc = outer.format_problem("urn:httpcrypt:token-required", 425, "token")
                fields.append(("Content-Type", "application/problem+json"))
                return 200, server.seal_response(acc, nonce, ResponseHead(425, "Too Early",
                                                                          fields), doc, self.now)
        return 200, server.seal_response(acc, nonce, ResponseHead(200, "OK", fields),
                                         b"ok:" + body, self.now)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        """As an httpx MockTransport handler."""
        if request.method == "OPTIONS":
            status, body = self.options(request.url.raw_path.decode())
            return httpx.Response(status, content=body,
                                  headers={"Content-Type": "application/httpcrypt-certs"})
        body = request.read()
        head = f"{request.method} {request.url.raw_path.decode()} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in request.headers.items()
            if k.lower() != "content-length") + f"Content-Length: {len(body)}\r\n"
        status, out = self.serve((head + "\r\n").encode() + body)
        ctype = "application/octet-stream" if status == 200 else "application/problem+json"
        return httpx.Response(status, content=out, headers={"Content-Type": ctype})

    def asked(self) -> list[bool]:
        """Whether each request served asked for a short ticket."""
        return [inner.field_value(h.fields, "ticket") == "short" for _, h in self.seen]


def _outer_bytes(a: Attempt) -> bytes:
    target = a.url.split("//", 1)[1]
    target = target[target.index("/"):]
    head = f"{a.method} {target} HTTP/1.1\r\n" + "".join(f"{n}: {v}\r\n" for n, v in a.headers)
    body = a.body if isinstance(a.body, bytes) else b"".join(a.body or [])  # type: ignore[arg-type]
    return (head + "\r\n").encode() + body


def _key(e: Engine, s: ShortFake) -> Any:
    key = e.cached_key(A)
    while key is None:
        url = e.discovery_url("http", A)
        status, body = s.options(url.split(A, 1)[1])
        key = e.take_certs(A, url, status, None, body, "application/httpcrypt-certs")
    return key


def _build(e: Engine, s: ShortFake, method: str = "GET", body: bytes = b"") -> Attempt:
    return e.build("http", A, _key(e, s), method, "/x", [], body)


def _answer(e: Engine, s: ShortFake, a: Attempt) -> None:
    """Sends ``a`` to ``s`` and takes the answer (which must be 200 ok)."""
    status, rsp = s.serve(_outer_bytes(a))
    assert status == 200, rsp
    r = e.reader(a)
    r.push(rsp)
    r.end()
    assert r.head is not None and r.head.status == 200
    e.took_head(a, r.head)
    assert b"".join(r.take()).startswith(b"ok:")


def _value(a: Attempt) -> str:
    return a.prepared.cookie.split("=", 1)[1]


# ---- the engine ----

def test_a_one_shot_client_declines_and_presents_no_ticket() -> None:
    s = ShortFake()
    e = Engine(mount="/hc", identity=s.identity, clock=lambda: NOW, one_shot=True)
    for _ in range(2):
        a = _build(e, s)
        assert a.prepared.credential == "key"
        _answer(e, s, a)
        _, head = s.seen[-1]
        assert inner.field_value(head.fields, "ticket") == "none"
    assert s.issued == [] and s.asked() == [False, False]
    # An unsafe request does not decline: its token retry needs a ticket.
    _answer(e, s, _build(e, s, "PUT", b"x"))
    _, head = s.seen[-1]
    assert inner.field_value(head.fields, "ticket") is None



def test_asks_on_the_first_request_and_presents_on_later_ones() -> None:
    s = ShortFake()
    e = Engine(mount="/hc", identity=s.identity, clock=lambda: NOW)
    a1 = _build(e, s)
    assert a1.prepared.credential == "key" and len(_value(a1)) >= 43
    _answer(e, s, a1)
    assert s.asked() == [True] and len(s.issued) == 1
    t = s.issued[0]
    for i in range(3):
        a = _build(e, s, "PUT", os.urandom(3000))
        assert a.prepared.credential == "short_ticket" and a.info(1).credential == "short_ticket"
        assert 22 <= len(_value(a)) <= 22 + 16
        assert a.prepared.cookie.startswith(b64.encode(t.tid))
        assert a.prepared.session_key == t.key and a.method == "POST"
        _answer(e, s, a)
        acc, head = s.seen[-1]
        assert acc.credential.kind == "short_ticket" and acc.kid == s.cert.kid
        assert inner.field_value(head.fields, "ticket") is None, f"request {i + 2} asked"
    # A request presenting a short ticket without asking got no ticket.
    assert len(s.issued) == 1


def test_asks_again_on_the_rth_use() -> None:
    s = ShortFake()
    e = Engine(mount="/hc", short_ticket_reuse=3, clock=lambda: NOW)
    for _ in range(8):
        _answer(e, s, _build(e, s))
    # The first request asks; each ticket is presented 3 times, the third asking.
    assert s.asked() == [True, False, False, True, False, False, True, False]
    tids = [(acc.credential.kind, acc.credential.value) for acc, _ in s.seen]
    assert tids[0][0] == "key"
    h1, h2, h3 = (t.h for t in s.issued)
    assert [v for _, v in tids[1:]] == [h1, h1, h1, h2, h2, h2, h3]


def test_asks_again_t_seconds_after_the_first_use() -> None:
    s = ShortFake()
    clock = [NOW]
    e = Engine(mount="/hc", clock=lambda: clock[0])  # R = 16, T = 600 s
    _answer(e, s, _build(e, s))
    for at in (NOW + 10, NOW + 300, NOW + 609.9):  # first use at NOW + 10
        clock[0] = at
        _answer(e, s, _build(e, s))
    clock[0] = NOW + 610
    _answer(e, s, _build(e, s))
    assert s.asked() == [True, False, False, False, True]
    # The new ticket's clock starts at its own first use.
    clock[0] = NOW + 5000
    _answer(e, s, _build(e, s))
    assert s.seen[-1][0].credential.value == s.issued[1].h
    clock[0] = NOW + 5599
    _answer(e, s, _build(e, s))
    assert s.asked()[-2:] == [False, False]


def test_requests_sent_before_the_asked_ticket_arrives_do_not_ask() -> None:
    s = ShortFake()
    e = Engine(mount="/hc", short_ticket_reuse=3, clock=lambda: NOW)
    _answer(e, s, _build(e, s))
    t1 = s.issued[0]
    for _ in range(2):
        _answer(e, s, _build(e, s))
    asking = _build(e, s)  # T1's third use: asks
    # Sent before that answer comes: they present T1 and do not ask.
    concurrent = [_build(e, s), _build(e, s)]
    _answer(e, s, asking)
    for a in concurrent:
        assert a.prepared.session_key == t1.key
        _answer(e, s, a)
    assert s.asked() == [True, False, False, True, False, False]
    # The new ticket (from the asking request's answer) comes next, without asking.
    nxt = _build(e, s)
    assert nxt.prepared.session_key == s.issued[1].key
    _answer(e, s, nxt)
    assert s.asked()[-1] is False


def test_a_refused_short_ticket_is_dropped_and_the_retry_presents_a_key() -> None:
    s = ShortFake()
    e = Engine(mount="/hc", clock=lambda: NOW)
    _answer(e, s, _build(e, s))
    s.rotate(7, ticket_key_only=True)  # the server forgot the ticket key
    a = _build(e, s)
    assert a.prepared.credential == "short_ticket"
    status, doc = s.serve(_outer_bytes(a))
    assert status == 400 and b"no_cookie" in doc  # not the contract's HTTPCrypt shape
    err = e.refused(a, status, doc)
    assert err.code == "no_cookie" and err.problem_type == "urn:httpcrypt:malformed"
    retries = Retries(replayable=True)
    assert retries.allow(err) == 0.0
    with pytest.raises(type(err)):
        retries.allow(err)  # once only
    again = _build(e, s)
    assert again.prepared.credential == "key"
    _answer(e, s, again)
    assert s.asked()[-1] is True and len(s.issued) == 2
    assert _build(e, s).prepared.session_key == s.issued[1].key
    # A 400 malformed to a request that presented a key is an ordinary refusal.
    with pytest.raises(RefusedError) as other:
        e.refused(again, 400, doc)
    assert other.value.code == "refused"


def test_unknown_key_drops_the_short_ticket_too() -> None:
    s = ShortFake()
    e = Engine(mount="/hc", clock=lambda: NOW)
    _answer(e, s, _build(e, s))
    s.rotate(8)
    a = _build(e, s)
    doc = outer.format_problem("urn:httpcrypt:unknown-key", 400, "x", [s.cert.to_text()])
    assert e.refused(a, 400, doc).code == "unknown_key"
    b = _build(e, s)
    assert b.prepared.credential == "key" and b.prepared.cookie.startswith(
        b64.encode(s.cert.kid))


def test_short_tickets_off_is_v1_as_before() -> None:
    for kw in ({"short_tickets": False}, {"tickets": False}):
        s = ShortFake()
        e = Engine(mount="/hc", clock=lambda: NOW, **kw)  # type: ignore[arg-type]
        for _ in range(3):
            _answer(e, s, _build(e, s))
        assert s.asked() == [False, False, False] and s.issued == []
        kinds = [acc.credential.kind for acc, _ in s.seen]
        assert kinds == (["key", "ticket", "ticket"] if kw.get("tickets") is None
                         else ["key", "key", "key"])


def test_a_hybrid_session_resumes_with_its_short_ticket() -> None:
    s = ShortFake(suite=2)
    e = Engine(mount="/hc", pq="require", clock=lambda: NOW)
    a1 = _build(e, s)
    assert a1.suite == 2 and a1.prepared.ct_m
    _answer(e, s, a1)
    t = s.issued[0]
    assert t.tid == suite2_tid(s.tk.tid)
    a2 = _build(e, s, "POST", b"p" * 3000)
    # A hybrid ticket request: no ciphertext, the suite-2 tid, suite 2.
    assert (a2.prepared.credential, a2.suite, a2.prepared.ct_m) == ("short_ticket", 2, b"")
    assert isinstance(a2.body, bytes) and len(a2.body) < 3000 + 200
    _answer(e, s, a2)
    acc, _ = s.seen[-1]
    assert acc.kid == s.hcert.kid and acc.session_key == t.key


def test_a_classical_short_ticket_is_dropped_when_suite_2_appears() -> None:
    s = ShortFake()
    e = Engine(mount="/hc", pq="prefer", clock=lambda: NOW)
    _answer(e, s, _build(e, s))
    assert s.issued and s.seen[0][0].kid == s.cert.kid
    s2 = ShortFake(suite=2)
    e.take_certs(A, f"http://{A}/hc/pq", 200, None, s2.options("/hc/pq")[1])
    a = _build(e, s2)
    assert (a.prepared.credential, a.suite) == ("key", 2)


def test_profile_two_presents_the_short_ticket_with_short_pads() -> None:
    s = ShortFake(now=time.time(), version=2)
    e = Engine(mount="/hc")
    _answer(e, s, _build(e, s))
    for _ in range(20):  # pads are random: look at several
        a = _build(e, s)
        assert a.prepared.profile == 2 and a.prepared.credential == "short_ticket"
        assert 22 <= len(_value(a)) <= 22 + 7
        _answer(e, s, a)
        assert s.seen[-1][0].profile == 2


def test_a_token_with_a_short_ticket_is_bound_to_the_tickets_key() -> None:
    """The answer that issues a short ticket computes its ``Random`` under
    ``k'``: the client presents it with the ticket (under ``k'``), never
    under the key of the request it answered, even when that key comes
    back (``reuse_key``, after the ticket is dropped)."""
    s = ShortFake()
    e = Engine(mount="/hc", reuse_key=True, clock=lambda: NOW)
    a1 = _build(e, s, "POST", b"1")
    k = a1.prepared.session_key
    _answer(e, s, a1)
    t = s.issued[0]
    assert t.key != k
    held = e._host(A).token
    assert held is not None and held[1] == t.key
    a2 = _build(e, s, "POST", b"2")
    assert a2.prepared.credential == "short_ticket" and a2.prepared.session_key == t.key
    _answer(e, s, a2)
    r = inner.field_value(s.seen[-1][1].fields, "random")
    assert r is not None
    token.verify_random(s.token_secret, t.key, r)
    with pytest.raises(ProtocolError):
        token.verify_random(s.token_secret, k, r)
    # The ticket refused and dropped: the retry seals under k again (the
    # reused key pair) and presents no token, as none is bound to k.
    s.rotate(7, ticket_key_only=True)
    a3 = _build(e, s, "POST", b"3")
    status, doc = s.serve(_outer_bytes(a3))
    assert e.refused(a3, status, doc).code == "no_cookie"
    a4 = _build(e, s, "POST", b"4")
    assert a4.prepared.credential == "key" and a4.prepared.session_key == k
    _answer(e, s, a4)
    assert inner.field_value(s.seen[-1][1].fields, "random") is None
    # Without a short ticket in the answer the token stays bound to the
    # request's key, as before: a v1 ticket resumes k and presents it.
    s2 = ShortFake()
    v1 = Engine(mount="/hc", short_tickets=False, clock=lambda: NOW)
    b1 = _build(v1, s2, "POST", b"1")
    _answer(v1, s2, b1)
    held = v1._host(A).token
    assert held is not None and held[1] == b1.prepared.session_key
    b2 = _build(v1, s2, "POST", b"2")
    assert b2.prepared.credential == "ticket"
    _answer(v1, s2, b2)
    r = inner.field_value(s2.seen[-1][1].fields, "random")
    assert r is not None
    token.verify_random(s2.token_secret, b1.prepared.session_key, r)


def test_token_required_with_a_new_short_ticket_needs_one_retry() -> None:
    """The 425 that brings the short ticket carries a token bound to its key
    ``k'``: the one retry presents both and gets through (spec §8.4)."""
    for short, credential in ((True, "short_ticket"), (False, "ticket")):
        s = ShortFake(now=time.time())
        s.require_token = True
        t = HTTPCryptTransport(mount="/hc", transport=httpx.MockTransport(s),
                               short_tickets=short, short_ticket_reuse=2)
        with httpx.Client(transport=t) as c:
            r = c.post(f"http://{A}/side-effect", content=b"x")
            info = r.extensions["httpcrypt"]
            assert r.content == b"ok:x"
            assert (info.attempts, info.credential) == (2, credential)
            # Later ones (with R = 2 some ask again, and their answer's
            # token is bound to the new ticket's key) need no retry.
            for body in (b"y", b"z", b"w"):
                r = c.post(f"http://{A}/side-effect", content=body)
                info = r.extensions["httpcrypt"]
                assert r.content == b"ok:" + body
                assert (info.attempts, info.credential) == (1, credential)
        if short:
            # The retry presents the ticket; y asks again, z presents the new one.
            assert s.asked() == [True, False, True, False, True]
    # The retry rule: token-required once, then the error.
    retries = Retries(replayable=True)
    err = TokenRequiredError("urn:httpcrypt:token-required", 425)
    assert retries.allow(err) == 0.0
    with pytest.raises(TokenRequiredError):
        retries.allow(err)


# ---- the drivers ----

def test_httpx_transports_use_the_policy() -> None:
    s = ShortFake(now=time.time())
    t = HTTPCryptTransport(mount="/hc", transport=httpx.MockTransport(s), short_ticket_reuse=2)
    with httpx.Client(transport=t) as c:
        creds = [c.get(f"http://{A}/a").extensions["httpcrypt"].credential for _ in range(4)]
    assert creds == ["key", "short_ticket", "short_ticket", "short_ticket"]
    assert s.asked() == [True, False, True, False]

    async def go() -> None:
        s2 = ShortFake(now=time.time())
        at = AsyncHTTPCryptTransport(mount="/hc", transport=httpx.MockTransport(s2),
                                     short_ticket_reuse=2)
        async with httpx.AsyncClient(transport=at) as c:
            for _ in range(4):
                r = await c.get(f"http://{A}/a")
                assert r.content == b"ok:"
            assert s2.asked() == [True, False, True, False]
            # The ticket key forgotten: no_cookie, then a key.
            s2.rotate(7, ticket_key_only=True)
            r = await c.get(f"http://{A}/a")
            assert (r.extensions["httpcrypt"].attempts,
                    r.extensions["httpcrypt"].credential) == (2, "key")

    asyncio.run(go())


@pytest.fixture
def socket_server() -> Iterator[tuple[str, ShortFake]]:
    fake = ShortFake(now=time.time())
    with serve_fake(fake) as base:  # serves any fake with options/serve
        yield base, fake


@pytest.mark.parametrize("flavour", sorted(DRIVERS))
def test_drivers_over_a_socket(socket_server: tuple[str, ShortFake], flavour: str) -> None:
    base, fake = socket_server
    d = DRIVERS[flavour](timeout=10.0, mount="/hc", short_ticket_reuse=2)
    try:
        rs = [d.get(base + "/a"), d.post(base + "/b", b"z" * 3000), d.get(base + "/c"),
              d.get(base + "/d")]
        assert [r.body for r in rs] == [b"ok:", b"ok:" + b"z" * 3000, b"ok:", b"ok:"]
        assert [r.info.credential for r in rs] == ["key"] + ["short_ticket"] * 3
        assert fake.asked() == [True, False, True, False]
        fake.rotate(7, ticket_key_only=True)
        r = d.get(base + "/e")
        assert (r.body, r.info.attempts, r.info.credential) == (b"ok:", 2, "key")
    finally:
        d.close()
