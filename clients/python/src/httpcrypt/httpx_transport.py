"""httpx transports: ``httpx.Client(transport=HTTPCryptTransport(mount="/hc"))``
sends every ``http://`` request sealed (spec §4), with OPTIONS discovery,
tickets, retries (spec §11.5), the admission defence's challenges and busy
answers (spec §14.5) and streaming bodies both ways. Iterating a
response yields only verified bytes; a verification failure raises
:class:`~httpcrypt.errors.IntegrityError` instead."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from ._retry import Retries
from .cert import DiscoveredKey
from .client import (
    CERTS_LIMIT,
    PROBLEM_LIMIT,
    Attempt,
    ClientConfig,
    Engine,
    ExchangeInfo,
    ResponseReader,
)
from .errors import ProtocolError, TransportError, connect_failed, timed_out
from .inner import ResponseHead

__all__ = ["AsyncHTTPCryptTransport", "HTTPCryptTransport"]


def _engine(engine: Engine | None, config: ClientConfig | None, kwargs: dict[str, Any]) -> Engine:
    if engine is not None:
        return engine
    if config is None:
        config = ClientConfig(**kwargs)
    return Engine(config)


def _split(request: httpx.Request) -> tuple[str, str, str, list[tuple[str, str]]]:
    url = request.url
    authority = url.netloc.decode("ascii")
    target = url.raw_path.decode("ascii")
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
    return url.scheme, authority, target, headers


def _body(request: httpx.Request) -> tuple[bytes | None, Any, int | None]:
    stream = request.stream
    if isinstance(stream, httpx.ByteStream):
        return b"".join(stream), None, None
    cl = request.headers.get("content-length")
    return None, stream, int(cl) if cl and cl.isdigit() else None


def _timeout(request: httpx.Request, e: httpx.TimeoutException, reading: bool) -> TransportError:
    """``timeout`` with the limit that ran out and the phase it ran out in."""
    limits = request.extensions.get("timeout") or {}
    if isinstance(e, httpx.ConnectTimeout):
        key, phase = "connect", "connecting"
    elif isinstance(e, httpx.PoolTimeout):
        key, phase = "pool", "connecting"
    elif isinstance(e, httpx.WriteTimeout):
        key, phase = "write", "sending the request"
    else:
        key, phase = "read", "reading the answer" if reading else "waiting for the answer"
    return timed_out(limits.get(key), phase)


@contextmanager
def _diagnose(request: httpx.Request, reading: bool = False) -> Iterator[None]:
    """Names a connection that failed or a limit that ran out (spec §12,
    client diagnoses) instead of httpx's own exception."""
    try:
        yield
    except httpx.TimeoutException as e:
        raise _timeout(request, e, reading) from e
    except httpx.ConnectError as e:
        raise connect_failed(request.url.netloc.decode("ascii"), e) from e


def _outer_request(attempt: Attempt, request: httpx.Request) -> httpx.Request:
    content: Any = attempt.body if attempt.body is not None else b""
    return httpx.Request(attempt.method, attempt.url, headers=attempt.headers, content=content,
                         extensions=request.extensions)


def _response(head: ResponseHead, stream: httpx.SyncByteStream | httpx.AsyncByteStream,
              info: ExchangeInfo) -> httpx.Response:
    return httpx.Response(
        head.status,
        headers=[(n.encode("latin-1"), v.encode("latin-1")) for n, v in head.fields],
        stream=stream,
        extensions={"httpcrypt": info, "http_version": b"HTTP/1.1",
                    "reason_phrase": head.reason.encode("latin-1")},
    )


class _VerifiedStream(httpx.SyncByteStream):
    """The rest of a response body: verified plaintext only."""

    def __init__(self, reader: ResponseReader, first: list[bytes], outer: Iterator[bytes],
                 outer_response: httpx.Response, request: httpx.Request):
        self._reader = reader
        self._first = first
        self._outer = outer
        self._outer_response = outer_response
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._first
            self._first = []
            while True:
                with _diagnose(self._request, reading=True):
                    chunk = next(self._outer, None)
                if chunk is None:
                    break
                self._reader.push(chunk)
                yield from self._reader.take()
            self._reader.end()
            yield from self._reader.take()
        finally:
            self._outer_response.close()

    def close(self) -> None:
        self._outer_response.close()


class _AsyncVerifiedStream(httpx.AsyncByteStream):
    def __init__(self, reader: ResponseReader, first: list[bytes], outer: AsyncIterator[bytes],
                 outer_response: httpx.Response, request: httpx.Request):
        self._reader = reader
        self._first = first
        self._outer = outer
        self._outer_response = outer_response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            for c in self._first:
                yield c
            self._first = []
            while True:
                try:
                    with _diagnose(self._request, reading=True):
                        chunk = await self._outer.__anext__()
                except StopAsyncIteration:
                    break
                self._reader.push(chunk)
                for c in self._reader.take():
                    yield c
            self._reader.end()
            for c in self._reader.take():
                yield c
        finally:
            await self._outer_response.aclose()

    async def aclose(self) -> None:
        await self._outer_response.aclose()


def _limited(chunks: Iterable[bytes], limit: int) -> bytes:
    out = bytearray()
    for c in chunks:
        out += c
        if len(out) > limit:
            raise ProtocolError("body_too_large", "answer above its size limit")
    return bytes(out)


async def _alimited(chunks: AsyncIterable[bytes], limit: int) -> bytes:
    out = bytearray()
    async for c in chunks:
        out += c
        if len(out) > limit:
            raise ProtocolError("body_too_large", "answer above its size limit")
    return bytes(out)


def _pushed(reader: ResponseReader, chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The rest of a (small) response's verified body."""
    yield from reader.take()
    for chunk in chunks:
        reader.push(chunk)
        yield from reader.take()
    reader.end()
    yield from reader.take()


async def _apushed(reader: ResponseReader, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    for c in reader.take():
        yield c
    async for chunk in chunks:
        reader.push(chunk)
        for c in reader.take():
            yield c
    reader.end()
    for c in reader.take():
        yield c


class HTTPCryptTransport(httpx.BaseTransport):
    """A sync httpx transport speaking HTTPCrypt v1.

    Keyword settings are those of :class:`~httpcrypt.client.ClientConfig`
    (``mount``, ``identity``, ``get_form``, ``tickets``, ``reuse_key``,
    ``record_size``, ``clock``, …). ``transport`` carries the outer
    requests (default ``httpx.HTTPTransport()``); ``engine`` shares state
    with other transports."""

    def __init__(self, *, transport: httpx.BaseTransport | None = None,
                 engine: Engine | None = None, config: ClientConfig | None = None,
                 **kwargs: Any):
        self.engine = _engine(engine, config, kwargs)
        self._transport = transport or httpx.HTTPTransport()

    def _key(self, scheme: str, authority: str, request: httpx.Request) -> DiscoveredKey:
        key = self.engine.cached_key(authority)
        while key is None:
            url = self.engine.discovery_url(scheme, authority)
            req = httpx.Request("OPTIONS", url, headers=[("Host", authority)],
                                extensions=request.extensions)
            with _diagnose(request):
                rsp = self._transport.handle_request(req)
            try:
                assert isinstance(rsp.stream, httpx.SyncByteStream)
                with _diagnose(request, reading=True):
                    body = _limited(rsp.stream, CERTS_LIMIT)
            finally:
                rsp.close()
            key = self.engine.take_certs(authority, url, rsp.status_code,
                                         rsp.headers.get("cache-control"), body,
                                         rsp.headers.get("content-type"))
        return key

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        scheme, authority, target, headers = _split(request)
        body, stream, body_len = _body(request)
        retries = Retries(replayable=body is not None)
        engine = self.engine
        while True:
            n = retries.next()
            key = self._key(scheme, authority, request)
            attempt = engine.build(scheme, authority, key, request.method, target, headers, body,
                                   stream, body_len, retries.own_date)
            with _diagnose(request):
                rsp = self._transport.handle_request(_outer_request(attempt, request))
            info = attempt.info(n)
            info.status = rsp.status_code
            assert isinstance(rsp.stream, httpx.SyncByteStream)
            if rsp.status_code != 200:
                try:
                    problem = _limited(rsp.stream, PROBLEM_LIMIT)
                except ProtocolError:
                    problem = b""
                finally:
                    rsp.close()
                wait = retries.allow(engine.refused(attempt, rsp.status_code, problem))
                if wait:
                    time.sleep(wait)  # busy: min(retry_after, 5 s)
                continue
            reader = engine.reader(attempt)
            chunks = iter(rsp.stream)
            try:
                while reader.head is None:
                    with _diagnose(request, reading=True):
                        chunk = next(chunks, None)
                    if chunk is None:
                        reader.end()
                        break
                    reader.push(chunk)
                head = reader.head
                assert head is not None
                engine.took_head(attempt, head)
                if engine.is_problem(head):
                    whole = _limited(_pushed(reader, chunks), PROBLEM_LIMIT)
                    rsp.close()
                    verdict = engine.judge_problem(attempt, head, whole)
                    if verdict is not None:
                        retries.allow(verdict)
                        continue
                    return _response(head, httpx.ByteStream(whole), info)
            except BaseException:
                rsp.close()
                raise
            return _response(head, _VerifiedStream(reader, reader.take(), chunks, rsp, request),
                             info)

    def close(self) -> None:
        self._transport.close()


class AsyncHTTPCryptTransport(httpx.AsyncBaseTransport):
    """The async twin of :class:`HTTPCryptTransport`
    (``transport`` default ``httpx.AsyncHTTPTransport()``)."""

    def __init__(self, *, transport: httpx.AsyncBaseTransport | None = None,
                 engine: Engine | None = None, config: ClientConfig | None = None,
                 **kwargs: Any):
        self.engine = _engine(engine, config, kwargs)
        self._transport = transport or httpx.AsyncHTTPTransport()

    async def _key(self, scheme: str, authority: str, request: httpx.Request) -> DiscoveredKey:
        key = self.engine.cached_key(authority)
        while key is None:
            url = self.engine.discovery_url(scheme, authority)
            req = httpx.Request("OPTIONS", url, headers=[("Host", authority)],
                                extensions=request.extensions)
            with _diagnose(request):
                rsp = await self._transport.handle_async_request(req)
            try:
                assert isinstance(rsp.stream, httpx.AsyncByteStream)
                with _diagnose(request, reading=True):
                    body = await _alimited(rsp.stream, CERTS_LIMIT)
            finally:
                await rsp.aclose()
            key = self.engine.take_certs(authority, url, rsp.status_code,
                                         rsp.headers.get("cache-control"), body,
                                         rsp.headers.get("content-type"))
        return key

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        scheme, authority, target, headers = _split(request)
        body, stream, body_len = _body(request)
        retries = Retries(replayable=body is not None)
        engine = self.engine
        while True:
            n = retries.next()
            key = await self._key(scheme, authority, request)
            if engine.needs_puzzle(authority):
                # The admission puzzle is CPU work: off the event loop.
                attempt = await asyncio.to_thread(
                    engine.build, scheme, authority, key, request.method, target, headers,
                    body, stream, body_len, retries.own_date)
            else:
                attempt = engine.build(scheme, authority, key, request.method, target, headers,
                                       body, stream, body_len, retries.own_date)
            with _diagnose(request):
                rsp = await self._transport.handle_async_request(_outer_request(attempt, request))
            info = attempt.info(n)
            info.status = rsp.status_code
            assert isinstance(rsp.stream, httpx.AsyncByteStream)
            if rsp.status_code != 200:
                try:
                    problem = await _alimited(rsp.stream, PROBLEM_LIMIT)
                except ProtocolError:
                    problem = b""
                finally:
                    await rsp.aclose()
                wait = retries.allow(engine.refused(attempt, rsp.status_code, problem))
                if wait:
                    await asyncio.sleep(wait)  # busy: without blocking the loop
                continue
            reader = engine.reader(attempt)
            chunks = rsp.stream.__aiter__()
            try:
                while reader.head is None:
                    try:
                        with _diagnose(request, reading=True):
                            chunk = await chunks.__anext__()
                    except StopAsyncIteration:
                        reader.end()
                        break
                    reader.push(chunk)
                head = reader.head
                assert head is not None
                engine.took_head(attempt, head)
                if engine.is_problem(head):
                    whole = await _alimited(_apushed(reader, chunks), PROBLEM_LIMIT)
                    await rsp.aclose()
                    verdict = engine.judge_problem(attempt, head, whole)
                    if verdict is not None:
                        retries.allow(verdict)
                        continue
                    return _response(head, httpx.ByteStream(whole), info)
            except BaseException:
                await rsp.aclose()
                raise
            return _response(head, _AsyncVerifiedStream(reader, reader.take(), chunks, rsp,
                                                        request), info)

    async def aclose(self) -> None:
        await self._transport.aclose()
