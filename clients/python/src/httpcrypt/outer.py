"""What middleboxes see (spec §4.1, §4.2, §4.4, §11): mount and nonce path,
GET-form query, the cookie pair, the canonical outer head, routing and
cookie scanning (server side), and problem documents. Profile 2 (spec §4.5)
marks its nonce segment with a leading ``2`` (33 characters), puts the send
time in ``n0[0..5]`` and uses pads of 0-7 characters."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Literal

from . import b64
from .errors import ProtocolError
from .suite import KID_LEN, NONCE_LEN
from .ticket import SEALED_LEN, SHORT_H_LEN

NONCE_B64_LEN = b64.encoded_len(NONCE_LEN)  # 32
ID_B64_LEN = b64.encoded_len(KID_LEN)  # 14
PUBLIC_B64_LEN = b64.encoded_len(32)  # 43
TICKET_B64_LEN = b64.encoded_len(SEALED_LEN)  # 115
SHORT_B64_LEN = b64.encoded_len(SHORT_H_LEN)  # 22: a short ticket's h (spec §7.3)
MAX_PAD = 16
MAX_PAD2 = 7  # profile 2 sends shorter pads; servers still accept 0-16
PROFILE2_MARK = "2"
TIME_LEN = 5  # profile 2: n0 = u40(unix seconds) || 19 random bytes
GET_FORM_LIMIT = 2000
OCTET_STREAM = "application/octet-stream"
PROBLEM_TYPE = "application/problem+json"


class Mount:
    """The path prefix of a server's HTTPCrypt resources: empty, or
    ``/``-led without a trailing ``/`` (spec §4.1)."""

    __slots__ = ("path",)

    def __init__(self, path: str = ""):
        if any(c in "?#%" or ord(c) <= 0x20 or ord(c) >= 0x7F for c in path):
            raise ProtocolError("bad_nonce_path", f"unusable mount {path!r}")
        trimmed = path.rstrip("/")
        self.path = "" if not trimmed else (trimmed if trimmed.startswith("/") else "/" + trimmed)

    def __repr__(self) -> str:
        return f"Mount({self.path!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mount) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def options_path(self) -> str:
        """``{mount}/``: where OPTIONS is answered."""
        return self.path + "/"

    def nonce_path(self, n0: bytes, profile: int = 1) -> str:
        """``{mount}/{b64u(n0)}``, or ``{mount}/2{b64u(n0)}`` for profile 2."""
        mark = PROFILE2_MARK if profile == 2 else ""
        return f"{self.path}/{mark}{b64.encode(n0)}"

    def pq_path(self) -> str:
        """``{mount}/pq``: where the suite-2 certificates are answered
        (spec/hybrid.md H4)."""
        return self.path + "/pq"

    def get_target(self, n0: bytes, stream: bytes, profile: int = 1) -> str:
        """``{nonce_path}?{b64u(stream)}``."""
        return f"{self.nonce_path(n0, profile)}?{b64.encode(stream)}"


def fits_get_form(mount: Mount, stream_len: int, profile: int = 1) -> bool:
    """Whether ``GET {target} HTTP/1.1`` stays below 2000 bytes."""
    line = (4 + len(mount.path) + 1 + (profile == 2) + NONCE_B64_LEN + 1
            + b64.encoded_len(stream_len) + 9)
    return line < GET_FORM_LIMIT


def random_pad(max_pad: int = MAX_PAD) -> str:
    """0-``max_pad`` random base64url characters (length and content from
    the OS CSPRNG): 0-16 for v1, 0-7 (``MAX_PAD2``) for profile 2."""
    r = os.urandom(max_pad + 1)
    return bytes(b64.ALPHABET[x & 63] for x in r[1:1 + r[0] % (max_pad + 1)]).decode()


def compact_nonce(now: int) -> bytes:
    """A profile-2 request nonce: ``u40(now) || 19 random bytes``."""
    if not 0 <= now < 1 << (8 * TIME_LEN):
        raise ValueError("time outside the 40-bit range")
    return now.to_bytes(TIME_LEN, "big") + os.urandom(NONCE_LEN - TIME_LEN)


def nonce_time(n0: bytes) -> int:
    """The unix seconds in a profile-2 request nonce (``n0[0..5]``)."""
    return int.from_bytes(n0[:TIME_LEN], "big")


def format_cookie(id_: bytes, value: bytes, name_pad: str = "", value_pad: str = "") -> str:
    """``{b64u(id)}{name_pad}={b64u(value)}{value_pad}``."""
    for pad in (name_pad, value_pad):
        if len(pad) > MAX_PAD or not b64.is_alphabet(pad):
            raise ProtocolError("bad_cookie", "cookie pad must be 0-16 base64url characters")
    return f"{b64.encode(id_)}{name_pad}={b64.encode(value)}{value_pad}"


def cookie_credential(cookie: str) -> Literal["key", "ticket", "short_ticket", "none"]:
    """What the first pair of an outer Cookie value carries, by its value's
    length (spec §7.3): 22-38 characters a short ticket, 115-131 a v1
    ticket, else a public key."""
    pair = cookie.split(";", 1)[0]
    if "=" not in pair:
        return "none"
    n = len(pair.split("=", 1)[1].strip())
    if n <= SHORT_B64_LEN + MAX_PAD:
        return "short_ticket"
    return "ticket" if n >= TICKET_B64_LEN else "key"


def encode_request_head(form: Literal["post", "get"], target: str, host: str, cookie: str,
                        body_len: int = 0) -> bytes:
    """The outer request head in the canonical layout (spec §13 D9)."""
    method = "POST" if form == "post" else "GET"
    s = f"{method} {target} HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\n"
    if form == "post":
        s += f"Content-Type: {OCTET_STREAM}\r\n"
    if form == "post":
        s += f"Content-Length: {body_len}\r\n"
    return (s + "\r\n").encode("latin-1")


# ---- routing and cookie scanning (server side, spec §11.1, §11.3) ----

@dataclass
class Route:
    """How a server routes an outer request."""

    kind: Literal["outside", "options", "method_not_allowed", "not_found", "post", "get"]
    n0: bytes | None = None
    query: str | None = None
    profile: int = 1  # for post and get: 2 when the nonce segment is "2" + 32 characters


def parse_nonce(text: str) -> bytes:
    """Exactly 32 canonical base64url characters."""
    if len(text) != NONCE_B64_LEN:
        raise ProtocolError("bad_nonce_path", "nonce path segment is not 32 characters")
    return b64.decode(text, "bad_nonce_path")


def route(method: str, target: str, mount: Mount) -> Route:
    """Routes ``method`` and ``target`` (as received) against ``mount``."""
    path, sep, query = target.partition("?")
    prefix = mount.path + "/"
    if not path.startswith(prefix):
        return Route("outside")
    rest = path[len(prefix):]
    if method == "OPTIONS":
        return Route("options" if rest == "" else "not_found")
    if method not in ("POST", "GET"):
        return Route("method_not_allowed")
    profile = 1
    if len(rest) == NONCE_B64_LEN + 1 and rest.startswith(PROFILE2_MARK):
        profile, rest = 2, rest[1:]
    n0 = parse_nonce(rest)
    if method == "POST":
        return Route("post", n0, profile=profile)
    if not sep:
        raise ProtocolError("bad_query", "GET form without a query")
    return Route("get", n0, query, profile)


def decode_query(query: str, max_body: int) -> bytes:
    """A GET-form query as stream bytes."""
    if len(query) // 4 * 3 > max_body:
        raise ProtocolError("body_too_large", "GET query above the body limit")
    return b64.decode(query, "bad_query")


@dataclass
class Credential:
    """What a known cookie pair carries."""

    kind: Literal["key", "ticket", "short_ticket"]
    id: bytes
    value: bytes  # client public key, ticket[10..], or a short ticket's h


def _has_shape(name: str, value: str) -> bool:
    # A short ticket's 22-38 characters are not in the shape (spec §7.3):
    # the contract's no_cookie for other cookies of that length stays.
    return (
        ID_B64_LEN <= len(name) <= ID_B64_LEN + MAX_PAD and b64.is_alphabet(name)
        and (PUBLIC_B64_LEN <= len(value) <= PUBLIC_B64_LEN + MAX_PAD
             or TICKET_B64_LEN <= len(value) <= TICKET_B64_LEN + MAX_PAD)
        and b64.is_alphabet(value)
    )


def _strip_pad(text: str, n: int) -> bytes:
    length = b64.encoded_len(n)
    if len(text) < length or len(text) > length + MAX_PAD or not b64.is_alphabet(text[length:]):
        raise ProtocolError("bad_cookie", "cookie value of the wrong shape")
    return b64.decode(text[:length], "bad_cookie")


def scan_cookies(fields: list[str], lookup: dict[bytes, str]) -> Credential:
    """The first pair whose 14-character name prefix is a known ID
    (``lookup``: ID -> "key" | "ticket"), which must be well formed."""
    shaped = False
    for value in fields:
        for pair in value.split(";"):
            pair = pair.strip(" \t")
            if "=" not in pair:
                continue
            name, _, val = pair.partition("=")
            name, val = name.strip(" \t"), val.strip(" \t")
            shaped = shaped or _has_shape(name, val)
            if len(name) < ID_B64_LEN:
                continue
            try:
                id_ = b64.decode(name[:ID_B64_LEN])
            except ProtocolError:
                continue
            kind = lookup.get(id_)
            if kind is None:
                continue
            pad = name[ID_B64_LEN:]
            if len(pad) > MAX_PAD or not b64.is_alphabet(pad):
                raise ProtocolError("bad_cookie", "cookie name pad")
            if kind == "key":
                return Credential("key", id_, _strip_pad(val, 32))
            # The two ticket forms' lengths (22-38, 115-131) do not overlap.
            if len(val) <= SHORT_B64_LEN + MAX_PAD:
                return Credential("short_ticket", id_, _strip_pad(val, SHORT_H_LEN))
            return Credential("ticket", id_, _strip_pad(val, SEALED_LEN))
    raise ProtocolError("unknown_key" if shaped else "no_cookie", "no known cookie pair")


# ---- problem documents (spec §4.4) ----

@dataclass
class Problem:
    """An RFC 9457 problem document."""

    type: str
    status: int = 0
    title: str = ""
    certs: list[str] = field(default_factory=list)
    hybrid_certs: list[str] = field(default_factory=list)  # suite 2 (spec/hybrid.md H3)


def parse_problem(body: bytes) -> Problem | None:
    """Parses a problem document; None if it is not one."""
    try:
        v = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(v, dict) or not isinstance(v.get("type"), str):
        return None
    status = v.get("status")

    def texts(member: str) -> list[str]:
        items = v.get(member)
        return [c for c in items if isinstance(c, str)] if isinstance(items, list) else []

    return Problem(
        v["type"],
        status if isinstance(status, int) else 0,
        title if isinstance(title := v.get("title"), str) else "",
        texts("certs"),
        texts("hybrid_certs"),
    )


def format_problem(problem_type: str, status: int, title: str,
                   certs: list[str] | None = None,
                   hybrid_certs: list[str] | None = None) -> bytes:
    """A problem document (``certs`` and ``hybrid_certs`` for unknown-key only)."""
    doc: dict[str, object] = {"type": problem_type, "title": title, "status": status}
    if certs is not None:
        doc["certs"] = certs
    if hybrid_certs is not None:
        doc["hybrid_certs"] = hybrid_certs
    return json.dumps(doc).encode()
