"""Sealed streams (spec §3): the record layer every message body uses.

    record = header(4) || tag(16) || payload(L)
    header = u32 BE: bit 31 FINAL, bit 30 CLEAR, bits 29..0 L

Record ``i`` uses nonce ``n0 + i``; record 0 is bound to the direction (and,
for responses, to the request's nonce), every later record to the previous
tag. :class:`Opener` is push/pull: :meth:`Opener.receive` takes bytes in any
split, :meth:`Opener.pull` returns verified plaintext only.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

from .errors import ProtocolError, protocol_error
from .suite import NONCE_LEN, TAG_LEN, XChaCha

HEADER_LEN = 4
RECORD_OVERHEAD = HEADER_LEN + TAG_LEN
MAX_RECORDS = 1 << 32
RECORD_FLOOR = 16 * 1024
RECORD_CEILING = 1 << 24
DEFAULT_MAX_RECORD = 1 << 20
FINAL = 1 << 31
CLEAR = 1 << 30
LEN_MASK = CLEAR - 1
REQ_LABEL = b"hc1-req"
RSP_LABEL = b"hc1-rsp"

_U32 = struct.Struct(">I")


def record_limit(max_record: int) -> int:
    """The record maximum a receiver enforces: clamped into [16 KiB, 2^24]."""
    return min(max(max_record, RECORD_FLOOR), RECORD_CEILING)


class _Chain:
    """Nonce, index and previous tag shared by both ends."""

    __slots__ = ("aead", "index", "label", "n0", "n0_int", "prev_tag")

    def __init__(self, key: bytes, n0: bytes, request_n0: bytes | None):
        self.aead = XChaCha(key)
        self.n0 = n0
        self.n0_int = int.from_bytes(n0, "big")
        self.index = 0
        self.prev_tag = b""
        # AD_0 prefix: "hc1-req", or "hc1-rsp" || request_n0.
        self.label = REQ_LABEL if request_n0 is None else RSP_LABEL + request_n0

    def set_n0(self, n0: bytes) -> None:
        self.n0 = n0
        self.n0_int = int.from_bytes(n0, "big")

    def ad(self, header: bytes) -> bytes:
        return (self.label if self.index == 0 else self.prev_tag) + header

    def nonce(self) -> bytes:
        return ((self.n0_int + self.index) & ((1 << 192) - 1)).to_bytes(NONCE_LEN, "big")


class Sealer:
    """Produces the records of one stream. :meth:`finish` appends the FINAL
    record; nothing can be sealed after it."""

    def __init__(self, key: bytes, n0: bytes, request_n0: bytes | None = None):
        if len(n0) != NONCE_LEN:
            raise ValueError("n0 must be 24 bytes")
        self._chain = _Chain(key, n0, request_n0)
        self._is_request = request_n0 is None
        self._done = False

    @classmethod
    def request(cls, key: bytes, n0: bytes) -> Sealer:
        """A request stream starting at ``n0`` (the nonce in the path)."""
        return cls(key, n0)

    @classmethod
    def response(cls, key: bytes, request_n0: bytes, n0: bytes) -> Sealer:
        """A response stream with fresh ``n0``, bound to ``request_n0``.
        The caller writes ``n0`` before the records (spec §4.2)."""
        return cls(key, n0, request_n0)

    @property
    def records(self) -> int:
        """Records sealed so far."""
        return self._chain.index

    def _record(self, plaintext: bytes, last: bool, clear: bool) -> bytes:
        if self._done:
            raise ProtocolError("trailing_data", "stream already finished")
        n = len(plaintext)
        if n > RECORD_CEILING:
            raise ProtocolError("record_too_large", "record above 2^24 bytes")
        if clear and self._is_request:
            raise protocol_error("clear_in_request", "CLEAR record in a request")
        c = self._chain
        if c.index >= MAX_RECORDS:
            raise protocol_error("too_many_records", "more than 2^32 records")
        header = _U32.pack(n | (FINAL if last else 0) | (CLEAR if clear else 0))
        ad = c.ad(header)
        nonce = c.nonce()
        if clear:
            tag = c.aead.seal(nonce, b"", ad + plaintext)
            out = b"".join((header, tag, plaintext))
        else:
            sealed = c.aead.seal(nonce, plaintext, ad)
            tag = sealed[n:]
            out = b"".join((header, tag, memoryview(sealed)[:n]))
        c.prev_tag = tag
        c.index += 1
        if last:
            self._done = True
        return out

    def seal(self, plaintext: bytes) -> bytes:
        """A non-final encrypted record holding ``plaintext``."""
        return self._record(plaintext, False, False)

    def seal_clear(self, plaintext: bytes) -> bytes:
        """A non-final CLEAR record (responses only, spec §9)."""
        return self._record(plaintext, False, True)

    def finish(self, plaintext: bytes = b"") -> bytes:
        """The FINAL encrypted record (possibly empty)."""
        return self._record(plaintext, True, False)

    def finish_clear(self, plaintext: bytes = b"") -> bytes:
        """The FINAL record as a CLEAR record (responses only)."""
        return self._record(plaintext, True, True)


def seal_all(sealer: Sealer, plaintext: bytes, record_size: int) -> bytes:
    """``plaintext`` as records of at most ``record_size`` bytes, the last
    FINAL (an empty plaintext gives one empty FINAL record)."""
    record_size = max(record_size, 1)
    mv = memoryview(plaintext)
    parts = []
    pos = 0
    while len(mv) - pos > record_size:
        parts.append(sealer.seal(bytes(mv[pos:pos + record_size])))
        pos += record_size
    parts.append(sealer.finish(bytes(mv[pos:])))
    return b"".join(parts)


def seal_chunks(sealer: Sealer, chunks: Iterable[bytes], record_size: int,
                prefix: bytes = b"") -> Iterator[bytes]:
    """Seals a plaintext given as chunks (``prefix`` first) into records of
    at most ``record_size``, yielding each batch of records as soon as it
    is sealed. Holds at most one record of plaintext beyond a chunk."""
    record_size = max(record_size, 1)
    pending = bytearray(prefix)
    for chunk in chunks:
        if not chunk:
            continue
        pending += chunk
        if len(pending) > record_size:
            out = []
            mv = memoryview(pending)
            pos = 0
            while len(pending) - pos > record_size:
                out.append(sealer.seal(bytes(mv[pos:pos + record_size])))
                pos += record_size
            mv.release()
            del pending[:pos]
            yield b"".join(out)
    yield sealer.finish(bytes(pending))


class Opener:
    """Opens one stream: :meth:`receive` bytes (any split), :meth:`pull`
    verified plaintext, :meth:`finish` at the end of input.

    Holds at most one record beyond the caller's input. After a failure it
    keeps raising the same error and has discarded what it buffered."""

    def __init__(self, key: bytes, n0: bytes | None, request_n0: bytes | None,
                 max_record: int = DEFAULT_MAX_RECORD):
        self._is_request = request_n0 is None
        self._chain = _Chain(key, n0 or bytes(NONCE_LEN), request_n0)
        self._max = record_limit(max_record)
        self._buf = bytearray()
        self._pos = 0
        self._need_nonce = n0 is None
        self._done = False
        self._failed: ProtocolError | None = None
        self.last_clear = False

    @classmethod
    def request(cls, key: bytes, n0: bytes, max_record: int = DEFAULT_MAX_RECORD) -> Opener:
        """Opens a request stream whose ``n0`` came from the outer path."""
        return cls(key, n0, None, max_record)

    @classmethod
    def response(cls, key: bytes, request_n0: bytes,
                 max_record: int = DEFAULT_MAX_RECORD) -> Opener:
        """Opens a response body (``n0 || stream``) answering ``request_n0``."""
        return cls(key, None, request_n0, max_record)

    @property
    def complete(self) -> bool:
        """Whether the FINAL record verified."""
        return self._done

    @property
    def records(self) -> int:
        """Records verified so far."""
        return self._chain.index

    def _fail(self, code: str, message: str) -> ProtocolError:
        self._failed = protocol_error(code, message)
        self._buf = bytearray()
        self._pos = 0
        return self._failed

    def receive(self, data: bytes) -> None:
        """Pushes received bytes. Bytes after the FINAL record are an error."""
        if self._failed is not None:
            raise self._failed
        if not data:
            return
        if self._done:
            raise self._fail("trailing_data", "bytes after the FINAL record")
        if self._pos:
            del self._buf[:self._pos]
            self._pos = 0
        self._buf += data

    def pull(self) -> bytes | None:
        """The next verified, non-empty plaintext, or None when more input is
        needed (or the stream is complete)."""
        if self._failed is not None:
            raise self._failed
        while True:
            if self._done:
                return None
            buf = self._buf
            avail = len(buf) - self._pos
            if self._need_nonce:
                if avail < NONCE_LEN:
                    return None
                self._chain.set_n0(bytes(buf[self._pos:self._pos + NONCE_LEN]))
                self._pos += NONCE_LEN
                self._need_nonce = False
                continue
            if avail < HEADER_LEN:
                return None
            p = self._pos
            header = bytes(buf[p:p + HEADER_LEN])
            (word,) = _U32.unpack(header)
            length = word & LEN_MASK
            clear = bool(word & CLEAR)
            last = bool(word & FINAL)
            # Spec §11.2: the header is judged before the payload is awaited.
            if length > self._max:
                raise self._fail("record_too_large", f"record of {length} bytes")
            if clear and self._is_request:
                raise self._fail("clear_in_request", "CLEAR record in a request")
            c = self._chain
            if c.index >= MAX_RECORDS:
                raise self._fail("too_many_records", "more than 2^32 records")
            total = RECORD_OVERHEAD + length
            if avail < total:
                return None
            tag = bytes(buf[p + HEADER_LEN:p + RECORD_OVERHEAD])
            payload = bytes(buf[p + RECORD_OVERHEAD:p + total])
            ad = c.ad(header)
            nonce = c.nonce()
            try:
                if clear:
                    c.aead.open(nonce, tag, ad + payload)
                    plaintext = payload
                else:
                    plaintext = c.aead.open(nonce, payload + tag, ad)
            except ProtocolError:
                raise self._fail("integrity", "record tag did not verify") from None
            c.prev_tag = tag
            c.index += 1
            self._pos = p + total
            if last:
                if self._pos != len(buf):
                    raise self._fail("trailing_data", "bytes after the FINAL record")
                self._done = True
                self._buf = bytearray()
                self._pos = 0
            if plaintext:
                self.last_clear = clear
                return plaintext
            if last:
                return None

    def feed(self, data: bytes) -> Iterator[bytes]:
        """:meth:`receive` then every plaintext :meth:`pull` yields."""
        self.receive(data)
        while (p := self.pull()) is not None:
            yield p

    def finish(self) -> None:
        """Ends the input: ``truncated`` unless the FINAL record verified."""
        if self._failed is not None:
            raise self._failed
        if not self._done:
            raise self._fail("truncated", "stream ended before its FINAL record")


def open_all(opener: Opener, data: bytes) -> bytes:
    """Opens a whole stream held in memory."""
    out = list(opener.feed(data))
    opener.finish()
    return b"".join(out)
