"""Live tests of suite 2 (spec/hybrid.md) against the real server
(``$HTTPCRYPT_BIN``, found as the other live tests find it), for httpx sync,
httpx async and requests: ``serve --pq on`` answers a hybrid request and
resumes it with a ticket; ``--pq off`` makes ``require`` fail with
``hybrid_downgrade`` and ``prefer`` fall back to v1; ``--pq only`` refuses a
v1 request (``hybrid_required``); ``hcfetch --pq require`` gets through.
A binary whose ``serve`` has no ``--pq`` skips these."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from httpcrypt import hybrid
from httpcrypt.cert import DiscoveredKey
from httpcrypt.client import Engine
from httpcrypt.errors import HTTPCryptError, RefusedError

from .live import DRIVERS, REPO, Server, binary, free_port, keygen
from .live import start as start_server

INDEX = b"<h1>httpcrypt suite 2</h1>\n" * 10


def has_pq(bin_: Path) -> bool:
    """Whether the binary's ``serve`` takes ``--pq`` (spec/hybrid.md H4)."""
    out = subprocess.run([str(bin_), "serve", "--help"], capture_output=True, timeout=30)
    return b"--pq" in out.stdout


@pytest.fixture(scope="module")
def bin_path() -> Path:
    b = binary()
    if not has_pq(b):
        pytest.skip(f"{b} has no `serve --pq` (suite 2 not in this server binary yet)")
    return b


def _serve(bin_path: Path, d: Path, mode: str) -> Server:
    (d / "root").mkdir()
    (d / "root" / "index.html").write_bytes(INDEX)
    ident = keygen(bin_path, d / "keys")
    return start_server(bin_path, ["serve", "--keys", str(d / "keys"), "--root",
                                   str(d / "root"), "--mount", "/hc", "--pq", mode],
                        ident, free_port(), d / "serve.log")


def _server(bin_path: Path, factory: pytest.TempPathFactory, mode: str) -> Iterator[Server]:
    s = _serve(bin_path, factory.mktemp(f"pq-{mode}"), mode)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def pq_on(bin_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from _server(bin_path, tmp_path_factory, "on")


@pytest.fixture(scope="module")
def pq_off(bin_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from _server(bin_path, tmp_path_factory, "off")


@pytest.fixture(scope="module")
def pq_only(bin_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from _server(bin_path, tmp_path_factory, "only")


@pytest.fixture(params=sorted(DRIVERS))
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("short", [True, False], ids=["short-ticket", "v1-ticket"])
@pytest.mark.parametrize("mode", ["require", "prefer"])
def test_hybrid_request_and_ticket(pq_on: Server, flavour: str, mode: str, short: bool) -> None:
    """A hybrid session resumed with its ticket: a short one by default (the
    server issues it under the suite-2 table's ticket key; the client
    presents it with no ciphertext, spec §7.3), a v1 one with short tickets
    off."""
    d = DRIVERS[flavour](mount="/hc", identity=pq_on.identity, pq=mode, short_tickets=short)
    try:
        r = d.get(pq_on.base + "/index.html")
        assert (r.status, r.body) == (200, INDEX)
        assert (r.info.credential, r.info.suite) == ("key", 2)
        for _ in range(2):
            r2 = d.get(pq_on.base + "/index.html")
            assert (r2.status, r2.body) == (200, INDEX)
            resumed = "short_ticket" if short else "ticket"
            assert (r2.info.credential, r2.info.suite, r2.info.attempts) == (resumed, 2, 1)
            cookie = next(v for n, v in r2.info.request_headers if n == "Cookie")
            assert len(cookie.split("=", 1)[1]) <= (22 if short else 115) + 16
    finally:
        d.close()


def test_hybrid_post_form(pq_on: Server, flavour: str) -> None:
    # A body too large for the GET form: POST with ct_M before the stream.
    d = DRIVERS[flavour](mount="/hc", pq="require", tickets=False)
    try:
        r = d.post(pq_on.base + "/index.html", b"x" * 4000)
        assert r.info.method == "POST" and r.info.suite == 2
        assert r.status in (200, 405)  # an authenticated answer either way
    finally:
        d.close()


def test_v1_server(pq_off: Server, flavour: str) -> None:
    d = DRIVERS[flavour](mount="/hc", pq="require")
    try:
        with pytest.raises(HTTPCryptError) as err:
            d.get(pq_off.base + "/index.html")
        assert err.value.code == "hybrid_downgrade"
    finally:
        d.close()
    p = DRIVERS[flavour](mount="/hc", pq="prefer")
    try:
        r = p.get(pq_off.base + "/index.html")
        assert (r.status, r.body, r.info.suite) == (200, INDEX, 1)
    finally:
        p.close()


def test_hybrid_only_server(pq_only: Server, flavour: str) -> None:
    d = DRIVERS[flavour](mount="/hc", pq="require")
    try:
        r = d.get(pq_only.base + "/index.html")
        assert (r.status, r.body, r.info.suite) == (200, INDEX, 2)
    finally:
        d.close()


def test_hcfetch_pq(pq_on: Server) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "httpcrypt.hcfetch", "--mount", "/hc", "--pq", "require",
         f"--identity={pq_on.identity}", "--repeat", "2", pq_on.base + "/index.html"],
        capture_output=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout == INDEX
    assert b"request 2: status 200, credential ticket (short)\n" in out.stderr


def test_hybrid_only_refuses_v1(pq_only: Server) -> None:
    """A v1 fresh-key request to the kex key of a suite-2 certificate."""
    authority = pq_only.base.split("//", 1)[1]
    with httpx.Client(timeout=30) as c:
        lst = hybrid.parse_cert_list(c.request("OPTIONS", pq_only.base + "/hc/pq").content)
        hc = lst.hybrid[0]
        e = Engine(mount="/hc")
        key = DiscoveredKey(hc.serial, hc.not_before, hc.not_after, hc.kex_public, hc.version)
        a = e.build("http", authority, key, "GET", "/index.html", [], b"")
        rsp = c.request(a.method, a.url, headers=a.headers)
    with pytest.raises(RefusedError) as err:
        e.refused(a, rsp.status_code, rsp.content)
    assert (err.value.status, err.value.code) == (400, "hybrid_required")
