"""Suite 2 end to end without a network (spec/hybrid.md): the engine and
the httpx transports against the package's server side holding suite-2
keys, in the server's three modes (``--pq off``, ``on``, ``only``). A hybrid
request in both forms, a ticket resuming a hybrid session, the pin refusing
a downgrade, ``require`` against a v1-only server, ``unknown-key`` with
``hybrid_certs``, and ``hybrid_required``."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from httpcrypt import hybrid, inner, outer, server
from httpcrypt.cert import KeyCert
from httpcrypt.client import Attempt, Engine
from httpcrypt.errors import ConfigError, HTTPCryptError, ProtocolError, RefusedError
from httpcrypt.httpx_transport import AsyncHTTPCryptTransport, HTTPCryptTransport
from httpcrypt.inner import ResponseHead
from httpcrypt.suite import ed25519_public, x25519_public
from httpcrypt.ticket import TicketContents, TicketKey

from .live import DRIVERS

A = "h.test"


class PqFake:
    """An in-memory server with one kex key published in the suites its
    ``mode`` says: ``off`` (v1), ``on`` (both), ``only`` (suite 2)."""

    def __init__(self, now: int, mode: str = "on") -> None:
        self.now = now
        self.mode = mode
        self.seed = os.urandom(32)
        self.tk = TicketKey(os.urandom(10), os.urandom(32))
        self.mount = outer.Mount("/hc")
        self.seen: list[tuple[server.Accepted, inner.RequestHead, bytes]] = []
        self.rotate(7)

    def rotate(self, serial: int) -> None:
        """A new kex key and ML-KEM key (the old ones are dropped)."""
        self.secret = os.urandom(32)
        self.kem = hybrid.KemSecret(os.urandom(64))
        pub = x25519_public(self.secret)
        self.cert = KeyCert.sign(self.seed, serial, self.now - 60, self.now + 7200, pub)
        self.hcert = hybrid.HybridCert.sign(self.seed, serial, self.now - 60, self.now + 7200,
                                            pub, self.kem.public.hash)
        v1 = [(self.secret, self.cert)] if self.mode != "only" else []
        pq = [server.HybridKey(self.secret, self.kem, self.hcert)] if self.mode != "off" else []
        self.keys = server.ServerKeys(v1, [(self.tk, self.now + 7200)], pq)

    @property
    def identity(self) -> bytes:
        return ed25519_public(self.seed)

    def options(self, path: str) -> tuple[int, bytes]:
        if path == "/hc/pq":
            if self.mode == "off":
                return 404, b""
            return 200, hybrid.format_cert_list([self.hcert], [self.kem.public]).encode()
        if self.mode == "only":
            return 200, b""
        return 200, (self.cert.to_text() + "\n").encode()

    def serve(self, raw: bytes) -> tuple[int, bytes]:
        try:
            acc, head, body = server.serve_bytes(self.keys, self.mount, server.Limits(),
                                                 self.now, raw)
        except ProtocolError as e:
            if e.code == "unknown_key":
                doc = outer.format_problem(
                    "urn:httpcrypt:unknown-key", 400, "x",
                    [self.cert.to_text()] if self.mode != "only" else [],
                    [self.hcert.to_text()] if self.mode != "off" else None)
            elif e.code == "hybrid_required":
                doc = outer.format_problem("urn:httpcrypt:hybrid-required", 400, "x")
            else:
                doc = outer.format_problem("urn:httpcrypt:malformed", 400, e.code)
            return 400, doc
        self.seen.append((acc, head, body))
        t = self.tk.seal(TicketContents(acc.session_key, acc.kid, self.now + 7200),
                         os.urandom(24))
        rsp = server.seal_response(acc, os.urandom(16 if acc.profile == 2 else 24),
                                   ResponseHead(200, "OK", [("Ticket", t.to_field())]),
                                   b"ok:" + body, self.now)
        return 200, rsp

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


def _outer_bytes(a: Attempt) -> bytes:
    target = a.url.split("//", 1)[1]
    target = target[target.index("/"):]
    head = f"{a.method} {target} HTTP/1.1\r\n" + "".join(f"{n}: {v}\r\n" for n, v in a.headers)
    body = a.body if isinstance(a.body, bytes) else b"".join(a.body or [])  # type: ignore[arg-type]
    return (head + "\r\n").encode() + body


def _discover(e: Engine, s: PqFake) -> Any:
    """The drivers' discovery loop, against ``s``."""
    key = e.cached_key(A)
    while key is None:
        url = e.discovery_url("http", A)
        status, body = s.options(url.split(A, 1)[1])
        key = e.take_certs(A, url, status, "max-age=100", body, "application/httpcrypt-certs")
    return key


def _exchange(e: Engine, s: PqFake, method: str = "GET", body: bytes = b"") -> Attempt:
    a = e.build("http", A, _discover(e, s), method, "/x", [], body)
    status, rsp = s.serve(_outer_bytes(a))
    if status != 200:
        raise e.refused(a, status, rsp)
    r = e.reader(a)
    r.push(rsp)
    r.end()
    assert r.head is not None and r.head.status == 200
    e.took_head(a, r.head)
    assert b"".join(r.take()) == b"ok:" + body
    return a


def test_hybrid_request_both_forms_and_ticket() -> None:
    s = PqFake(int(time.time()))
    e = Engine(mount="/hc", pq="prefer", identity=s.identity)
    assert e.discovery_url("http", A) == f"http://{A}/hc/pq"
    a = _exchange(e, s)
    acc = s.seen[-1][0]
    # GET form: query = b64u(ct_M || stream), below the 2,000-byte line.
    assert a.method == "GET" and a.suite == 2 and a.prepared.credential == "key"
    assert acc.kid == s.hcert.kid and acc.session_key == a.prepared.session_key
    assert len(a.url.split("//", 1)[1].split("/", 1)[1]) + 14 < 2000
    cookie = dict(a.headers)["Cookie"]
    assert cookie.startswith(outer.format_cookie(s.hcert.kid, b"\0" * 32)[:14])
    # The resumed request presents the hybrid session's ticket: no ciphertext.
    t = _exchange(e, s, "PUT", os.urandom(3000))
    assert t.prepared.credential == "ticket" and t.suite == 2 and t.method == "POST"
    assert t.prepared.ct_m == b"" and s.seen[-1][0].session_key == a.prepared.session_key
    assert s.seen[-1][0].kid == s.hcert.kid
    # A large fresh request takes the POST form: ct_M, then the stream.
    e2 = Engine(mount="/hc", pq="require", tickets=False)
    big = os.urandom(5000)
    p = _exchange(e2, s, "POST", big)
    assert p.method == "POST" and isinstance(p.body, bytes)
    assert p.body[:hybrid.CIPHERTEXT_LEN] == p.prepared.ct_m
    assert p.content_length == len(p.body)
    assert p.info(1).suite == 2


def test_compact_hybrid_request() -> None:
    """A version-2 suite-2 certificate: profile 2 under the hybrid key."""
    s = PqFake(int(time.time()))
    s.hcert = hybrid.HybridCert.sign(s.seed, 7, s.now - 60, s.now + 7200, s.cert.kex_public,
                                     s.kem.public.hash, version=2)
    s.keys.hybrid = [server.HybridKey(s.secret, s.kem, s.hcert)]
    e = Engine(mount="/hc", pq="require")
    a = _exchange(e, s)
    assert (a.prepared.profile, a.suite) == (2, 2) and s.seen[-1][0].profile == 2
    assert _exchange(e, s, "POST", b"b" * 3000).prepared.credential == "ticket"
    assert Engine(mount="/hc", pq="require", compact=False).build(
        "http", A, _discover(e, s), "GET", "/", [], b"").prepared.profile == 1


def test_classical_ticket_dropped_when_suite_2_appears() -> None:
    s = PqFake(int(time.time()), "off")
    e = Engine(mount="/hc", pq="prefer")
    assert _exchange(e, s).suite == 1
    s.mode = "on"
    s.rotate(8)
    e.take_certs(A, f"http://{A}/hc/pq", 200, None, s.options("/hc/pq")[1])
    a = _exchange(e, s)
    assert (a.prepared.credential, a.suite) == ("key", 2)


def test_streamed_hybrid_body_length_is_exact() -> None:
    s = PqFake(int(time.time()))
    e = Engine(mount="/hc", pq="require")
    key = _discover(e, s)
    data = os.urandom(40000)
    a = e.build("http", A, key, "POST", "/s", [], None,
                iter([data[i:i + 999] for i in range(0, len(data), 999)]), len(data))
    raw = _outer_bytes(a)
    assert a.content_length == len(raw) - raw.index(b"\r\n\r\n") - 4
    assert s.serve(raw)[0] == 200 and s.seen[-1][2] == data


def test_pin_refuses_a_downgrade_until_not_after() -> None:
    now = [float(int(time.time()))]
    s = PqFake(int(now[0]))
    e = Engine(mount="/hc", pq="prefer", tickets=False, clock=lambda: now[0])
    _exchange(e, s)
    # Later, discovery offers suite 1 only (an attacker answering 404 to /pq).
    now[0] += 200  # past max-age: discovery again
    s.mode = "off"
    s.rotate(8)
    with pytest.raises(ProtocolError) as err:
        _exchange(e, s)
    assert err.value.code == "hybrid_downgrade"
    # A v1 certificate list is a downgrade too, while the pin holds.
    with pytest.raises(ProtocolError) as err:
        e.store_certs(A, 200, None, (s.cert.to_text() + "\n").encode())
    assert err.value.code == "hybrid_downgrade"
    # After the pinned certificate's not_after, prefer falls back to v1.
    now[0] = s.hcert.not_after + 1
    s.now = int(now[0])
    s.rotate(9)
    a = _exchange(e, s)
    assert a.suite == 1 and s.seen[-1][0].kid == s.cert.kid


def test_require_against_a_v1_only_server() -> None:
    s = PqFake(int(time.time()), "off")
    e = Engine(mount="/hc", pq="require")
    with pytest.raises(ProtocolError) as err:
        _exchange(e, s)
    assert err.value.code == "hybrid_downgrade"
    # prefer falls back to v1 discovery, and asks /pq again next time.
    p = Engine(mount="/hc", pq="prefer")
    a = _exchange(p, s)
    assert a.suite == 1 and a.prepared.ct_m == b""
    assert p.discovery_url("http", A).endswith("/hc/pq")
    # off never asks /pq.
    assert Engine(mount="/hc").discovery_url("http", A).endswith("/hc/")


def test_unknown_key_takes_hybrid_certs() -> None:
    s = PqFake(int(time.time()))
    e = Engine(mount="/hc", pq="prefer", tickets=False)
    _exchange(e, s)
    # The server rotates its kex key but keeps the ML-KEM key (H4).
    kem = s.kem
    s.rotate(8)
    s.kem = kem
    s.hcert = hybrid.HybridCert.sign(s.seed, 8, s.now - 60, s.now + 7200, s.cert.kex_public,
                                     kem.public.hash)
    s.keys.hybrid = [server.HybridKey(s.secret, kem, s.hcert)]
    with pytest.raises(RefusedError) as err:
        _exchange(e, s)
    assert err.value.code == "unknown_key"
    key = e.cached_key(A)  # taken from hybrid_certs, the key text from the cache
    assert key is not None and key.suite == 2 and key.kid == s.hcert.kid
    a = _exchange(e, s)
    assert a.suite == 2 and s.seen[-1][0].kid == s.hcert.kid
    # A new ML-KEM key the client has not seen: the retry discovers again.
    s.rotate(9)
    with pytest.raises(RefusedError):
        _exchange(e, s)
    assert e.cached_key(A) is None
    assert _exchange(e, s).suite == 2 and s.seen[-1][0].kid == s.hcert.kid


def test_unknown_key_lines_each_on_their_own() -> None:
    s = PqFake(int(time.time()))
    e = Engine(mount="/hc", pq="require", tickets=False)
    a = _exchange(e, s)
    s.rotate(8)  # a new ML-KEM key too; the problem carries its key text
    doc = outer.format_problem("urn:httpcrypt:unknown-key", 400, "x", [],
                               ["hc1 bad", s.hcert.to_text(), s.kem.public.to_text()])
    assert e.refused(a, 400, doc).code == "unknown_key"
    key = e.cached_key(A)
    assert key is not None and key.kid == s.hcert.kid
    assert _exchange(e, s).suite == 2


def test_hybrid_only_server_refuses_v1() -> None:
    s = PqFake(int(time.time()), "only")
    v1 = Engine(mount="/hc")
    key = v1.store_certs(A, 200, None, (s.cert.to_text() + "\n").encode())
    a = v1.build("http", A, key, "GET", "/", [], b"")
    status, doc = s.serve(_outer_bytes(a))
    with pytest.raises(RefusedError) as err:
        v1.refused(a, status, doc)
    assert err.value.code == "hybrid_required"
    assert err.value.problem_type == "urn:httpcrypt:hybrid-required"
    assert _exchange(Engine(mount="/hc", pq="require"), s).suite == 2


def test_pq_answers_checked() -> None:
    s = PqFake(int(time.time()))
    other = PqFake(int(time.time()))
    url = f"http://{A}/hc/pq"
    # Pinned identity: a list signed by another identity is bad_signature.
    e = Engine(mount="/hc", pq="prefer", identity=other.identity)
    with pytest.raises(ProtocolError) as err:
        e.take_certs(A, url, 200, None, s.options("/hc/pq")[1])
    assert err.value.code == "bad_signature"
    # A key text that is not the certified one leaves no usable key.
    body = hybrid.format_cert_list([s.hcert], [other.kem.public]).encode()
    r = Engine(mount="/hc", pq="require")
    with pytest.raises(ProtocolError) as err:
        r.take_certs(A, url, 200, None, body)
    assert err.value.code == "hybrid_downgrade"
    p = Engine(mount="/hc", pq="prefer")
    assert p.take_certs(A, url, 200, None, body) is None
    assert p.discovery_url("http", A).endswith("/hc/")
    with pytest.raises(ProtocolError) as err:
        p.take_certs(A, url, 200, None, b"hck1 AAAA\n", "application/httpcrypt-certs")
    assert err.value.code == "bad_certificate"
    with pytest.raises(ConfigError):
        Engine(pq="maybe")  # type: ignore[arg-type]


def test_transports_speak_suite_2() -> None:
    s = PqFake(int(time.time()))
    with httpx.Client(transport=HTTPCryptTransport(
            mount="/hc", pq="require", transport=httpx.MockTransport(s))) as c:
        r = c.get(f"http://{A}/a")
        assert r.content == b"ok:" and r.extensions["httpcrypt"].suite == 2
        r = c.post(f"http://{A}/b", content=b"x" * 3000)
        info = r.extensions["httpcrypt"]
        assert r.content == b"ok:" + b"x" * 3000
        assert info.credential == "ticket" and info.suite == 2
    v1 = PqFake(int(time.time()), "off")
    with httpx.Client(transport=HTTPCryptTransport(
            mount="/hc", pq="prefer", transport=httpx.MockTransport(v1))) as c:
        r = c.get(f"http://{A}/a")
        assert r.content == b"ok:" and r.extensions["httpcrypt"].suite == 1

    async def go() -> None:
        t = AsyncHTTPCryptTransport(mount="/hc", pq="require", transport=httpx.MockTransport(s))
        async with httpx.AsyncClient(transport=t) as c:
            r = await c.post(f"http://{A}/c", content=b"y" * 3000)
            assert r.content == b"ok:" + b"y" * 3000 and r.extensions["httpcrypt"].suite == 2
        t2 = AsyncHTTPCryptTransport(mount="/hc", pq="require",
                                     transport=httpx.MockTransport(v1))
        async with httpx.AsyncClient(transport=t2) as c:
            with pytest.raises(HTTPCryptError) as err:
                await c.get(f"http://{A}/a")
            assert err.value.code == "hybrid_downgrade"

    asyncio.run(go())


class _Handler(http.server.BaseHTTPRequestHandler):
    """:class:`PqFake` behind a real socket (the requests adapter has no mock transport)."""

    fake: PqFake
    protocol_version = "HTTP/1.1"

    def _answer(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_OPTIONS(self) -> None:
        status, body = self.fake.options(self.path)
        self._answer(status, body, "application/httpcrypt-certs")

    def _serve(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        head = f"{self.command} {self.path} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in self.headers.items())
        status, out = self.fake.serve((head + "\r\n").encode("latin-1") + body)
        self._answer(status, out, "application/octet-stream" if status == 200
                     else "application/problem+json")

    do_GET = do_POST = _serve

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve_fake(fake: Any) -> Iterator[str]:
    """Serves ``fake`` (any object with ``options`` and ``serve``) with
    ``_Handler`` on a local port in a thread; yields the base URL."""
    handler = type("H", (_Handler,), {"fake": fake})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=5)


@pytest.fixture
def socket_server() -> Iterator[tuple[str, PqFake]]:
    fake = PqFake(int(time.time()))
    with serve_fake(fake) as base:
        yield base, fake


@pytest.mark.parametrize("flavour", sorted(DRIVERS))
def test_drivers_over_a_socket(socket_server: tuple[str, PqFake], flavour: str) -> None:
    base, fake = socket_server
    d = DRIVERS[flavour](timeout=10.0, mount="/hc", pq="require", identity=fake.identity)
    try:
        r = d.get(base + "/a")
        assert (r.status, r.body, r.info.suite, r.info.credential) == (200, b"ok:", 2, "key")
        r = d.post(base + "/b", b"z" * 4000)
        assert (r.body, r.info.suite, r.info.credential) == (b"ok:" + b"z" * 4000, 2, "ticket")
        data = os.urandom(20000)
        chunks = iter([data[i:i + 4096] for i in range(0, len(data), 4096)])
        r = d.upload(base + "/c", chunks, len(data))
        assert r.body == b"ok:" + data
    finally:
        d.close()
    fake.mode = "off"
    fake.rotate(8)
    d = DRIVERS[flavour](timeout=10.0, mount="/hc", pq="require")
    try:
        with pytest.raises(HTTPCryptError) as err:
            d.get(base + "/a")
        assert err.value.code == "hybrid_downgrade"
    finally:
        d.close()


def test_hcfetch_over_a_socket(socket_server: tuple[str, PqFake]) -> None:
    base, _ = socket_server
    out = subprocess.run(
        [sys.executable, "-m", "httpcrypt.hcfetch", "--mount", "/hc", "--pq", "require",
         "--repeat", "2", base + "/x"], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout == b"ok:"
    assert b"request 2: status 200, credential ticket" in out.stderr
