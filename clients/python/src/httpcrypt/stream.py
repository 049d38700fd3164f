"""Sealed streams (spec §3): the record layer every message body uses.

    record = header(4) || tag(16) || payload(L)
    header = u32 BE: bit 31 FINAL, bit 30 CLEAR, bits 29..0 L

Record ``i`` uses nonce ``n0 + i``; record 0 is bound to the direction (and,
for responses, to the request's nonce), every later record to the previous
tag. :class:`Opener` is push/pull: :meth:`Opener.receive` takes bytes in any
split, :meth:`Opener.pull` returns verified plaintext only.

Profile 2 (spec §4.5) changes record 0 only: a request's ``AD_0`` is
``"hc2-req" || u16(len(host)) || host || header_0`` (the outer Host bound),
a response's ``"hc2-rsp" || request_n0 || header_0``; a response body starts
with 16 random bytes ``r`` and its stream nonce is ``0xff^8 || r``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from cryptography.exceptions import InvalidTag

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
REQ2_LABEL = b"hc2-req"
RSP2_LABEL = b"hc2-rsp"
MAX_HOST = 0xFFFF
RESPONSE_RANDOM_LEN = 16
RESPONSE2_PREFIX = b"\xff" * (NONCE_LEN - RESPONSE_RANDOM_LEN)

_U32 = struct.Struct(">I")
_NONCE_MASK = (1 << 192) - 1
_ZERO_NONCE = bytes(NONCE_LEN)


def host_bytes(host: str | bytes) -> bytes:
    """The outer Host value as the bytes bound in a profile-2 request
    (Latin-1, as HTTP field values travel); above 65535 bytes ``bad_host``."""
    raw = host.encode("latin-1") if isinstance(host, str) else bytes(host)
    if len(raw) > MAX_HOST:
        raise ProtocolError("bad_host", "Host above 65535 bytes cannot be bound")
    return raw


def request_label(host: str | bytes | None = None) -> bytes:
    """The prefix of a request's ``AD_0``: ``hc1-req``, or with ``host``
    (profile 2) ``hc2-req || u16(len(host)) || host``."""
    if host is None:
        return REQ_LABEL
    raw = host_bytes(host)
    return REQ2_LABEL + len(raw).to_bytes(2, "big") + raw


def response_label(request_n0: bytes, profile: int = 1) -> bytes:
    """The prefix of a response's ``AD_0``: ``hc1-rsp || request_n0``, or
    ``hc2-rsp || request_n0`` for profile 2."""
    return (RSP2_LABEL if profile == 2 else RSP_LABEL) + request_n0


def response_nonce(response_random: bytes) -> bytes:
    """The stream nonce of a profile-2 response: ``0xff^8 || r``."""
    if len(response_random) != RESPONSE_RANDOM_LEN:
        raise ValueError("a profile-2 response random is 16 bytes")
    return RESPONSE2_PREFIX + response_random


def record_limit(max_record: int) -> int:
    """The record maximum a receiver enforces: clamped into [16 KiB, 2^24]."""
    return min(max(max_record, RECORD_FLOOR), RECORD_CEILING)


class _Chain:
    """The record chain both ends keep (spec §3.2, §3.3): the AEAD, the
    stream's ``n0`` (also as an integer), the record index, the previous
    tag, and the label that starts ``AD_0``. Sealer and opener set these
    fields themselves: that runs once per message and is on the hot path."""

    __slots__ = ("aead", "index", "label", "n0", "n0_int", "prev_tag")

    aead: XChaCha
    index: int
    label: bytes
    n0: bytes
    n0_int: int
    prev_tag: bytes

    def set_n0(self, n0: bytes) -> None:
        self.n0 = n0
        self.n0_int = int.from_bytes(n0, "big")


class Sealer(_Chain):
    """Produces the records of one stream. :meth:`finish` appends the FINAL
    record; nothing can be sealed after it."""

    __slots__ = ("_done", "_is_request")

    def __init__(self, key: bytes, n0: bytes, request_n0: bytes | None = None,
                 label: bytes | None = None):
        if len(n0) != NONCE_LEN:
            raise ValueError("n0 must be 24 bytes")
        # (The chain's fields, set here directly: this runs once per message.)
        self.aead = XChaCha(key)
        self.n0 = n0
        self.n0_int = int.from_bytes(n0, "big")
        self.index = 0
        self.prev_tag = b""
        self._is_request = request_n0 is None
        if label is None:
            label = REQ_LABEL if request_n0 is None else RSP_LABEL + request_n0
        self.label = label
        self._done = False

    @classmethod
    def request(cls, key: bytes, n0: bytes, host: str | bytes | None = None) -> Sealer:
        """A request stream starting at ``n0`` (the nonce in the path). With
        ``host`` a profile-2 stream whose record 0 binds that outer Host."""
        return cls(key, n0, None, request_label(host))

    @classmethod
    def response(cls, key: bytes, request_n0: bytes, n0: bytes) -> Sealer:
        """A response stream with fresh ``n0``, bound to ``request_n0``.
        The caller writes ``n0`` before the records (spec §4.2)."""
        return cls(key, n0, request_n0)

    @classmethod
    def response2(cls, key: bytes, request_n0: bytes, response_random: bytes) -> Sealer:
        """A profile-2 response stream (nonce ``0xff^8 || response_random``,
        ``AD_0`` labelled ``hc2-rsp``). The caller writes the 16 random
        bytes before the records (spec §4.5)."""
        return cls(key, response_nonce(response_random), request_n0,
                   response_label(request_n0, 2))

    @property
    def records(self) -> int:
        """Records sealed so far."""
        return self.index

    def _check(self, n: int, clear: bool) -> None:
        if self._done:
            raise ProtocolError("trailing_data", "stream already finished")
        if n > RECORD_CEILING:
            raise ProtocolError("record_too_large", "record above 2^24 bytes")
        if clear and self._is_request:
            raise protocol_error("clear_in_request", "CLEAR record in a request")
        if self.index >= MAX_RECORDS:
            raise protocol_error("too_many_records", "more than 2^32 records")

    def seal_parts(self, plaintext: bytes | bytearray | memoryview, last: bool = False,
                   clear: bool = False) -> tuple[bytes, bytes | memoryview]:
        """One record as two pieces, ``header || tag`` and the payload, so
        that the AEAD output is never copied (a sender writes both)."""
        n = len(plaintext)
        c = self
        if self._done or n > RECORD_CEILING or (clear and self._is_request) or (
                c.index >= MAX_RECORDS):
            self._check(n, clear)
        header = _U32.pack(n | (FINAL if last else 0) | (CLEAR if clear else 0))
        ad = (c.label if c.index == 0 else c.prev_tag) + header
        nonce = (c.n0_int + c.index) & _NONCE_MASK
        payload: bytes | memoryview
        aead, n12 = c.aead.at(nonce)
        if clear:
            payload = bytes(plaintext)
            tag = aead.encrypt(n12, b"", ad + payload)
        else:
            sealed = aead.encrypt(n12, plaintext, ad)
            tag = sealed[n:]
            payload = memoryview(sealed)[:n]
        c.prev_tag = tag
        c.index += 1
        if last:
            self._done = True
        return header + tag, payload

    def _record(self, plaintext: bytes, last: bool, clear: bool) -> bytes:
        return b"".join(self.seal_parts(plaintext, last, clear))

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


def seal_records(sealer: Sealer, plaintext: bytes | bytearray | memoryview, record_size: int,
                 final: bool = True) -> tuple[list[bytes | memoryview], int]:
    """Seals ``plaintext`` into records of ``record_size`` bytes, as pieces
    to write in order (two per record: ``header || tag``, payload). With
    ``final`` the last record (1..record_size bytes, or empty for an empty
    plaintext) is FINAL; without, that last part is left unsealed. Returns
    the pieces and the number of plaintext bytes they hold."""
    record_size = max(record_size, 1)
    total = len(plaintext)
    if final and total <= record_size:
        return list(sealer.seal_parts(plaintext, last=True)), total
    mv = memoryview(plaintext)
    full = max(0, (total - 1) // record_size)
    pieces: list[bytes | memoryview] = []
    seal = sealer.seal_parts
    pos = 0
    for _ in range(full):
        pieces.extend(seal(mv[pos:pos + record_size]))
        pos += record_size
    if final:
        pieces.extend(seal(mv[pos:], last=True))
        pos = total
    return pieces, pos


def seal_all(sealer: Sealer, plaintext: bytes | bytearray | memoryview,
             record_size: int) -> bytes:
    """``plaintext`` as one sealed stream of records of at most
    ``record_size`` bytes, the last FINAL (an empty plaintext gives one
    empty FINAL record)."""
    return b"".join(seal_records(sealer, plaintext, record_size)[0])


class Opener(_Chain):
    """Opens one stream: :meth:`receive` bytes (any split), :meth:`pull`
    verified plaintext, :meth:`finish` at the end of input.

    Holds at most one record beyond the caller's input. After a failure it
    keeps raising the same error and has discarded what it buffered."""

    __slots__ = ("_buf", "_done", "_failed", "_is_request", "_max", "_need_nonce",
                 "_nonce_prefix", "_pos", "last_clear")

    def __init__(self, key: bytes, n0: bytes | None, request_n0: bytes | None,
                 max_record: int = DEFAULT_MAX_RECORD, label: bytes | None = None,
                 nonce_prefix: bytes = b""):
        self._is_request = request_n0 is None
        self.aead = XChaCha(key)
        self.n0 = n0 or _ZERO_NONCE
        self.n0_int = int.from_bytes(self.n0, "big")
        self.index = 0
        self.prev_tag = b""
        if label is None:
            label = REQ_LABEL if request_n0 is None else RSP_LABEL + request_n0
        self.label = label
        self._max = (RECORD_FLOOR if max_record < RECORD_FLOOR
                     else RECORD_CEILING if max_record > RECORD_CEILING else max_record)
        self._buf: bytes | bytearray = b""
        self._pos = 0
        # Response bodies start with the stream nonce: all 24 bytes (v1), or
        # the 16 random bytes after the fixed 0xff^8 (profile 2).
        self._need_nonce = NONCE_LEN - len(nonce_prefix) if n0 is None else 0
        self._nonce_prefix = nonce_prefix
        self._done = False
        self._failed: ProtocolError | None = None
        self.last_clear = False

    @classmethod
    def request(cls, key: bytes, n0: bytes, max_record: int = DEFAULT_MAX_RECORD,
                host: str | bytes | None = None) -> Opener:
        """Opens a request stream whose ``n0`` came from the outer path; with
        ``host`` a profile-2 stream bound to that outer Host."""
        return cls(key, n0, None, max_record, request_label(host))

    @classmethod
    def response(cls, key: bytes, request_n0: bytes,
                 max_record: int = DEFAULT_MAX_RECORD, profile: int = 1) -> Opener:
        """Opens a response body answering ``request_n0``: ``n0 || stream``,
        or for profile 2 ``r || stream`` with 16 random bytes ``r``."""
        if profile == 2:
            return cls(key, None, request_n0, max_record, response_label(request_n0, 2),
                       RESPONSE2_PREFIX)
        return cls(key, None, request_n0, max_record)

    @property
    def complete(self) -> bool:
        """Whether the FINAL record verified."""
        return self._done

    @property
    def records(self) -> int:
        """Records verified so far."""
        return self.index

    def _fail(self, code: str, message: str) -> ProtocolError:
        self._failed = protocol_error(code, message)
        self._buf = b""
        self._pos = 0
        return self._failed

    def receive(self, data: bytes | bytearray | memoryview) -> None:
        """Pushes received bytes. Bytes after the FINAL record are an error."""
        if self._failed is not None:
            raise self._failed
        if not data:
            return
        if self._done:
            raise self._fail("trailing_data", "bytes after the FINAL record")
        if self._pos >= len(self._buf):
            # Nothing buffered: borrow the caller's bytes (no copy).
            self._buf = data if isinstance(data, bytes) else bytes(data)
            self._pos = 0
            return
        if self._pos or not isinstance(self._buf, bytearray):
            self._buf = bytearray(memoryview(self._buf)[self._pos:])
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
                need = self._need_nonce
                if avail < need:
                    return None
                self.set_n0(self._nonce_prefix + bytes(buf[self._pos:self._pos + need]))
                self._pos += need
                self._need_nonce = 0
                continue
            if avail < HEADER_LEN:
                return None
            p = self._pos
            (word,) = _U32.unpack_from(buf, p)
            length = word & LEN_MASK
            # Spec §11.2: the header is judged before the payload is awaited.
            if length > self._max:
                raise self._fail("record_too_large", f"record of {length} bytes")
            clear = word & CLEAR
            if clear and self._is_request:
                raise self._fail("clear_in_request", "CLEAR record in a request")
            c = self
            index = c.index
            if index >= MAX_RECORDS:
                raise self._fail("too_many_records", "more than 2^32 records")
            end = p + RECORD_OVERHEAD + length
            if avail < RECORD_OVERHEAD + length:
                return None
            tag = bytes(buf[p + HEADER_LEN:p + RECORD_OVERHEAD])
            ad = (c.label if index == 0 else c.prev_tag) + buf[p:p + HEADER_LEN]
            nonce = (c.n0_int + index) & _NONCE_MASK
            # (The memoryview dies with this frame: CPython frees it at once,
            # so the buffer can grow again on the next receive.)
            payload = memoryview(buf)[p + RECORD_OVERHEAD:end]
            aead, n12 = c.aead.at(nonce)
            try:
                if clear:
                    plaintext = payload.tobytes()
                    aead.decrypt(n12, tag, ad + plaintext)
                else:
                    # The AEAD wants ciphertext || tag: one copy into that order.
                    plaintext = aead.decrypt(n12, b"".join((payload, tag)), ad)
            except InvalidTag:
                raise self._fail("integrity", "record tag did not verify") from None
            del payload
            c.prev_tag = tag
            c.index = index + 1
            self._pos = end
            if word & FINAL:
                if end != len(buf):
                    raise self._fail("trailing_data", "bytes after the FINAL record")
                self._done = True
                self._buf = b""
                self._pos = 0
                if plaintext:
                    self.last_clear = bool(clear)
                    return plaintext
                return None
            if plaintext:
                self.last_clear = bool(clear)
                return plaintext

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


def open_all(opener: Opener, data: bytes | bytearray | memoryview) -> bytes:
    """Opens a whole stream held in memory."""
    opener.receive(data)
    out = []
    while (p := opener.pull()) is not None:
        out.append(p)
    opener.finish()
    return b"".join(out)
