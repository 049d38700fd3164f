//! Sealed streams (spec §3): the record layer every message body uses.
//!
//! ```text
//! record = header(4) || tag(16) || payload(L)
//! header = u32 BE: bit 31 FINAL, bit 30 CLEAR, bits 29..0 L
//! ```
//!
//! Record `i` uses nonce `n0 + i`. Record 0 is bound to the direction (and,
//! for responses, to the request's nonce); every later record is bound to
//! the previous tag, so records cannot be dropped, reordered or spliced from
//! another stream. Self-delimiting records make the stream indifferent to how
//! proxies re-chunk the body.
//!
//! Where each part lives: the record header and the receive buffer the
//! stream decoders share here; the record chain both ends keep in
//! `chain.rs`; the [`Sealer`] in `sealer.rs`; the [`Opener`] in `opener.rs`.

mod chain;
mod opener;
mod sealer;

pub use opener::{open_all, Event, Opener};
pub use sealer::{seal_all, sealed_len, ResponseKey, Sealer};

use crate::suite::TAG_LEN;

/// Length of a record header.
pub const HEADER_LEN: usize = 4;
/// Bytes a record adds to its payload.
pub const RECORD_OVERHEAD: usize = HEADER_LEN + TAG_LEN;
/// At most this many records in one stream.
pub const MAX_RECORDS: u64 = 1 << 32;

const FINAL: u32 = 1 << 31;
const CLEAR: u32 = 1 << 30;
const LEN_MASK: u32 = CLEAR - 1;

/// The parsed fields of a record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// This is the stream's last record.
    pub last: bool,
    /// The payload travels in plaintext, authenticated only (split serving).
    pub clear: bool,
    /// Payload length.
    pub len: usize,
}

impl RecordHeader {
    /// Encodes the header word.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut w = self.len as u32 & LEN_MASK;
        if self.last {
            w |= FINAL;
        }
        if self.clear {
            w |= CLEAR;
        }
        w.to_be_bytes()
    }

    /// Decodes a header word.
    pub fn decode(bytes: [u8; HEADER_LEN]) -> Self {
        let w = u32::from_be_bytes(bytes);
        RecordHeader {
            last: w & FINAL != 0,
            clear: w & CLEAR != 0,
            len: (w & LEN_MASK) as usize,
        }
    }
}

/// Appends `bytes` to a decoder's receive buffer `buf`, of which the first
/// `pos` bytes are consumed: they are dropped first, so the buffer holds at
/// most what is not yet decoded plus the new bytes. The one receive buffer
/// of the stream decoders ([`Opener`], and split serving's decoders).
pub(crate) fn append_received(buf: &mut Vec<u8>, pos: &mut usize, bytes: &[u8]) {
    if *pos > 0 {
        buf.drain(..*pos);
        *pos = 0;
    }
    buf.extend_from_slice(bytes);
}
