"""Strict base64url without padding (spec §1.2): every byte string has
exactly one accepted text form."""

from __future__ import annotations

import base64
import binascii
import re

from .errors import ProtocolError

_ALPHABET_RE = re.compile(rb"[A-Za-z0-9_-]*")
ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_ALPHABET_SET = frozenset(ALPHABET)


def encode(data: bytes) -> str:
    """base64url text of ``data``, no padding."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def encoded_len(n: int) -> int:
    """Characters of the text form of ``n`` bytes."""
    return (n * 4 + 2) // 3


def is_alphabet(text: bytes | str) -> bool:
    """Whether every character is in the base64url alphabet."""
    raw = text.encode("latin-1") if isinstance(text, str) else text
    return _ALPHABET_RE.fullmatch(raw) is not None


def decode(text: bytes | str, code: str = "bad_base64") -> bytes:
    """Decodes canonical base64url; anything else raises ``code``."""
    if isinstance(text, str):
        try:
            raw = text.encode("ascii")
        except UnicodeEncodeError:
            raise ProtocolError(code, "base64url: non-ASCII character") from None
    else:
        raw = bytes(text)
    if _ALPHABET_RE.fullmatch(raw) is None:
        raise ProtocolError(code, "base64url: character outside the alphabet")
    rem = len(raw) % 4
    if rem == 1:
        raise ProtocolError(code, "base64url: impossible length")
    try:
        out = base64.urlsafe_b64decode(raw + b"=" * ((4 - rem) % 4))
    except (binascii.Error, ValueError):
        raise ProtocolError(code, "base64url: undecodable") from None
    # Unused low bits of the last character must be zero (canonical form).
    if rem and base64.urlsafe_b64encode(out).rstrip(b"=") != raw:
        raise ProtocolError(code, "base64url: non-zero trailing bits")
    return out


def decode_exact(text: bytes | str, n: int, code: str = "bad_base64") -> bytes:
    """Decodes a fixed-size field of ``n`` bytes."""
    if len(text) != encoded_len(n):
        raise ProtocolError(code, f"base64url: expected {encoded_len(n)} characters")
    return decode(text, code)
