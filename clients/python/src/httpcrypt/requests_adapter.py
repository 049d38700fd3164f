"""A requests adapter: ``session.mount("http://", HTTPCryptAdapter(mount="/hc"))``
sends every ``http://`` request of the session sealed (spec §4), with the
same discovery, tickets, retries, admission (spec §14.5) and streaming as
the httpx transports.
With ``stream=True`` the body is read record by record, verified bytes only."""

from __future__ import annotations

import http.client
import io
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter
from requests.utils import select_proxy
from urllib3 import HTTPHeaderDict
from urllib3.util import SKIP_HEADER

from ._retry import Retries
from .cert import DiscoveredKey
from .client import CERTS_LIMIT, PROBLEM_LIMIT, ClientConfig, Engine, ResponseReader
from .errors import ProtocolError, connect_failed, timed_out

__all__ = ["HTTPCryptAdapter"]

_CHUNK = 64 * 1024
# Outer fields urllib3 would add on its own: the outer request carries only
# what the network needs (erratum E1); the caller's own go inside.
_NO_DEFAULTS = {"User-Agent": SKIP_HEADER, "Accept-Encoding": SKIP_HEADER}


def _seconds(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


@contextmanager
def _diagnose(authority: str, timeout: urllib3.Timeout, reading: bool = False) -> Iterator[None]:
    """Names a connection that failed or a limit that ran out (spec §12,
    client diagnoses) instead of urllib3's own exception."""
    try:
        yield
    except urllib3.exceptions.NewConnectionError as e:
        raise connect_failed(authority, e) from e
    except urllib3.exceptions.ConnectTimeoutError as e:
        raise timed_out(_seconds(timeout.connect_timeout), "connecting") from e
    except urllib3.exceptions.ReadTimeoutError as e:
        phase = "reading the answer" if reading else "waiting for the answer"
        raise timed_out(_seconds(timeout.read_timeout), phase) from e
    except urllib3.exceptions.MaxRetryError as e:
        # urllib3 wraps a failed connection when it may not retry.
        if isinstance(e.reason, urllib3.exceptions.NewConnectionError):
            raise connect_failed(authority, e.reason) from e
        raise


class _VerifiedRaw(io.RawIOBase):
    """A file over a response's verified plaintext (urllib3 reads it)."""

    def __init__(self, first: list[bytes], rest: Iterator[bytes],
                 outer: urllib3.BaseHTTPResponse, authority: str, timeout: urllib3.Timeout):
        super().__init__()
        self._buf = bytearray(b"".join(first))
        self._rest = rest
        self._outer = outer
        self._eof = False
        self._authority = authority
        self._timeout = timeout

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf and not self._eof:
            with _diagnose(self._authority, self._timeout, reading=True):
                chunk = next(self._rest, None)
            if chunk is None:
                self._eof = True
                self._outer.release_conn()
            else:
                self._buf += chunk
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        del self._buf[:n]
        return n

    def close(self) -> None:
        if not self._eof:
            self._outer.close()
        super().close()


class _OriginalResponse:
    """What requests and urllib3 read from ``HTTPResponse._original_response``:
    the inner fields as ``msg`` (requests takes ``Set-Cookie`` from there into
    the session's jar), the method, and the closed state."""

    def __init__(self, fields: list[tuple[str, str]], method: str):
        self.msg = http.client.HTTPMessage()
        for name, value in fields:
            self.msg[name] = value
        self._method = method
        self._closed = False

    def close(self) -> None:
        self._closed = True

    def isclosed(self) -> bool:
        return self._closed


def inner_response(fields: list[tuple[str, str]], status: int, reason: str, fp: Any,
                   method: str, url: str | None) -> urllib3.HTTPResponse:
    """A urllib3 response over verified inner bytes, as requests expects it
    (content decoding by urllib3, cookies through ``_original_response``)."""
    return urllib3.HTTPResponse(
        body=fp, headers=HTTPHeaderDict(fields), status=status, reason=reason,
        preload_content=False, decode_content=True, request_method=method,
        request_url=url,
        original_response=_OriginalResponse(fields, method),  # type: ignore[arg-type]
    )


def _rest(reader: ResponseReader, chunks: Iterator[bytes]) -> Iterator[bytes]:
    for chunk in chunks:
        reader.push(chunk)
        yield from reader.take()
    reader.end()
    yield from reader.take()


def _read_limited(rsp: urllib3.BaseHTTPResponse, limit: int) -> bytes:
    out = bytearray()
    for chunk in rsp.stream(_CHUNK, decode_content=False):
        out += chunk
        if len(out) > limit:
            raise ProtocolError("body_too_large", "answer above its size limit")
    return bytes(out)


def _file_chunks(f: Any) -> Iterator[bytes]:
    while chunk := f.read(_CHUNK):
        yield chunk.encode("utf-8") if isinstance(chunk, str) else chunk


def _timeout(timeout: Any) -> urllib3.Timeout:
    if isinstance(timeout, tuple):
        return urllib3.Timeout(connect=timeout[0], read=timeout[1])
    if isinstance(timeout, urllib3.Timeout):
        return timeout
    return urllib3.Timeout(connect=timeout, read=timeout)


class HTTPCryptAdapter(HTTPAdapter):
    """A requests transport adapter speaking HTTPCrypt v1. Keyword settings
    are those of :class:`~httpcrypt.client.ClientConfig`; ``engine`` shares
    state with other adapters or transports. Outer requests go through the
    adapter's own urllib3 pool."""

    def __init__(self, *, engine: Engine | None = None, config: ClientConfig | None = None,
                 pool_connections: int = 10, pool_maxsize: int = 10, **kwargs: Any):
        super().__init__(pool_connections=pool_connections, pool_maxsize=pool_maxsize,
                         max_retries=0)
        if engine is None:
            engine = Engine(config or ClientConfig(**kwargs))
        self.engine = engine

    def _key(self, pool: urllib3.PoolManager, scheme: str, authority: str,
             timeout: urllib3.Timeout) -> DiscoveredKey:
        key = self.engine.cached_key(authority)
        while key is None:
            url = self.engine.discovery_url(scheme, authority)
            with _diagnose(authority, timeout):
                rsp = pool.urlopen(
                    "OPTIONS", url, headers={"Host": authority, **_NO_DEFAULTS},
                    redirect=False, retries=False, preload_content=False, timeout=timeout)
            try:
                with _diagnose(authority, timeout, reading=True):
                    body = _read_limited(rsp, CERTS_LIMIT)
            finally:
                rsp.release_conn()
            key = self.engine.take_certs(authority, url, rsp.status,
                                         rsp.headers.get("cache-control"), body,
                                         rsp.headers.get("content-type"))
        return key

    def send(self, request: requests.PreparedRequest, stream: bool = False,
             timeout: Any = None, verify: Any = True, cert: Any = None,
             proxies: Mapping[str, str] | None = None) -> requests.Response:
        url = urlsplit(request.url or "")
        scheme, authority = url.scheme, url.netloc
        target = (url.path or "/") + (f"?{url.query}" if url.query else "")
        headers = [(k, v.decode("latin-1") if isinstance(v, bytes) else v)
                   for k, v in request.headers.items()]
        method = request.method or "GET"
        raw_body: Any = request.body
        body: bytes | None
        body_stream: Iterable[bytes] | None = None
        body_len: int | None = None
        if raw_body is None:
            body = b""
        elif isinstance(raw_body, str):
            body = raw_body.encode("utf-8")
        elif isinstance(raw_body, (bytes, bytearray, memoryview)):
            body = bytes(raw_body)
        else:
            body = None
            body_stream = _file_chunks(raw_body) if hasattr(raw_body, "read") else raw_body
            cl = request.headers.get("Content-Length")
            body_len = int(cl) if cl and cl.isdigit() else None
        to = _timeout(timeout)
        # Outer requests go direct or through the session's HTTP proxy (the
        # proxy sees only what any middlebox sees).
        proxy = select_proxy(request.url or "", dict(proxies or {}))
        pool = self.proxy_manager_for(proxy) if proxy else self.poolmanager
        retries = Retries(replayable=body is not None)
        engine = self.engine
        while True:
            n = retries.next()
            key = self._key(pool, scheme, authority, to)
            attempt = engine.build(scheme, authority, key, method, target, headers, body,
                                   body_stream, body_len, retries.own_date)
            with _diagnose(authority, to):
                rsp = pool.urlopen(
                    attempt.method, attempt.url, body=attempt.body,
                    headers={**dict(attempt.headers), **_NO_DEFAULTS}, redirect=False,
                    retries=False,
                    preload_content=False, decode_content=False,
                    chunked=attempt.body is not None and attempt.content_length is None,
                    timeout=to)
            info = attempt.info(n)
            info.status = rsp.status
            if rsp.status != 200:
                try:
                    problem = _read_limited(rsp, PROBLEM_LIMIT)
                except ProtocolError:
                    problem = b""
                finally:
                    rsp.release_conn()
                wait = retries.allow(engine.refused(attempt, rsp.status, problem))
                if wait:
                    time.sleep(wait)  # busy: min(retry_after, 5 s)
                continue
            reader = engine.reader(attempt)
            chunks = rsp.stream(_CHUNK, decode_content=False)
            try:
                while reader.head is None:
                    with _diagnose(authority, to, reading=True):
                        chunk = next(chunks, None)
                    if chunk is None:
                        reader.end()
                        break
                    reader.push(chunk)
                head = reader.head
                assert head is not None
                engine.took_head(attempt, head)
                if engine.is_problem(head):
                    whole = bytearray()
                    for c in [*reader.take(), *_rest(reader, chunks)]:
                        whole += c
                        if len(whole) > PROBLEM_LIMIT:
                            raise ProtocolError("body_too_large", "problem above its limit")
                    rsp.release_conn()
                    verdict = engine.judge_problem(attempt, head, bytes(whole))
                    if verdict is not None:
                        retries.allow(verdict)
                        continue
                    fp: io.IOBase = io.BytesIO(bytes(whole))
                else:
                    fp = io.BufferedReader(
                        _VerifiedRaw(reader.take(), _rest(reader, chunks), rsp, authority, to),
                        _CHUNK)
            except BaseException:
                rsp.close()
                raise
            inner_rsp = inner_response(head.fields, head.status, head.reason, fp, method,
                                       request.url)
            response = self.build_response(request, inner_rsp)
            response.httpcrypt = info  # type: ignore[attr-defined]
            return response
