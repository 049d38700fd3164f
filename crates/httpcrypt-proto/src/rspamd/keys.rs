//! rspamd key IDs and the `Key` request header (profile "Keys and text
//! encoding", "Request").
//!
//! rspamd names a server key by `BLAKE2b-512(public key)`; the request's `Key`
//! header carries the first 5 bytes of it (the short ID) and the client's
//! ephemeral public key, both in rspamd base32.

use blake2::{Blake2b512, Digest};

use super::base32;
use crate::error::{Error, Result};
use crate::keys::KexPublic;

/// Length of an rspamd key ID.
pub const KEY_ID_LEN: usize = 64;
/// Length of an rspamd short key ID.
pub const SHORT_ID_LEN: usize = 5;

/// rspamd's key ID: unkeyed `BLAKE2b-512(public key)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId(pub [u8; KEY_ID_LEN]);

impl KeyId {
    /// The key ID of `public`.
    pub fn of(public: &KexPublic) -> KeyId {
        KeyId(Blake2b512::digest(public.0).into())
    }

    /// Its first 5 bytes.
    pub fn short(&self) -> ShortId {
        let mut s = [0u8; SHORT_ID_LEN];
        s.copy_from_slice(&self.0[..SHORT_ID_LEN]);
        ShortId(s)
    }

    /// The 103-character base32 form printed as `id` by `rspamadm keypair`.
    pub fn to_base32(&self) -> String {
        base32::encode(&self.0)
    }

    /// Parses the 103-character base32 form.
    pub fn from_base32(text: &[u8]) -> Result<KeyId> {
        base32::decode_array(text).map(KeyId)
    }
}

impl core::fmt::Debug for KeyId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "rspamd::KeyId({})", self.to_base32())
    }
}

/// The first 5 bytes of a [`KeyId`], as sent in the `Key` header.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShortId(pub [u8; SHORT_ID_LEN]);

impl ShortId {
    /// The short ID of `public`.
    pub fn of(public: &KexPublic) -> ShortId {
        KeyId::of(public).short()
    }

    /// The 8-character base32 form (the first 8 characters of the key ID's).
    pub fn to_base32(&self) -> String {
        base32::encode(&self.0)
    }
}

impl core::fmt::Debug for ShortId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ShortId({})", self.to_base32())
    }
}

/// The 52-character base32 form of a public key (`rspamc --key`, `pubkey`).
pub fn public_to_base32(public: &KexPublic) -> String {
    base32::encode(&public.0)
}

/// Parses a public key from its 52-character base32 form, or the
/// 51-character form rspamd also accepts.
pub fn public_from_base32(text: &[u8]) -> Result<KexPublic> {
    base32::decode_key(text).map(KexPublic)
}

/// The value of the `Key` request header: `{b32(short ID)}={b32(client public)}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyHeader {
    /// Short ID of the server key the request is sealed to.
    pub short_id: ShortId,
    /// The client's ephemeral public key.
    pub client: KexPublic,
}

impl KeyHeader {
    /// The header's field name.
    pub const NAME: &'static str = "Key";

    /// Parses a `Key` field value.
    ///
    /// `Ok(None)` means the value has no `=`: rspamd 3.4 then ignores the
    /// header and treats the request as plaintext, and so should the caller.
    /// Surrounding spaces and tabs are ignored. Like rspamd, the ID part may be
    /// any base32 ID of at least 5 bytes (a full 103-character key ID
    /// included); only its first 5 bytes are used. Anything else that does not
    /// decode is [`Error::BadKeyHeader`].
    pub fn parse(value: &[u8]) -> Result<Option<KeyHeader>> {
        let value = trim_ows(value);
        let Some(eq) = value.iter().position(|&b| b == b'=') else {
            return Ok(None);
        };
        let (id, public) = (&value[..eq], &value[eq + 1..]);
        let id = base32::decode(id).map_err(|_| Error::BadKeyHeader)?;
        let short: [u8; SHORT_ID_LEN] = id
            .get(..SHORT_ID_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(Error::BadKeyHeader)?;
        let client = public_from_base32(public).map_err(|_| Error::BadKeyHeader)?;
        Ok(Some(KeyHeader {
            short_id: ShortId(short),
            client,
        }))
    }

    /// The field value, as rspamc sends it.
    pub fn format(&self) -> String {
        let mut s = self.short_id.to_base32();
        s.push('=');
        base32::encode_to(&self.client.0, &mut s);
        s
    }
}

fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    use crate::rspamd::testdata::{ID, PUBKEY, STAT_KEY_HEADER as HEADER};

    #[test]
    fn key_id_matches_rspamadm() {
        let pk = public_from_base32(PUBKEY.as_bytes()).unwrap();
        let id = KeyId::of(&pk);
        assert_eq!(id.to_base32(), ID);
        assert_eq!(KeyId::from_base32(ID.as_bytes()).unwrap(), id);
        assert_eq!(id.short().to_base32(), &ID[..8]);
        assert_eq!(ShortId::of(&pk), id.short());
        assert_eq!(public_to_base32(&pk), PUBKEY);
        assert!(format!("{:?}", id.short()).contains(&ID[..8]));
    }

    #[test]
    fn blake2b_512_empty_input() {
        // RFC 7693 Appendix A style check of the hash itself (BLAKE2b-512("")).
        let h = Blake2b512::digest(b"");
        assert_eq!(
            hex::encode(h),
            "786a02f742015903c6c6fd852552d272912f4740e15847618a86e217f71f5419\
             d25e1031afee585313896444934eb04b903a685b1448b755d56f701afe9be2ce"
        );
    }

    #[test]
    fn parses_what_rspamc_sent() {
        let h = KeyHeader::parse(HEADER.as_bytes()).unwrap().unwrap();
        let pk = public_from_base32(PUBKEY.as_bytes()).unwrap();
        assert_eq!(h.short_id, ShortId::of(&pk));
        assert_eq!(h.format(), HEADER);
        let padded = format!(" \t{HEADER} ");
        assert_eq!(KeyHeader::parse(padded.as_bytes()).unwrap(), Some(h));
        // A full key ID in place of the short one, as rspamd accepts.
        let long = format!("{ID}={}", &HEADER[9..]);
        assert_eq!(KeyHeader::parse(long.as_bytes()).unwrap(), Some(h));
        // The 51-character public key form.
        let short_pk = &HEADER[..HEADER.len() - 1];
        assert_eq!(KeyHeader::parse(short_pk.as_bytes()).unwrap(), Some(h));
    }

    #[test]
    fn value_without_equals_is_plaintext() {
        assert_eq!(KeyHeader::parse(b""), Ok(None));
        assert_eq!(KeyHeader::parse(b"r898uxxz"), Ok(None));
        assert_eq!(KeyHeader::parse(PUBKEY.as_bytes()), Ok(None));
    }

    #[test]
    fn malformed_values() {
        let (id, pk) = HEADER.split_once('=').unwrap();
        let cases = [
            "=".to_string(),
            format!("={pk}"),
            format!("{id}="),
            format!("{}={pk}", &id[..7]), // short ID too short
            format!("{}={pk}", &id[..4]), // 2 bytes
            format!("{id}y={pk}"),        // 9 chars: not a canonical length
            format!("{}={pk}", id.to_uppercase()),
            format!("{id}={}", pk.to_uppercase()),
            format!("{id}={}", &pk[..50]),
            format!("{id}={pk}y"),
            format!("{id}={pk}="),
            format!("{id}=={pk}"),
            format!("{id} = {pk}"),
            format!("{id}=0{}", &pk[1..]),
        ];
        for c in cases {
            assert_eq!(
                KeyHeader::parse(c.as_bytes()),
                Err(Error::BadKeyHeader),
                "{c}"
            );
        }
    }
}
