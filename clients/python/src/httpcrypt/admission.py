"""Load-aware admission (spec §14): the admission cookie, the hash puzzle,
the echo, and the server's 429 answers.

A server under load answers a fresh-key request with an outer 429
``urn:httpcrypt:admission`` carrying a cookie; the client solves the
puzzle for each new request nonce ``n0`` and sends
``hc1-admit={b64u(cookie || solution)}`` next to its key pair. The
server side (:func:`issue_cookie`, :func:`verify_echo`) is here too, so
the shared vectors run both ends."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
from dataclasses import dataclass

from . import b64
from .errors import ADMISSION, BUSY, ProtocolError

ADMIT_COOKIE = "hc1-admit"
COOKIE_LEN = 21  # u32 step || u8 d || mac(16)
SOLUTION_LEN = 8
ECHO_LEN = COOKIE_LEN + SOLUTION_LEN
COOKIE_B64_LEN = b64.encoded_len(COOKIE_LEN)  # 28
ECHO_B64_LEN = b64.encoded_len(ECHO_LEN)  # 39
MAX_DIFFICULTY = 24  # the highest difficulty a client accepts to solve
_MAC_LABEL = b"hc1-admit"
_PUZZLE_LABEL = b"hc1-puzzle"
# Single-byte bytes objects are interned by CPython: the inner loop of the
# puzzle search builds nothing.
_LAST_BYTE = [bytes((i,)) for i in range(256)]


def _bad(message: str) -> ProtocolError:
    return ProtocolError("bad_admission", message)


def addr16(addr: str | ipaddress.IPv4Address | ipaddress.IPv6Address) -> bytes:
    """The 16 address bytes a cookie binds: IPv6 as is, IPv4 as IPv4-mapped IPv6."""
    a = ipaddress.ip_address(addr) if isinstance(addr, str) else addr
    if isinstance(a, ipaddress.IPv4Address):
        return b"\0" * 10 + b"\xff\xff" + a.packed
    return a.packed


def cookie_mac(secret: bytes, step: int, difficulty: int, addr: str) -> bytes:
    """``SHA3-256("hc1-admit" || secret || u32 step || u8 d || addr16)[0..16]``."""
    return hashlib.sha3_256(_MAC_LABEL + secret + step.to_bytes(4, "big")
                            + bytes((difficulty,)) + addr16(addr)).digest()[:16]


def issue_cookie(secret: bytes, step: int, difficulty: int, addr: str) -> bytes:
    """The 21-byte cookie a server issues to ``addr`` in ``step``."""
    return (step.to_bytes(4, "big") + bytes((difficulty,))
            + cookie_mac(secret, step, difficulty, addr))


def cookie_step(cookie: bytes) -> int:
    """The coarse time step a cookie was issued in."""
    return int.from_bytes(cookie[:4], "big")


def cookie_difficulty(cookie: bytes) -> int:
    """The difficulty (leading zero bits) a cookie demands; the MAC covers it."""
    return cookie[4]


def puzzle_hash(cookie: bytes, n0: bytes, solution: bytes) -> bytes:
    """``SHA3-256("hc1-puzzle" || cookie || n0 || solution)``."""
    return hashlib.sha3_256(_PUZZLE_LABEL + cookie + n0 + solution).digest()


def _threshold(d: int) -> bytes:
    # At least d leading zero bits <=> the digest, read big-endian, is below
    # 2^(256-d); equal-length bytes compare like those numbers.
    return (1 << (256 - d)).to_bytes(33, "big")[1:] if d else b"\xff" * 32 + b"\x00"


def puzzle_solved(cookie: bytes, n0: bytes, solution: bytes) -> bool:
    """Whether ``solution`` solves the cookie's puzzle for the nonce ``n0``."""
    d = cookie_difficulty(cookie)
    return d == 0 or puzzle_hash(cookie, n0, solution) < _threshold(d)


def max_tries(d: int) -> int:
    """The search bound for difficulty ``d``: 2^(d+6) tries (as the Rust
    client), which miss a solution with probability about e^-64."""
    return 1 << min(d + 6, 40)


def solve_puzzle(cookie: bytes, n0: bytes, tries: int | None = None,
                 start: bytes | None = None) -> bytes:
    """An 8-byte solution of the cookie's puzzle for ``n0``. Tries at most
    ``tries`` (default :func:`max_tries`) solutions, the first 7 bytes from
    ``start`` (random by default) counting up, the last byte through all
    256 values. Raises ``bad_admission`` above :data:`MAX_DIFFICULTY` or
    when the bound is reached."""
    d = cookie_difficulty(cookie)
    if d > MAX_DIFFICULTY:
        raise _bad(f"puzzle difficulty {d} above {MAX_DIFFICULTY}")
    if d == 0:
        return bytes(SOLUTION_LEN)
    if tries is None:
        tries = max_tries(d)
    high = int.from_bytes(start[:7] if start is not None else os.urandom(7), "big")
    threshold = _threshold(d)
    base = hashlib.sha3_256(_PUZZLE_LABEL + cookie + n0)
    suffixes = _LAST_BYTE
    for block in range(-(-tries // 256)):
        prefix = ((high + block) & 0xFF_FFFF_FFFF_FFFF).to_bytes(7, "big")
        outer = base.copy()
        outer.update(prefix)
        copy = outer.copy
        for last in suffixes:
            h = copy()
            h.update(last)
            if h.digest() < threshold:
                return prefix + last
    raise _bad(f"no puzzle solution within {tries} tries")


def format_echo(cookie: bytes, solution: bytes) -> str:
    """``b64u(cookie || solution)``: 39 characters."""
    return b64.encode(cookie + solution)


def echo_pair(cookie: bytes, n0: bytes) -> str:
    """The ``hc1-admit=…`` cookie pair for a request with nonce ``n0``
    (solves the puzzle: CPU-bound at high difficulty)."""
    return f"{ADMIT_COOKIE}={format_echo(cookie, solve_puzzle(cookie, n0))}"


def parse_echo(text: str) -> tuple[bytes, bytes]:
    """An echo text (exactly 39 canonical characters) as cookie and solution."""
    raw = b64.decode_exact(text, ECHO_LEN, "bad_admission")
    return raw[:COOKIE_LEN], raw[COOKIE_LEN:]


def verify_echo(secrets: list[bytes], step_now: int, addr: str, n0: bytes, echo: str) -> bytes:
    """The server's check of an echo (spec §14.3): it decodes, its step is
    ``step_now`` or the one before, the MAC matches under one of
    ``secrets`` for ``addr``, and the puzzle holds for ``n0``. Returns the
    cookie; any failure is ``bad_admission``."""
    cookie, solution = parse_echo(echo)
    step = cookie_step(cookie)
    if step > step_now or step_now - step > 1:
        raise _bad("admission cookie from another step")
    d = cookie_difficulty(cookie)
    if not any(cookie_mac(s, step, d, addr) == cookie[5:] for s in secrets):
        raise _bad("admission cookie MAC")
    if not puzzle_solved(cookie, n0, solution):
        raise _bad("puzzle not solved")
    return cookie


@dataclass
class Challenge:
    """An outer 429 ``urn:httpcrypt:admission``: echo ``cookie``."""

    cookie: bytes
    difficulty: int


@dataclass
class Busy:
    """An outer 429 ``urn:httpcrypt:busy``: wait ``retry_after`` seconds."""

    retry_after: float


def parse_refusal(body: bytes) -> Challenge | Busy | None:
    """Reads an admission or busy problem document; None for anything else
    (then the 429 is an ordinary refusal). A challenge's difficulty is the
    cookie's own byte (the one its MAC covers and the server checks); a
    ``difficulty`` member that disagrees makes the challenge malformed."""
    try:
        v = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(v, dict):
        return None
    if v.get("type") == ADMISSION:
        text = v.get("admit")
        if not isinstance(text, str):
            return None
        try:
            cookie = b64.decode_exact(text, COOKIE_LEN, "bad_admission")
        except ProtocolError:
            return None
        d = cookie_difficulty(cookie)
        member = v.get("difficulty", d)
        if type(member) is not int or member != d:
            return None
        return Challenge(cookie, d)
    if v.get("type") == BUSY:
        secs = v.get("retry_after")
        if type(secs) is not int or secs < 0:
            secs = 1
        return Busy(float(secs))
    return None


__all__ = [
    "ADMIT_COOKIE", "Busy", "Challenge", "MAX_DIFFICULTY", "addr16", "cookie_mac",
    "echo_pair", "format_echo", "issue_cookie", "parse_echo", "parse_refusal", "puzzle_hash",
    "puzzle_solved", "solve_puzzle", "verify_echo",
]
