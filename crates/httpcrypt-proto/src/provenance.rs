//! Provenance certificates (spec/asap.md): a short MAC-protected statement,
//! issued by the authoritative DNS server that publishes a host's keys, that
//! a given client address asked for the host's records at a given time. The
//! HTTP server holding the same [`ProvenanceKey`] checks it against the
//! connection's peer address before it answers data that arrived with the
//! TCP SYN, so the check replaces the TCP handshake's return-routability
//! proof for that first flight.
//!
//! Binary layout (spec/asap.md §2), all integers big-endian:
//!
//! ```text
//! version 1 | key_id 4 | family 1 | address 4 or 16 | server 8 | issued 8 | lifetime 4 | tag 16
//! ```
//!
//! `tag` is the first 16 bytes of HMAC-SHA256(secret, "httpcrypt-pc-v1" ||
//! every byte before the tag). The text form is base64url of the bytes.
//! Everything here is pure: time is a parameter.

use std::net::IpAddr;

use aws_lc_rs::{digest, hmac};
use rand_core::{CryptoRng, RngCore};
use zeroize::Zeroizing;

use crate::{b64, Error, IdentityPublic, Result};

/// Wire version of this layout.
pub const VERSION: u8 = 1;
/// Domain separation prefix of the MAC input.
const LABEL: &[u8] = b"httpcrypt-pc-v1";
/// Tag length in bytes.
pub const TAG_LEN: usize = 16;
/// The longest lifetime a verifier accepts (one day, spec/asap.md §4).
pub const MAX_LIFETIME: u32 = 86_400;
/// How far in the future `issued` may lie (clock skew between the DNS
/// server and the HTTP server), seconds.
pub const MAX_SKEW: u64 = 30;
/// Longest text form (IPv6): 62 bytes → 83 base64url characters.
pub const MAX_TEXT_LEN: usize = 83;
/// Name of the outer request field that carries a certificate.
pub const FIELD: &str = "Httpcrypt-Provenance";
/// First label of the DNS name a client asks (TXT) for a certificate.
pub const DNS_LABEL: &str = "_hcpc";

/// Identifies the server a certificate is good for: the first 8 bytes of
/// SHA-256 over the host's identity public key (spec §2), so every server
/// that shares a key directory (a fleet) accepts the same certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServerId(pub [u8; 8]);

impl ServerId {
    /// The server ID of the host whose identity key is `identity`.
    pub fn of(identity: &IdentityPublic) -> ServerId {
        let d = digest::digest(&digest::SHA256, &identity.to_bytes());
        let mut id = [0u8; 8];
        id.copy_from_slice(&d.as_ref()[..8]);
        ServerId(id)
    }
}

/// The MAC key shared by the DNS server that issues certificates and the
/// HTTP servers that verify them. `Debug` shows only the key ID.
pub struct ProvenanceKey {
    id: [u8; 4],
    secret: Zeroizing<[u8; 32]>,
}

impl std::fmt::Debug for ProvenanceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProvenanceKey")
            .field("id", &hex4(&self.id))
            .finish_non_exhaustive()
    }
}

fn hex4(b: &[u8; 4]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl ProvenanceKey {
    /// A key from its parts.
    pub fn from_parts(id: [u8; 4], secret: [u8; 32]) -> Self {
        ProvenanceKey {
            id,
            secret: Zeroizing::new(secret),
        }
    }

    /// A fresh random key.
    pub fn generate(rng: &mut (impl RngCore + CryptoRng)) -> Self {
        let mut id = [0u8; 4];
        let mut secret = [0u8; 32];
        rng.fill_bytes(&mut id);
        rng.fill_bytes(&mut secret);
        let k = ProvenanceKey::from_parts(id, secret);
        zeroize::Zeroize::zeroize(&mut secret);
        k
    }

    /// The key ID carried in certificates.
    pub fn id(&self) -> [u8; 4] {
        self.id
    }

    /// The key file form: `hcpk1 ` followed by base64url(id || secret).
    pub fn format(&self) -> Zeroizing<String> {
        let mut raw = Zeroizing::new([0u8; 36]);
        raw[..4].copy_from_slice(&self.id);
        raw[4..].copy_from_slice(&self.secret[..]);
        Zeroizing::new(format!("hcpk1 {}", b64::encode(&raw[..])))
    }

    /// Parses [`ProvenanceKey::format`]'s output (surrounding white space allowed).
    pub fn parse(text: &str) -> Result<Self> {
        let body = text
            .trim()
            .strip_prefix("hcpk1 ")
            .ok_or(Error::BadKeypair)?;
        let raw = Zeroizing::new(b64::decode_array::<36>(body.trim().as_bytes())?);
        let mut id = [0u8; 4];
        id.copy_from_slice(&raw[..4]);
        let mut secret = [0u8; 32];
        secret.copy_from_slice(&raw[4..]);
        let k = ProvenanceKey::from_parts(id, secret);
        zeroize::Zeroize::zeroize(&mut secret);
        Ok(k)
    }

    fn mac_key(&self) -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, &self.secret[..])
    }
}

/// What a certificate states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claims {
    /// The issuing key's ID.
    pub key_id: [u8; 4],
    /// The client address the DNS server saw.
    pub address: IpAddr,
    /// The server the certificate is good for.
    pub server: ServerId,
    /// Issue time, unix seconds.
    pub issued: u64,
    /// Seconds of validity after `issued`.
    pub lifetime: u32,
}

impl Claims {
    /// The last second the certificate is valid.
    pub fn expires(&self) -> u64 {
        self.issued.saturating_add(u64::from(self.lifetime))
    }

    /// The bytes before the tag.
    fn encode_body(&self, out: &mut Vec<u8>) {
        out.push(VERSION);
        out.extend_from_slice(&self.key_id);
        match canonical(self.address) {
            IpAddr::V4(a) => {
                out.push(4);
                out.extend_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                out.push(6);
                out.extend_from_slice(&a.octets());
            }
        }
        out.extend_from_slice(&self.server.0);
        out.extend_from_slice(&self.issued.to_be_bytes());
        out.extend_from_slice(&self.lifetime.to_be_bytes());
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it stands for.
pub fn canonical(a: IpAddr) -> IpAddr {
    a.to_canonical()
}

fn tag(key: &ProvenanceKey, body: &[u8]) -> hmac::Tag {
    let mut ctx = hmac::Context::with_key(&key.mac_key());
    ctx.update(LABEL);
    ctx.update(body);
    ctx.sign()
}

/// Issues a certificate for `address` at `now`, valid for `lifetime`
/// seconds (capped at [`MAX_LIFETIME`]); returns its bytes.
pub fn issue(
    key: &ProvenanceKey,
    address: IpAddr,
    server: ServerId,
    now: u64,
    lifetime: u32,
) -> Vec<u8> {
    let claims = Claims {
        key_id: key.id,
        address: canonical(address),
        server,
        issued: now,
        lifetime: lifetime.min(MAX_LIFETIME),
    };
    let mut out = Vec::with_capacity(62);
    claims.encode_body(&mut out);
    let t = tag(key, &out);
    out.extend_from_slice(&t.as_ref()[..TAG_LEN]);
    out
}

/// [`issue`] in text form (base64url), as the TXT record and the outer
/// field carry it.
pub fn issue_text(
    key: &ProvenanceKey,
    address: IpAddr,
    server: ServerId,
    now: u64,
    lifetime: u32,
) -> String {
    b64::encode(&issue(key, address, server, now, lifetime))
}

/// Reads the fields of a certificate without checking its tag (for a
/// client deciding whether one it holds is still worth presenting).
pub fn decode_unverified(bytes: &[u8]) -> Result<Claims> {
    let (claims, _) = split(bytes)?;
    Ok(claims)
}

fn split(bytes: &[u8]) -> Result<(Claims, usize)> {
    let take = |at: usize, n: usize| bytes.get(at..at + n).ok_or(Error::Truncated);
    if *bytes.first().ok_or(Error::Truncated)? != VERSION {
        return Err(Error::BadCertificate);
    }
    let mut key_id = [0u8; 4];
    key_id.copy_from_slice(take(1, 4)?);
    let family = *take(5, 1)?.first().ok_or(Error::Truncated)?;
    let (address, mut at): (IpAddr, usize) = match family {
        4 => {
            let mut a = [0u8; 4];
            a.copy_from_slice(take(6, 4)?);
            (IpAddr::from(a), 10)
        }
        6 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(take(6, 16)?);
            let ip = IpAddr::from(a);
            // One address, one encoding: a mapped IPv4 address must be sent as family 4.
            if canonical(ip) != ip {
                return Err(Error::BadCertificate);
            }
            (ip, 22)
        }
        _ => return Err(Error::BadCertificate),
    };
    let mut server = [0u8; 8];
    server.copy_from_slice(take(at, 8)?);
    at += 8;
    let mut issued = [0u8; 8];
    issued.copy_from_slice(take(at, 8)?);
    at += 8;
    let mut lifetime = [0u8; 4];
    lifetime.copy_from_slice(take(at, 4)?);
    at += 4;
    take(at, TAG_LEN)?;
    if bytes.len() > at + TAG_LEN {
        return Err(Error::TrailingData);
    }
    let claims = Claims {
        key_id,
        address,
        server: ServerId(server),
        issued: u64::from_be_bytes(issued),
        lifetime: u32::from_be_bytes(lifetime),
    };
    Ok((claims, at))
}

/// Checks a certificate in text form, cheapest steps first (spec/asap.md §4):
/// length and layout, key ID, tag, time window, then that it names `peer`
/// and `server`. `keys` are the verifier's current and previous keys.
pub fn verify(
    text: &[u8],
    keys: &[ProvenanceKey],
    peer: IpAddr,
    server: ServerId,
    now: u64,
) -> Result<Claims> {
    if text.len() > MAX_TEXT_LEN {
        return Err(Error::BadCertificate);
    }
    let bytes = b64::decode(text)?;
    let (claims, body_len) = split(&bytes)?;
    let key = keys
        .iter()
        .find(|k| k.id == claims.key_id)
        .ok_or(Error::UnknownKey)?;
    let mut ctx = hmac::Context::with_key(&key.mac_key());
    ctx.update(LABEL);
    ctx.update(&bytes[..body_len]);
    let full = ctx.sign();
    // Constant time, on the truncated tag.
    if !bool::from(subtle::ConstantTimeEq::ct_eq(
        &full.as_ref()[..TAG_LEN],
        &bytes[body_len..],
    )) {
        return Err(Error::BadSignature);
    }
    if claims.lifetime > MAX_LIFETIME
        || claims.issued > now.saturating_add(MAX_SKEW)
        || now > claims.expires()
    {
        return Err(Error::NotValid);
    }
    if claims.address != canonical(peer) {
        return Err(Error::WrongAddress);
    }
    if claims.server != server {
        return Err(Error::WrongServer);
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn key(b: u8) -> ProvenanceKey {
        ProvenanceKey::from_parts([b; 4], [b; 32])
    }

    #[test]
    fn round_trip_and_rejections() {
        let k = key(1);
        let s = ServerId([7; 8]);
        let peer: IpAddr = "192.0.2.1".parse().unwrap();
        let t = issue_text(&k, peer, s, 1000, 60);
        assert_eq!(t.len(), 62);
        let c = verify(t.as_bytes(), &[key(9), key(1)], peer, s, 1030).unwrap();
        assert_eq!((c.issued, c.lifetime, c.expires()), (1000, 60, 1060));
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert!(verify(t.as_bytes(), &[key(1)], mapped, s, 1030).is_ok());
        let err = |r: Result<Claims>| r.unwrap_err();
        assert_eq!(
            err(verify(t.as_bytes(), &[key(1)], peer, s, 1061)),
            Error::NotValid
        );
        assert_eq!(
            err(verify(t.as_bytes(), &[key(1)], peer, s, 969)),
            Error::NotValid
        );
        assert_eq!(
            err(verify(
                t.as_bytes(),
                &[key(1)],
                "192.0.2.2".parse().unwrap(),
                s,
                1030
            )),
            Error::WrongAddress
        );
        assert_eq!(
            err(verify(
                t.as_bytes(),
                &[key(1)],
                peer,
                ServerId([8; 8]),
                1030
            )),
            Error::WrongServer
        );
        assert_eq!(
            err(verify(t.as_bytes(), &[key(2)], peer, s, 1030)),
            Error::UnknownKey
        );
        let other = ProvenanceKey::from_parts([1; 4], [3; 32]);
        assert_eq!(
            err(verify(t.as_bytes(), &[other], peer, s, 1030)),
            Error::BadSignature
        );
        let raw = b64::decode(t.as_bytes()).unwrap();
        for cut in 0..raw.len() {
            let r = verify(
                b64::encode(&raw[..cut]).as_bytes(),
                &[key(1)],
                peer,
                s,
                1030,
            );
            assert!(r.is_err(), "truncated at {cut}");
        }
        for bit in 0..raw.len() * 8 {
            let mut m = raw.clone();
            m[bit / 8] ^= 1 << (bit % 8);
            let r = verify(b64::encode(&m).as_bytes(), &[key(1)], peer, s, 1030);
            assert!(r.is_err(), "bit {bit} flipped");
        }
    }

    #[test]
    fn key_text() {
        let k = key(5);
        let t = k.format();
        let back = ProvenanceKey::parse(&t).unwrap();
        assert_eq!(back.id(), [5; 4]);
        assert!(format!("{k:?}").contains("05050505"));
        assert!(ProvenanceKey::parse("hcpk1 AAAA").is_err());
    }
}
