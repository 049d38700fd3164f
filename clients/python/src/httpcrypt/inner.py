"""The inner HTTP/1.1 message carried by a sealed stream (spec §4.3):
format and incremental parse under the inner limits. (The service's
request is the inner message alone, erratum E1: no outer field is merged.)

Field names and values are ``str`` holding their bytes as Latin-1.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from .errors import ProtocolError

FORBIDDEN = frozenset({"transfer-encoding", "connection", "keep-alive", "upgrade"})
DEFAULT_MAX_INNER_HEAD = 64 * 1024
DEFAULT_MAX_INNER_FIELDS = 100

Fields = list[tuple[str, str]]

_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_REQUEST_LINE = re.compile(rb"(" + _TOKEN + rb") ([\x21-\x7e\x80-\xff]+) HTTP/1\.([0-9])")
_STATUS_LINE = re.compile(rb"HTTP/1\.([0-9]) ([0-9]{3})(?: ([\t\x20-\x7e\x80-\xff]*))?")
_FIELD_LINE = re.compile(rb"(" + _TOKEN + rb"):[ \t]*([\t\x20-\x7e\x80-\xff]*?)[ \t]*")
_CONTENT_LENGTH = re.compile(r"[0-9]{1,19}")


def _malformed(msg: str) -> ProtocolError:
    return ProtocolError("malformed_inner", msg)


def field_value(fields: Fields, name: str) -> str | None:
    """The value of the first field named ``name`` (case-insensitive)."""
    lname = name.lower()
    for n, v in fields:
        if n.lower() == lname:
            return v
    return None


def _format_fields(fields: Fields) -> bytes:
    return b"".join(f"{n}: {v}\r\n".encode("latin-1") for n, v in fields) + b"\r\n"


@dataclass
class RequestHead:
    """The head of an inner request."""

    method: str
    target: str
    fields: Fields = field(default_factory=list)

    def format(self) -> bytes:
        """``METHOD SP target SP HTTP/1.1 CRLF fields CRLF``."""
        return f"{self.method} {self.target} HTTP/1.1\r\n".encode("latin-1") + _format_fields(
            self.fields
        )


@dataclass
class ResponseHead:
    """The head of an inner response."""

    status: int
    reason: str
    fields: Fields = field(default_factory=list)

    def format(self) -> bytes:
        """``HTTP/1.1 SP status SP reason CRLF fields CRLF``."""
        return f"HTTP/1.1 {self.status} {self.reason}\r\n".encode("latin-1") + _format_fields(
            self.fields
        )


def _check_line_ends(head: bytes) -> None:
    # CR only before LF, LF only after CR; no whitespace before the start line.
    if head.count(b"\r") != head.count(b"\n") or head.count(b"\r\n") != head.count(b"\r"):
        raise _malformed("CRLF line ends only")
    if head[:1] in (b" ", b"\t", b"\r", b"\n", b"\x0b", b"\x0c"):
        raise _malformed("whitespace before the start line")


def _parse_fields(lines: list[bytes], max_fields: int) -> Fields:
    fields: Fields = []
    for line in lines:
        m = _FIELD_LINE.fullmatch(line)
        if m is None:
            # Includes obsolete line folding (a line starting with whitespace).
            raise _malformed("bad field line")
        if len(fields) >= max_fields:
            raise ProtocolError("inner_head_too_large", "too many inner fields")
        fields.append((m.group(1).decode("latin-1"), m.group(2).decode("latin-1")))
    return fields


def _check_fields(fields: Fields) -> None:
    seen_length = False
    for name, value in fields:
        lname = name.lower()
        if lname in FORBIDDEN:
            raise ProtocolError("forbidden_header", f"inner {name} is forbidden")
        if lname == "content-length":
            if seen_length or _CONTENT_LENGTH.fullmatch(value) is None:
                raise ProtocolError("content_length_mismatch", "bad inner Content-Length")
            seen_length = True


def _split_head(head: bytes) -> tuple[bytes, list[bytes]]:
    # head ends with CRLF CRLF
    lines = head[:-4].split(b"\r\n")
    return lines[0], lines[1:]


def parse_request_head(head: bytes, max_fields: int = DEFAULT_MAX_INNER_FIELDS) -> RequestHead:
    """Parses a complete request head (through the empty line)."""
    _check_line_ends(head)
    first, rest = _split_head(head)
    m = _REQUEST_LINE.fullmatch(first)
    if m is None:
        raise _malformed("bad request line")
    fields = _parse_fields(rest, max_fields)
    if m.group(3) != b"1":
        raise _malformed("inner version must be HTTP/1.1")
    _check_fields(fields)
    return RequestHead(m.group(1).decode("latin-1"), m.group(2).decode("latin-1"), fields)


def parse_response_head(head: bytes, max_fields: int = DEFAULT_MAX_INNER_FIELDS) -> ResponseHead:
    """Parses a complete response head (through the empty line)."""
    _check_line_ends(head)
    first, rest = _split_head(head)
    m = _STATUS_LINE.fullmatch(first)
    if m is None:
        raise _malformed("bad status line")
    fields = _parse_fields(rest, max_fields)
    if m.group(1) != b"1":
        raise _malformed("inner version must be HTTP/1.1")
    status = int(m.group(2))
    if status < 200:
        raise _malformed("informational inner status")
    _check_fields(fields)
    return ResponseHead(status, (m.group(3) or b"").decode("latin-1"), fields)


H = TypeVar("H", RequestHead, ResponseHead)


class _Decoder(ABC, Generic[H]):
    """Incremental inner-message decoder: :meth:`receive` plaintext,
    :meth:`pull` the head (once) then body chunks, :meth:`finish` at the
    end of the stream."""

    def __init__(self, max_inner_head: int = DEFAULT_MAX_INNER_HEAD,
                 max_inner_fields: int = DEFAULT_MAX_INNER_FIELDS):
        self._max_head = max_inner_head
        self._max_fields = max_inner_fields
        self._buf = bytearray()
        self._scanned = 0
        self.head: H | None = None
        self._content_length: int | None = None
        self._body_len = 0
        self._failed: ProtocolError | None = None

    @abstractmethod
    def _parse(self, head: bytes) -> H:
        """Parses a complete head (through the blank line)."""

    def _bodiless(self, head: H) -> bool:
        """Whether the message has no body whatever its Content-Length says."""
        return False

    def _fail(self, e: ProtocolError) -> ProtocolError:
        self._failed = e
        self._buf = bytearray()
        return e

    def receive(self, data: bytes) -> None:
        """Pushes stream plaintext."""
        if self._failed is not None:
            raise self._failed
        self._buf += data

    def pull(self) -> H | bytes | None:
        """The head, then non-empty body chunks; None when more is needed."""
        if self._failed is not None:
            raise self._failed
        if self.head is None:
            start = max(self._scanned - 3, 0)
            end = self._buf.find(b"\r\n\r\n", start)
            if end < 0:
                self._scanned = len(self._buf)
                if len(self._buf) >= self._max_head:
                    raise self._fail(ProtocolError("inner_head_too_large", "inner head too large"))
                return None
            end += 4
            if end > self._max_head:
                raise self._fail(ProtocolError("inner_head_too_large", "inner head too large"))
            try:
                head = self._parse(bytes(self._buf[:end]))
            except ProtocolError as e:
                raise self._fail(e) from None
            del self._buf[:end]
            if self._bodiless(head):
                # Its Content-Length is the representation's (syntax checked
                # by the parser) and it has no body at all (erratum E2).
                self._content_length = 0
            else:
                cl = field_value(head.fields, "content-length")
                self._content_length = int(cl) if cl is not None else None
            self.head = head
            return head
        if not self._buf:
            return None
        chunk = bytes(self._buf)
        self._buf = bytearray()
        self._body_len += len(chunk)
        if self._content_length is not None and self._body_len > self._content_length:
            raise self._fail(ProtocolError("content_length_mismatch", "body longer than declared"))
        return chunk

    def finish(self) -> None:
        """The stream ended: the head must be complete and the body must
        match a declared Content-Length."""
        if self._failed is not None:
            raise self._failed
        if self.head is None:
            raise self._fail(_malformed("stream ended inside the inner head"))
        if self._buf:
            raise self._fail(_malformed("unread plaintext"))
        if self._content_length is not None and self._content_length != self._body_len:
            raise self._fail(ProtocolError("content_length_mismatch", "body shorter than declared"))


class RequestDecoder(_Decoder[RequestHead]):
    """Decoder for inner requests (server side)."""

    def _parse(self, head: bytes) -> RequestHead:
        return parse_request_head(head, self._max_fields)


class ResponseDecoder(_Decoder[ResponseHead]):
    """Decoder for inner responses (client side) to a ``request_method``
    request. The answer to HEAD, and a 304, may declare the
    representation's Content-Length; their body must be empty
    (``content_length_mismatch`` otherwise; erratum E2, spec §4.3)."""

    def __init__(self, max_inner_head: int = DEFAULT_MAX_INNER_HEAD,
                 max_inner_fields: int = DEFAULT_MAX_INNER_FIELDS,
                 request_method: str = "GET"):
        super().__init__(max_inner_head, max_inner_fields)
        self._answers_head = request_method == "HEAD"

    def _parse(self, head: bytes) -> ResponseHead:
        return parse_response_head(head, self._max_fields)

    def _bodiless(self, head: ResponseHead) -> bool:
        return self._answers_head or head.status == 304


def decode_request(plaintext: bytes, max_inner_head: int = DEFAULT_MAX_INNER_HEAD,
                   max_inner_fields: int = DEFAULT_MAX_INNER_FIELDS) -> tuple[RequestHead, bytes]:
    """A complete inner request from whole plaintext."""
    d = RequestDecoder(max_inner_head, max_inner_fields)
    return _decode_all(d, plaintext)


def decode_response(plaintext: bytes, max_inner_head: int = DEFAULT_MAX_INNER_HEAD,
                    max_inner_fields: int = DEFAULT_MAX_INNER_FIELDS,
                    request_method: str = "GET") -> tuple[ResponseHead, bytes]:
    """A complete inner response to a ``request_method`` request from whole
    plaintext."""
    d = ResponseDecoder(max_inner_head, max_inner_fields, request_method)
    return _decode_all(d, plaintext)


def _decode_all(d: _Decoder[H], plaintext: bytes) -> tuple[H, bytes]:
    d.receive(plaintext)
    body = []
    while (ev := d.pull()) is not None:
        if isinstance(ev, bytes):
            body.append(ev)
    d.finish()
    assert d.head is not None
    return d.head, b"".join(body)

