//! The content endpoint's batch format (§S5): a request of content IDs, and
//! an answer of one entry per ID, read with [`BatchDecoder`].

use crate::error::{Error, Result};
use crate::limits::{RECORD_CEILING, RECORD_FLOOR};

use super::{ContentId, ID_LEN, MAX_BATCH, MISSING};

/// Appends a batch request body for `ids` (§S5).
pub fn encode_batch_request(ids: &[ContentId], out: &mut Vec<u8>) {
    for id in ids {
        out.extend_from_slice(&id.0);
    }
}

/// Parses a batch request body: 1 to [`MAX_BATCH`] IDs of 32 bytes.
pub fn decode_batch_request(body: &[u8]) -> Result<Vec<ContentId>> {
    if body.is_empty() || body.len() % ID_LEN != 0 || body.len() / ID_LEN > MAX_BATCH {
        return Err(Error::MalformedSplit);
    }
    Ok(body
        .chunks_exact(ID_LEN)
        .map(|c| ContentId(c.try_into().expect("chunks of ID_LEN")))
        .collect())
}

/// Appends one batch answer entry: the payload, or the missing marker.
pub fn encode_batch_entry(payload: Option<&[u8]>, out: &mut Vec<u8>) {
    match payload {
        Some(p) => {
            out.extend_from_slice(&(p.len() as u32).to_be_bytes());
            out.extend_from_slice(p);
        }
        None => out.extend_from_slice(&MISSING.to_be_bytes()),
    }
}

/// What a [`BatchDecoder`] yields, one per requested ID in order.
#[derive(Debug, PartialEq, Eq)]
pub enum BatchEvent<'a> {
    /// The origin's bytes for the ID (still to be checked against the stub).
    Found(&'a [u8]),
    /// The origin does not hold the ID.
    Missing,
}

/// Reads a batch answer of `count` entries (push bytes in, pull events out).
#[derive(Debug)]
pub struct BatchDecoder {
    left: usize,
    max_record: usize,
    buf: Vec<u8>,
    pos: usize,
    failed: Option<Error>,
}

impl BatchDecoder {
    /// A decoder for the answer to a request of `count` IDs.
    pub fn new(count: usize, max_record: usize) -> Self {
        BatchDecoder {
            left: count,
            max_record: max_record.clamp(RECORD_FLOOR, RECORD_CEILING),
            buf: Vec::new(),
            pos: 0,
            failed: None,
        }
    }

    /// Pushes received bytes.
    pub fn receive(&mut self, bytes: &[u8]) -> Result<()> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if bytes.is_empty() {
            return Ok(());
        }
        if self.left == 0 {
            self.failed = Some(Error::TrailingData);
            return Err(Error::TrailingData);
        }
        crate::stream::append_received(&mut self.buf, &mut self.pos, bytes);
        Ok(())
    }

    /// The next entry, or `Ok(None)` when more input is needed.
    pub fn next_event(&mut self) -> Result<Option<BatchEvent<'_>>> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.left == 0 {
            return Ok(None);
        }
        let avail = &self.buf[self.pos..];
        if avail.len() < 4 {
            return Ok(None);
        }
        let word = u32::from_be_bytes(avail[..4].try_into().expect("length checked"));
        if word == MISSING {
            self.pos += 4;
            self.left -= 1;
            return self.after(BatchEvent::Missing);
        }
        let len = word as usize;
        if len > self.max_record {
            self.failed = Some(Error::RecordTooLarge);
            return Err(Error::RecordTooLarge);
        }
        if avail.len() < 4 + len {
            return Ok(None);
        }
        let start = self.pos + 4;
        self.pos = start + len;
        self.left -= 1;
        if self.left == 0 && self.pos != self.buf.len() {
            self.failed = Some(Error::TrailingData);
            return Err(Error::TrailingData);
        }
        Ok(Some(BatchEvent::Found(&self.buf[start..start + len])))
    }

    fn after(&mut self, ev: BatchEvent<'static>) -> Result<Option<BatchEvent<'_>>> {
        if self.left == 0 && self.pos != self.buf.len() {
            self.failed = Some(Error::TrailingData);
            return Err(Error::TrailingData);
        }
        Ok(Some(ev))
    }

    /// Ends the input: `truncated` unless every entry was read.
    pub fn finish(self) -> Result<()> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        if self.left > 0 {
            return Err(Error::Truncated);
        }
        Ok(())
    }
}
