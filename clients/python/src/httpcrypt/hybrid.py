"""Suite 2, the hybrid key agreement (spec/hybrid.md): X25519 and
ML-KEM-768 (FIPS 203) joined by X-Wing's combiner.

- ML-KEM-768 is ``cryptography``'s (``hazmat.primitives.asymmetric.mlkem``,
  OpenSSL or AWS-LC underneath): key pairs from the 64-byte seed ``d || z``,
  encapsulation (randomness drawn inside the library) and decapsulation.
  X25519 is v1's (``suite``), SHA3-256 and SHAKE-256 are ``hashlib``'s.
- Written here is only glue: the combiner (one SHA3-256, H1), the seed
  expansion of the X-Wing draft's test vectors, and the suite-2 formats
  (H2, H4): the 150-byte certificate, the ``hck1 `` key text, lists of both
  suites, the eleven-address AAAA form.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from . import b64
from .cert import CONTEXT, TEXT_PREFIX, VERSIONS, DiscoveredKey, KeyCert
from .dns import aaaa_addresses, aaaa_payload
from .errors import ProtocolError
from .kem import (
    CIPHERTEXT_LEN as CIPHERTEXT_LEN,
)
from .kem import (
    ENCAPSULATION_KEY_LEN as ENCAPSULATION_KEY_LEN,
)
from .kem import (
    KEM_SEED_LEN as KEM_SEED_LEN,
)
from .kem import (
    KEM_TEXT_PREFIX as KEM_TEXT_PREFIX,
)
from .kem import (
    XWING_LABEL as XWING_LABEL,
)
from .kem import (
    KemPublic as KemPublic,
)
from .kem import (
    KemSecret as KemSecret,
)
from .kem import (
    combine as combine,
)
from .kem import (
    decapsulate as decapsulate,
)
from .kem import (
    supported as supported,
)
from .kem import (
    xwing_expand_seed as xwing_expand_seed,
)
from .suite import (
    check_identity,
    ed25519_public,
    ed25519_sign,
    ed25519_verify,
    hybrid_kid,
    signer_id,
)

HYBRID_CERT_LEN = 150
SIGNED_LEN = 86
SUITE = 2
AAAA_COUNT = 11

_FIXED = struct.Struct(">BBIII")


# ---- certificates (H2) ----

@dataclass(frozen=True)
class HybridCert:
    """A suite-2 certificate: a v1 one with suite byte 2 and ``kem_hash``
    signed (150 bytes)."""

    serial: int
    not_before: int
    not_after: int
    kex_public: bytes
    kem_hash: bytes
    signer: bytes
    signature: bytes
    version: int = 1

    @classmethod
    def sign(cls, identity_seed: bytes, serial: int, not_before: int, not_after: int,
             kex_public: bytes, kem_hash: bytes, version: int = 1) -> HybridCert:
        """Issues a suite-2 certificate with the identity of ``identity_seed``."""
        if version not in VERSIONS:
            raise ValueError("certificate version must be 1 or 2")
        unsigned = cls(serial, not_before, not_after, bytes(kex_public), bytes(kem_hash),
                       signer_id(ed25519_public(identity_seed)), bytes(64), version)
        sig = ed25519_sign(identity_seed, CONTEXT + unsigned.encode()[:SIGNED_LEN])
        return cls(serial, not_before, not_after, bytes(kex_public), bytes(kem_hash),
                   unsigned.signer, sig, version)

    def encode(self) -> bytes:
        """The 150 bytes."""
        return (_FIXED.pack(self.version, SUITE, self.serial, self.not_before, self.not_after)
                + self.kex_public + self.kem_hash + self.signer + self.signature)

    @classmethod
    def decode(cls, data: bytes) -> HybridCert:
        """150 bytes, version 1 or 2, suite 2; else ``bad_certificate``."""
        if len(data) != HYBRID_CERT_LEN or data[0] not in VERSIONS or data[1] != SUITE:
            raise ProtocolError("bad_certificate", "wrong certificate length, version or suite")
        version, _, serial, nb, na = _FIXED.unpack_from(data)
        return cls(serial, nb, na, bytes(data[14:46]), bytes(data[46:78]), bytes(data[78:86]),
                   bytes(data[86:]), version)

    def to_text(self) -> str:
        """``hc1 {b64u(cert)}`` (204 characters)."""
        return TEXT_PREFIX + b64.encode(self.encode())

    @classmethod
    def from_text(cls, text: str) -> HybridCert:
        """Parses the text form of a suite-2 certificate exactly."""
        cert = parse_any_cert(text)
        if not isinstance(cert, HybridCert):
            raise ProtocolError("bad_certificate", "not a suite-2 certificate")
        return cert

    def verify(self, identity_public: bytes) -> None:
        """Signer ID, then strict Ed25519 (``bad_signature``)."""
        if self.signer != signer_id(identity_public):
            raise ProtocolError("bad_signature", "certificate signed by another identity")
        check_identity(identity_public)
        ed25519_verify(identity_public, CONTEXT + self.encode()[:SIGNED_LEN], self.signature)

    def is_valid_at(self, now: float) -> bool:
        """``not_before <= now <= not_after``."""
        return self.not_before <= now <= self.not_after

    @property
    def kid(self) -> bytes:
        """``SHA3-256(kex_public || kem_hash)[0..10]``."""
        return hybrid_kid(self.kex_public, self.kem_hash)

    def discovered(self, kem: KemPublic) -> DiscoveredKey:
        """The key a client uses, with its checked encapsulation key
        (``kem_mismatch`` when ``kem`` is not the one signed)."""
        kem.check(self)
        return DiscoveredKey(self.serial, self.not_before, self.not_after, self.kex_public,
                             self.version, kem)


def parse_any_cert(text: str) -> KeyCert | HybridCert:
    """A certificate of either suite by its suite byte; a length that does
    not match the suite, or another suite, is ``bad_certificate``."""
    if not text.startswith(TEXT_PREFIX):
        raise ProtocolError("bad_certificate", "missing 'hc1 ' prefix")
    data = b64.decode(text[len(TEXT_PREFIX):])
    if len(data) > 1 and data[1] == SUITE:
        return HybridCert.decode(data)
    return KeyCert.decode(data)


@dataclass
class CertList:
    """A list of both suites and key texts (``OPTIONS {mount}/pq``)."""

    certs: list[KeyCert | HybridCert] = field(default_factory=list)
    kems: list[KemPublic] = field(default_factory=list)

    @property
    def hybrid(self) -> list[HybridCert]:
        """The suite-2 certificates in list order."""
        return [c for c in self.certs if isinstance(c, HybridCert)]


def parse_cert_lines(lines: Iterable[str]) -> CertList:
    """Certificates of both suites and ``hck1 `` key texts, every line
    required to parse; empty lines skipped."""
    out = CertList()
    for line in lines:
        if not line:
            continue
        if line.startswith(KEM_TEXT_PREFIX):
            out.kems.append(KemPublic.from_text(line))
        else:
            out.certs.append(parse_any_cert(line))
    return out


def parse_cert_list(body: bytes) -> CertList:
    """Parses ``application/httpcrypt-certs`` as a reader of both suites:
    LF or CRLF, empty lines skipped."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("bad_certificate", "certificate list is not UTF-8") from None
    return parse_cert_lines(line[:-1] if line.endswith("\r") else line
                            for line in text.split("\n"))


def format_cert_list(certs: Iterable[HybridCert], kems: Iterable[KemPublic]) -> str:
    """The ``OPTIONS {mount}/pq`` answer: the certificates, then each
    distinct key text once, LF line ends."""
    out = [c.to_text() + "\n" for c in certs]
    seen: set[bytes] = set()
    for k in kems:
        if k.hash not in seen:
            seen.add(k.hash)
            out.append(k.to_text() + "\n")
    return "".join(out)


# ---- the AAAA form (H4) ----

def encode_aaaa(cert: HybridCert) -> list[bytes]:
    """The eleven addresses: padded to 154 bytes, chunks of 14, ``fd 0j``."""
    return aaaa_addresses(cert.encode(), AAAA_COUNT)


def read_aaaa(addrs: Sequence[bytes]) -> HybridCert:
    """Reassembles a suite-2 certificate from its AAAA RRset in any order
    (``bad_record`` for a wrong count, prefix, order or padding)."""
    return HybridCert.decode(aaaa_payload(addrs, AAAA_COUNT, HYBRID_CERT_LEN))


__all__ = [
    "CIPHERTEXT_LEN", "CertList", "HybridCert", "KemPublic", "KemSecret", "combine",
    "decapsulate", "encode_aaaa", "format_cert_list", "parse_any_cert", "parse_cert_list",
    "parse_cert_lines", "read_aaaa", "xwing_expand_seed",
]
