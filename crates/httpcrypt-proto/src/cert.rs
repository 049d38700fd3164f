//! Key certificates (spec §5): an identity key vouches for a short-lived
//! X25519 key and its validity window. Also the text form (`hc1 …`) and the
//! `application/httpcrypt-certs` list answered to `OPTIONS`.

use crate::b64;
use crate::error::{Error, Result};
use crate::keys::{IdentityKey, IdentityPublic, KexPublic, KeyId, SIGNER_LEN};
use crate::profile::Profile;

/// Encoded length of a certificate.
pub const CERT_LEN: usize = 118;
const SIGNED_LEN: usize = 54;
/// The label before the signed bytes of a certificate of either suite.
pub(crate) const CONTEXT: &[u8] = b"httpcrypt-cert-v1";
/// Prefix of the text form.
pub const TEXT_PREFIX: &str = "hc1 ";
/// Length of the text form.
pub const TEXT_LEN: usize = TEXT_PREFIX.len() + b64::encoded_len(CERT_LEN);

/// A signed statement: "this X25519 key is mine from `not_before` to `not_after`".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyCert {
    /// The request profile the key takes (version byte 1 or 2, spec §4.5).
    pub profile: Profile,
    /// Increases with every new key.
    pub serial: u32,
    /// First valid second (unix time).
    pub not_before: u32,
    /// Last valid second (inclusive).
    pub not_after: u32,
    /// The server's X25519 key.
    pub kex_public: KexPublic,
    /// `SHA3-256(identity_public)[0..8]`.
    pub signer: [u8; SIGNER_LEN],
    /// Ed25519 signature over the context label and bytes 0..54.
    pub signature: [u8; 64],
}

impl KeyCert {
    /// Signs a certificate for `kex_public`.
    pub fn sign(
        identity: &IdentityKey,
        serial: u32,
        not_before: u32,
        not_after: u32,
        kex_public: KexPublic,
    ) -> Self {
        Self::sign_for(
            identity,
            Profile::V1,
            serial,
            not_before,
            not_after,
            kex_public,
        )
    }

    /// Signs a certificate for `kex_public` announcing `profile` (version
    /// byte 2 for [`Profile::Compact`], spec §4.5).
    pub fn sign_for(
        identity: &IdentityKey,
        profile: Profile,
        serial: u32,
        not_before: u32,
        not_after: u32,
        kex_public: KexPublic,
    ) -> Self {
        let mut cert = KeyCert {
            profile,
            serial,
            not_before,
            not_after,
            kex_public,
            signer: identity.public().signer_id(),
            signature: [0; 64],
        };
        let bytes = cert.encode();
        cert.signature = identity.sign(&signed_message(&bytes));
        cert
    }

    /// The 118-byte wire form.
    pub fn encode(&self) -> [u8; CERT_LEN] {
        let mut b = [0u8; CERT_LEN];
        b[0] = self.profile.number();
        b[1] = 1;
        b[2..6].copy_from_slice(&self.serial.to_be_bytes());
        b[6..10].copy_from_slice(&self.not_before.to_be_bytes());
        b[10..14].copy_from_slice(&self.not_after.to_be_bytes());
        b[14..46].copy_from_slice(&self.kex_public.0);
        b[46..54].copy_from_slice(&self.signer);
        b[54..].copy_from_slice(&self.signature);
        b
    }

    /// Decodes the wire form (checks length, version and suite; not the signature).
    pub fn decode(b: &[u8]) -> Result<Self> {
        if b.len() != CERT_LEN || b[1] != 1 {
            return Err(Error::BadCertificate);
        }
        let profile = match b[0] {
            1 => Profile::V1,
            2 => Profile::Compact,
            _ => return Err(Error::BadCertificate),
        };
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut kex = [0u8; 32];
        kex.copy_from_slice(&b[14..46]);
        let mut signer = [0u8; SIGNER_LEN];
        signer.copy_from_slice(&b[46..54]);
        let mut signature = [0u8; 64];
        signature.copy_from_slice(&b[54..]);
        Ok(KeyCert {
            profile,
            serial: u32_at(2),
            not_before: u32_at(6),
            not_after: u32_at(10),
            kex_public: KexPublic(kex),
            signer,
            signature,
        })
    }

    /// Checks the signer ID and the signature under `identity`.
    pub fn verify(&self, identity: &IdentityPublic) -> Result<()> {
        if self.signer != identity.signer_id() {
            return Err(Error::BadSignature);
        }
        identity.verify(&signed_message(&self.encode()), &self.signature)
    }

    /// The key ID of the certified key.
    pub fn kid(&self) -> KeyId {
        self.kex_public.kid()
    }

    /// Whether `now` lies in `[not_before, not_after]` (both ends included).
    pub fn is_valid_at(&self, now: u64) -> bool {
        u64::from(self.not_before) <= now && now <= u64::from(self.not_after)
    }

    /// `hc1 {b64u(cert)}`.
    pub fn to_text(&self) -> String {
        let mut s = String::with_capacity(TEXT_LEN);
        s.push_str(TEXT_PREFIX);
        b64::encode_to(&self.encode(), &mut s);
        s
    }

    /// Parses the text form exactly (no surrounding whitespace).
    pub fn from_text(text: &str) -> Result<Self> {
        let body = text
            .strip_prefix(TEXT_PREFIX)
            .ok_or(Error::BadCertificate)?;
        Self::decode(&b64::decode(body.as_bytes())?)
    }
}

/// A server key as a client uses it, whichever form it arrived in: a
/// [`KeyCert`] (TXT, AAAA, `OPTIONS`, an `unknown-key` problem) or a TLSA
/// X.509 certificate ([`crate::tlsa::TlsaCert`]). It carries no signature:
/// in authenticated mode the form's own signature is checked *before* a
/// `DiscoveredKey` is made from it (spec §6.7), so holding one means "this
/// key passed the checks the client's mode requires".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscoveredKey {
    /// The request profile the key takes (always v1 when learnt from TLSA).
    pub profile: Profile,
    /// Increases with every new key.
    pub serial: u32,
    /// First valid second (unix time).
    pub not_before: u32,
    /// Last valid second (inclusive).
    pub not_after: u32,
    /// The server's X25519 key.
    pub kex_public: KexPublic,
}

impl DiscoveredKey {
    /// Whether `now` lies in `[not_before, not_after]` (both ends included).
    pub fn is_valid_at(&self, now: u64) -> bool {
        u64::from(self.not_before) <= now && now <= u64::from(self.not_after)
    }

    /// The key ID.
    pub fn kid(&self) -> KeyId {
        self.kex_public.kid()
    }
}

impl From<&KeyCert> for DiscoveredKey {
    fn from(c: &KeyCert) -> Self {
        DiscoveredKey {
            profile: c.profile,
            serial: c.serial,
            not_before: c.not_before,
            not_after: c.not_after,
            kex_public: c.kex_public,
        }
    }
}

/// The key to use at `now` among already-checked keys: valid, highest
/// serial, and on equal serials the later `not_before` (the rule of
/// [`choose`] without the signature step). `not_valid` if none is valid.
pub fn choose_key(keys: &[DiscoveredKey], now: u64) -> Result<&DiscoveredKey> {
    keys.iter()
        .filter(|k| k.is_valid_at(now))
        .max_by_key(|k| (k.serial, k.not_before))
        .ok_or(Error::NotValid)
}

fn signed_message(bytes: &[u8; CERT_LEN]) -> Vec<u8> {
    [CONTEXT, &bytes[..SIGNED_LEN]].concat()
}

/// The certificate a client should use at `now`: valid, signed by
/// `identity` when given (authenticated mode), highest serial, and on equal
/// serials the later `not_before` (spec §5, §11).
pub fn choose<'a>(
    certs: &'a [KeyCert],
    now: u64,
    identity: Option<&IdentityPublic>,
) -> Result<&'a KeyCert> {
    let mut best: Option<&KeyCert> = None;
    let mut saw_bad_signature = false;
    for c in certs.iter().filter(|c| c.is_valid_at(now)) {
        if let Some(id) = identity {
            if c.verify(id).is_err() {
                saw_bad_signature = true;
                continue;
            }
        }
        if best.is_none_or(|b| (c.serial, c.not_before) > (b.serial, b.not_before)) {
            best = Some(c);
        }
    }
    best.ok_or(if saw_bad_signature {
        Error::BadSignature
    } else {
        Error::NotValid
    })
}

/// Formats an `application/httpcrypt-certs` body: one text line per
/// certificate, LF line ends.
pub fn format_cert_list(certs: &[KeyCert]) -> String {
    let mut s = String::with_capacity(certs.len() * (TEXT_LEN + 1));
    for c in certs {
        s.push_str(&c.to_text());
        s.push('\n');
    }
    s
}

/// Parses an `application/httpcrypt-certs` body: LF or CRLF line ends,
/// blank lines skipped; every other line must be a certificate.
pub fn parse_cert_list(body: &[u8]) -> Result<Vec<KeyCert>> {
    let text = std::str::from_utf8(body).map_err(|_| Error::BadCertificate)?;
    text.split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .filter(|l| !l.is_empty())
        .map(KeyCert::from_text)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(id: &IdentityKey, serial: u32, nb: u32, na: u32) -> KeyCert {
        KeyCert::sign(id, serial, nb, na, KexPublic([serial as u8; 32]))
    }

    #[test]
    fn round_trip_and_verify() {
        let id = IdentityKey::from_seed([1; 32]);
        let c = cert(&id, 7, 100, 200);
        let text = c.to_text();
        assert_eq!(text.len(), TEXT_LEN);
        assert_eq!(TEXT_LEN, 162);
        let back = KeyCert::from_text(&text).unwrap();
        assert_eq!(back, c);
        back.verify(&id.public()).unwrap();
        let other = IdentityKey::from_seed([2; 32]);
        assert_eq!(back.verify(&other.public()), Err(Error::BadSignature));
        let mut bytes = c.encode();
        bytes[3] ^= 1;
        assert_eq!(
            KeyCert::decode(&bytes).unwrap().verify(&id.public()),
            Err(Error::BadSignature)
        );
        // Version 2 announces profile 2 (spec §4.5); the byte is signed.
        bytes[3] ^= 1;
        bytes[0] = 2;
        let v2 = KeyCert::decode(&bytes).unwrap();
        assert_eq!(v2.profile, Profile::Compact);
        assert_eq!(v2.verify(&id.public()), Err(Error::BadSignature));
        let signed = KeyCert::sign_for(&id, Profile::Compact, 7, 100, 200, c.kex_public);
        assert_eq!(signed.encode()[0], 2);
        signed.verify(&id.public()).unwrap();
        assert_eq!(KeyCert::from_text(&signed.to_text()).unwrap(), signed);
        for version in [0, 3, 255] {
            bytes[0] = version;
            assert_eq!(KeyCert::decode(&bytes), Err(Error::BadCertificate));
        }
        assert_eq!(KeyCert::decode(&bytes[..117]), Err(Error::BadCertificate));
    }

    #[test]
    fn choosing() {
        let id = IdentityKey::from_seed([1; 32]);
        let certs = vec![
            cert(&id, 1, 0, 100),
            cert(&id, 2, 50, 150),
            cert(&id, 3, 120, 300),
        ];
        assert_eq!(choose(&certs, 60, None).unwrap().serial, 2);
        assert_eq!(choose(&certs, 100, None).unwrap().serial, 2);
        assert_eq!(choose(&certs, 120, Some(&id.public())).unwrap().serial, 3);
        assert_eq!(choose(&certs, 301, None), Err(Error::NotValid));
        let other = IdentityKey::from_seed([2; 32]);
        assert_eq!(
            choose(&certs, 60, Some(&other.public())),
            Err(Error::BadSignature)
        );
        let tie = vec![cert(&id, 5, 10, 100), cert(&id, 5, 20, 100)];
        assert_eq!(choose(&tie, 30, None).unwrap().not_before, 20);
        let keys: Vec<DiscoveredKey> = certs.iter().chain(&tie).map(DiscoveredKey::from).collect();
        assert_eq!(choose_key(&keys[..3], 60).unwrap().serial, 2);
        assert_eq!(choose_key(&keys, 30).unwrap().not_before, 20);
        assert_eq!(choose_key(&keys, 301), Err(Error::NotValid));
    }

    #[test]
    fn lists() {
        let id = IdentityKey::from_seed([1; 32]);
        let certs = vec![cert(&id, 1, 0, 100), cert(&id, 2, 50, 150)];
        let text = format_cert_list(&certs);
        assert_eq!(parse_cert_list(text.as_bytes()).unwrap(), certs);
        let crlf = format!("\r\n{}", text.replace('\n', "\r\n"));
        assert_eq!(parse_cert_list(crlf.as_bytes()).unwrap(), certs);
        assert_eq!(parse_cert_list(b"hc1 AAAA\n"), Err(Error::BadCertificate));
    }
}
