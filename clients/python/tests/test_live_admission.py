"""Live tests of the load-aware defence (spec §14) against the real server
(``$HTTPCRYPT_BIN``), for httpx sync, httpx async and requests: a burst of
fresh-key requests without echoes switches the defence on (low
threshold), echoing clients from another /24 raise the puzzle, then the
client under test must get through (challenge solved, 200), keep
echoing for the next fresh-key request, never echo on or be challenged
for a ticket request, and wait out a ``busy`` answer.
A binary that predates §14 (no ``--defence-threshold``) skips these."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .live import (
    DRIVERS,
    REPO,
    Driver,
    Pressure,
    Server,
    binary,
    free_port,
    has_defence,
    keygen,
    wait_idle,
)
from .live import start as start_server

INDEX = b"<h1>httpcrypt admission test</h1>\n" * 20
THRESHOLD = 10  # fresh-key requests per second
MAX_DIFFICULTY = 12


@pytest.fixture(scope="module")
def bin_path() -> Path:
    b = binary()
    if not has_defence(b):
        pytest.skip(f"{b} predates the load-aware defence (spec §14)")
    return b


def _serve(bin_path: Path, d: Path, *extra: str) -> Server:
    (d / "root").mkdir()
    (d / "root" / "index.html").write_bytes(INDEX)
    ident = keygen(bin_path, d / "keys")
    return start_server(bin_path, [
        "serve", "--keys", str(d / "keys"), "--root", str(d / "root"), "--mount", "/hc",
        "--defence", "auto", "--defence-threshold", str(THRESHOLD),
        "--max-difficulty", str(MAX_DIFFICULTY), *extra], ident, free_port(), d / "serve.log")


@pytest.fixture(scope="module")
def defended(bin_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = _serve(bin_path, tmp_path_factory.mktemp("defended"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def tight(bin_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One key agreement per second for the loopback prefix once the defence is on."""
    s = _serve(bin_path, tmp_path_factory.mktemp("tight"), "--prefix-rate", "1",
               "--prefix-burst", "1")
    yield s
    s.stop()


@pytest.fixture(params=sorted(DRIVERS))
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _cookie(headers: list[tuple[str, str]]) -> str:
    return next(v for n, v in headers if n == "Cookie")


def _under_pressure(s: Server, echo: bool = False) -> Pressure:
    # Echoing pressure comes from a /24 of its own (its budget is not ours).
    p = Pressure(s.base, "/hc", echo=echo,
                 local_address="127.0.1.1" if echo else None).__enter__()
    try:
        p.wait_on()
    except BaseException:
        p.stop()
        raise
    return p


def test_challenge_solved_then_echo_reused(defended: Server, flavour: str) -> None:
    # Idle server: no challenge, no echo, one round trip.
    wait_idle(defended.base, "/hc")
    idle: Driver = DRIVERS[flavour](mount="/hc", tickets=False)
    try:
        r = idle.get(defended.base + "/index.html")
        assert r.status == 200 and r.info.attempts == 1 and r.info.admission is None
    finally:
        idle.close()
    # Junk keeps the defence on; clients that echo (another /24) make the
    # proven demand that raises the puzzle.
    p = _under_pressure(defended)
    q: Pressure | None = None
    d: Driver = DRIVERS[flavour](mount="/hc", tickets=False)
    try:
        q = _under_pressure(defended, echo=True)
        before = p.challenged
        r = d.get(defended.base + "/index.html")
        assert r.status == 200 and r.body == INDEX
        assert r.info.attempts >= 2  # the outer 429 challenge, then the solved echo
        # Proven demand at or above twice the threshold: a puzzle of 10 bits or more.
        assert q.rate >= 2 * THRESHOLD, f"pressure too weak: {q.rate} requests/s"
        assert q.ok > 0, "the echoing pressure was admitted"
        assert r.info.admission is not None and r.info.admission >= 10
        assert "; hc1-admit=" in _cookie(r.info.request_headers)
        # Within 25 s the next fresh-key request echoes the cookie at once.
        r2 = d.get(defended.base + "/index.html")
        assert r2.status == 200 and r2.info.attempts == 1 and r2.info.credential == "key"
        assert "; hc1-admit=" in _cookie(r2.info.request_headers)
        # The defence was on throughout: echo-less requests kept being challenged.
        assert p.challenged > before and p.error is None and q.error is None
    finally:
        d.close()
        p.stop()
        if q is not None:
            q.stop()


@pytest.mark.parametrize("short", [True, False], ids=["short-ticket", "v1-ticket"])
def test_ticket_request_is_never_challenged(defended: Server, flavour: str, short: bool) -> None:
    p = _under_pressure(defended)
    d: Driver = DRIVERS[flavour](mount="/hc", short_tickets=short)
    try:
        first = d.get(defended.base + "/index.html")
        assert first.status == 200 and first.info.credential == "key"
        assert first.info.attempts >= 2  # the first, fresh-key request was challenged
        for _ in range(3):
            r = d.get(defended.base + "/index.html")
            assert r.status == 200 and r.body == INDEX
            assert r.info.credential == ("short_ticket" if short else "ticket")
            assert r.info.attempts == 1
            assert r.info.admission is None
            assert "hc1-admit" not in _cookie(r.info.request_headers)
        assert p.challenged > 0
    finally:
        d.close()
        p.stop()


def test_busy_is_waited_out(tight: Server, flavour: str) -> None:
    p = _under_pressure(tight)
    d: Driver = DRIVERS[flavour](mount="/hc", tickets=False)
    try:
        d.get(tight.base + "/index.html")  # challenged, admitted: the budget is spent
        started = time.monotonic()
        r = d.get(tight.base + "/index.html")
        took = time.monotonic() - started
        # busy (Retry-After 1 s), wait, then admitted with a fresh solution.
        assert r.status == 200 and r.body == INDEX
        assert r.info.attempts >= 2 and took >= 0.9
        assert took < 12  # waits are capped at 5 s, at most three of them
    finally:
        d.close()
        p.stop()


def test_hcfetch_obeys_the_defence(defended: Server) -> None:
    p = _under_pressure(defended)
    try:
        out = subprocess.run(
            # "=": a base64url identity may start with "-".
            [sys.executable, "-m", "httpcrypt.hcfetch", "--mount", "/hc",
             f"--identity={defended.identity}", "--repeat", "2", defended.base + "/index.html"],
            capture_output=True, timeout=60, cwd=REPO)
        assert out.returncode == 0, out.stderr
        assert out.stdout == INDEX
        assert out.stderr.decode().splitlines() == [
            "request 1: status 200, credential key",
            "request 2: status 200, credential ticket (short)",
        ]
        assert p.challenged > 0
    finally:
        p.stop()
