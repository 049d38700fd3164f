//! DNS record forms of key certificates (spec §6) as pure format/parse
//! functions: TXT at `_httpcrypt.{host}`, the AAAA chunk set, and the
//! identity TXT at `_httpcrypt-id.{host}`.

use crate::b64;
use crate::cert::{KeyCert, CERT_LEN};
use crate::error::{Error, Result};
use crate::keys::IdentityPublic;

/// Addresses in an AAAA chunk set.
pub const AAAA_CHUNKS: usize = 9;
const CHUNK: usize = 14;
/// Prefix of the identity TXT record.
pub const IDENTITY_PREFIX: &str = "hc1-id ";

/// `_httpcrypt.{host}`: owner of the TXT and AAAA records.
pub fn cert_name(host: &str) -> String {
    format!("_httpcrypt.{}", host.trim_end_matches('.'))
}

/// `_httpcrypt-id.{host}`: owner of the identity TXT record.
pub fn identity_name(host: &str) -> String {
    format!("_httpcrypt-id.{}", host.trim_end_matches('.'))
}

/// `_{port}._tcp.{host}`: owner of the TLSA record.
pub fn tlsa_name(port: u16, host: &str) -> String {
    format!("_{port}._tcp.{}", host.trim_end_matches('.'))
}

/// TXT record text for a certificate (its text form).
pub fn format_txt(cert: &KeyCert) -> String {
    cert.to_text()
}

/// Parses one TXT record (its character-strings already concatenated).
pub fn parse_txt(text: &[u8]) -> Result<KeyCert> {
    let text = std::str::from_utf8(text).map_err(|_| Error::BadRecord)?;
    KeyCert::from_text(text)
}

/// The AAAA chunk set of a certificate: zero-padded to 126 bytes, nine
/// chunks of 14 bytes, address `j` = `fd` `0j` chunk `j`.
pub fn format_aaaa(cert: &KeyCert) -> [[u8; 16]; AAAA_CHUNKS] {
    aaaa_addresses(&cert.encode())
}

/// Reassembles a certificate from an AAAA RRset in any order. The set must
/// hold exactly the nine chunk addresses, each once, with zero padding.
pub fn parse_aaaa(addrs: &[[u8; 16]]) -> Result<KeyCert> {
    let mut cert = [0u8; CERT_LEN];
    aaaa_payload::<AAAA_CHUNKS>(addrs, &mut cert)?;
    KeyCert::decode(&cert)
}

/// `N` AAAA addresses carrying `data` (at most `N` chunks of 14 bytes, zero
/// padded): address `j` is `fd` `0j` and chunk `j` (spec §6.2; suite 2 uses
/// eleven, spec/hybrid.md H4).
pub(crate) fn aaaa_addresses<const N: usize>(data: &[u8]) -> [[u8; 16]; N] {
    let mut out = [[0u8; 16]; N];
    for (j, addr) in out.iter_mut().enumerate() {
        addr[0] = 0xfd;
        addr[1] = j as u8;
        let chunk = data.get(j * CHUNK..).unwrap_or(&[]);
        let n = chunk.len().min(CHUNK);
        addr[2..2 + n].copy_from_slice(&chunk[..n]);
    }
    out
}

/// Fills `out` with the bytes an AAAA RRset carries, its addresses in any
/// order: exactly `N` addresses, each with the `0xfd0` prefix and an order
/// below `N` once, and zeros after `out.len()` bytes; else `bad_record`.
pub(crate) fn aaaa_payload<const N: usize>(addrs: &[[u8; 16]], out: &mut [u8]) -> Result<()> {
    if addrs.len() != N {
        return Err(Error::BadRecord);
    }
    let mut chunks = [[0u8; CHUNK]; N];
    let mut seen = [false; N];
    for a in addrs {
        let order = (a[1] & 0x0f) as usize;
        if a[0] != 0xfd || a[1] >> 4 != 0 || order >= N || seen[order] {
            return Err(Error::BadRecord);
        }
        seen[order] = true;
        chunks[order].copy_from_slice(&a[2..]);
    }
    let padded = chunks.as_flattened();
    if padded[out.len()..].iter().any(|b| *b != 0) {
        return Err(Error::BadRecord);
    }
    out.copy_from_slice(&padded[..out.len()]);
    Ok(())
}

/// `hc1-id {b64u(identity_public)}`.
pub fn format_identity_txt(id: &IdentityPublic) -> String {
    format!("{IDENTITY_PREFIX}{}", id.to_b64())
}

/// Parses the identity TXT record.
pub fn parse_identity_txt(text: &[u8]) -> Result<IdentityPublic> {
    let rest = text
        .strip_prefix(IDENTITY_PREFIX.as_bytes())
        .ok_or(Error::BadRecord)?;
    IdentityPublic::from_bytes(&b64::decode_array::<32>(rest)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{IdentityKey, KexPublic};

    #[test]
    fn aaaa_round_trip_any_order() {
        let id = IdentityKey::from_seed([3; 32]);
        let cert = KeyCert::sign(&id, 9, 1, 2, KexPublic([4; 32]));
        let mut set = format_aaaa(&cert).to_vec();
        assert_eq!(set[3][..2], [0xfd, 0x03]);
        set.reverse();
        assert_eq!(parse_aaaa(&set).unwrap(), cert);
        let mut dup = set.clone();
        dup[0] = dup[1];
        assert_eq!(parse_aaaa(&dup), Err(Error::BadRecord));
        let mut pad = set.clone();
        pad[0][15] = 1; // set[0] is chunk 8, which holds the padding
        assert_eq!(parse_aaaa(&pad), Err(Error::BadRecord));
        assert_eq!(parse_aaaa(&set[..8]), Err(Error::BadRecord));
        let mut prefix = set.clone();
        prefix[2][1] |= 0x10;
        assert_eq!(parse_aaaa(&prefix), Err(Error::BadRecord));
    }

    #[test]
    fn txt_forms() {
        let id = IdentityKey::from_seed([3; 32]);
        let cert = KeyCert::sign(&id, 9, 1, 2, KexPublic([4; 32]));
        assert_eq!(parse_txt(format_txt(&cert).as_bytes()).unwrap(), cert);
        let t = format_identity_txt(&id.public());
        assert_eq!(parse_identity_txt(t.as_bytes()).unwrap(), id.public());
        assert_eq!(parse_identity_txt(b"hc1-id !!"), Err(Error::BadBase64));
        assert_eq!(cert_name("example.com."), "_httpcrypt.example.com");
        assert_eq!(tlsa_name(8080, "a.b"), "_8080._tcp.a.b");
    }
}
