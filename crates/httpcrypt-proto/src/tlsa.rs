//! The TLSA form of a key certificate (spec §6.3): an X.509 v3 certificate
//! in a `3 0 0` TLSA record at `_{port}._tcp.{host}`, stating what a
//! [`KeyCert`] states in X.509 terms.
//!
//! ```text
//! version           v3
//! serialNumber      serial (a positive INTEGER, at most 32 bits)
//! signature         Ed25519 (1.3.101.112), no parameters
//! issuer            CN=httpcrypt identity {b64u(signer ID)}
//! validity          not_before .. not_after (UTCTime before 2050, else GeneralizedTime)
//! subject           CN=httpcrypt kex {b64u(kid)}
//! subjectPublicKey  X25519 (1.3.101.110, RFC 8410), 32 bytes
//! extensions        keyUsage (critical) = keyAgreement (RFC 8410 §5)
//! ```
//!
//! The certificate is built and read with the RustCrypto `x509-cert`/`der`
//! crates; the identity key signs the DER of the `TBSCertificate` with pure
//! Ed25519. Because Ed25519 is deterministic, one [`KeyCert`] and one
//! identity give exactly one DER encoding, which the vectors pin.
//!
//! A reader ([`decode`]) requires the shape above except for names and
//! extensions, which DANE-EE (RFC 7671 §5.1) ignores and so does this
//! reader. The result is a [`TlsaCert`]: the key, serial and validity,
//! plus what [`TlsaCert::verify`] needs to check the X.509 signature in
//! authenticated mode. Its signature is over other bytes than the 118-byte
//! [`KeyCert`]'s, so a client uses it through [`DiscoveredKey`].

use core::str::FromStr;
use core::time::Duration;

use der::asn1::{BitString, GeneralizedTime, ObjectIdentifier, OctetString, UtcTime};
use der::oid::AssociatedOid;
use der::{DateTime, Decode, Encode};
use spki::{AlgorithmIdentifierOwned, SubjectPublicKeyInfoOwned};
use x509_cert::certificate::{Certificate, TbsCertificate, Version};
use x509_cert::ext::pkix::{KeyUsage, KeyUsages};
use x509_cert::ext::Extension;
use x509_cert::name::Name;
use x509_cert::serial_number::SerialNumber;
use x509_cert::time::{Time, Validity};

use crate::b64;
use crate::cert::{DiscoveredKey, KeyCert};
use crate::error::{Error, Result};
use crate::keys::{IdentityKey, IdentityPublic, KexPublic};

/// `id-Ed25519` (RFC 8410): the signature algorithm.
pub const ED25519_OID: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");
/// `id-X25519` (RFC 8410): the certified key's algorithm.
pub const X25519_OID: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.110");
/// Certificate usage 3: DANE-EE.
pub const USAGE_DANE_EE: u8 = 3;
/// Selector 0: the full certificate.
pub const SELECTOR_FULL: u8 = 0;
/// Matching type 0: the data is the certificate itself.
pub const MATCHING_FULL: u8 = 0;
/// Largest certificate a reader accepts (`bad_record` above). Ours are
/// about 300 bytes; the bound keeps a hostile record from costing more
/// than a parse of 2 KiB.
pub const MAX_DER: usize = 2048;

/// A TLSA certificate as read: the statement, not yet trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsaCert {
    /// The certificate's serial number.
    pub serial: u32,
    /// First valid second (unix time), from `notBefore`.
    pub not_before: u32,
    /// Last valid second (inclusive), from `notAfter`.
    pub not_after: u32,
    /// The certified X25519 key.
    pub kex_public: KexPublic,
    tbs: Vec<u8>,
    signature: [u8; 64],
}

impl TlsaCert {
    /// Checks the Ed25519 signature over the `TBSCertificate` (strict
    /// verification, as for [`KeyCert::verify`]).
    pub fn verify(&self, identity: &IdentityPublic) -> Result<()> {
        identity.verify(&self.tbs, &self.signature)
    }

    /// The key a client encrypts to. In authenticated mode, call
    /// [`TlsaCert::verify`] first.
    pub fn key(&self) -> DiscoveredKey {
        DiscoveredKey {
            profile: crate::profile::Profile::V1,
            serial: self.serial,
            not_before: self.not_before,
            not_after: self.not_after,
            kex_public: self.kex_public,
        }
    }

    /// Whether `now` lies in `[not_before, not_after]`.
    pub fn is_valid_at(&self, now: u64) -> bool {
        self.key().is_valid_at(now)
    }
}

fn x509_time(secs: u32) -> Result<Time> {
    let dt = DateTime::from_unix_duration(Duration::from_secs(secs.into()))
        .map_err(|_| Error::BadCertificate)?;
    // RFC 5280 §4.1.2.5: UTCTime through 2049, GeneralizedTime from 2050.
    Ok(if dt.year() < 2050 {
        Time::UtcTime(UtcTime::from_date_time(dt).map_err(|_| Error::BadCertificate)?)
    } else {
        Time::GeneralTime(GeneralizedTime::from_date_time(dt))
    })
}

fn name(cn: &str) -> Name {
    Name::from_str(&format!("CN={cn}")).expect("a CN of base64url characters is a valid name")
}

/// The DER of the X.509 certificate that states what `cert` states
/// (serial, validity, key), signed by `identity`. Only those fields of
/// `cert` are used; its own signature is not copied.
pub fn encode(identity: &IdentityKey, cert: &KeyCert) -> Vec<u8> {
    let ed25519 = AlgorithmIdentifierOwned {
        oid: ED25519_OID,
        parameters: None,
    };
    let key_usage = KeyUsage(KeyUsages::KeyAgreement.into())
        .to_der()
        .expect("keyUsage encodes");
    let tbs = TbsCertificate {
        version: Version::V3,
        serial_number: SerialNumber::from(cert.serial),
        signature: ed25519.clone(),
        issuer: name(&format!(
            "httpcrypt identity {}",
            b64::encode(&identity.public().signer_id())
        )),
        validity: Validity {
            not_before: x509_time(cert.not_before).expect("every u32 time is a valid X.509 time"),
            not_after: x509_time(cert.not_after).expect("every u32 time is a valid X.509 time"),
        },
        subject: name(&format!("httpcrypt kex {}", cert.kid().to_b64())),
        subject_public_key_info: SubjectPublicKeyInfoOwned {
            algorithm: AlgorithmIdentifierOwned {
                oid: X25519_OID,
                parameters: None,
            },
            subject_public_key: BitString::from_bytes(&cert.kex_public.0)
                .expect("32 bytes fit a BIT STRING"),
        },
        issuer_unique_id: None,
        subject_unique_id: None,
        extensions: Some(vec![Extension {
            extn_id: KeyUsage::OID,
            critical: true,
            extn_value: OctetString::new(key_usage).expect("short octet string"),
        }]),
    };
    let tbs_der = tbs.to_der().expect("the TBSCertificate encodes");
    let signature = identity.sign(&tbs_der);
    Certificate {
        tbs_certificate: tbs,
        signature_algorithm: ed25519,
        signature: BitString::from_bytes(&signature).expect("64 bytes fit a BIT STRING"),
    }
    .to_der()
    .expect("the certificate encodes")
}

fn unix(t: &Time) -> Result<u32> {
    u32::try_from(t.to_unix_duration().as_secs()).map_err(|_| Error::BadCertificate)
}

fn serial(s: &SerialNumber) -> Result<u32> {
    let b = s.as_bytes();
    // Two's complement, minimal: a set top bit is a negative number.
    if b.first().is_none_or(|f| f & 0x80 != 0) {
        return Err(Error::BadCertificate);
    }
    let b = b.strip_prefix(&[0]).unwrap_or(b);
    if b.len() > 4 {
        return Err(Error::BadCertificate);
    }
    Ok(b.iter().fold(0u32, |acc, x| (acc << 8) | u32::from(*x)))
}

/// Reads a DER certificate (spec §6.3). Structure, algorithms, key size,
/// serial range and times are checked here (`bad_certificate`); the
/// signature only by [`TlsaCert::verify`].
pub fn decode(der: &[u8]) -> Result<TlsaCert> {
    if der.len() > MAX_DER {
        return Err(Error::BadRecord);
    }
    let cert = Certificate::from_der(der).map_err(|_| Error::BadCertificate)?;
    // The `der` crate accepts some non-canonical input (an explicitly
    // encoded DEFAULT such as `critical FALSE`). Only the canonical form is
    // accepted, so the bytes that were signed are exactly the re-encoded
    // TBSCertificate kept below, and a record has one byte form.
    if cert.to_der().map_err(|_| Error::BadCertificate)? != der {
        return Err(Error::BadCertificate);
    }
    let tbs = &cert.tbs_certificate;
    let is_ed25519 = |a: &AlgorithmIdentifierOwned| a.oid == ED25519_OID && a.parameters.is_none();
    if tbs.version != Version::V3
        || !is_ed25519(&cert.signature_algorithm)
        || tbs.signature != cert.signature_algorithm
    {
        return Err(Error::BadCertificate);
    }
    let spki = &tbs.subject_public_key_info;
    if spki.algorithm.oid != X25519_OID || spki.algorithm.parameters.is_some() {
        return Err(Error::BadCertificate);
    }
    let kex: [u8; 32] = spki
        .subject_public_key
        .as_bytes()
        .and_then(|b| b.try_into().ok())
        .ok_or(Error::BadCertificate)?;
    let signature: [u8; 64] = cert
        .signature
        .as_bytes()
        .and_then(|b| b.try_into().ok())
        .ok_or(Error::BadCertificate)?;
    // Canonical input (checked above): this is the received TBSCertificate.
    let tbs_der = tbs.to_der().map_err(|_| Error::BadCertificate)?;
    Ok(TlsaCert {
        serial: serial(&tbs.serial_number)?,
        not_before: unix(&tbs.validity.not_before)?,
        not_after: unix(&tbs.validity.not_after)?,
        kex_public: KexPublic(kex),
        tbs: tbs_der,
        signature,
    })
}

/// The TLSA RDATA in zone-file presentation: `3 0 0 {HEX}`.
pub fn format_rdata(der: &[u8]) -> String {
    let mut s = format!("{USAGE_DANE_EE} {SELECTOR_FULL} {MATCHING_FULL} ");
    for b in der {
        s.push_str(&format!("{b:02X}"));
    }
    s
}

/// Reads one TLSA record's fields: anything but `3 0 0` is `bad_record`
/// (a reader skips such records rather than failing the RRset), then the
/// data is [`decode`]d.
pub fn parse_record(usage: u8, selector: u8, matching: u8, data: &[u8]) -> Result<TlsaCert> {
    if (usage, selector, matching) != (USAGE_DANE_EE, SELECTOR_FULL, MATCHING_FULL) {
        return Err(Error::BadRecord);
    }
    decode(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(serial: u32, nb: u32, na: u32) -> (IdentityKey, KeyCert, Vec<u8>) {
        let id = IdentityKey::from_seed([7; 32]);
        let cert = KeyCert::sign(&id, serial, nb, na, KexPublic([9; 32]));
        let der = encode(&id, &cert);
        (id, cert, der)
    }

    #[test]
    fn round_trip_and_verify() {
        let (id, cert, der) = fixture(42, 1_700_000_000, 1_700_007_260);
        let t = decode(&der).unwrap();
        assert_eq!(
            (t.serial, t.not_before, t.not_after, t.kex_public),
            (42, 1_700_000_000, 1_700_007_260, cert.kex_public)
        );
        t.verify(&id.public()).unwrap();
        assert_eq!(t.key(), DiscoveredKey::from(&cert));
        let other = IdentityKey::from_seed([8; 32]);
        assert_eq!(t.verify(&other.public()), Err(Error::BadSignature));
        // Deterministic: the same inputs give the same DER.
        assert_eq!(encode(&id, &cert), der);
        assert!(der.len() < 400, "{} bytes", der.len());
    }

    proptest::proptest! {
        #[test]
        fn any_statement_round_trips(serial: u32, nb: u32, na: u32, kex: [u8; 32], seed: [u8; 32]) {
            let id = IdentityKey::from_seed(seed);
            let cert = KeyCert::sign(&id, serial, nb, na, KexPublic(kex));
            let t = decode(&encode(&id, &cert)).unwrap();
            proptest::prop_assert_eq!(t.key(), DiscoveredKey::from(&cert));
            proptest::prop_assert!(t.verify(&id.public()).is_ok());
        }
    }

    #[test]
    fn extreme_serials_and_times() {
        for (serial, nb, na) in [
            (0, 0, 0),
            (1, 0, 1),
            (u32::MAX, 0, u32::MAX),
            (0x80, 2_524_608_000, 2_524_608_001),
        ] {
            let (id, _, der) = fixture(serial, nb, na);
            let t = decode(&der).unwrap();
            assert_eq!((t.serial, t.not_before, t.not_after), (serial, nb, na));
            t.verify(&id.public()).unwrap();
        }
    }

    #[test]
    fn every_flipped_byte_is_refused_or_fails_verification() {
        let (id, _, der) = fixture(5, 100, 200);
        for i in 0..der.len() {
            let mut b = der.clone();
            b[i] ^= 0x01;
            if let Ok(t) = decode(&b) {
                // Names and extensions are not read, but they are signed.
                assert_eq!(t.verify(&id.public()), Err(Error::BadSignature), "byte {i}");
            }
        }
    }

    #[test]
    fn truncation_and_trailing_bytes() {
        let (_, _, der) = fixture(5, 100, 200);
        for n in 0..der.len() {
            assert_eq!(decode(&der[..n]), Err(Error::BadCertificate), "{n} bytes");
        }
        let mut long = der.clone();
        long.push(0);
        assert_eq!(decode(&long), Err(Error::BadCertificate));
        assert_eq!(decode(&vec![0x30; MAX_DER + 1]), Err(Error::BadRecord));
    }

    #[test]
    fn non_canonical_der_is_refused() {
        // keyUsage written with an explicit `critical FALSE` (a DEFAULT that
        // DER omits), signed over those very bytes: refused, not re-encoded.
        let (id, _, der) = fixture(5, 100, 200);
        let at = der
            .windows(3)
            .position(|w| w == [0x01, 0x01, 0xff])
            .expect("critical TRUE");
        let mut b = der.clone();
        b[at + 2] = 0x00;
        // Outer SEQUENCE header: 30 82 LL LL; then the TBS SEQUENCE.
        assert_eq!(b[..2], [0x30, 0x82]);
        let tbs_len = match b[5] {
            0x81 => 3 + usize::from(b[6]),
            0x82 => 4 + usize::from(u16::from_be_bytes([b[6], b[7]])),
            l => 2 + usize::from(l),
        };
        let sig = id.sign(&b[4..4 + tbs_len]);
        let n = b.len();
        b[n - 64..].copy_from_slice(&sig);
        assert_eq!(decode(&b), Err(Error::BadCertificate));
    }

    #[test]
    fn record_fields() {
        let (_, _, der) = fixture(5, 100, 200);
        assert!(parse_record(3, 0, 0, &der).is_ok());
        assert_eq!(parse_record(3, 1, 0, &der), Err(Error::BadRecord));
        assert_eq!(parse_record(2, 0, 0, &der), Err(Error::BadRecord));
        assert_eq!(parse_record(3, 0, 1, &der), Err(Error::BadRecord));
        let text = format_rdata(&der);
        assert!(text.starts_with("3 0 0 30"));
        assert_eq!(text.len(), 6 + 2 * der.len());
    }
}
