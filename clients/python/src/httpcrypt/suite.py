"""Suite 1 primitives (spec §1.3), all from maintained libraries.

- X25519, ChaCha20-Poly1305 (RFC 8439) and raw ChaCha20: ``cryptography``
  (OpenSSL).
- Ed25519: PyNaCl (libsodium), whose verification refuses small-order keys
  and ``R``, and non-reduced ``s``: the strict verification spec §5 asks for.
- SHA3-256: ``hashlib``.
- HChaCha20 (draft-irtf-cfrg-xchacha-03 §2.2): neither library exposes it
  (libsodium has ``crypto_core_hchacha20`` but PyNaCl binds no such function).
  It is derived from OpenSSL's ChaCha20 block function: one keystream block
  for key ``K`` and the 16-byte input as counter||nonce is
  ``rounds(state) + state`` word by word, and HChaCha20 is words 0-3 and
  12-15 of ``rounds(state)``; subtracting the known state words (the
  constants and the input) recovers them. No round function is written
  here; the test suite checks the draft's HChaCha20 vector and compares the
  resulting XChaCha20-Poly1305 with libsodium's.
- XChaCha20-Poly1305 = ChaCha20-Poly1305(HChaCha20(K, n[0..16]), 0^4 || n[16..24]),
  with the subkey cached per 16-byte nonce prefix (consecutive record nonces
  share it).
"""

from __future__ import annotations

import hashlib
import struct

import nacl.bindings
import nacl.exceptions
import nacl.signing
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from .errors import ProtocolError

NONCE_LEN = 24
TAG_LEN = 16
KEY_LEN = 32
KID_LEN = 10
SIGNER_LEN = 8

_SIGMA = struct.unpack("<4I", b"expand 32-byte k")
_ZERO_BLOCK = bytes(64)


def sha3_256(*parts: bytes) -> bytes:
    """SHA3-256 of the concatenation of ``parts``."""
    h = hashlib.sha3_256()
    for p in parts:
        h.update(p)
    return h.digest()


def hchacha20(key: bytes, inp: bytes) -> bytes:
    """HChaCha20(key, 16-byte input) -> 32-byte subkey (see module doc)."""
    if len(key) != 32 or len(inp) != 16:
        raise ValueError("hchacha20 takes a 32-byte key and a 16-byte input")
    enc = Cipher(algorithms.ChaCha20(key, inp), mode=None).encryptor()
    block = struct.unpack("<16I", enc.update(_ZERO_BLOCK))
    words = struct.unpack("<4I", inp)
    out = [(block[i] - _SIGMA[i]) & 0xFFFFFFFF for i in range(4)]
    out += [(block[12 + i] - words[i]) & 0xFFFFFFFF for i in range(4)]
    return struct.pack("<8I", *out)


def nonce_add(n0: bytes, i: int) -> bytes:
    """``(n0 + i) mod 2^192`` with n0 read big-endian (spec §3.2)."""
    v = (int.from_bytes(n0, "big") + i) % (1 << 192)
    return v.to_bytes(NONCE_LEN, "big")


_MASK64 = (1 << 64) - 1
_MASK192 = (1 << 192) - 1


class XChaCha:
    """XChaCha20-Poly1305 under one key, caching the HChaCha20 subkey of the
    current 16-byte nonce prefix. Nonces are 24 bytes, or (for the record
    layer's consecutive nonces) a 192-bit integer."""

    __slots__ = ("_aead", "_hi", "_key")

    def __init__(self, key: bytes):
        if len(key) != KEY_LEN:
            raise ValueError("XChaCha20-Poly1305 key must be 32 bytes")
        self._key = key if type(key) is bytes else bytes(key)
        self._hi = -1
        self._aead: ChaCha20Poly1305 | None = None

    def at(self, nonce: int) -> tuple[ChaCha20Poly1305, bytes]:
        """The RFC 8439 AEAD (under the HChaCha20 subkey) and 12-byte nonce
        for the XChaCha nonce given as an integer (the record layer's hot
        path calls the AEAD itself)."""
        hi = nonce >> 64
        aead = self._aead
        if aead is None or hi != self._hi:
            aead = self._aead = ChaCha20Poly1305(hchacha20(self._key, hi.to_bytes(16, "big")))
            self._hi = hi
        return aead, b"\0\0\0\0" + (nonce & _MASK64).to_bytes(8, "big")

    def seal_at(self, nonce: int, plaintext: bytes | bytearray | memoryview, ad: bytes) -> bytes:
        """``ciphertext || tag`` under the nonce given as an integer."""
        aead, n12 = self.at(nonce)
        return aead.encrypt(n12, plaintext, ad)

    def open_at(self, nonce: int, ciphertext_and_tag: bytes | bytearray | memoryview,
                ad: bytes) -> bytes:
        """Verifies and decrypts under the nonce given as an integer."""
        aead, n12 = self.at(nonce)
        try:
            return aead.decrypt(n12, ciphertext_and_tag, ad)
        except InvalidTag:
            raise ProtocolError("integrity", "tag did not verify") from None

    def seal(self, nonce: bytes, plaintext: bytes | bytearray | memoryview, ad: bytes) -> bytes:
        """Returns ``ciphertext || tag``."""
        return self.seal_at(int.from_bytes(nonce, "big"), plaintext, ad)

    def open(self, nonce: bytes, ciphertext_and_tag: bytes | bytearray | memoryview,
             ad: bytes) -> bytes:
        """Verifies and decrypts ``ciphertext || tag``; ``integrity`` on failure."""
        return self.open_at(int.from_bytes(nonce, "big"), ciphertext_and_tag, ad)


# ---- X25519 (spec §2) ----

def x25519_public(secret: bytes) -> bytes:
    """The public key of a 32-byte X25519 secret."""
    return X25519PrivateKey.from_private_bytes(secret).public_key().public_bytes_raw()


class KexKey:
    """An X25519 key pair (a client's, fresh per request or kept per host)."""

    __slots__ = ("_key", "public")

    def __init__(self, secret: bytes | None = None):
        self._key = (X25519PrivateKey.generate() if secret is None
                     else X25519PrivateKey.from_private_bytes(secret))
        self.public = self._key.public_key().public_bytes_raw()

    def __repr__(self) -> str:
        return f"KexKey(public={self.public.hex()})"

    def agree(self, peer_public: bytes) -> bytes:
        """Raw X25519 with ``peer_public`` (``small_order`` on an all-zero result)."""
        return _exchange(self._key, peer_public)

    def session_key(self, peer_public: bytes) -> bytes:
        """``k = HChaCha20(X25519(secret, peer), 0^16)``."""
        return hchacha20(self.agree(peer_public), bytes(16))


def x25519(secret: bytes, peer_public: bytes) -> bytes:
    """Raw X25519; an all-zero result (small-order peer) is ``small_order``."""
    return _exchange(X25519PrivateKey.from_private_bytes(secret), peer_public)


def _exchange(key: X25519PrivateKey, peer_public: bytes) -> bytes:
    if len(peer_public) != 32:
        raise ProtocolError("bad_base64", "X25519 public key must be 32 bytes")
    try:
        shared = key.exchange(X25519PublicKey.from_public_bytes(peer_public))
    except ValueError:
        # OpenSSL refuses the all-zero output itself.
        raise ProtocolError("small_order", "peer key has small order") from None
    if shared == bytes(32):
        raise ProtocolError("small_order", "peer key has small order")
    return shared


def session_key(secret: bytes, peer_public: bytes) -> bytes:
    """``k = HChaCha20(X25519(secret, peer), 0^16)`` (spec §2)."""
    return hchacha20(x25519(secret, peer_public), bytes(16))


def kid(kex_public: bytes) -> bytes:
    """``SHA3-256(kex_public)[0..10]``."""
    return sha3_256(kex_public)[:KID_LEN]


def hybrid_kid(kex_public: bytes, kem_hash: bytes) -> bytes:
    """The suite-2 key ID ``SHA3-256(kex_public || kem_hash)[0..10]`` (spec/hybrid.md H2)."""
    return sha3_256(kex_public, kem_hash)[:KID_LEN]


def generate_secret() -> bytes:
    """A fresh X25519 secret from the OS CSPRNG."""
    return X25519PrivateKey.generate().private_bytes_raw()


# ---- Ed25519 (spec §5) ----

def signer_id(identity_public: bytes) -> bytes:
    """``SHA3-256(identity_public)[0..8]``."""
    return sha3_256(identity_public)[:SIGNER_LEN]


def check_identity(identity_public: bytes) -> bytes:
    """32 bytes that are a usable Ed25519 key, else ``bad_signature``."""
    if len(identity_public) != 32 or not nacl.bindings.crypto_core_ed25519_is_valid_point(
        bytes(identity_public)
    ):
        raise ProtocolError("bad_signature", "identity key is not a valid Ed25519 point")
    return bytes(identity_public)


def ed25519_verify(identity_public: bytes, message: bytes, signature: bytes) -> None:
    """Strict Ed25519 verification; ``bad_signature`` on any failure."""
    try:
        nacl.signing.VerifyKey(bytes(identity_public)).verify(message, bytes(signature))
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError, ValueError):
        raise ProtocolError("bad_signature", "signature did not verify") from None


def ed25519_public(seed: bytes) -> bytes:
    """The Ed25519 public key of a 32-byte seed."""
    return bytes(nacl.signing.SigningKey(bytes(seed)).verify_key)


def ed25519_sign(seed: bytes, message: bytes) -> bytes:
    """Deterministic Ed25519 signature by the key with ``seed``."""
    return bytes(nacl.signing.SigningKey(bytes(seed)).sign(message).signature)
