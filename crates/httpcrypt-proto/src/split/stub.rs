//! What a stub frame stands for: the [`ContentId`] of a CLEAR record's
//! payload (§S4), and the [`Stub`] a proxy fills in with the payload from
//! its cache to rebuild the client's record.

use crate::b64;
use crate::error::{Error, Result};
use crate::stream::RECORD_OVERHEAD;

use super::ID_LEN;

/// BLAKE3-256 of a CLEAR record's payload (§S4).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentId(pub [u8; ID_LEN]);

impl ContentId {
    /// The ID of `payload`.
    pub fn of(payload: &[u8]) -> Self {
        ContentId(*blake3::hash(payload).as_bytes())
    }

    /// base64url text (43 characters), as in content endpoint paths.
    pub fn to_b64(&self) -> String {
        b64::encode(&self.0)
    }

    /// Parses the 43-character base64url form.
    pub fn from_b64(text: &[u8]) -> Result<Self> {
        Ok(ContentId(b64::decode_array::<ID_LEN>(text)?))
    }

    /// Lower-case hex (cache file names).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses 64 lower-case hex digits.
    pub fn from_hex(text: &str) -> Option<Self> {
        if text.len() != 2 * ID_LEN {
            return None;
        }
        let mut id = [0u8; ID_LEN];
        for (i, out) in id.iter_mut().enumerate() {
            let pair = text.get(2 * i..2 * i + 2)?;
            if pair
                .bytes()
                .any(|c| !matches!(c, b'0'..=b'9' | b'a'..=b'f'))
            {
                return None;
            }
            *out = u8::from_str_radix(pair, 16).ok()?;
        }
        Some(ContentId(id))
    }
}

impl core::fmt::Debug for ContentId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ContentId({})", self.to_b64())
    }
}

/// A stub: a CLEAR record without its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stub {
    /// The record's `header || tag`, as the client will receive them.
    pub head: [u8; RECORD_OVERHEAD],
    /// BLAKE3-256 of the payload.
    pub id: ContentId,
    /// Payload length (the header's L).
    pub len: usize,
    /// The record is the stream's FINAL one.
    pub last: bool,
}

impl Stub {
    /// Whether `payload` is the one this stub stands for.
    pub fn check(&self, payload: &[u8]) -> Result<()> {
        if payload.len() != self.len || ContentId::of(payload) != self.id {
            return Err(Error::ContentMismatch);
        }
        Ok(())
    }

    /// Appends the client's record (`header || tag || payload`) after
    /// checking the payload (`content_mismatch` otherwise, nothing appended).
    pub fn splice(&self, payload: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.check(payload)?;
        out.extend_from_slice(&self.head);
        out.extend_from_slice(payload);
        Ok(())
    }
}
