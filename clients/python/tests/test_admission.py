"""The load-aware admission defence (spec §14) on the client side: puzzle,
echo, refusal parsing, and the transports against an in-memory server with
the defence (challenges, echo reuse for 25 s, never on tickets, one bound of
three retries, busy waits capped at 5 s and off the event loop, streamed
bodies)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from httpcrypt import admission, b64, server
from httpcrypt.client import ADMIT_REUSE, Engine
from httpcrypt.errors import ProtocolError, RefusedError
from httpcrypt.httpx_transport import AsyncHTTPCryptTransport, HTTPCryptTransport

from .test_core import Fake

ADDR = "127.0.0.1"
PERIOD = 30


def test_solve_and_verify_round_trip() -> None:
    secret = os.urandom(32)
    for d in (0, 1, 8, 12):
        cookie = admission.issue_cookie(secret, 1000, d, ADDR)
        n0 = os.urandom(24)
        solution = admission.solve_puzzle(cookie, n0)
        h = admission.puzzle_hash(cookie, n0, solution)
        assert int.from_bytes(h, "big") >> (256 - d) == 0 if d else solution == bytes(8)
        echo = admission.format_echo(cookie, solution)
        assert len(echo) == 39
        assert admission.verify_echo([os.urandom(32), secret], 1001, ADDR, n0, echo) == cookie
        # Another nonce needs its own solution (d = 12: a stray fit is 1 in 4096).
        if d == 12:
            other = os.urandom(24)
            if not admission.puzzle_solved(cookie, other, solution):
                with pytest.raises(ProtocolError) as e:
                    admission.verify_echo([secret], 1000, ADDR, other, echo)
                assert e.value.code == "bad_admission"
        with pytest.raises(ProtocolError):
            admission.verify_echo([secret], 1000, "::ffff:127.0.0.2", n0, echo)
    # IPv4 is bound as IPv4-mapped IPv6: the two spellings are one address.
    assert admission.addr16("192.0.2.7") == admission.addr16("::ffff:192.0.2.7")


def test_solver_bounds() -> None:
    cookie = admission.issue_cookie(os.urandom(32), 1, 25, ADDR)
    with pytest.raises(ProtocolError) as e:
        admission.solve_puzzle(cookie, os.urandom(24))
    assert e.value.code == "bad_admission"
    # d = 24 within 256 tries: find a start without a solution there (each
    # start has one with probability 1.5e-5), then the bound must hold.
    hard = admission.issue_cookie(os.urandom(32), 1, 24, ADDR)
    n0 = os.urandom(24)
    for start in range(100):
        s7 = start.to_bytes(7, "big")
        try:
            admission.solve_puzzle(hard, n0, 256, s7)
        except ProtocolError as err:
            assert err.code == "bad_admission"
            break
    else:
        pytest.fail("100 starts all held a 24-bit solution within 256 tries")
    assert admission.max_tries(16) == 1 << 22


def test_parse_refusal() -> None:
    cookie = admission.issue_cookie(os.urandom(32), 5, 12, ADDR)
    doc = {"type": "urn:httpcrypt:admission", "title": "t", "status": 429,
           "admit": b64.encode(cookie), "difficulty": 12}
    got = admission.parse_refusal(json.dumps(doc).encode())
    assert isinstance(got, admission.Challenge) and got.cookie == cookie and got.difficulty == 12
    for bad in ({"difficulty": 11}, {"difficulty": "12"}, {"admit": b64.encode(cookie) + "A"},
                {"admit": None}):
        assert admission.parse_refusal(json.dumps({**doc, **bad}).encode()) is None
    busy = admission.parse_refusal(b'{"type":"urn:httpcrypt:busy","status":429,"retry_after":3}')
    assert isinstance(busy, admission.Busy) and busy.retry_after == 3
    busy = admission.parse_refusal(b'{"type":"urn:httpcrypt:busy","retry_after":-2}')
    assert isinstance(busy, admission.Busy) and busy.retry_after == 1
    assert admission.parse_refusal(b'{"type":"urn:httpcrypt:unknown-key"}') is None
    assert admission.parse_refusal(b"<html>") is None


# ---- an in-memory server with the defence ----

class DefenceServer:
    """``Fake`` behind the defence of §14.2, as an httpx handler. ``on``:
    judge fresh-key requests; ``difficulty`` of the cookies it issues;
    ``busy``: answers ``busy`` this many times to valid echoes;
    ``always_challenge``: refuses every echo."""

    def __init__(self, difficulty: int = 8) -> None:
        self.now = int(time.time())
        self.fake = Fake(self.now)
        self.secret = os.urandom(32)
        self.on = True
        self.difficulty = difficulty
        self.busy = 0
        self.retry_after = 1
        self.always_challenge = False
        self.seen: list[tuple[str, str | None, bool]] = []  # credential, echo, admitted

    def _step(self) -> int:
        return int(time.time()) // PERIOD

    def _problem(self, doc: dict[str, Any]) -> httpx.Response:
        return httpx.Response(429, json=doc, headers={"Cache-Control": "no-store"})

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "OPTIONS":
            return httpx.Response(200, content=self.fake.certs(),
                                  headers={"Cache-Control": "max-age=3600"})
        body = request.read()
        head = f"{request.method} {request.url.raw_path.decode()} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in request.headers.items()
            if k.lower() != "content-length") + f"Content-Length: {len(body)}\r\n"
        raw = (head + "\r\n").encode() + body
        req = server.OuterRequest.parse(raw)
        acc = server.accept(self.fake.keys, self.fake.mount, req, server.Limits(), self.now)
        assert not isinstance(acc, str)
        echo = None
        for field in req.cookies:
            for pair in field.split(";"):
                name, _, value = pair.strip().partition("=")
                if name.strip() == admission.ADMIT_COOKIE and echo is None:
                    echo = value.strip()
        kind = acc.credential.kind
        if kind == "key" and self.on:
            valid = False
            if echo is not None and not self.always_challenge:
                try:
                    admission.verify_echo([self.secret], self._step(), ADDR, acc.n0, echo)
                    valid = True
                except ProtocolError:
                    pass
            if not valid:
                self.seen.append((kind, echo, False))
                c = admission.issue_cookie(self.secret, self._step(), self.difficulty, ADDR)
                return self._problem({"type": "urn:httpcrypt:admission", "title": "x",
                                      "status": 429, "admit": b64.encode(c),
                                      "difficulty": self.difficulty})
            if self.busy:
                self.busy -= 1
                self.seen.append((kind, echo, False))
                return self._problem({"type": "urn:httpcrypt:busy", "title": "x",
                                      "status": 429, "retry_after": self.retry_after})
        self.seen.append((kind, echo, True))
        rsp, _, _ = self.fake.serve(raw, self.now)
        return httpx.Response(200, content=rsp,
                              headers={"Content-Type": "application/octet-stream"})


def _client(s: DefenceServer, **kw: Any) -> httpx.Client:
    t = HTTPCryptTransport(mount="/hc", transport=httpx.MockTransport(s), **kw)
    return httpx.Client(transport=t)


def _cookie(r: httpx.Response) -> str:
    info = r.extensions["httpcrypt"]
    return next(v for n, v in info.request_headers if n == "Cookie")


URL = "http://h.test/x"


def test_challenge_solved_echo_reused_then_expired() -> None:
    s = DefenceServer(difficulty=10)
    shift = [0.0]
    with _client(s, tickets=False, clock=lambda: time.time() + shift[0]) as c:
        r = c.get(URL)
        info = r.extensions["httpcrypt"]
        assert r.status_code == 200 and r.content == b"ok"
        assert info.attempts == 2 and info.admission == 10
        assert "; hc1-admit=" in _cookie(r)
        assert [(k, e is not None, a) for k, e, a in s.seen] == [("key", False, False),
                                                                ("key", True, True)]
        # Within 25 s: the next fresh-key request echoes at once, a new solution.
        r2 = c.get(URL)
        assert r2.extensions["httpcrypt"].attempts == 1
        assert s.seen[-1][2] and s.seen[-1][1] != s.seen[-2][1]
        # After 25 s the client drops the cookie: one more round trip.
        shift[0] = ADMIT_REUSE + 1
        r3 = c.get(URL)
        assert r3.extensions["httpcrypt"].attempts == 2
        assert s.seen[-2][1] is None
        # An idle server: the echo rides along harmlessly, no extra round trip.
        s.on = False
        assert c.get(URL).extensions["httpcrypt"].attempts == 1


def test_idle_server_no_echo() -> None:
    s = DefenceServer()
    s.on = False
    with _client(s, tickets=False) as c:
        r = c.get(URL)
        assert r.extensions["httpcrypt"].attempts == 1
        assert r.extensions["httpcrypt"].admission is None
        assert "hc1-admit" not in _cookie(r)


def test_ticket_requests_never_echo() -> None:
    s = DefenceServer()
    with _client(s) as c:
        first = c.get(URL)
        assert first.extensions["httpcrypt"].attempts == 2
        for _ in range(2):
            r = c.get(URL)
            info = r.extensions["httpcrypt"]
            assert info.credential == "ticket" and info.attempts == 1
            assert info.admission is None and "hc1-admit" not in _cookie(r)
        assert [e for k, e, _ in s.seen if k == "ticket"] == [None, None]


def test_one_bound_of_three_retries() -> None:
    s = DefenceServer(difficulty=4)
    s.always_challenge = True
    with _client(s, tickets=False) as c, pytest.raises(RefusedError) as e:
        c.get(URL)
    assert e.value.code == "admission_required" and e.value.status == 429
    assert e.value.problem_type == "urn:httpcrypt:admission"
    assert len(s.seen) == 4  # the call and three retries

    # A challenge and then busy answers share the bound.
    s2 = DefenceServer(difficulty=4)
    s2.busy, s2.retry_after = 10, 0
    with _client(s2, tickets=False) as c, pytest.raises(RefusedError) as e:
        c.get(URL)
    assert e.value.code == "busy" and e.value.problem_type == "urn:httpcrypt:busy"
    assert len(s2.seen) == 4 and s2.busy == 7

    # Two busy answers, then admitted.
    s3 = DefenceServer(difficulty=4)
    s3.busy, s3.retry_after = 2, 0
    with _client(s3, tickets=False) as c:
        assert c.get(URL).extensions["httpcrypt"].attempts == 4


def test_busy_wait_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(time, "sleep", waits.append)
    s = DefenceServer(difficulty=2)
    s.busy, s.retry_after = 2, 9
    with _client(s, tickets=False) as c:
        assert c.get(URL).status_code == 200
    assert waits == [5.0, 5.0]
    s.busy, s.retry_after = 1, 2
    with _client(s, tickets=False) as c:
        assert c.get(URL).status_code == 200
    assert waits == [5.0, 5.0, 2.0]


def test_difficulty_above_24_gives_up() -> None:
    s = DefenceServer(difficulty=25)
    with _client(s, tickets=False) as c:
        with pytest.raises(ProtocolError) as e:
            c.get(URL)
        assert e.value.code == "bad_admission"
        assert len(s.seen) == 1
        engine = c._transport.engine  # type: ignore[attr-defined]
        assert engine.admission_cookie("h.test") is None


def test_streamed_body_is_not_resent() -> None:
    s = DefenceServer(difficulty=6)

    def chunks() -> Iterator[bytes]:
        yield b"a" * 100
        yield b"b" * 100

    with _client(s, tickets=False) as c:
        with pytest.raises(RefusedError) as e:
            c.post(URL, content=chunks())
        assert e.value.code == "admission_required" and len(s.seen) == 1
        # The cookie was stored: the next streamed request echoes it at once.
        r = c.post(URL, content=chunks())
        assert r.status_code == 200 and r.extensions["httpcrypt"].attempts == 1


def test_async_transport_waits_without_blocking_the_loop() -> None:
    s = DefenceServer(difficulty=12)
    s.busy, s.retry_after = 1, 1
    ticks = 0

    async def ticker(stop: asyncio.Event) -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.05)

    async def main() -> httpx.Response:
        t = AsyncHTTPCryptTransport(mount="/hc", transport=httpx.MockTransport(s), tickets=False)
        stop = asyncio.Event()
        task = asyncio.create_task(ticker(stop))
        async with httpx.AsyncClient(transport=t) as c:
            started = time.monotonic()
            r = await c.get(URL)
            assert time.monotonic() - started >= 1.0  # the busy wait
            async def body() -> AsyncIterator[bytes]:
                yield b"x" * 10
            with pytest.raises(RefusedError):
                s.busy = 1
                await c.post(URL, content=body())  # streamed: busy is not retried
        stop.set()
        await task
        return r

    r = asyncio.run(asyncio.wait_for(main(), 60))
    info = r.extensions["httpcrypt"]
    assert r.status_code == 200 and info.attempts == 3 and info.admission == 12
    assert ticks >= 10  # the loop ran during the 1 s wait


def test_engine_shared_between_transports() -> None:
    s = DefenceServer(difficulty=8)
    engine = Engine(mount="/hc", tickets=False)
    with httpx.Client(transport=HTTPCryptTransport(engine=engine,
                                                   transport=httpx.MockTransport(s))) as c:
        assert c.get(URL).extensions["httpcrypt"].attempts == 2
    cookie = engine.admission_cookie("h.test")
    assert cookie is not None and admission.cookie_difficulty(cookie) == 8
    assert engine.needs_puzzle("h.test")
