//! Writing a split stream on the origin side (§S2, §S4): the head as
//! verbatim frames of encrypted records, the public body as stub frames of
//! CLEAR records, and the FINAL record.

use crate::error::Result;
use crate::stream::Sealer;

use super::{ContentId, STUB, VERBATIM};

/// Writes a split stream (origin side, §S2/§S4).
///
/// The caller made the [`Sealer`] with [`Sealer::response`], which wrote the
/// response nonce; then it seals the head, the public body in records of
/// exactly `public_record` bytes (the last may be shorter), and finishes.
#[derive(Debug)]
pub struct SplitSealer {
    sealer: Sealer,
}

impl SplitSealer {
    /// Wraps a response sealer.
    pub fn new(sealer: Sealer) -> Self {
        SplitSealer { sealer }
    }

    /// Appends encrypted records holding `head`, cut every `record_size`
    /// bytes, as verbatim frames.
    pub fn seal_head(&mut self, head: &[u8], record_size: usize, out: &mut Vec<u8>) -> Result<()> {
        for piece in head.chunks(record_size.max(1)) {
            out.push(VERBATIM);
            self.sealer.seal(piece, out)?;
        }
        Ok(())
    }

    /// Appends one CLEAR record holding `payload` as a stub frame and
    /// returns the payload's content ID.
    pub fn seal_public(&mut self, payload: &[u8], out: &mut Vec<u8>) -> Result<ContentId> {
        let head = self.sealer.seal_clear_detached(payload)?;
        let id = ContentId::of(payload);
        out.push(STUB);
        out.extend_from_slice(&head);
        out.extend_from_slice(&id.0);
        Ok(id)
    }

    /// Appends the empty encrypted FINAL record as a verbatim frame.
    pub fn finish(self, out: &mut Vec<u8>) -> Result<()> {
        out.push(VERBATIM);
        self.sealer.finish(&[], out)
    }
}

/// Seals a whole public response as a split stream: `head` (encrypted,
/// cut every `public_record` bytes), `body` as CLEAR records cut at
/// multiples of `public_record`, and an empty FINAL record. Returns the
/// content IDs in order.
pub fn seal_split(
    sealer: Sealer,
    head: &[u8],
    body: &[u8],
    public_record: usize,
    out: &mut Vec<u8>,
) -> Result<Vec<ContentId>> {
    let size = public_record.max(1);
    let mut s = SplitSealer::new(sealer);
    s.seal_head(head, size, out)?;
    let mut ids = Vec::with_capacity(body.len().div_ceil(size));
    for piece in body.chunks(size) {
        ids.push(s.seal_public(piece, out)?);
    }
    s.finish(out)?;
    Ok(ids)
}
