"""Unit tests of the core beyond the shared vectors: the HChaCha20
derivation, the client engine against the in-memory server, retry
decisions, and incremental decoding at every split."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import nacl.bindings
import pytest

from httpcrypt import inner, outer, server
from httpcrypt.cert import KeyCert
from httpcrypt.client import ClientConfig, Engine, PreparedRequest
from httpcrypt.date import format_date
from httpcrypt.errors import (
    ConfigError,
    IntegrityError,
    ProtocolError,
    RefusedError,
    ReplayError,
    TokenRequiredError,
)
from httpcrypt.inner import ResponseHead
from httpcrypt.stream import Opener, Sealer, open_all, seal_all, seal_records
from httpcrypt.suite import XChaCha, ed25519_public, hchacha20, nonce_add, x25519_public
from httpcrypt.ticket import TicketContents, TicketKey


def test_hchacha20_draft_vector() -> None:
    # draft-irtf-cfrg-xchacha-03 §2.2.1
    key = bytes(range(32))
    inp = bytes.fromhex("000000090000004a0000000031415927")
    want = "82413b4227b27bfed30e42508a877d73a0f9e4d58a74a853c12ec41326d3ecdc"
    assert hchacha20(key, inp).hex() == want


@pytest.mark.parametrize("size", [0, 1, 63, 64, 1000, 16384, 70000])
def test_xchacha_matches_libsodium(size: int) -> None:
    key, nonce, ad = os.urandom(32), os.urandom(24), os.urandom(size % 40)
    msg = os.urandom(size)
    ours = XChaCha(key).seal(nonce, msg, ad)
    theirs = nacl.bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(msg, ad, nonce, key)
    assert ours == theirs
    assert XChaCha(key).open(nonce, theirs, ad) == msg
    bad = bytearray(theirs)
    bad[-1] ^= 1
    with pytest.raises(ProtocolError) as e:
        XChaCha(key).open(nonce, bytes(bad), ad)
    assert e.value.code == "integrity"


def test_nonce_add_carries_and_wraps() -> None:
    n = bytes(23) + b"\xff"
    assert nonce_add(n, 1)[22:] == b"\x01\x00"
    assert nonce_add(b"\xff" * 24, 1) == bytes(24)
    # The subkey changes when the carry reaches byte 15: the cache follows.
    key = os.urandom(32)
    n0 = bytes(16) + b"\xff" * 8
    stream = seal_all(Sealer.request(key, n0), os.urandom(100), 10)
    assert len(open_all(Opener.request(key, n0), stream)) == 100


def test_opener_failure_is_sticky_and_trailing_is_refused() -> None:
    key, n0 = os.urandom(32), os.urandom(24)
    body = seal_all(Sealer.request(key, n0), b"hello", 16)
    o = Opener.request(key, n0)
    assert list(o.feed(body)) == [b"hello"]
    with pytest.raises(IntegrityError) as e:
        o.receive(b"x")
    assert e.value.code == "trailing_data"
    with pytest.raises(IntegrityError):
        o.pull()
    bad = bytearray(body)
    bad[10] ^= 1
    o = Opener.request(key, n0)
    with pytest.raises(IntegrityError):
        list(o.feed(bytes(bad)))
    with pytest.raises(IntegrityError) as e:
        o.finish()
    assert e.value.code == "integrity"


def test_seal_records_pieces_equal_seal_all() -> None:
    key, n0 = os.urandom(32), os.urandom(24)
    data = os.urandom(50_000)
    pieces, taken = seal_records(Sealer.request(key, n0), data, 16384)
    assert taken == len(data)
    assert b"".join(pieces) == seal_all(Sealer.request(key, n0), data, 16384)


def test_response_decoder_every_split() -> None:
    msg = (b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nX-A: b \r\n\r\nhello world")
    for cut in range(len(msg) + 1):
        d = inner.ResponseDecoder()
        body = b""
        for part in (msg[:cut], msg[cut:]):
            d.receive(part)
            while (ev := d.pull()) is not None:
                if isinstance(ev, bytes):
                    body += ev
        d.finish()
        assert d.head is not None and d.head.fields == [("Content-Length", "11"), ("X-A", "b")]
        assert body == b"hello world"


# ---- the engine against the in-memory server ----

class Fake:
    """An in-memory server: keys, a cert, a ticket key."""

    def __init__(self, now: int) -> None:
        self.seed = os.urandom(32)
        self.secret = os.urandom(32)
        self.cert = KeyCert.sign(self.seed, 7, now - 60, now + 7200,
                                 x25519_public(self.secret))
        self.tk = TicketKey(os.urandom(10), os.urandom(32))
        self.keys = server.ServerKeys([(self.secret, self.cert)], [(self.tk, now + 7200)])
        self.mount = outer.Mount("/hc")

    def certs(self) -> bytes:
        return (self.cert.to_text() + "\n").encode()

    def serve(self, outer_bytes: bytes, now: int, fields: list[tuple[str, str]] | None = None,
              status: int = 200, body: bytes = b"ok") -> tuple[bytes, inner.RequestHead, bytes]:
        acc, head, req_body = server.serve_bytes(self.keys, self.mount, server.Limits(), now,
                                                 outer_bytes)
        f = list(fields or [])
        t = self.tk.seal(TicketContents(acc.session_key, acc.kid, now + 7200), os.urandom(24))
        f.append(("Ticket", t.to_field()))
        rsp = server.seal_response(acc, os.urandom(24), ResponseHead(status, "X", f), body, now)
        return rsp, head, req_body


def _outer_bytes(a: object) -> bytes:
    from httpcrypt.client import Attempt
    assert isinstance(a, Attempt)
    target = a.url.split("//", 1)[1]
    target = target[target.index("/"):]
    head = f"{a.method} {target} HTTP/1.1\r\n" + "".join(f"{n}: {v}\r\n" for n, v in a.headers)
    body = a.body if isinstance(a.body, bytes) else b"".join(a.body or [])  # type: ignore[arg-type]
    return (head + "\r\n").encode() + body


def _read(engine: Engine, a: object, rsp: bytes) -> tuple[ResponseHead, bytes]:
    from httpcrypt.client import Attempt
    assert isinstance(a, Attempt)
    r = engine.reader(a)
    for i in range(0, len(rsp), 7):
        r.push(rsp[i:i + 7])
    r.end()
    assert r.head is not None
    engine.took_head(a, r.head)
    return r.head, b"".join(r.take())


def test_engine_exchange_forms_ticket_and_token() -> None:
    now = int(time.time())
    s = Fake(now)
    e = Engine(mount="/hc", identity=ed25519_public(s.seed))
    key = e.store_certs("h:1", 200, "max-age=100", s.certs())
    assert e.cached_key("h:1") == key
    a = e.build("http", "h:1", key, "GET", "/x?y=1", [("Accept", "*/*")], b"")
    assert a.method == "GET" and a.body is None and a.prepared.credential == "key"
    rsp, head, _ = s.serve(_outer_bytes(a), now)
    assert head.target == "/x?y=1"
    assert inner.field_value(head.fields, "host") == "h:1"
    assert inner.field_value(head.fields, "date") is not None
    h, body = _read(e, a, rsp)
    assert (h.status, body) == (200, b"ok")
    # The next request presents the ticket; a large body takes the POST form.
    big = os.urandom(5000)
    a2 = e.build("http", "h:1", key, "PUT", "/up", [], big)
    assert a2.method == "POST" and a2.prepared.credential == "ticket"
    _, head2, body2 = s.serve(_outer_bytes(a2), now)
    assert body2 == big and inner.field_value(head2.fields, "client-random") is not None
    assert inner.field_value(head2.fields, "content-length") == "5000"


@pytest.mark.parametrize("size", [0, 1, 16383, 16384, 16385, 40000])
def test_engine_streamed_body_length_is_exact(size: int) -> None:
    now = int(time.time())
    s = Fake(now)
    e = Engine(ClientConfig(mount="/hc", record_size=16384))
    key = e.store_certs("h", 200, None, s.certs())
    data = os.urandom(size)

    def chunks() -> Iterator[bytes]:
        for i in range(0, size, 1000):
            yield data[i:i + 1000]

    a = e.build("http", "h", key, "POST", "/s", [], None, chunks(), size)
    raw = _outer_bytes(a)
    assert a.content_length == len(raw) - raw.index(b"\r\n\r\n") - 4
    _, _, got = s.serve(raw, now)
    assert got == data


def test_refused_unknown_key_takes_certs_and_drops_ticket() -> None:
    now = int(time.time())
    s, s2 = Fake(now), Fake(now)
    e = Engine(mount="/hc")
    key = e.store_certs("h", 200, None, s.certs())
    a = e.build("http", "h", key, "GET", "/", [], b"")
    doc = outer.format_problem("urn:httpcrypt:unknown-key", 400, "x", [s2.cert.to_text()])
    err = e.refused(a, 400, doc)
    assert err.code == "unknown_key" and err.problem_type == "urn:httpcrypt:unknown-key"
    assert e.cached_key("h") == s2.cert.discovered()
    with pytest.raises(RefusedError) as r:
        e.refused(a, 400, outer.format_problem("urn:httpcrypt:malformed", 400, "bad"))
    assert r.value.code == "refused" and r.value.problem_type == "urn:httpcrypt:malformed"
    with pytest.raises(RefusedError) as r:
        e.refused(a, 502, b"<html>")
    assert r.value.status == 502 and r.value.problem_type is None
    # Authenticated mode ignores certificates the pinned identity did not sign.
    pinned = Engine(mount="/hc", identity=ed25519_public(s.seed))
    pinned.store_certs("h", 200, None, s.certs())
    pinned.refused(a, 400, doc)
    assert pinned.cached_key("h") is None


def test_judge_problem() -> None:
    now = int(time.time())
    s = Fake(now - 100)
    e = Engine(mount="/hc", clock=lambda: now - 100)  # 100 s behind: stale
    key = e.store_certs("h", 200, None, s.certs())
    a = e.build("http", "h", key, "GET", "/", [], b"")
    head = ResponseHead(425, "Too Early", [("Content-Type", "application/problem+json"),
                                           ("Date", format_date(now))])
    stale = outer.format_problem("urn:httpcrypt:stale", 425, "stale")
    got = e.judge_problem(a, head, stale)
    assert got is not None and got.code == "stale" and got.problem_type == "urn:httpcrypt:stale"
    a2 = e.build("http", "h", key, "GET", "/", [], b"")
    _, h2, _ = s.serve(_outer_bytes(a2), now)
    assert inner.field_value(h2.fields, "date") == format_date(now)  # corrected clock
    with pytest.raises(ReplayError) as r:
        e.judge_problem(a, head, outer.format_problem("urn:httpcrypt:replay", 425, "again"))
    assert r.value.code == "replay" and r.value.status == 425
    token = e.judge_problem(a, head, outer.format_problem("urn:httpcrypt:token-required",
                                                          425, "t"))
    assert isinstance(token, TokenRequiredError)
    assert e.judge_problem(a, head, b'{"type": "https://example.com/app-error"}') is None
    assert TokenRequiredError("urn:httpcrypt:token-required", 425).code == "token_required"


def test_config_errors() -> None:
    with pytest.raises(ConfigError):
        Engine(mount="/hc").build("https", "h", Fake(1000).cert.discovered(), "GET", "/", [],
                                   b"")
    with pytest.raises(ProtocolError) as e:
        Engine(mount="/a?b")
    assert e.value.code == "bad_nonce_path"
    with pytest.raises(ProtocolError):
        Engine(identity="not-base64!")


def test_prepared_request_round_trip() -> None:
    s = Fake(1000)
    p = PreparedRequest.for_key(s.cert.kex_public, os.urandom(24), "ab", "",
                                client_secret=os.urandom(32))
    assert p.cookie.split("=")[0][14:] == "ab"
    with pytest.raises(ProtocolError) as e:
        PreparedRequest.for_key(s.cert.kex_public, os.urandom(24), "!", "",
                                client_secret=os.urandom(32))
    assert e.value.code == "bad_cookie"


def test_certificate_cache_follows_max_age() -> None:
    now = [float(int(time.time()))]
    s = Fake(int(now[0]))
    e = Engine(mount="/hc", clock=lambda: now[0])
    key = e.store_certs("h", 200, "public, max-age=100", s.certs())
    assert e.cached_key("h") == key
    now[0] += 99
    assert e.cached_key("h") == key
    now[0] += 1
    assert e.cached_key("h") is None  # stale: ask OPTIONS again
    e.store_certs("h", 200, "max-age=0", s.certs())
    assert e.cached_key("h") == key  # max-age=0 counts as one second
    now[0] += 1
    assert e.cached_key("h") is None
    e.store_certs("h", 200, None, s.certs())  # no max-age: until no cert is valid
    now[0] += 7000
    assert e.cached_key("h") == key
    now[0] += 1000
    assert e.cached_key("h") is None
    with pytest.raises(RefusedError):
        e.store_certs("h", 404, None, b"")


def test_requests_response_hands_set_cookie_to_the_jar() -> None:
    import io

    import requests
    from requests.cookies import RequestsCookieJar, extract_cookies_to_jar

    from httpcrypt.requests_adapter import inner_response

    fields = [("Content-Length", "2"), ("Set-Cookie", "sid=42; Path=/")]
    rsp = inner_response(fields, 200, "OK", io.BytesIO(b"ok"), "GET", "http://h/x")
    req = requests.Request("GET", "http://h/x").prepare()
    jar = RequestsCookieJar()
    extract_cookies_to_jar(jar, req, rsp)
    assert jar.get("sid") == "42"
    assert rsp.read() == b"ok"


# ---- erratum E2: HEAD and 304 carry the representation's length ----

@pytest.mark.parametrize(("method", "msg", "expect"), [
    ("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n", None),
    ("GET", b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n", "content_length_mismatch"),
    ("GET", b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n", None),
    ("GET", b"HTTP/1.1 304 Not Modified\r\n\r\nx", "content_length_mismatch"),
    ("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "content_length_mismatch"),
    ("HEAD", b"HTTP/1.1 200 OK\r\n\r\nhello", "content_length_mismatch"),
    ("HEAD", b"HTTP/1.1 200 OK\r\n\r\n", None),
    ("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n", "content_length_mismatch"),
])
def test_response_to_head_and_304(method: str, msg: bytes, expect: str | None) -> None:
    if expect is None:
        head, body = inner.decode_response(msg, request_method=method)
        assert body == b"" and head.status in (200, 304)
    else:
        with pytest.raises(ProtocolError) as e:
            inner.decode_response(msg, request_method=method)
        assert e.value.code == expect


def test_engine_reads_no_body_for_head() -> None:
    # The answer to HEAD declares the length a GET would get (erratum E2):
    # the engine's reader accepts it with no body; the same answer to a
    # GET is a content_length_mismatch.
    now = int(time.time())
    s = Fake(now)
    e = Engine(mount="/hc")
    key = e.store_certs("h", 200, None, s.certs())
    length = [("Content-Length", "1048576")]
    a = e.build("http", "h", key, "HEAD", "/big", [], b"")
    rsp, head, _ = s.serve(_outer_bytes(a), now, length, body=b"")
    assert head.method == "HEAD"
    h, body = _read(e, a, rsp)
    assert (h.status, body) == (200, b"")
    assert inner.field_value(h.fields, "content-length") == "1048576"
    g = e.build("http", "h", key, "GET", "/big", [], b"")
    rsp, _, _ = s.serve(_outer_bytes(g), now, length, body=b"")
    with pytest.raises(ProtocolError) as err:
        _read(e, g, rsp)
    assert err.value.code == "content_length_mismatch"
