"""ML-KEM-768 for suite 2 (spec/hybrid.md H1, H2): keys from the 64-byte
seed, the ``hck1 `` key text, X-Wing's combiner and the draft's seed
expansion. ML-KEM itself is ``cryptography``'s; SHA3 and SHAKE are
``hashlib``'s. The certificates that name these keys are in ``hybrid``.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import Protocol

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.mlkem import MLKEM768PrivateKey, MLKEM768PublicKey

from . import b64
from .errors import ProtocolError
from .suite import sha3_256, x25519, x25519_public

CIPHERTEXT_LEN = 1088
ENCAPSULATION_KEY_LEN = 1184
KEM_SEED_LEN = 64
XWING_LABEL = b"\\.//^\\"
KEM_TEXT_PREFIX = "hck1 "


class _SignsKemHash(Protocol):
    """A certificate naming an ML-KEM key by its hash (``hybrid.HybridCert``)."""

    @property
    def kem_hash(self) -> bytes: ...


# ---- ML-KEM keys (H2) ----

@functools.cache
def supported() -> bool:
    """Whether ``cryptography``'s backend has ML-KEM-768 (its OpenSSL 3.5
    or later, or AWS-LC; the published wheels have it)."""
    try:
        MLKEM768PrivateKey.from_seed_bytes(bytes(KEM_SEED_LEN))
    except UnsupportedAlgorithm:
        return False
    return True


@dataclass(frozen=True)
class KemPublic:
    """An ML-KEM-768 encapsulation key that passed FIPS 203's modulus
    check, with ``SHA3-256(ek_M)``."""

    raw: bytes
    hash: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.raw) != ENCAPSULATION_KEY_LEN:
            raise ProtocolError("bad_certificate", "an ML-KEM-768 key is 1184 bytes")
        try:
            MLKEM768PublicKey.from_public_bytes(self.raw)
        except ValueError:
            raise ProtocolError("bad_certificate",
                                "ML-KEM key fails the modulus check") from None
        object.__setattr__(self, "hash", sha3_256(self.raw))

    def __repr__(self) -> str:
        return f"KemPublic(hash={self.hash.hex()})"

    def to_text(self) -> str:
        """``hck1 {b64u(ek_M)}`` (1,584 characters)."""
        return KEM_TEXT_PREFIX + b64.encode(self.raw)

    @classmethod
    def from_text(cls, text: str) -> KemPublic:
        """The prefix (``bad_certificate``), canonical base64url
        (``bad_base64``), 1,184 bytes that pass the modulus check
        (``bad_certificate``)."""
        if not text.startswith(KEM_TEXT_PREFIX):
            raise ProtocolError("bad_certificate", "missing 'hck1 ' prefix")
        return cls(b64.decode(text[len(KEM_TEXT_PREFIX):]))

    def check(self, cert: _SignsKemHash) -> None:
        """``kem_mismatch`` unless ``cert`` signs this key's hash."""
        if self.hash != cert.kem_hash:
            raise ProtocolError("kem_mismatch", "key text does not match the certificate")

    def encapsulate(self) -> tuple[bytes, bytes]:
        """``(ct_M, ss_M)`` with fresh randomness from the library."""
        ss, ct = MLKEM768PublicKey.from_public_bytes(self.raw).encapsulate()
        return ct, ss


class KemSecret:
    """A server's ML-KEM-768 key pair from its 64-byte seed ``d || z``."""

    __slots__ = ("_key", "public")

    def __init__(self, seed: bytes):
        if len(seed) != KEM_SEED_LEN:
            raise ValueError("an ML-KEM seed is 64 bytes")
        self._key = MLKEM768PrivateKey.from_seed_bytes(seed)
        self.public = KemPublic(self._key.public_key().public_bytes_raw())

    def __repr__(self) -> str:
        return f"KemSecret(hash={self.public.hash.hex()})"

    def decapsulate(self, ct: bytes) -> bytes:
        """``ss_M`` of exactly 1,088 bytes (``bad_ciphertext`` otherwise); a
        ciphertext for another key gives an unrelated secret (implicit
        rejection), never an error."""
        if len(ct) != CIPHERTEXT_LEN:
            raise ProtocolError("bad_ciphertext", "ML-KEM ciphertext is 1088 bytes")
        try:
            return self._key.decapsulate(ct)
        except ValueError:
            raise ProtocolError("bad_ciphertext", "ML-KEM ciphertext refused") from None


def combine(ss_m: bytes, ss_x: bytes, ct_x: bytes, pk_x: bytes) -> bytes:
    """X-Wing's combiner ``SHA3-256(ss_M || ss_X || ct_X || pk_X || label)`` (H1)."""
    return sha3_256(ss_m, ss_x, ct_x, pk_x, XWING_LABEL)


def decapsulate(kex_secret: bytes, kem: KemSecret, ct_x: bytes, ct_m: bytes) -> bytes:
    """The server's agreement: the ciphertext's length (``bad_ciphertext``),
    X25519 with ``ct_x`` (``small_order``), decapsulation, the combiner."""
    if len(ct_m) < CIPHERTEXT_LEN:
        raise ProtocolError("bad_ciphertext", "body shorter than the ML-KEM ciphertext")
    ss_x = x25519(kex_secret, ct_x)
    ss_m = kem.decapsulate(ct_m[:CIPHERTEXT_LEN])
    return combine(ss_m, ss_x, ct_x, x25519_public(kex_secret))


def xwing_expand_seed(seed: bytes) -> tuple[KemSecret, bytes]:
    """The X-Wing draft's key generation, which only its test vectors use
    here (H1 keeps the halves apart): ``SHAKE-256(seed)``, 64 bytes of
    ML-KEM seed, then the 32-byte X25519 secret."""
    out = hashlib.shake_256(seed).digest(KEM_SEED_LEN + 32)
    return KemSecret(out[:KEM_SEED_LEN]), out[KEM_SEED_LEN:]
