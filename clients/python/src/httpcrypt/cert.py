"""Key certificates (spec §5): the 118-byte form, its ``hc1 …`` text form,
verification under an identity, the choice rule and the
``application/httpcrypt-certs`` list. The version byte is 1, or 2 for a key
that also takes profile-2 (compact) requests (spec §4.5); everything else
treats both alike."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from . import b64
from .errors import ProtocolError
from .suite import (
    check_identity,
    ed25519_public,
    ed25519_sign,
    ed25519_verify,
    hybrid_kid,
    kid,
    signer_id,
)

if TYPE_CHECKING:
    from .kem import KemPublic

CERT_LEN = 118
SIGNED_LEN = 54
CONTEXT = b"httpcrypt-cert-v1"
TEXT_PREFIX = "hc1 "
CERTS_TYPE = "application/httpcrypt-certs"

_FIXED = struct.Struct(">BBIII")
VERSIONS = (1, 2)


@dataclass(frozen=True)
class DiscoveredKey:
    """A server key without its signature (spec §6.3): what a client uses.
    ``version`` is its certificate's version byte: 2 means the key takes
    profile-2 requests (spec §4.5); a key learnt from TLSA is always 1.
    ``kem`` is the checked ML-KEM encapsulation key of a suite-2 certificate
    (spec/hybrid.md): requests under the key then use the hybrid agreement."""

    serial: int
    not_before: int
    not_after: int
    kex_public: bytes
    version: int = 1
    kem: KemPublic | None = None

    def is_valid_at(self, now: float) -> bool:
        """``not_before <= now <= not_after``."""
        return self.not_before <= now <= self.not_after

    @property
    def suite(self) -> int:
        """2 for a hybrid key, else 1."""
        return 1 if self.kem is None else 2

    @property
    def kid(self) -> bytes:
        """The key ID the cookie names (suite 2: of the pair)."""
        if self.kem is not None:
            return hybrid_kid(self.kex_public, self.kem.hash)
        return kid(self.kex_public)


@dataclass(frozen=True)
class KeyCert:
    """A key certificate."""

    serial: int
    not_before: int
    not_after: int
    kex_public: bytes
    signer: bytes
    signature: bytes
    version: int = 1

    @classmethod
    def sign(cls, identity_seed: bytes, serial: int, not_before: int, not_after: int,
             kex_public: bytes, version: int = 1) -> KeyCert:
        """Issues a certificate with the identity key of ``identity_seed``
        (``version`` 2 announces profile 2; it is covered by the signature)."""
        if version not in VERSIONS:
            raise ValueError("certificate version must be 1 or 2")
        unsigned = cls(serial, not_before, not_after, bytes(kex_public),
                       signer_id(ed25519_public(identity_seed)), bytes(64), version)
        sig = ed25519_sign(identity_seed, CONTEXT + unsigned.encode()[:SIGNED_LEN])
        return cls(serial, not_before, not_after, bytes(kex_public), unsigned.signer, sig,
                   version)

    def encode(self) -> bytes:
        """The 118 bytes."""
        return (_FIXED.pack(self.version, 1, self.serial, self.not_before, self.not_after)
                + self.kex_public + self.signer + self.signature)

    @classmethod
    def decode(cls, data: bytes) -> KeyCert:
        """Parses 118 bytes; ``bad_certificate`` on length, on a version
        other than 1 and 2, or on a suite other than 1."""
        if len(data) != CERT_LEN or data[0] not in VERSIONS or data[1] != 1:
            raise ProtocolError("bad_certificate", "wrong certificate length, version or suite")
        version, _, serial, nb, na = _FIXED.unpack_from(data)
        return cls(serial, nb, na, bytes(data[14:46]), bytes(data[46:54]), bytes(data[54:]),
                   version)

    def to_text(self) -> str:
        """``hc1 {b64u(cert)}``."""
        return TEXT_PREFIX + b64.encode(self.encode())

    @classmethod
    def from_text(cls, text: str) -> KeyCert:
        """Parses the text form exactly (no surrounding whitespace)."""
        if not text.startswith(TEXT_PREFIX):
            raise ProtocolError("bad_certificate", "missing 'hc1 ' prefix")
        return cls.decode(b64.decode(text[len(TEXT_PREFIX):]))

    def verify(self, identity_public: bytes) -> None:
        """Signer ID, then strict Ed25519; ``bad_signature`` on failure."""
        if self.signer != signer_id(identity_public):
            raise ProtocolError("bad_signature", "certificate signed by another identity")
        check_identity(identity_public)
        ed25519_verify(identity_public, CONTEXT + self.encode()[:SIGNED_LEN], self.signature)

    def is_valid_at(self, now: float) -> bool:
        """``not_before <= now <= not_after``."""
        return self.not_before <= now <= self.not_after

    @property
    def kid(self) -> bytes:
        """The key ID of the certified key."""
        return kid(self.kex_public)

    def discovered(self) -> DiscoveredKey:
        """The signature-free key."""
        return DiscoveredKey(self.serial, self.not_before, self.not_after, self.kex_public,
                             self.version)


K = TypeVar("K", KeyCert, DiscoveredKey)


def choose_key(keys: Iterable[K], now: float) -> K:
    """Among keys valid at ``now``, the highest serial; ties go to the later
    ``not_before``. ``not_valid`` if none."""
    best: K | None = None
    for k in keys:
        if k.is_valid_at(now) and (
            best is None or (k.serial, k.not_before) > (best.serial, best.not_before)
        ):
            best = k
    if best is None:
        raise ProtocolError("not_valid", "no certificate is valid now")
    return best


def choose(certs: Iterable[KeyCert], now: float, identity: bytes | None = None) -> KeyCert:
    """:func:`choose_key` among certificates that verify under ``identity``
    (authenticated mode). ``bad_signature`` when valid ones exist but none
    verifies, else ``not_valid``."""
    valid = [c for c in certs if c.is_valid_at(now)]
    if identity is None:
        return choose_key(valid, now)
    good = []
    for c in valid:
        try:
            c.verify(identity)
        except ProtocolError:
            continue
        good.append(c)
    if valid and not good:
        raise ProtocolError("bad_signature", "no valid certificate verifies under the identity")
    return choose_key(good, now)


def format_cert_list(certs: Iterable[KeyCert]) -> str:
    """One text form per line, LF line ends."""
    return "".join(c.to_text() + "\n" for c in certs)


def parse_cert_list(body: bytes) -> list[KeyCert]:
    """Parses ``application/httpcrypt-certs``: LF or CRLF, empty lines
    skipped, every other line must be a certificate."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("bad_certificate", "certificate list is not UTF-8") from None
    out = []
    for line in text.split("\n"):
        if line.endswith("\r"):
            line = line[:-1]
        if line:
            out.append(KeyCert.from_text(line))
    return out
