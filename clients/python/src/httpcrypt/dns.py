"""DNS record forms (spec §6.1, §6.2, §6.4): the TXT text form, the AAAA
chunk set, and the identity TXT. (The TLSA X.509 form is in ``tlsa``.)"""

from __future__ import annotations

from collections.abc import Sequence

from . import b64
from .cert import CERT_LEN, KeyCert
from .errors import ProtocolError
from .suite import check_identity

IDENTITY_PREFIX = "hc1-id "
AAAA_COUNT = 9
AAAA_CHUNK = 14


def read_txt(strings: Sequence[bytes]) -> KeyCert:
    """A certificate from a TXT RR's character-strings, joined."""
    try:
        text = b"".join(strings).decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("bad_record", "TXT record is not UTF-8") from None
    return KeyCert.from_text(text)


def encode_aaaa(cert: KeyCert) -> list[bytes]:
    """The nine 16-byte addresses carrying ``cert``."""
    return aaaa_addresses(cert.encode(), AAAA_COUNT)


def read_aaaa(addrs: Sequence[bytes]) -> KeyCert:
    """Reassembles a certificate from an AAAA RRset in any order."""
    return KeyCert.decode(aaaa_payload(addrs, AAAA_COUNT, CERT_LEN))


def aaaa_addresses(data: bytes, count: int) -> list[bytes]:
    """``data`` zero-padded to ``count`` chunks of 14 bytes, each behind
    ``fd 0j`` (spec §6.2; suite 2 uses eleven, spec/hybrid.md H4)."""
    padded = data + bytes(count * AAAA_CHUNK - len(data))
    return [bytes([0xFD, j]) + padded[AAAA_CHUNK * j:AAAA_CHUNK * (j + 1)] for j in range(count)]


def aaaa_payload(addrs: Sequence[bytes], count: int, length: int) -> bytes:
    """The first ``length`` bytes carried by an AAAA RRset in any order:
    exactly ``count`` addresses, each with the ``fd0`` prefix and an order
    below ``count`` once, and zero padding; else ``bad_record``."""
    if len(addrs) != count:
        raise ProtocolError("bad_record", f"AAAA set needs exactly {count} addresses")
    chunks: dict[int, bytes] = {}
    for a in addrs:
        if len(a) != 16 or a[0] != 0xFD or a[1] >> 4 != 0:
            raise ProtocolError("bad_record", "AAAA address without the fd0 prefix")
        j = a[1] & 0x0F
        if j >= count or j in chunks:
            raise ProtocolError("bad_record", "AAAA order field out of range or repeated")
        chunks[j] = bytes(a[2:])
    padded = b"".join(chunks[j] for j in range(count))
    if any(padded[length:]):
        raise ProtocolError("bad_record", "AAAA padding is not zero")
    return padded[:length]


def format_identity_txt(identity_public: bytes) -> str:
    """``hc1-id {b64u(identity_public)}``."""
    return IDENTITY_PREFIX + b64.encode(identity_public)


def read_identity_txt(text: str) -> bytes:
    """The identity key of an ``hc1-id`` TXT record."""
    if not text.startswith(IDENTITY_PREFIX):
        raise ProtocolError("bad_record", "missing 'hc1-id ' prefix")
    key = b64.decode_exact(text[len(IDENTITY_PREFIX):], 32)
    return check_identity(key)
