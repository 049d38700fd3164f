//! Suite-2 certificates (spec/hybrid.md H2): a v1 certificate with suite
//! byte 2 and the hash of the ML-KEM encapsulation key inside the signed
//! part; readers of both suites ([`AnyCert`]); the `OPTIONS {mount}/pq`
//! answer; the eleven-address AAAA form (H4).

use crate::b64;
use crate::cert::{KeyCert, CONTEXT, TEXT_PREFIX};
use crate::error::{Error, Result};
use crate::keys::{IdentityKey, IdentityPublic, KexPublic, KeyId, KID_LEN, SIGNER_LEN};
use crate::profile::Profile;
use crate::suite::sha3_256;

use super::{KemHash, KemPublic};

/// Encoded length of a suite-2 certificate.
pub const HYBRID_CERT_LEN: usize = 150;
const SIGNED_LEN: usize = 86;
/// The suite byte of a hybrid certificate.
pub const SUITE: u8 = 2;
/// Length of the text form (204 characters).
pub const HYBRID_TEXT_LEN: usize = TEXT_PREFIX.len() + b64::encoded_len(HYBRID_CERT_LEN);

/// A signed statement: "this X25519 key and this ML-KEM-768 key (by hash)
/// are mine from `not_before` to `not_after`".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HybridCert {
    /// The request profile the key takes (version byte 1 or 2).
    pub profile: Profile,
    /// Increases with every new kex key.
    pub serial: u32,
    /// First valid second (unix time).
    pub not_before: u32,
    /// Last valid second (inclusive).
    pub not_after: u32,
    /// The server's X25519 key (X-Wing's `pk_X`).
    pub kex_public: KexPublic,
    /// `SHA3-256(ek_M)`.
    pub kem_hash: KemHash,
    /// `SHA3-256(identity_public)[0..8]`.
    pub signer: [u8; SIGNER_LEN],
    /// Ed25519 signature over the context label and bytes 0..86.
    pub signature: [u8; 64],
}

impl HybridCert {
    /// Signs a suite-2 certificate for `kex_public` and the ML-KEM key
    /// whose hash is `kem_hash`, announcing `profile`.
    pub fn sign(
        identity: &IdentityKey,
        profile: Profile,
        serial: u32,
        not_before: u32,
        not_after: u32,
        kex_public: KexPublic,
        kem_hash: KemHash,
    ) -> Self {
        let mut cert = HybridCert {
            profile,
            serial,
            not_before,
            not_after,
            kex_public,
            kem_hash,
            signer: identity.public().signer_id(),
            signature: [0; 64],
        };
        cert.signature = identity.sign(&signed_message(&cert.encode()));
        cert
    }

    /// The 150-byte wire form.
    pub fn encode(&self) -> [u8; HYBRID_CERT_LEN] {
        let mut b = [0u8; HYBRID_CERT_LEN];
        b[0] = self.profile.number();
        b[1] = SUITE;
        b[2..6].copy_from_slice(&self.serial.to_be_bytes());
        b[6..10].copy_from_slice(&self.not_before.to_be_bytes());
        b[10..14].copy_from_slice(&self.not_after.to_be_bytes());
        b[14..46].copy_from_slice(&self.kex_public.0);
        b[46..78].copy_from_slice(&self.kem_hash.0);
        b[78..86].copy_from_slice(&self.signer);
        b[86..].copy_from_slice(&self.signature);
        b
    }

    /// Decodes the wire form (length, version, suite; not the signature).
    pub fn decode(b: &[u8]) -> Result<Self> {
        if b.len() != HYBRID_CERT_LEN || b[1] != SUITE {
            return Err(Error::BadCertificate);
        }
        let profile = match b[0] {
            1 => Profile::V1,
            2 => Profile::Compact,
            _ => return Err(Error::BadCertificate),
        };
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let take = |from: usize, to: usize, out: &mut [u8]| out.copy_from_slice(&b[from..to]);
        let mut cert = HybridCert {
            profile,
            serial: u32_at(2),
            not_before: u32_at(6),
            not_after: u32_at(10),
            kex_public: KexPublic([0; 32]),
            kem_hash: KemHash([0; 32]),
            signer: [0; SIGNER_LEN],
            signature: [0; 64],
        };
        take(14, 46, &mut cert.kex_public.0);
        take(46, 78, &mut cert.kem_hash.0);
        take(78, 86, &mut cert.signer);
        take(86, HYBRID_CERT_LEN, &mut cert.signature);
        Ok(cert)
    }

    /// Checks the signer ID and the signature under `identity`.
    pub fn verify(&self, identity: &IdentityPublic) -> Result<()> {
        if self.signer != identity.signer_id() {
            return Err(Error::BadSignature);
        }
        identity.verify(&signed_message(&self.encode()), &self.signature)
    }

    /// The suite-2 key ID, `SHA3-256(kex_public || kem_hash)[0..10]`.
    pub fn kid(&self) -> KeyId {
        hybrid_kid(&self.kex_public, &self.kem_hash)
    }

    /// Whether `now` lies in `[not_before, not_after]` (both ends included).
    pub fn is_valid_at(&self, now: u64) -> bool {
        u64::from(self.not_before) <= now && now <= u64::from(self.not_after)
    }

    /// `hc1 {b64u(cert)}` (204 characters).
    pub fn to_text(&self) -> String {
        let mut s = String::with_capacity(HYBRID_TEXT_LEN);
        s.push_str(TEXT_PREFIX);
        b64::encode_to(&self.encode(), &mut s);
        s
    }

    /// Parses the text form of a suite-2 certificate exactly.
    pub fn from_text(text: &str) -> Result<Self> {
        let body = text
            .strip_prefix(TEXT_PREFIX)
            .ok_or(Error::BadCertificate)?;
        Self::decode(&b64::decode(body.as_bytes())?)
    }
}

/// `SHA3-256(kex_public || kem_hash)[0..10]`.
pub fn hybrid_kid(kex_public: &KexPublic, kem_hash: &KemHash) -> KeyId {
    let h = sha3_256(&[&kex_public.0, &kem_hash.0]);
    let mut id = [0u8; KID_LEN];
    id.copy_from_slice(&h[..KID_LEN]);
    KeyId(id)
}

fn signed_message(bytes: &[u8; HYBRID_CERT_LEN]) -> Vec<u8> {
    [CONTEXT, &bytes[..SIGNED_LEN]].concat()
}

/// A certificate of either suite, as a reader of this version takes them.
// Parsed once per discovery and matched at once.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnyCert {
    /// Suite 1 (118 bytes).
    Classical(KeyCert),
    /// Suite 2 (150 bytes).
    Hybrid(HybridCert),
}

impl AnyCert {
    /// Decodes by the suite byte; a length that does not match the suite,
    /// or another suite, is `bad_certificate`.
    pub fn decode(b: &[u8]) -> Result<Self> {
        match b.get(1) {
            Some(1) => KeyCert::decode(b).map(AnyCert::Classical),
            Some(&SUITE) => HybridCert::decode(b).map(AnyCert::Hybrid),
            _ => Err(Error::BadCertificate),
        }
    }

    /// Parses the text form of either suite.
    pub fn from_text(text: &str) -> Result<Self> {
        let body = text
            .strip_prefix(TEXT_PREFIX)
            .ok_or(Error::BadCertificate)?;
        Self::decode(&b64::decode(body.as_bytes())?)
    }

    /// The text form.
    pub fn to_text(&self) -> String {
        match self {
            AnyCert::Classical(c) => c.to_text(),
            AnyCert::Hybrid(c) => c.to_text(),
        }
    }

    /// Checks the signature under `identity`.
    pub fn verify(&self, identity: &IdentityPublic) -> Result<()> {
        match self {
            AnyCert::Classical(c) => c.verify(identity),
            AnyCert::Hybrid(c) => c.verify(identity),
        }
    }

    /// The key ID the cookie names (suite 1: of the kex key; suite 2: of the pair).
    pub fn kid(&self) -> KeyId {
        match self {
            AnyCert::Classical(c) => c.kid(),
            AnyCert::Hybrid(c) => c.kid(),
        }
    }
}

/// A certificate list that may hold both suites, and encapsulation key
/// texts (the `OPTIONS {mount}/pq` answer, spec/hybrid.md H4).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertList {
    /// Certificates in list order.
    pub certs: Vec<AnyCert>,
    /// Encapsulation keys in list order.
    pub kems: Vec<KemPublic>,
}

impl CertList {
    /// The suite-2 certificates.
    pub fn hybrid(&self) -> impl Iterator<Item = &HybridCert> {
        self.certs.iter().filter_map(|c| match c {
            AnyCert::Hybrid(h) => Some(h),
            AnyCert::Classical(_) => None,
        })
    }

    /// The suite-1 certificates.
    pub fn classical(&self) -> impl Iterator<Item = &KeyCert> {
        self.certs.iter().filter_map(|c| match c {
            AnyCert::Classical(k) => Some(k),
            AnyCert::Hybrid(_) => None,
        })
    }

    /// The encapsulation key `cert` names, if the list holds it.
    pub fn kem_for(&self, cert: &HybridCert) -> Option<&KemPublic> {
        self.kems.iter().find(|k| k.hash() == cert.kem_hash)
    }
}

/// Parses a list as `application/httpcrypt-certs` does (LF or CRLF, blank
/// lines skipped, every other line must parse), taking certificates of both
/// suites and `hck1 ` key texts.
pub fn parse_cert_list(body: &[u8]) -> Result<CertList> {
    let text = std::str::from_utf8(body).map_err(|_| Error::BadCertificate)?;
    let mut list = CertList::default();
    for line in text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .filter(|l| !l.is_empty())
    {
        if line.starts_with(super::KEM_TEXT_PREFIX) {
            list.kems.push(KemPublic::from_text(line)?);
        } else {
            list.certs.push(AnyCert::from_text(line)?);
        }
    }
    Ok(list)
}

/// Formats the `OPTIONS {mount}/pq` answer: the certificates, then each
/// distinct key text once, LF line ends.
pub fn format_cert_list(certs: &[HybridCert], kems: &[&KemPublic]) -> String {
    let mut s = String::new();
    for c in certs {
        s.push_str(&c.to_text());
        s.push('\n');
    }
    let mut seen: Vec<KemHash> = Vec::new();
    for k in kems {
        if !seen.contains(&k.hash()) {
            seen.push(k.hash());
            s.push_str(&k.to_text());
            s.push('\n');
        }
    }
    s
}

/// `_httpcrypt-pq.{host}`: owner of the suite-2 TXT and AAAA records.
pub fn hybrid_cert_name(host: &str) -> String {
    format!("_httpcrypt-pq.{}", host.trim_end_matches('.'))
}

/// `_httpcrypt-kem.{host}`: owner of the key text TXT record.
pub fn kem_name(host: &str) -> String {
    format!("_httpcrypt-kem.{}", host.trim_end_matches('.'))
}

/// Addresses in a suite-2 AAAA chunk set.
pub const HYBRID_AAAA_CHUNKS: usize = 11;

/// The AAAA chunk set of a suite-2 certificate: zero-padded to 154 bytes,
/// eleven chunks of 14, address `j` = `fd` `0j` chunk `j` (as spec §6.2).
pub fn format_aaaa(cert: &HybridCert) -> [[u8; 16]; HYBRID_AAAA_CHUNKS] {
    crate::dns::aaaa_addresses(&cert.encode())
}

/// Reassembles a suite-2 certificate from its AAAA RRset in any order:
/// exactly eleven addresses, prefix `0xfd0`, orders 0–10 once each, zero
/// padding; anything else is `bad_record`.
pub fn parse_aaaa(addrs: &[[u8; 16]]) -> Result<HybridCert> {
    let mut cert = [0u8; HYBRID_CERT_LEN];
    crate::dns::aaaa_payload::<HYBRID_AAAA_CHUNKS>(addrs, &mut cert)?;
    HybridCert::decode(&cert)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hybrid::KemSecret;

    fn cert(id: &IdentityKey) -> (HybridCert, KemSecret) {
        let kem = KemSecret::from_seed([4; 64]);
        let c = HybridCert::sign(
            id,
            Profile::V1,
            3,
            10,
            20,
            KexPublic([5; 32]),
            kem.public().hash(),
        );
        (c, kem)
    }

    #[test]
    fn round_trip_verify_and_strip() {
        let id = IdentityKey::from_seed([1; 32]);
        let (c, kem) = cert(&id);
        let text = c.to_text();
        assert_eq!(text.len(), HYBRID_TEXT_LEN);
        assert_eq!(HYBRID_TEXT_LEN, 204);
        let back = HybridCert::from_text(&text).unwrap();
        assert_eq!(back, c);
        back.verify(&id.public()).unwrap();
        kem.public().check(&back).unwrap();
        assert_ne!(c.kid(), c.kex_public.kid());
        // Stripped to suite 1: the signature no longer covers these bytes.
        let b = c.encode();
        let mut v1 = [&b[..46], &b[78..]].concat();
        v1[1] = 1;
        let stripped = KeyCert::decode(&v1).unwrap();
        assert_eq!(stripped.verify(&id.public()), Err(Error::BadSignature));
        // Lengths must match the suite.
        assert_eq!(AnyCert::decode(&b[..118]), Err(Error::BadCertificate));
        let mut long = v1.clone();
        long.extend_from_slice(&[0; 32]);
        assert_eq!(AnyCert::decode(&long), Err(Error::BadCertificate));
        assert_eq!(
            AnyCert::from_text(&text).unwrap(),
            AnyCert::Hybrid(c.clone())
        );
    }

    #[test]
    fn lists_and_aaaa() {
        let id = IdentityKey::from_seed([1; 32]);
        let (c, kem) = cert(&id);
        let v1 = KeyCert::sign(&id, 3, 10, 20, c.kex_public);
        let mut body = format_cert_list(std::slice::from_ref(&c), &[kem.public(), kem.public()]);
        body.push_str(&v1.to_text());
        body.push_str("\r\n\r\n");
        let list = parse_cert_list(body.as_bytes()).unwrap();
        assert_eq!(list.kems.len(), 1);
        assert_eq!(list.hybrid().next(), Some(&c));
        assert_eq!(list.classical().next(), Some(&v1));
        assert_eq!(list.kem_for(&c), Some(kem.public()));
        let mut set = format_aaaa(&c).to_vec();
        set.reverse();
        assert_eq!(parse_aaaa(&set).unwrap(), c);
        assert_eq!(parse_aaaa(&set[..10]), Err(Error::BadRecord));
        let mut pad = set.clone();
        pad[0][15] = 1;
        assert_eq!(parse_aaaa(&pad), Err(Error::BadRecord));
    }
}
