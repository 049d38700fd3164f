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


class FlipProxy:
    """A TCP relay to ``target`` that flips one byte in every sealed
    response: ``offset`` bytes after the head of a response whose head
    names ``application/octet-stream`` (offset 40 lies in record 0's tag)."""

    def __init__(self, target: int, offset: int = 40):
        self.target = target
        self.offset = offset
        self.flipped = 0
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
                if tamper:
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


class Driver:
    """One client flavour: ``get``, ``post`` and streaming variants."""

    name = ""

    def get(self, url: str) -> Result:
        raise NotImplementedError

    def post(self, url: str, body: bytes) -> Result:
        raise NotImplementedError

    def upload(self, url: str, chunks: Iterator[bytes], length: int | None) -> Result:
        raise NotImplementedError

    def download(self, url: str, sink: Callable[[bytes], None]) -> Result:
        """Streams the body into ``sink``; Result.body is empty."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class HttpxDriver(Driver):
    name = "httpx"

    def __init__(self, **kw: Any):
        self.client = httpx.Client(transport=HTTPCryptTransport(**kw), timeout=60.0)

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

    def __init__(self, **kw: Any):
        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient(transport=AsyncHTTPCryptTransport(**kw), timeout=60.0)

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

    def __init__(self, **kw: Any):
        self.session = requests.Session()
        self.session.mount("http://", HTTPCryptAdapter(**kw))

    def _res(self, r: requests.Response, body: bytes) -> Result:
        return Result(r.status_code, body, r.httpcrypt, dict(r.headers))  # type: ignore[attr-defined]

    def get(self, url: str) -> Result:
        r = self.session.get(url, timeout=60)
        return self._res(r, r.content)

    def post(self, url: str, body: bytes) -> Result:
        r = self.session.post(url, data=body, timeout=60)
        return self._res(r, r.content)

    def upload(self, url: str, chunks: Iterator[bytes], length: int | None) -> Result:
        headers = {"Content-Length": str(length)} if length is not None else {}
        r = self.session.post(url, data=chunks, headers=headers, timeout=60)
        return self._res(r, r.content)

    def download(self, url: str, sink: Callable[[bytes], None]) -> Result:
        with self.session.get(url, stream=True, timeout=60) as r:
            for chunk in r.iter_content(64 * 1024):
                sink(chunk)
            return self._res(r, b"")

    def close(self) -> None:
        self.session.close()


DRIVERS: dict[str, type[Driver]] = {
    "httpx": HttpxDriver, "httpx-async": AsyncDriver, "requests": RequestsDriver}
