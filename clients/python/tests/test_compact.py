"""Profile 2, the compact profile (spec §4.5), beyond the shared vectors:
byte layouts checked against libsodium and hand-built bytes (record 0's
associated data both ways, the response body ``r || stream`` under
``0xff^8 || r``, the 33-character nonce segment, the time in ``n0``), the
version-2 certificate, and the engine and the httpx transport against an
in-memory profile-2 server (no inner Host or Date, short pads, Host
binding, stale retry with the corrected time in ``n0``, tickets)."""

from __future__ import annotations

import os
import struct
import time
from typing import Any

import httpx
import nacl.bindings
import pytest

from httpcrypt import b64, inner, outer, server
from httpcrypt.cert import KeyCert, choose, parse_cert_list
from httpcrypt.client import ClientConfig, Engine, PreparedRequest
from httpcrypt.date import check_nonce_time, format_date
from httpcrypt.errors import HTTPCryptError, IntegrityError, ProtocolError, StaleError
from httpcrypt.httpx_transport import HTTPCryptTransport
from httpcrypt.inner import ResponseHead
from httpcrypt.stream import Opener, Sealer, open_all, seal_all
from httpcrypt.suite import ed25519_public, x25519_public
from httpcrypt.ticket import TicketContents, TicketKey

from .test_core import _outer_bytes, _read

U32 = struct.Struct(">I")
FINAL = 1 << 31


def _xseal(key: bytes, nonce: bytes, msg: bytes, ad: bytes) -> tuple[bytes, bytes]:
    """libsodium's XChaCha20-Poly1305: (ciphertext, tag)."""
    out = nacl.bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(msg, ad, nonce, key)
    return out[:-16], out[-16:]


# ---- byte layouts ----

def test_request_record0_binds_host_exactly() -> None:
    key, n0 = os.urandom(32), os.urandom(24)
    host = "example.com:8080"
    msg = b"GET / HTTP/1.1\r\n\r\n"
    body = seal_all(Sealer.request(key, n0, host), msg, 1024)
    header = U32.pack(FINAL | len(msg))
    ad = b"hc2-req" + len(host).to_bytes(2, "big") + host.encode() + header
    ct, tag = _xseal(key, n0, msg, ad)
    assert body == header + tag + ct
    assert open_all(Opener.request(key, n0, host=host), body) == msg
    # Another Host, the v1 label, or no length prefix: record 0 fails.
    for opener in (Opener.request(key, n0, host="example.com"), Opener.request(key, n0)):
        with pytest.raises(IntegrityError) as e:
            open_all(opener, body)
        assert e.value.code == "integrity"
    bare = b"hc2-req" + host.encode() + header
    assert _xseal(key, n0, msg, bare)[1] != tag


def test_request_later_records_chain_as_v1() -> None:
    key, n0, host = os.urandom(32), os.urandom(24), "h"
    msg = os.urandom(25)
    body = seal_all(Sealer.request(key, n0, host), msg, 10)
    h0, h1, h2 = U32.pack(10), U32.pack(10), U32.pack(FINAL | 5)
    _, t0 = _xseal(key, n0, msg[:10], b"hc2-req\x00\x01h" + h0)
    n1 = (int.from_bytes(n0, "big") + 1).to_bytes(24, "big")
    c1, t1 = _xseal(key, n1, msg[10:20], t0 + h1)
    n2 = (int.from_bytes(n0, "big") + 2).to_bytes(24, "big")
    c2, t2 = _xseal(key, n2, msg[20:], t1 + h2)
    assert body[30:] == h1 + t1 + c1 + h2 + t2 + c2
    assert body[4:20] == t0


def test_response_body_is_random_then_stream() -> None:
    key, req_n0, r = os.urandom(32), os.urandom(24), os.urandom(16)
    msg = b"HTTP/1.1 200 OK\r\n\r\nhi"
    body = r + seal_all(Sealer.response2(key, req_n0, r), msg, 1024)
    header = U32.pack(FINAL | len(msg))
    ct, tag = _xseal(key, b"\xff" * 8 + r, msg, b"hc2-rsp" + req_n0 + header)
    assert body == r + header + tag + ct
    assert len(body) == 16 + 20 + len(msg)
    assert open_all(Opener.response(key, req_n0, profile=2), body) == msg
    # Split at every offset, including inside the 16 random bytes.
    for cut in range(len(body) + 1):
        o = Opener.response(key, req_n0, profile=2)
        got = list(o.feed(body[:cut])) + list(o.feed(body[cut:]))
        o.finish()
        assert b"".join(got) == msg
    # Bound to another request: record 0 fails.
    with pytest.raises(IntegrityError) as e:
        open_all(Opener.response(key, os.urandom(24), profile=2), body)
    assert e.value.code == "integrity"
    # Read as v1 (24-byte nonce, hc1-rsp): never opens (the "header" is
    # then random bytes: too large, truncated, or a failing tag).
    with pytest.raises(ProtocolError) as e:
        open_all(Opener.response(key, req_n0), body)
    assert e.value.code in ("integrity", "record_too_large", "truncated")
    same_as_v1 = r + seal_all(Sealer.response(key, req_n0, b"\xff" * 8 + r), msg, 1024)
    assert same_as_v1 != body  # only the label differs: hc1-rsp vs hc2-rsp


def test_response_shorter_than_its_random_is_truncated() -> None:
    for n in (0, 1, 15, 16, 17):
        with pytest.raises(IntegrityError) as e:
            open_all(Opener.response(os.urandom(32), os.urandom(24), profile=2), bytes(n))
        assert e.value.code == "truncated"


def test_nonce_segment_and_targets() -> None:
    n0 = bytes(range(24))
    m = outer.Mount("/hc")
    assert m.nonce_path(n0, 2) == "/hc/2" + b64.encode(n0)
    assert len(m.nonce_path(n0, 2).rsplit("/", 1)[1]) == 33
    assert m.get_target(n0, b"\x01\x02", 2) == "/hc/2" + b64.encode(n0) + "?AQI"
    assert outer.Mount("").nonce_path(n0, 2) == "/2" + b64.encode(n0)
    assert m.nonce_path(n0) == "/hc/" + b64.encode(n0)
    # The GET-form bound counts the extra character of the segment.
    changed = 0
    for mount in (m, outer.Mount("/hcx"), outer.Mount("/hcxy")):
        for n in range(1300, 1500):
            for p in (1, 2):
                line = f"GET {mount.get_target(n0, bytes(n), p)} HTTP/1.1"
                assert outer.fits_get_form(mount, n, p) == (len(line) < 2000), (n, p)
            changed += outer.fits_get_form(mount, n, 1) != outer.fits_get_form(mount, n, 2)
    assert changed >= 1


def test_route_profile_two() -> None:
    n0 = bytes(range(24))  # its text starts with "A", not "2"
    m = outer.Mount("/hc")
    r = outer.route("POST", m.nonce_path(n0, 2), m)
    assert (r.kind, r.n0, r.profile) == ("post", n0, 2)
    r = outer.route("GET", m.get_target(n0, b"x", 2), m)
    assert (r.kind, r.n0, r.query, r.profile) == ("get", n0, "eA", 2)
    assert outer.route("POST", m.nonce_path(n0), m).profile == 1
    seg = b64.encode(n0)
    # "2" + 31 characters is 32 characters: a v1 nonce, not profile 2.
    assert outer.route("POST", "/hc/2" + seg[:31], m).profile == 1
    for bad in ("1" + seg, "3" + seg, "A" + seg, "2" + seg[:31] + "=", seg + "2",
                "22" + seg, "2" + seg[:30] + "%41"):
        with pytest.raises(ProtocolError) as e:
            outer.route("POST", "/hc/" + bad, m)
        assert e.value.code == "bad_nonce_path", bad


def test_nonce_carries_the_time() -> None:
    now = 1_767_225_600
    n0 = outer.compact_nonce(now)
    assert len(n0) == 24 and n0[:5] == now.to_bytes(5, "big") and n0[0] == 0
    assert outer.nonce_time(n0) == now
    assert outer.compact_nonce(now)[5:] != n0[5:]  # 19 fresh random bytes
    assert check_nonce_time(n0, now + 60, 60) == now
    assert check_nonce_time(n0, now - 60, 60) == now
    for skew in (61, -61, 10_000):
        with pytest.raises(ProtocolError) as e:
            check_nonce_time(n0, now + skew, 60)
        assert e.value.code == "stale"


def test_host_above_65535_bytes_is_bad_host() -> None:
    with pytest.raises(ProtocolError) as e:
        Sealer.request(os.urandom(32), os.urandom(24), "h" * 65536)
    assert e.value.code == "bad_host"
    Sealer.request(os.urandom(32), os.urandom(24), "h" * 65535)
    with pytest.raises(ProtocolError) as e:
        PreparedRequest.for_key(os.urandom(32), os.urandom(24), client_secret=os.urandom(32),
                                host="h" * 65536)
    assert e.value.code == "bad_host"


# ---- certificates ----

def test_version_two_certificate() -> None:
    seed, pub = os.urandom(32), os.urandom(32)
    c = KeyCert.sign(seed, 3, 100, 200, pub, version=2)
    raw = c.encode()
    assert raw[0] == 2 and raw[1] == 1
    back = KeyCert.from_text(c.to_text())
    assert back == c and back.version == 2
    back.verify(ed25519_public(seed))
    assert c.discovered().version == 2
    assert KeyCert.sign(seed, 3, 100, 200, pub).discovered().version == 1
    # The version byte is signed: a v1 certificate relabelled as v2 fails.
    v1 = KeyCert.sign(seed, 3, 100, 200, pub)
    relabelled = KeyCert.decode(b"\x02" + v1.encode()[1:])
    with pytest.raises(ProtocolError) as e:
        relabelled.verify(ed25519_public(seed))
    assert e.value.code == "bad_signature"
    for v in (0, 3, 255):
        with pytest.raises(ProtocolError) as e:
            KeyCert.decode(bytes([v]) + raw[1:])
        assert e.value.code == "bad_certificate"
    # Choice ignores the version; lists carry both.
    lst = parse_cert_list((v1.to_text() + "\n" + KeyCert.sign(seed, 4, 100, 200, pub, 2)
                           .to_text() + "\n").encode())
    assert [x.version for x in lst] == [1, 2]
    assert choose(lst, 150, ed25519_public(seed)).serial == 4


# ---- the engine against an in-memory profile-2 server ----

class CompactFake:
    """A server holding one key with a version-2 certificate and a ticket
    key; judges freshness as spec §11.4 says (profile 2: the time in n0)."""

    def __init__(self, now: int, version: int = 2) -> None:
        self.now = now
        self.seed = os.urandom(32)
        self.secret = os.urandom(32)
        self.cert = KeyCert.sign(self.seed, 9, now - 60, now + 7200, x25519_public(self.secret),
                                 version)
        self.tk = TicketKey(os.urandom(10), os.urandom(32))
        self.keys = server.ServerKeys([(self.secret, self.cert)], [(self.tk, now + 7200)])
        self.mount = outer.Mount("/hc")
        self.seen: list[tuple[server.Accepted, inner.RequestHead, bytes]] = []
        self.stale_date = True  # a stale answer carries the server's Date

    def certs(self) -> bytes:
        return (self.cert.to_text() + "\n").encode()

    def serve(self, raw: bytes, body: bytes = b"ok", record_size: int = 16384) -> bytes:
        acc, head, req_body = server.serve_bytes(self.keys, self.mount, server.Limits(),
                                                 self.now, raw)
        self.seen.append((acc, head, req_body))
        nonce = os.urandom(16 if acc.profile == 2 else 24)
        try:
            server.check_fresh(acc, head, self.now)
        except ProtocolError:
            fields = [("Content-Type", "application/problem+json")]
            if self.stale_date:
                fields.append(("Date", format_date(self.now)))
            stale = ResponseHead(425, "Too Early", fields)
            doc = outer.format_problem("urn:httpcrypt:stale", 425, "stale")
            return server.seal_response(acc, nonce, stale, doc, self.now)
        t = self.tk.seal(TicketContents(acc.session_key, acc.kid, self.now + 7200),
                         os.urandom(24))
        head_out = ResponseHead(200, "OK", [("Ticket", t.to_field())])
        return server.seal_response(acc, nonce, head_out, body, self.now, record_size)


def test_engine_uses_profile_two_for_a_version_two_key() -> None:
    now = int(time.time())
    s = CompactFake(now)
    e = Engine(mount="/hc", identity=ed25519_public(s.seed))
    key = e.store_certs("h:1", 200, None, s.certs())
    assert key.version == 2
    for _ in range(20):  # pads are 0-7 characters (random): look at several
        a = e.build("http", "h:1", key, "GET", "/x", [("Host", "h:1"), ("Accept", "*/*")], b"")
        assert a.prepared.profile == 2 and a.info(1).profile == 2
        assert a.method == "GET"
        segment = a.url.split("?")[0].rsplit("/", 1)[1]
        assert len(segment) == 33 and segment[0] == "2"
        assert b64.decode(segment[1:]) == a.prepared.n0
        assert abs(int.from_bytes(a.prepared.n0[:5], "big") - now) <= 2
        name, value = a.prepared.cookie.split("=")
        assert 14 <= len(name) <= 14 + 7 and 43 <= len(value) <= 43 + 7
    rsp = s.serve(_outer_bytes(a))
    acc, head, _ = s.seen[-1]
    assert acc.profile == 2 and acc.host == "h:1"
    # Neither Host nor Date inside (the caller's Host equals the outer one);
    # the first request to a host asks for a short ticket (spec §7.3).
    assert head.fields == [("Accept", "*/*"), ("Ticket", "short")]
    h, body = _read(e, a, rsp)
    assert (h.status, body) == (200, b"ok")
    # One FINAL record after 16 random bytes, and in it neither Date nor
    # Content-Length.
    assert len(rsp) == 16 + 20 + len(h.format()) + len(body)
    assert inner.field_value(h.fields, "date") is None
    assert inner.field_value(h.fields, "content-length") is None
    # The ticket the response carried is presented next, still profile 2.
    a2 = e.build("http", "h:1", key, "PUT", "/up", [], os.urandom(5000))
    assert a2.method == "POST" and a2.prepared.credential == "ticket"
    assert a2.prepared.profile == 2 and "/hc/2" in a2.url
    rsp2 = s.serve(_outer_bytes(a2), body=os.urandom(40000))
    h2, body2 = _read(e, a2, rsp2)
    # A multi-record response carries Content-Length again.
    assert inner.field_value(h2.fields, "content-length") == "40000" and len(body2) == 40000
    assert s.seen[-1][0].credential.kind == "ticket" and s.seen[-1][0].profile == 2


def test_caller_host_that_differs_stays_inside() -> None:
    now = int(time.time())
    s = CompactFake(now)
    e = Engine(mount="/hc")
    key = e.store_certs("h", 200, None, s.certs())
    a = e.build("http", "h", key, "GET", "/", [("Host", "other.example")], b"")
    s.serve(_outer_bytes(a))
    assert s.seen[-1][1].fields == [("Host", "other.example"), ("Ticket", "short")]


def test_version_one_key_and_compact_off_use_v1() -> None:
    now = int(time.time())
    for s, cfg in ((CompactFake(now, version=1), ClientConfig(mount="/hc")),
                   (CompactFake(now), ClientConfig(mount="/hc", compact=False))):
        e = Engine(cfg)
        key = e.store_certs("h", 200, None, s.certs())
        a = e.build("http", "h", key, "GET", "/", [], b"")
        assert a.prepared.profile == 1
        assert len(a.url.split("?")[0].rsplit("/", 1)[1]) == 32
        rsp = s.serve(_outer_bytes(a))
        acc, head, _ = s.seen[-1]
        assert acc.profile == 1
        assert inner.field_value(head.fields, "host") == "h"
        assert inner.field_value(head.fields, "date") is not None
        h, _ = _read(e, a, rsp)
        assert inner.field_value(h.fields, "date") is not None


def test_rewritten_host_breaks_record_zero() -> None:
    now = int(time.time())
    s = CompactFake(now)
    e = Engine(mount="/hc", get_form=False)
    key = e.store_certs("h.example", 200, None, s.certs())
    a = e.build("http", "h.example", key, "GET", "/", [], b"")
    raw = _outer_bytes(a).replace(b"Host: h.example\r\n", b"Host: other.example\r\n")
    with pytest.raises(IntegrityError) as err:
        s.serve(raw)
    assert err.value.code == "integrity"
    # A Host above 65535 bytes is refused at the nonce-path step.
    long = _outer_bytes(a).replace(b"Host: h.example", b"Host: " + b"h" * 65536)
    with pytest.raises(ProtocolError) as err:
        s.serve(long)
    assert err.value.code == "bad_host"


class _Mock:
    """An httpx MockTransport handler around :class:`CompactFake`."""

    def __init__(self, fake: CompactFake):
        self.fake = fake
        self.targets: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "OPTIONS":
            return httpx.Response(200, content=self.fake.certs())
        body = request.read()
        target = request.url.raw_path.decode()
        self.targets.append(target)
        head = f"{request.method} {target} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in request.headers.items()
            if k.lower() != "content-length") + f"Content-Length: {len(body)}\r\n"
        rsp = self.fake.serve((head + "\r\n").encode() + body)
        return httpx.Response(200, content=rsp,
                              headers={"Content-Type": "application/octet-stream"})


def _client(fake: CompactFake, **kw: Any) -> tuple[httpx.Client, _Mock]:
    m = _Mock(fake)
    t = HTTPCryptTransport(mount="/hc", transport=httpx.MockTransport(m), **kw)
    return httpx.Client(transport=t), m


def test_transport_stale_retry_corrects_the_time_in_n0() -> None:
    now = int(time.time())
    s = CompactFake(now)
    c, m = _client(s, clock=lambda: time.time() + 150)
    with c:
        r = c.get("http://h.test/x")
        assert r.status_code == 200 and r.content == b"ok"
        info = r.extensions["httpcrypt"]
        assert info.attempts == 2 and info.profile == 2
        times = [outer.nonce_time(acc.n0) for acc, _, _ in s.seen]
        assert times[0] - now >= 149 and abs(times[1] - now) <= 2
        assert all(len(t.split("?")[0].rsplit("/", 1)[1]) == 33 for t in m.targets)
        # The offset is kept; the ticket request is profile 2 as well.
        r2 = c.get("http://h.test/x")
        assert r2.extensions["httpcrypt"].attempts == 1
        assert r2.extensions["httpcrypt"].credential == "ticket"
        assert abs(outer.nonce_time(s.seen[-1][0].n0) - now) <= 2
    # Without a Date to correct the clock from, the second stale is the error.
    s2 = CompactFake(now)
    s2.stale_date = False
    c2, _ = _client(s2, clock=lambda: time.time() + 150)
    with c2, pytest.raises(StaleError) as err:
        c2.get("http://h.test/x")
    assert err.value.code == "stale" and len(s2.seen) == 2


def test_transport_tampered_compact_response_is_an_error() -> None:
    now = int(time.time())
    s = CompactFake(now)

    class Flip(_Mock):
        def __call__(self, request: httpx.Request) -> httpx.Response:
            rsp = super().__call__(request)
            if request.method == "OPTIONS":
                return rsp
            data = bytearray(rsp.content)
            data[3] ^= 1  # inside the 16 random bytes: the stream nonce changes
            return httpx.Response(200, content=bytes(data))

    t = HTTPCryptTransport(mount="/hc", transport=httpx.MockTransport(Flip(s)))
    with httpx.Client(transport=t) as c, pytest.raises(HTTPCryptError) as err:
        c.get("http://h.test/x")
    assert err.value.code == "integrity"
