"""Live tests of what a caller is told and what the network sees: the
client diagnoses of spec §12 (connect_failed, timeout, not_httpcrypt,
no_endpoint, bad_signature) for each client flavour, a server's early 413
reported as such, and erratum E1 (every field the caller sets travels
inside the sealed request; outer fields are for the network only)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from httpcrypt.errors import BAD_SIGNATURE, HTTPCryptError, RefusedError

from .live import (
    DRIVERS,
    Driver,
    FlipProxy,
    Server,
    binary,
    free_port,
    keygen,
    run_gateway,
    start,
)


@pytest.fixture(scope="module")
def bin_path() -> Path:
    return binary()


@pytest.fixture(scope="module")
def served(bin_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``httpcrypt serve`` under /hc with a 4 KiB body limit."""
    d = tmp_path_factory.mktemp("diag")
    (d / "root").mkdir()
    (d / "root" / "index.html").write_bytes(b"<h1>hello</h1>\n")
    ident = keygen(bin_path, d / "keys")
    s = start(bin_path, ["serve", "--keys", str(d / "keys"), "--root", str(d / "root"),
                         "--mount", "/hc", "--max-body", "4096"], ident, free_port(),
              d / "serve.log")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def gateway(bin_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from run_gateway(bin_path, tmp_path_factory.mktemp("diag-gateway"))


@pytest.fixture(params=sorted(DRIVERS))
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make(flavour: str, **kw: object) -> Driver:
    return DRIVERS[flavour](**kw)


def _fails(d: Driver, url: str, code: str, message: str) -> HTTPCryptError:
    try:
        with pytest.raises(HTTPCryptError) as e:
            d.get(url)
    finally:
        d.close()
    assert e.value.code == code
    assert str(e.value) == message
    return e.value


class _Plain(BaseHTTPRequestHandler):
    """A plain web server: GET answers, OPTIONS is 501 (not implemented)."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"hi")


@pytest.fixture(scope="module")
def plain() -> Iterator[int]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Plain)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield int(srv.server_address[1])
    srv.shutdown()
    srv.server_close()


def test_not_httpcrypt(plain: int, flavour: str) -> None:
    e = _fails(make(flavour, mount="/hc"), f"http://127.0.0.1:{plain}/", "not_httpcrypt",
               f"127.0.0.1:{plain} is not an HTTPCrypt server (OPTIONS /hc/ answered 501)")
    assert isinstance(e, RefusedError) and e.status == 501


def test_no_endpoint(served: Server, flavour: str) -> None:
    _fails(make(flavour, mount="/elsewhere"), served.base + "/index.html", "no_endpoint",
           f"no HTTPCrypt endpoint at /elsewhere on 127.0.0.1:{served.port}: wrong mount?")


def test_connect_failed(flavour: str) -> None:
    port = free_port()
    _fails(make(flavour, mount="/hc"), f"http://127.0.0.1:{port}/", "connect_failed",
           f"cannot connect to 127.0.0.1:{port}: connection refused")


def test_bad_signature(served: Server, flavour: str, bin_path: Path, tmp_path: Path) -> None:
    other = keygen(bin_path, tmp_path / "other")
    _fails(make(flavour, mount="/hc", identity=other), served.base + "/index.html",
           "bad_signature", BAD_SIGNATURE)


def test_timeout(flavour: str) -> None:
    # Accepts connections and never answers.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        _fails(make(flavour, mount="/hc", timeout=0.5), f"http://127.0.0.1:{port}/",
               "timeout", "timed out after 0.5 s while waiting for the answer")


# The async httpx transport is left out: asyncio stops reading a socket
# while nobody awaits a read and closes it on the failed write, so the
# answer the server sent is gone before httpcore asks for it (it then
# raises httpx.ReadError, as plain httpx does against the same server).
@pytest.mark.parametrize("sync_flavour", ["httpx", "requests"])
def test_early_refusal_of_a_large_body(served: Server, sync_flavour: str) -> None:
    # The server answers 413 before reading the body and closes: the
    # client reports that answer, not the reset of its upload.
    d = make(sync_flavour, mount="/hc")
    try:
        for _ in range(3):
            with pytest.raises(RefusedError) as e:
                d.post(served.base + "/upload", b"x" * (8 << 20))
            assert e.value.code == "body_too_large" and e.value.status == 413
    finally:
        d.close()


def test_caller_fields_travel_inside(gateway: Server, flavour: str) -> None:
    # Erratum E1: what the caller sets reaches the service inside the
    # sealed request and never shows on the wire; the outer request
    # carries only what the network needs.
    relay = FlipProxy(gateway.port, offset=None)
    d = make(flavour, mount="/hc", get_form=False)
    secrets = {"Authorization": "Bearer e1-secret-token", "X-Caller": "e1-caller-field",
               "User-Agent": "e1-agent/1.0", "Accept": "text/e1"}
    try:
        if flavour == "requests":
            s = d.session  # type: ignore[attr-defined]
            s.cookies.set("sid", "e1-cookie")
            r = s.get(f"http://127.0.0.1:{relay.port}/echo", headers=secrets, timeout=60)
            doc, info = r.json(), r.httpcrypt
        else:
            client = d.client  # type: ignore[attr-defined]
            client.cookies.set("sid", "e1-cookie")
            if flavour == "httpx":
                r = client.get(f"http://127.0.0.1:{relay.port}/echo", headers=secrets)
            else:
                r = d._run(client.get(  # type: ignore[attr-defined]
                    f"http://127.0.0.1:{relay.port}/echo", headers=secrets))
            doc, info = json.loads(r.content), r.extensions["httpcrypt"]
    finally:
        d.close()
        relay.close()
    seen = {n.lower(): v for n, v in doc["headers"]}
    for name, value in secrets.items():
        assert seen[name.lower()] == value
    assert seen["cookie"] == "sid=e1-cookie"
    wire = bytes(relay.requests)
    for value in [*secrets.values(), "e1-cookie"]:
        assert value.encode() not in wire, f"{value} travelled in clear"
    network = {"host", "cookie", "content-type", "content-length", "transfer-encoding"}
    assert {n.lower() for n, _ in info.request_headers} <= network
    # What the relay saw: the OPTIONS and the sealed POST, nothing else.
    heads = wire.split(b"\r\n\r\n")
    names = {line.split(b":")[0].decode().lower()
             for head in heads if head.startswith((b"OPTIONS ", b"POST "))
             for line in head.split(b"\r\n")[1:]}
    assert names and names <= network, names
