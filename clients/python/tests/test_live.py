"""Live tests against the real Rust server (``httpcrypt serve`` and
``httpcrypt gateway``), for each client flavour: httpx sync, httpx async
and requests. A missing server binary fails these tests (never skips)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from httpcrypt import b64
from httpcrypt.errors import (
    HTTPCryptError,
    IntegrityError,
    ProtocolError,
    ReplayError,
    ServerIntegrityError,
    TokenRequiredError,
)
from httpcrypt.httpx_transport import HTTPCryptTransport

from .live import (
    DRIVERS,
    REPO,
    Driver,
    FlipProxy,
    Result,
    Server,
    binary,
    free_port,
    keygen,
    run_gateway,
    start,
    start_upstream,
    stop,
)

MIB = 1 << 20
BIG = 8 * MIB
MEMORY_BOUND = 3 * MIB  # peak Python allocations while moving 8 MiB
INDEX = b"<h1>httpcrypt live test</h1>\n" * 40


@pytest.fixture(scope="module")
def bin_path() -> Path:
    return binary()  # raises (test error, not a skip) when the binary is missing


@pytest.fixture(scope="module")
def served(bin_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("serve")
    (d / "root").mkdir()
    (d / "root" / "index.html").write_bytes(INDEX)
    ident = keygen(bin_path, d / "keys")
    s = start(bin_path, ["serve", "--keys", str(d / "keys"), "--root", str(d / "root"),
                         "--mount", "/hc"], ident, free_port(), d / "serve.log")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def compact_served(bin_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``httpcrypt serve --compact``: version-2 certificates (spec §4.5)."""
    help_text = subprocess.run([str(bin_path), "serve", "--help"], capture_output=True,
                               timeout=30).stdout
    if b"--compact" not in help_text:
        raise RuntimeError(f"{bin_path} has no `serve --compact` (profile 2): rebuild it")
    d = tmp_path_factory.mktemp("compact")
    (d / "root").mkdir()
    (d / "root" / "index.html").write_bytes(INDEX)
    ident = keygen(bin_path, d / "keys")
    s = start(bin_path, ["serve", "--keys", str(d / "keys"), "--root", str(d / "root"),
                         "--mount", "/hc", "--compact"], ident, free_port(), d / "compact.log")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def gateway(bin_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from run_gateway(bin_path, tmp_path_factory.mktemp("gateway"))


@pytest.fixture(scope="module")
def token_gateway(bin_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A gateway that demands the application token before side effects."""
    d = tmp_path_factory.mktemp("token")
    up, up_port = start_upstream()
    try:
        ident = keygen(bin_path, d / "keys")
        g = start(bin_path, ["gateway", "--keys", str(d / "keys"), "--upstream",
                             f"http://127.0.0.1:{up_port}", "--mount", "/hc", "--require-token"],
                  ident, free_port(), d / "gateway.log")
        yield g
        g.stop()
    finally:
        stop(up)


@pytest.fixture(params=sorted(DRIVERS))
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make(flavour: str, **kw: object) -> Driver:
    return DRIVERS[flavour](**kw)


def test_binary_is_present(bin_path: Path) -> None:
    assert bin_path.is_file()


def test_get_file(served: Server, flavour: str) -> None:
    d = make(flavour, mount="/hc")
    try:
        r = d.get(served.base + "/index.html")
        assert r.status == 200 and r.body == INDEX
        assert r.info.status == 200 and r.info.credential == "key"
        # The default form for a small body-less request is GET (as in Rust).
        assert r.info.method == "GET" and "/hc/" in r.info.url
        missing = d.get(served.base + "/missing.html")
        assert missing.status == 404  # an authenticated inner status, not an error
    finally:
        d.close()


def test_post_form(served: Server, flavour: str) -> None:
    d = make(flavour, mount="/hc", get_form=False)
    try:
        r = d.get(served.base + "/index.html")
        assert r.status == 200 and r.body == INDEX and r.info.method == "POST"
    finally:
        d.close()


def test_pinned_identity(served: Server, flavour: str) -> None:
    d = make(flavour, mount="/hc", identity=served.identity)
    try:
        assert d.get(served.base + "/index.html").body == INDEX
    finally:
        d.close()
    wrong = make(flavour, mount="/hc", identity="A" * 43)
    try:
        with pytest.raises(ProtocolError) as e:
            wrong.get(served.base + "/index.html")
        assert e.value.code == "bad_signature"
    finally:
        wrong.close()


def test_ticket_on_second_request(served: Server, flavour: str) -> None:
    # By default the first request asks for a short ticket (spec §7.3) and
    # the second presents it; with short tickets off, the v1 ticket (§7.2).
    for short, credential in ((True, "short_ticket"), (False, "ticket")):
        d = make(flavour, mount="/hc", short_tickets=short)
        try:
            first = d.get(served.base + "/index.html")
            second = d.get(served.base + "/index.html")
            assert first.info.credential == "key"
            assert second.info.credential == credential
            assert second.body == INDEX
        finally:
            d.close()
    no_tickets = make(flavour, mount="/hc", tickets=False)
    try:
        no_tickets.get(served.base + "/index.html")
        assert no_tickets.get(served.base + "/index.html").info.credential == "key"
    finally:
        no_tickets.close()


def _cookie_value(r: Result) -> str:
    """The value of the outer cookie's first pair (pad included)."""
    cookie = next(v for n, v in r.info.request_headers if n == "Cookie")
    return cookie.split(";", 1)[0].split("=", 1)[1]


def test_short_tickets(served: Server, gateway: Server, flavour: str) -> None:
    """Several requests through one client: a key, then a short ticket
    (cookie value 22-38 characters) on every later one, presented for R = 3
    requests; the third of them asks again and the next presents the new
    ticket (spec §7.3). The bodies are right throughout."""
    d = make(flavour, mount="/hc", short_ticket_reuse=3)
    try:
        rs = [d.get(served.base + "/index.html") for _ in range(6)]
        assert all(r.status == 200 and r.body == INDEX for r in rs)
        assert [r.info.credential for r in rs] == ["key"] + ["short_ticket"] * 5
        assert 43 <= len(_cookie_value(rs[0])) <= 43 + 16
        values = [_cookie_value(r) for r in rs[1:]]
        assert all(22 <= len(v) <= 22 + 16 for v in values), values
        hs = [v[:22] for v in values]  # h, without the pad
        assert hs[0] == hs[1] == hs[2] != hs[3] == hs[4]
        assert all(r.info.attempts == 1 for r in rs)
        # A POST with a body, presenting the short ticket, through the gateway.
        g = d.post(gateway.base + "/echo", b"x" * 3000)  # discovers, asks
        g2 = d.post(gateway.base + "/echo", b"y" * 3000)
        assert (g.info.credential, g2.info.credential) == ("key", "short_ticket")
        doc = httpx.Response(200, content=g2.body).json()
        assert doc["length"] == 3000 and doc["sha256"] == hashlib.sha256(b"y" * 3000).hexdigest()
        assert 22 <= len(_cookie_value(g2)) <= 22 + 16
    finally:
        d.close()


def test_reuse_key(served: Server, flavour: str) -> None:
    d = make(flavour, mount="/hc", reuse_key=True, tickets=False)
    try:
        a = d.get(served.base + "/index.html")
        b = d.get(served.base + "/index.html")
        cookie = next(v for n, v in a.info.request_headers if n == "Cookie")
        cookie2 = next(v for n, v in b.info.request_headers if n == "Cookie")
        # The same client public key (value) under random padding.
        assert cookie.split("=")[1][:43] == cookie2.split("=")[1][:43]
    finally:
        d.close()


def test_stale_retry(served: Server, flavour: str) -> None:
    d = make(flavour, mount="/hc", clock=lambda: time.time() + 150)
    try:
        r = d.get(served.base + "/index.html")
        assert r.status == 200 and r.body == INDEX
        assert r.info.attempts == 2  # inner 425 stale, then the corrected retry
        # The offset is kept: the next request needs no retry.
        assert d.get(served.base + "/index.html").info.attempts == 1
    finally:
        d.close()


def _serve_new_keys(bin_path: Path, tmp_path: Path, port: int, keys: str) -> Server:
    """``httpcrypt serve`` of tmp_path/root on ``port`` with new keys made
    in tmp_path/``keys`` (a restart on the same port forgets the old ones)."""
    ident = keygen(bin_path, tmp_path / keys)
    return start(bin_path, ["serve", "--keys", str(tmp_path / keys), "--root",
                            str(tmp_path / "root"), "--mount", "/hc"], ident, port,
                 tmp_path / "serve.log")


def test_unknown_key_retry(bin_path: Path, tmp_path: Path, flavour: str) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "index.html").write_bytes(INDEX)
    port = free_port()

    s = _serve_new_keys(bin_path, tmp_path, port, "keys1")
    d = make(flavour, mount="/hc", short_tickets=False)
    try:
        assert d.get(s.base + "/index.html").info.attempts == 1  # caches cert (and a ticket)
        s.stop()
        # New keys: the client's cert and ticket are unknown there.
        s = _serve_new_keys(bin_path, tmp_path, port, "keys2")
        r = d.get(s.base + "/index.html")
        assert r.status == 200 and r.body == INDEX
        assert r.info.attempts == 2 and r.info.credential == "key"
    finally:
        d.close()
        s.stop()


def test_refused_short_ticket_recovers_with_a_key(bin_path: Path, tmp_path: Path,
                                                  flavour: str) -> None:
    """The server restarted with new keys forgets the held short ticket's
    ticket key: a short ticket's cookie is not the contract's HTTPCrypt
    shape, so the answer is 400 malformed (no_cookie). The client drops the
    ticket and tries a key: the cached certificate's, refused with the new
    certificates (unknown-key), then the new key (spec §7.3, §11.5)."""
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "index.html").write_bytes(INDEX)
    port = free_port()

    s = _serve_new_keys(bin_path, tmp_path, port, "keys1")
    d = make(flavour, mount="/hc")
    try:
        d.get(s.base + "/index.html")
        assert d.get(s.base + "/index.html").info.credential == "short_ticket"
        s.stop()
        s = _serve_new_keys(bin_path, tmp_path, port, "keys2")
        r = d.get(s.base + "/index.html")
        assert r.status == 200 and r.body == INDEX
        assert r.info.attempts == 3 and r.info.credential == "key"
        # That answer brought a short ticket from the new server.
        again = d.get(s.base + "/index.html")
        assert again.info.credential == "short_ticket" and again.info.attempts == 1
        assert again.body == INDEX
    finally:
        d.close()
        s.stop()


def test_non_200_outer_is_an_error(served: Server, flavour: str) -> None:
    # A wrong mount: the server answers outside the mount (404, plaintext).
    d = make(flavour, mount="/elsewhere")
    try:
        with pytest.raises(HTTPCryptError) as e:
            d.get(served.base + "/index.html")
        assert e.value.code == "no_endpoint"
    finally:
        d.close()


def test_tampered_response(served: Server, flavour: str) -> None:
    proxy = FlipProxy(served.port)
    d = make(flavour, mount="/hc")
    try:
        got: list[bytes] = []
        with pytest.raises(IntegrityError) as e:
            got.append(d.get(f"http://127.0.0.1:{proxy.port}/index.html").body)
        assert e.value.code == "integrity"
        assert got == [] and proxy.flipped >= 1
    finally:
        d.close()
        proxy.close()


def test_tampered_later_record_yields_only_verified_bytes(served: Server, flavour: str,
                                                          gateway: Server) -> None:
    # A 200 KB body in 16 KiB records; a byte deep in the body is flipped.
    n = 200_000
    proxy = FlipProxy(gateway.port, offset=100_000)
    d = make(flavour, mount="/hc")
    got = bytearray()
    try:
        with pytest.raises(IntegrityError):
            d.download(f"http://127.0.0.1:{proxy.port}/gen?n={n}", got.extend)
        assert proxy.flipped >= 1
        assert len(got) < 100_000
        assert bytes(got) == bytes(i % 251 for i in range(len(got)))
    finally:
        d.close()
        proxy.close()


def _pattern_chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    block = bytes(i % 256 for i in range(size))
    sent = 0
    while sent < total:
        n = min(size, total - sent)
        yield block if n == size else block[:n]
        sent += n


def test_streaming_upload_bounded(gateway: Server, flavour: str) -> None:
    want = hashlib.sha256()
    for c in _pattern_chunks(BIG):
        want.update(c)
    d = make(flavour, mount="/hc")
    try:
        d.get(gateway.base + "/echo")  # fetch the certificate outside the measurement
        for length in (BIG, None):  # known length (Content-Length) and chunked
            tracemalloc.start()
            try:
                r = d.upload(gateway.base + "/sink", _pattern_chunks(BIG), length)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert r.status == 200
            assert r.body.decode() == f"{BIG} {want.hexdigest()}"
            assert r.info.method == "POST"
            print(f"upload peak {flavour} {length}: {peak}")
            assert peak < MEMORY_BOUND, f"peak {peak} bytes while uploading {BIG}"
    finally:
        d.close()


def test_streaming_download_bounded(gateway: Server, flavour: str) -> None:
    want = hashlib.sha256()
    pattern = bytes(i % 251 for i in range(251 * 256))
    left = BIG
    while left:
        piece = pattern[:min(len(pattern), left)]
        want.update(piece)
        left -= len(piece)
    d = make(flavour, mount="/hc")
    try:
        d.get(gateway.base + "/echo")
        got = hashlib.sha256()
        count = [0]

        def sink(chunk: bytes) -> None:
            got.update(chunk)
            count[0] += len(chunk)

        tracemalloc.start()
        try:
            r = d.download(gateway.base + f"/gen?n={BIG}", sink)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert r.status == 200
        assert count[0] == BIG and got.hexdigest() == want.hexdigest()
        print(f"download peak {flavour}: {peak}")
        assert peak < MEMORY_BOUND, f"peak {peak} bytes while downloading {BIG}"
    finally:
        d.close()


def test_gateway_echo_reconstruction(gateway: Server, flavour: str) -> None:
    d = make(flavour, mount="/hc")
    try:
        r = d.post(gateway.base + "/echo?x=1", b"hello body")
        doc = httpx.Response(200, content=r.body).json()
        assert doc["method"] == "POST" and doc["target"] == "/echo?x=1"
        assert doc["length"] == 10
        assert doc["sha256"] == hashlib.sha256(b"hello body").hexdigest()
        names = {n.lower() for n, _ in doc["headers"]}
        # Erratum E1: the protocol's own fields (Client-Random, Date) stay with
        # the gateway; the outer Cookie never reaches the service.
        assert "cookie" not in names and "client-random" not in names
    finally:
        d.close()


def test_token_required_retry(token_gateway: Server, flavour: str) -> None:
    """The first side effect takes one token-required retry; later ones
    present the token they hold. With short tickets the 425 brings the
    short ticket and a token bound to its key ``k'`` (spec §7.3, §8.4), and
    an answer that brings a new short ticket (R = 2: every other request
    asks) a token bound to the new one's key."""
    cases: list[tuple[str, dict[str, object]]] = [
        ("ticket", {"short_tickets": False}), ("short_ticket", {}),
        ("short_ticket", {"short_ticket_reuse": 2})]
    for credential, kw in cases:
        d = make(flavour, mount="/hc", **kw)
        try:
            for i in range(4):
                body = b"side effect %d" % i
                r = d.post(token_gateway.base + "/echo", body)
                # 425 token-required (with a token and a ticket), then the retry.
                assert (r.status, r.info.attempts, r.info.credential) == (
                    200, 2 if i == 0 else 1, credential), (kw, i)
                assert httpx.Response(200, content=r.body).json()["length"] == len(body)
            assert d.get(token_gateway.base + "/echo").info.attempts == 1  # GET needs none
        finally:
            d.close()
    no_tickets = make(flavour, mount="/hc", tickets=False)
    try:
        # Without a ticket the retry runs under a new key, which the token
        # does not match: the second refusal is an error.
        with pytest.raises(TokenRequiredError) as e:
            no_tickets.post(token_gateway.base + "/echo", b"side effect")
        assert e.value.code == "token_required" and e.value.status == 425
    finally:
        no_tickets.close()


def test_requests_session_cookies_travel_inside(gateway: Server) -> None:
    import requests

    from httpcrypt.requests_adapter import HTTPCryptAdapter

    with requests.Session() as s:
        s.mount("http://", HTTPCryptAdapter(mount="/hc"))
        s.cookies.set("sid", "42")
        doc = s.get(gateway.base + "/echo", timeout=60).json()
    cookies = [v for n, v in doc["headers"] if n.lower() == "cookie"]
    assert cookies == ["sid=42"]  # the inner one; the outer key cookie was dropped


class _Twice(httpx.BaseTransport):
    """Sends every sealed request twice (a replaying middlebox) and returns
    the second answer."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "OPTIONS":
            return self.inner.handle_request(request)
        first = self.inner.handle_request(request)
        first.read()
        first.close()
        return self.inner.handle_request(request)


def test_replay_is_not_retried(served: Server) -> None:
    t = HTTPCryptTransport(mount="/hc", transport=_Twice(), tickets=False)
    with httpx.Client(transport=t) as c, pytest.raises(ReplayError) as e:
        c.get(served.base + "/index.html")
    assert e.value.code == "replay" and e.value.problem_type == "urn:httpcrypt:replay"
    assert e.value.status == 425


def _hcfetch(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "httpcrypt.hcfetch", *args],
                          capture_output=True, timeout=60, cwd=REPO)


def test_hcfetch_contract(served: Server, gateway: Server, tmp_path: Path) -> None:
    # "--identity=": a base64url identity may start with "-" (argparse).
    p = _hcfetch("--mount", "/hc", f"--identity={served.identity}", "--repeat", "3",
                 served.base + "/index.html")
    assert p.returncode == 0, p.stderr
    assert p.stdout == INDEX
    assert p.stderr.decode().splitlines() == [
        "request 1: status 200, credential key",
        "request 2: status 200, credential ticket (short)",
        "request 3: status 200, credential ticket (short)",
    ]
    # --v1-tickets never asks: the server's v1 tickets are presented.
    p = _hcfetch("--mount", "/hc", "--v1-tickets", "--repeat", "3", served.base + "/index.html")
    assert p.returncode == 0, p.stderr
    assert p.stdout == INDEX
    assert p.stderr.decode().splitlines() == [
        "request 1: status 200, credential key",
        "request 2: status 200, credential ticket",
        "request 3: status 200, credential ticket",
    ]
    p = _hcfetch("--mount", "/hc", served.base + "/missing")
    assert p.returncode == 0 and b"request 1: status 404" in p.stderr
    p = _hcfetch("--mount", "/hc", "--identity", "A" * 43, served.base + "/index.html")
    assert p.returncode == 1 and p.stderr.decode().strip() == "error: bad_signature"
    assert p.stdout == b""
    f = tmp_path / "data.bin"
    f.write_bytes(b"x" * 100_000)
    p = _hcfetch("--mount", "/hc", "-X", "PUT", "-H", "X-Test: 1", "--data-file", str(f),
                 gateway.base + "/echo")
    assert p.returncode == 0, p.stderr
    doc = httpx.Response(200, content=p.stdout).json()
    assert doc["method"] == "PUT" and doc["length"] == 100_000
    assert ["x-test", "1"] in [[n.lower(), v] for n, v in doc["headers"]]
    p = _hcfetch("--mount", "/hc", "-d", "hi", gateway.base + "/echo")
    assert p.returncode == 0 and httpx.Response(200, content=p.stdout).json()["method"] == "POST"


def _segment(url: str) -> str:
    return url.split("?", 1)[0].rsplit("/", 1)[1]


def test_compact_profile(compact_served: Server, flavour: str) -> None:
    """Against ``serve --compact`` the client sends profile 2: fresh key,
    then ticket (short, or v1 with short tickets off), in the GET and POST
    forms, pinned identity."""
    base = compact_served.base
    for get_form, short in ((True, True), (False, True), (True, False), (False, False)):
        d = make(flavour, mount="/hc", identity=compact_served.identity, get_form=get_form,
                 short_tickets=short)
        try:
            first = d.get(base + "/index.html")
            second = d.get(base + "/index.html")
            resumed = "short_ticket" if short else "ticket"
            for r, credential in ((first, "key"), (second, resumed)):
                assert r.status == 200 and r.body == INDEX
                assert r.info.credential == credential and r.info.attempts == 1
                assert r.info.profile == 2
                assert r.info.method == ("GET" if get_form else "POST")
                seg = _segment(r.info.url)
                assert len(seg) == 33 and seg[0] == "2", r.info.url
                # n0 carries the send time.
                n0 = b64.decode(seg[1:])
                assert abs(int.from_bytes(n0[:5], "big") - time.time()) < 30
                name, value = next(v for n, v in r.info.request_headers
                                   if n == "Cookie").split("=")
                lengths = {"key": 43, "ticket": 115, "short_ticket": 22}
                assert lengths[credential] <= len(value) <= lengths[credential] + 7
                assert len(name) <= 14 + 7
            assert d.get(base + "/missing.html").status == 404
        finally:
            d.close()


def test_compact_stale_retry_and_v1_opt_out(compact_served: Server, flavour: str) -> None:
    base = compact_served.base
    d = make(flavour, mount="/hc", clock=lambda: time.time() + 150)
    try:
        r = d.get(base + "/index.html")
        # Inner 425 stale (time in n0 150 s ahead), then the retry whose n0
        # carries the corrected time.
        assert r.status == 200 and r.body == INDEX
        assert r.info.attempts == 2 and r.info.profile == 2
        assert d.get(base + "/index.html").info.attempts == 1
    finally:
        d.close()
    v1 = make(flavour, mount="/hc", compact=False, tickets=False)
    try:
        r = v1.get(base + "/index.html")
        assert r.status == 200 and r.body == INDEX and r.info.profile == 1
        assert len(_segment(r.info.url)) == 32
    finally:
        v1.close()


def test_compact_rewritten_host_fails(compact_served: Server) -> None:
    """A middlebox that rewrites Host breaks record 0 of a profile-2
    request: the server answers inner 500 integrity."""

    class Rewrite(httpx.BaseTransport):
        def __init__(self) -> None:
            self.inner = httpx.HTTPTransport()

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            if request.method != "OPTIONS":
                request.headers["Host"] = "rewritten.example"
            return self.inner.handle_request(request)

    t = HTTPCryptTransport(mount="/hc", transport=Rewrite())
    with httpx.Client(transport=t) as c, pytest.raises(ServerIntegrityError) as e:
        c.get(compact_served.base + "/index.html")
    assert e.value.problem_type == "urn:httpcrypt:integrity" and e.value.status == 500
