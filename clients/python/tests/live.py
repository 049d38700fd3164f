"""Helpers for the live tests: the real ``httpcrypt`` binary (keygen,
serve, gateway), the upstream of the gateway tests, a byte-flipping TCP
proxy, and three client drivers (httpx sync, httpx async, requests) behind
one small interface. Everything binds to 127.0.0.1, every wait is bounded,
and processes are stopped by their own PID."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import requests

from httpcrypt.client import ExchangeInfo
from httpcrypt.httpx_transport import AsyncHTTPCryptTransport, HTTPCryptTransport
from httpcrypt.requests_adapter import HTTPCryptAdapter

REPO = Path(__file__).resolve().parents[3]


def binary() -> Path:
    """$HTTPCRYPT_BIN, else target/release, else target/debug."""
    env = os.environ.get("HTTPCRYPT_BIN")
    candidates = [Path(env)] if env else [
        REPO / "target" / "release" / "httpcrypt", REPO / "target" / "debug" / "httpcrypt"]
    for c in candidates:
        if c.is_file():
            return c
    raise RuntimeError(
        "live tests need the httpcrypt server binary: none of "
        + ", ".join(str(c) for c in candidates)
        + " exists (build it with `cargo build --release -p httpcrypt-cli`, or set HTTPCRYPT_BIN)"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited early with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"port {port} did not open within {timeout} s")


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def keygen(bin_: Path, keys: Path) -> str:
    out = subprocess.run([str(bin_), "keygen", "--dir", str(keys)], check=True,
                         capture_output=True, timeout=30)
    return out.stdout.decode().strip()


@dataclass
class Server:
    """A running ``httpcrypt serve`` or ``gateway``."""

    proc: subprocess.Popen[bytes]
    port: int
    identity: str
    args: list[str]
    log: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        stop(self.proc)


def start(bin_: Path, args: list[str], identity: str, port: int, log: Path) -> Server:
    with open(log, "ab") as f:
        proc = subprocess.Popen([str(bin_), *args, "--listen", f"127.0.0.1:{port}"],
                                stdout=f, stderr=subprocess.STDOUT)
    try:
        wait_port(port, proc)
    except Exception:
        stop(proc)
        raise
    return Server(proc, port, identity, args, log)


def start_upstream() -> tuple[subprocess.Popen[str], int]:
    script = REPO / "crates" / "httpcrypt-cli" / "tests" / "upstream.py"
    proc = subprocess.Popen([sys.executable, str(script), "0"], stdout=subprocess.PIPE,
                            text=True, cwd=REPO)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        stop(proc)
        raise RuntimeError(f"upstream did not report its port: {line!r}")
    return proc, int(line.split()[1])


def run_gateway(bin_: Path, d: Path) -> Iterator[Server]:
    """A `gateway --mount /hc` (keys in `d`) in front of the echoing
    upstream of `start_upstream`, for a fixture to `yield from`."""
    up, up_port = start_upstream()
    try:
        ident = keygen(bin_, d / "keys")
        g = start(bin_, ["gateway", "--keys", str(d / "keys"), "--upstream",
                         f"http://127.0.0.1:{up_port}", "--mount", "/hc"],
                  ident, free_port(), d / "gateway.log")
        yield g
        g.stop()
    finally:
        stop(up)


class FlipProxy:
    """A TCP relay to ``target`` that flips one byte in every sealed
    response: ``offset`` bytes after the head of a response whose head
    names ``application/octet-stream`` (offset 40 lies in record 0's tag);
    with ``offset`` None it flips nothing. ``requests`` keeps every byte
    the clients sent (what the network saw)."""

    def __init__(self, target: int, offset: int | None = 40):
        self.target = target
        self.offset = offset
        self.flipped = 0
        self.requests = bytearray()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self.port = int(self._sock.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                c, _ = self._sock.accept()
            except OSError:
                continue
            s = socket.create_connection(("127.0.0.1", self.target), timeout=10)
            threading.Thread(target=self._pipe, args=(c, s, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(s, c, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, tamper: bool) -> None:
        seen = bytearray()
        flip_at: int | None = None
        scan = 0
        src.settimeout(10)
        try:
            while not self._stop.is_set():
                data = src.recv(65536)
                if not data:
                    break
                if not tamper:
                    self.requests += data
                elif self.offset is not None:
                    start = len(seen)
                    seen += data
                    buf = bytearray(data)
                    if flip_at is None:
                        m = seen.find(b"application/octet-stream", scan)
                        if m >= 0:
                            end = seen.find(b"\r\n\r\n", m)
                            if end >= 0:
                                flip_at = end + 4 + self.offset
                    if flip_at is not None and start <= flip_at < len(seen):
                        buf[flip_at - start] ^= 0x01
                        self.flipped += 1
                        scan = flip_at
                        flip_at = None
                    data = bytes(buf)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        self._thread.join(timeout=5)


# ---- client drivers ----

@dataclass
class Result:
    status: int
    body: bytes
    info: ExchangeInfo
    headers: dict[str, str] = field(default_factory=dict)


class Driver(ABC):
    """One client flavour: ``get``, ``post`` and streaming variants."""

    name = ""

    @abstractmethod
    def get(self, url: str) -> Result:
        """A GET of ``url``, body read whole."""

    @abstractmethod
    def post(self, url: str, body: bytes) -> Result:
        """A POST of ``body`` to ``url``."""

    @abstractmethod
    def upload(self, url: str, chunks: Iterator[bytes], length: int | None) -> Result:
        """A POST whose body is streamed from ``chunks`` (``length`` if known)."""

    @abstractmethod
    def download(self, url: str, sink: Callable[[bytes], None]) -> Result:
        """Streams the body into ``sink``; Result.body is empty."""

    @abstractmethod
    def close(self) -> None:
        """Releases the client and its connections."""


class HttpxDriver(Driver):
    name = "httpx"

    def __init__(self, timeout: float = 60.0, **kw: Any):
        self.client = httpx.Client(transport=HTTPCryptTransport(**kw), timeout=timeout)

    def _res(self, r: httpx.Response, body: bytes) -> Result:
        return Result(r.status_code, body, r.extensions["httpcrypt"], dict(r.headers))

    def get(self, url: str) -> Result:
        r = self.client.get(url)
        return self._res(r, r.content)

    def post(self, url: str, body: bytes) -> Result:
        r = self.client.post(url, content=body)
        return self._res(r, r.content)

    def upload(self, url: str, chunks: Iterator[bytes], length: int | None) -> Result:
        headers = {"Content-Length": str(length)} if length is not None else {}
        r = self.client.post(url, content=chunks, headers=headers)
        return self._res(r, r.content)

    def download(self, url: str, sink: Callable[[bytes], None]) -> Result:
        with self.client.stream("GET", url) as r:
            for chunk in r.iter_bytes():
                sink(chunk)
            return self._res(r, b"")

    def close(self) -> None:
        self.client.close()


class AsyncDriver(Driver):
    """httpx.AsyncClient with the async transport, driven on its own loop."""

    name = "httpx-async"

    def __init__(self, timeout: float = 60.0, **kw: Any):
        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient(transport=AsyncHTTPCryptTransport(**kw), timeout=timeout)

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 120))

    def _res(self, r: httpx.Response, body: bytes) -> Result:
        return Result(r.status_code, body, r.extensions["httpcrypt"], dict(r.headers))

    def get(self, url: str) -> Result:
        async def go() -> Result:
            r = await self.client.get(url)
            return self._res(r, r.content)
        return self._run(go())  # type: ignore[no-any-return]

    def post(self, url: str, body: bytes) -> Result:
        async def go() -> Result:
            r = await self.client.post(url, content=body)
            return self._res(r, r.content)
        return self._run(go())  # type: ignore[no-any-return]

    def upload(self, url: str, chunks: Iterator[bytes], length: int | None) -> Result:
        async def agen() -> Any:
            for c in chunks:
                yield c

        async def go() -> Result:
            headers = {"Content-Length": str(length)} if length is not None else {}
            r = await self.client.post(url, content=agen(), headers=headers)
            return self._res(r, r.content)
        return self._run(go())  # type: ignore[no-any-return]

    def download(self, url: str, sink: Callable[[bytes], None]) -> Result:
        async def go() -> Result:
            async with self.client.stream("GET", url) as r:
                async for chunk in r.aiter_bytes():
                    sink(chunk)
                return self._res(r, b"")
        return self._run(go())  # type: ignore[no-any-return]

    def close(self) -> None:
        self._run(self.client.aclose())
        self.loop.close()


class RequestsDriver(Driver):
    name = "requests"

    def __init__(self, timeout: float = 60.0, **kw: Any):
        self.session = requests.Session()
        self.session.mount("http://", HTTPCryptAdapter(**kw))
        self.timeout = timeout

    def _res(self, r: requests.Response, body: bytes) -> Result:
        return Result(r.status_code, body, r.httpcrypt, dict(r.headers))  # type: ignore[attr-defined]

    def get(self, url: str) -> Result:
        r = self.session.get(url, timeout=self.timeout)
        return self._res(r, r.content)

    def post(self, url: str, body: bytes) -> Result:
        r = self.session.post(url, data=body, timeout=self.timeout)
        return self._res(r, r.content)

    def upload(self, url: str, chunks: Iterator[bytes], length: int | None) -> Result:
        headers = {"Content-Length": str(length)} if length is not None else {}
        r = self.session.post(url, data=chunks, headers=headers, timeout=self.timeout)
        return self._res(r, r.content)

    def download(self, url: str, sink: Callable[[bytes], None]) -> Result:
        with self.session.get(url, stream=True, timeout=self.timeout) as r:
            for chunk in r.iter_content(64 * 1024):
                sink(chunk)
            return self._res(r, b"")

    def close(self) -> None:
        self.session.close()


DRIVERS: dict[str, type[Driver]] = {
    "httpx": HttpxDriver, "httpx-async": AsyncDriver, "requests": RequestsDriver}


def has_defence(bin_: Path) -> bool:
    """Whether the binary's ``serve`` has the load-aware defence (spec §14)."""
    out = subprocess.run([str(bin_), "serve", "--help"], capture_output=True, timeout=30)
    return b"--defence-threshold" in out.stdout


class Pressure:
    """Fresh-key requests, as fast as one keep-alive connection carries
    them, from a background thread: they push the server's key-agreement
    demand over its threshold so the defence switches on. Without ``echo``
    they never answer a challenge (junk: the puzzle stays off); with it
    they echo the cookie and solve its puzzle like a real client, which is
    the proven demand that raises the difficulty (spec §14.1). A
    ``local_address`` (e.g. 127.0.1.1) puts them in a /24 of their own, so
    they do not spend the prefix budget of the client under test. Counts
    the answers; stops on ``stop()`` or after ``max_seconds`` /
    ``max_requests``."""

    def __init__(self, base: str, mount: str, max_seconds: float = 60.0,
                 max_requests: int = 50_000, echo: bool = False,
                 local_address: str | None = None):
        from httpcrypt.client import Engine

        self.base = base
        self.engine = Engine(mount=mount, tickets=False)
        self.max_seconds = max_seconds
        self.max_requests = max_requests
        self.echo = echo
        self.local_address = local_address
        self.sent = 0
        self.ok = 0
        self.challenged = 0
        self.other: list[int] = []
        self.rate = 0  # requests in the second after the defence switched on
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Pressure:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        authority = self.base.split("//", 1)[1]
        deadline = time.monotonic() + self.max_seconds
        try:
            transport = (httpx.HTTPTransport(local_address=self.local_address)
                         if self.local_address else None)
            with httpx.Client(timeout=10.0, transport=transport) as c:
                r = c.options(self.engine.options_url("http", authority))
                key = self.engine.store_certs(authority, r.status_code,
                                              r.headers.get("cache-control"), r.content)
                while (not self._stop.is_set() and time.monotonic() < deadline
                       and self.sent < self.max_requests):
                    a = self.engine.build("http", authority, key, "GET", "/index.html", [], b"")
                    rsp = c.request(a.method, a.url, headers=a.headers)
                    self.sent += 1
                    if rsp.status_code == 200:
                        self.ok += 1
                    elif (rsp.status_code == 429
                          and b"urn:httpcrypt:admission" in rsp.content):
                        self.challenged += 1
                        if self.echo:
                            # Stores the cookie: the next request echoes it.
                            self.engine.refused(a, rsp.status_code, rsp.content)
                    else:
                        self.other.append(rsp.status_code)
        except BaseException as e:  # reported by the test
            self.error = e

    def wait_on(self, timeout: float = 15.0) -> None:
        """Waits until the server has challenged a pressure request."""
        deadline = time.monotonic() + timeout
        while self.challenged == 0 and time.monotonic() < deadline:
            if self.error is not None or not self._thread.is_alive():
                break
            time.sleep(0.02)
        if self.challenged == 0:
            raise RuntimeError(f"the defence did not switch on: {self.sent} sent, "
                               f"{self.ok} ok, other {self.other[:5]}, error {self.error!r}")
        # One more second fills the server's demand meter (a 1 s window)
        # with the full rate, so the challenges carry a puzzle.
        sent = self.sent
        time.sleep(1.0)
        self.rate = self.sent - sent

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


def wait_idle(base: str, mount: str, timeout: float = 15.0) -> None:
    """Waits until an echo-less fresh-key request is admitted again (the
    defence switches off 3 s after the demand fell below half the
    threshold); probes twice a second."""
    deadline = time.monotonic() + timeout
    while True:
        p = Pressure(base, mount, max_requests=1)
        p._run()
        if p.ok == 1:
            return
        if p.error is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the defence stayed on: {p.challenged} challenged, "
                               f"other {p.other}, error {p.error!r}")
        time.sleep(0.5)
