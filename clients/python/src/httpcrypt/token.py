"""The application token (spec §8.4): ``Client-Random: b64u(cr)`` in, and
``Random: b64u(cr || SHA3-256("hc1-token" || secret || k || cr)[0..16])`` out."""

from __future__ import annotations

import hmac

from . import b64
from .errors import ProtocolError
from .suite import sha3_256

CLIENT_RANDOM_FIELD = "Client-Random"
RANDOM_FIELD = "Random"
LABEL = b"hc1-token"


def server_random(token_secret: bytes, session_key: bytes, client_random: bytes) -> bytes:
    """The server's 16-byte half of a token."""
    return sha3_256(LABEL, token_secret, session_key, client_random)[:16]


def random_field(token_secret: bytes, session_key: bytes, client_random: bytes) -> str:
    """The ``Random`` value the server returns."""
    return b64.encode(client_random + server_random(token_secret, session_key, client_random))


def verify_random(token_secret: bytes, session_key: bytes, value: str) -> bytes:
    """Rechecks a presented ``Random``; returns the client random or raises ``bad_token``."""
    try:
        raw = b64.decode_exact(value, 40)
    except ProtocolError:
        raise ProtocolError("bad_token", "token is not 40 bytes of base64url") from None
    cr, sr = raw[:24], raw[24:]
    if not hmac.compare_digest(sr, server_random(token_secret, session_key, cr)):
        raise ProtocolError("bad_token", "token does not verify")
    return cr
