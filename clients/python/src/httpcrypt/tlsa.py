"""The TLSA form of a key certificate (spec §6.3): an X.509 v3 certificate
(usage 3, selector 0, matching 0) whose subject key is the X25519 kex key,
signed with Ed25519 by the identity key. Built and parsed with
``cryptography``'s X.509 support (its DER parser refuses non-DER input such
as an explicitly encoded DEFAULT); the signature is checked with the same
strict Ed25519 verification as certificates (spec §5)."""

from __future__ import annotations

import datetime

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID, SignatureAlgorithmOID

from . import b64
from .cert import DiscoveredKey
from .errors import ProtocolError
from .suite import check_identity, ed25519_public, ed25519_verify, kid, signer_id

MAX_DATA = 2048
_UTC = datetime.timezone.utc


def _bad(msg: str) -> ProtocolError:
    return ProtocolError("bad_certificate", msg)


def encode(identity_seed: bytes, serial: int, not_before: int, not_after: int,
           kex_public: bytes) -> bytes:
    """The DER certificate for a kex key (Ed25519 is deterministic, so one
    input gives one encoding)."""
    identity = Ed25519PrivateKey.from_private_bytes(identity_seed)
    issuer = f"httpcrypt identity {b64.encode(signer_id(ed25519_public(identity_seed)))}"
    subject = f"httpcrypt kex {b64.encode(kid(kex_public))}"
    builder = (
        x509.CertificateBuilder()
        .serial_number(serial)
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .not_valid_before(datetime.datetime.fromtimestamp(not_before, _UTC))
        .not_valid_after(datetime.datetime.fromtimestamp(not_after, _UTC))
        .public_key(X25519PublicKey.from_public_bytes(kex_public))
        .add_extension(
            x509.KeyUsage(digital_signature=False, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=True,
                          key_cert_sign=False, crl_sign=False, encipher_only=False,
                          decipher_only=False),
            critical=True,
        )
    )
    return builder.sign(identity, None).public_bytes(Encoding.DER)


def rdata(der: bytes) -> str:
    """Zone-file form ``3 0 0 HEX``."""
    return "3 0 0 " + der.hex().upper()


def read(usage: int, selector: int, matching: int, data: bytes,
         identity: bytes | None = None) -> DiscoveredKey:
    """The key a TLSA record states; with ``identity`` (authenticated mode)
    the X.509 signature must verify under it."""
    if (usage, selector, matching) != (3, 0, 0):
        raise ProtocolError("bad_record", "TLSA record is not 3 0 0")
    if len(data) > MAX_DATA:
        raise ProtocolError("bad_record", "TLSA data above 2048 bytes")
    try:
        cert = x509.load_der_x509_certificate(bytes(data))
        # Canonical DER: re-encoding must give the input back.
        if cert.public_bytes(Encoding.DER) != bytes(data):
            raise _bad("not canonical DER")
        if cert.version != x509.Version.v3:
            raise _bad("not an X.509 v3 certificate")
        if cert.signature_algorithm_oid != SignatureAlgorithmOID.ED25519:
            raise _bad("not signed with Ed25519")
        tbs = cert.tbs_certificate_bytes
        if not _inner_algorithm_is_ed25519(tbs):
            raise _bad("inner signature algorithm differs")
        key = cert.public_key()
        if not isinstance(key, X25519PublicKey):
            raise _bad("subject key is not X25519")
        kex_public = key.public_bytes_raw()
        serial = cert.serial_number
        nb = int(cert.not_valid_before_utc.timestamp())
        na = int(cert.not_valid_after_utc.timestamp())
        signature = cert.signature
    except ProtocolError:
        raise
    except (ValueError, TypeError) as e:
        raise _bad(f"unreadable certificate: {e}") from None
    if not 0 <= serial < 1 << 32:
        raise _bad("serial outside 0..2^32-1")
    if not (0 <= nb < 1 << 32 and 0 <= na < 1 << 32):
        raise _bad("validity outside the u32 range")
    if len(signature) != 64:
        raise _bad("signature is not 64 bytes")
    if identity is not None:
        check_identity(identity)
        ed25519_verify(identity, tbs, signature)
    return DiscoveredKey(serial, nb, na, kex_public)


# id-Ed25519 AlgorithmIdentifier, parameters absent: SEQUENCE { OID 1.3.101.112 }
_ED25519_ALG = bytes.fromhex("300506032b6570")


def _inner_algorithm_is_ed25519(tbs: bytes) -> bool:
    """The TBSCertificate's signature field is exactly id-Ed25519 (the
    library exposes only the outer algorithm). TBS = SEQUENCE { [0] version,
    serial INTEGER, signature AlgorithmIdentifier, ... }; walk the two
    leading elements by their DER lengths."""
    pos = _skip_header(tbs, 0)  # into the TBS SEQUENCE
    for _ in range(2):  # version, serialNumber
        pos = _skip_element(tbs, pos)
    return tbs[pos:pos + len(_ED25519_ALG)] == _ED25519_ALG


def _length(data: bytes, pos: int) -> tuple[int, int]:
    first = data[pos]
    if first < 0x80:
        return first, pos + 1
    n = first & 0x7F
    return int.from_bytes(data[pos + 1:pos + 1 + n], "big"), pos + 1 + n


def _skip_header(data: bytes, pos: int) -> int:
    return _length(data, pos + 1)[1]


def _skip_element(data: bytes, pos: int) -> int:
    length, start = _length(data, pos + 1)
    return start + length
