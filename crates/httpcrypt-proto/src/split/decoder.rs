//! Reading a split stream on the proxy side (§S4): [`SplitDecoder`] turns
//! bytes into the nonce, verbatim records and stubs for any split of the
//! input, and [`splice_all`] rebuilds a whole response body from a cache.

use crate::error::{Error, Result};
use crate::limits::{RECORD_CEILING, RECORD_FLOOR};
use crate::stream::{RecordHeader, HEADER_LEN, RECORD_OVERHEAD};
use crate::suite::NONCE_LEN;

use super::{ContentId, Stub, ID_LEN, STUB, STUB_LEN, VERBATIM};

/// What a [`SplitDecoder`] yields.
#[derive(Debug, PartialEq, Eq)]
pub enum SplitEvent<'a> {
    /// The 24-byte response nonce, to be sent on first.
    Nonce(&'a [u8]),
    /// A record to send on as it is.
    Verbatim(&'a [u8]),
    /// A CLEAR record whose payload the proxy must supply.
    Stub(Stub),
    /// The FINAL frame was read: the split stream is complete.
    End,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Nonce,
    Frames,
    EndPending,
    Done,
    Failed(Error),
}

/// Reads a split stream: push bytes with [`SplitDecoder::receive`] (any
/// split), pull events with [`SplitDecoder::next_event`], and call
/// [`SplitDecoder::finish`] at the end of input. It holds at most one
/// frame (`max_record + 21` bytes) beyond what the caller pushed.
pub struct SplitDecoder {
    max_record: usize,
    buf: Vec<u8>,
    pos: usize,
    state: State,
    frames: u64,
}

impl core::fmt::Debug for SplitDecoder {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SplitDecoder")
            .field("frames", &self.frames)
            .field("buffered", &(self.buf.len() - self.pos))
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl SplitDecoder {
    /// A decoder refusing records above `max_record` (clamped like a receiver's, spec §3.6).
    pub fn new(max_record: usize) -> Self {
        SplitDecoder {
            max_record: max_record.clamp(RECORD_FLOOR, RECORD_CEILING),
            buf: Vec::new(),
            pos: 0,
            state: State::Nonce,
            frames: 0,
        }
    }

    /// Pushes received bytes; bytes after the FINAL frame are `trailing_data`.
    pub fn receive(&mut self, bytes: &[u8]) -> Result<()> {
        if let State::Failed(e) = &self.state {
            return Err(e.clone());
        }
        if bytes.is_empty() {
            return Ok(());
        }
        if matches!(self.state, State::EndPending | State::Done) {
            return Err(self.fail(Error::TrailingData));
        }
        crate::stream::append_received(&mut self.buf, &mut self.pos, bytes);
        Ok(())
    }

    /// The next event, or `Ok(None)` when more input is needed (or after `End`).
    pub fn next_event(&mut self) -> Result<Option<SplitEvent<'_>>> {
        match &self.state {
            State::Failed(e) => Err(e.clone()),
            State::Done => Ok(None),
            State::EndPending => {
                self.state = State::Done;
                Ok(Some(SplitEvent::End))
            }
            State::Nonce => {
                if self.buf.len() - self.pos < NONCE_LEN {
                    return Ok(None);
                }
                let start = self.pos;
                self.pos += NONCE_LEN;
                self.state = State::Frames;
                Ok(Some(SplitEvent::Nonce(&self.buf[start..start + NONCE_LEN])))
            }
            State::Frames => self.frame(),
        }
    }

    fn frame(&mut self) -> Result<Option<SplitEvent<'_>>> {
        let avail = &self.buf[self.pos..];
        let Some(&kind) = avail.first() else {
            return Ok(None);
        };
        if kind != VERBATIM && kind != STUB {
            return Err(self.fail(Error::MalformedSplit));
        }
        if avail.len() < 1 + HEADER_LEN {
            return Ok(None);
        }
        let header_bytes: [u8; HEADER_LEN] = avail[1..1 + HEADER_LEN]
            .try_into()
            .expect("length checked above");
        let header = RecordHeader::decode(header_bytes);
        // Judge the header before waiting for the rest (spec §11.2).
        if header.len > self.max_record {
            return Err(self.fail(Error::RecordTooLarge));
        }
        if kind == STUB && !header.clear {
            return Err(self.fail(Error::MalformedSplit));
        }
        let total = if kind == STUB {
            STUB_LEN
        } else {
            1 + RECORD_OVERHEAD + header.len
        };
        if avail.len() < total {
            return Ok(None);
        }
        let start = self.pos + 1;
        self.pos += total;
        self.frames += 1;
        if header.last {
            if self.pos != self.buf.len() {
                return Err(self.fail(Error::TrailingData));
            }
            self.state = State::EndPending;
        }
        if kind == VERBATIM {
            return Ok(Some(SplitEvent::Verbatim(&self.buf[start..self.pos])));
        }
        let mut head = [0u8; RECORD_OVERHEAD];
        head.copy_from_slice(&self.buf[start..start + RECORD_OVERHEAD]);
        let mut id = [0u8; ID_LEN];
        id.copy_from_slice(&self.buf[start + RECORD_OVERHEAD..self.pos]);
        Ok(Some(SplitEvent::Stub(Stub {
            head,
            id: ContentId(id),
            len: header.len,
            last: header.last,
        })))
    }

    fn fail(&mut self, e: Error) -> Error {
        self.state = State::Failed(e.clone());
        self.buf = Vec::new();
        self.pos = 0;
        e
    }

    /// Frames read so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Whether the FINAL frame was read.
    pub fn is_complete(&self) -> bool {
        matches!(self.state, State::EndPending | State::Done)
    }

    /// Ends the input: `truncated` unless the FINAL frame was read.
    pub fn finish(self) -> Result<()> {
        match self.state {
            State::Failed(e) => Err(e),
            State::EndPending | State::Done => Ok(()),
            State::Nonce | State::Frames => Err(Error::Truncated),
        }
    }
}

/// Turns a whole split stream into the client's response body (`n0 ||
/// records`), taking each stub's payload from `lookup`. A missing payload
/// or one that does not match its stub is `content_mismatch`.
pub fn splice_all(
    split: &[u8],
    max_record: usize,
    mut lookup: impl FnMut(&ContentId) -> Option<Vec<u8>>,
) -> Result<Vec<u8>> {
    let mut d = SplitDecoder::new(max_record);
    d.receive(split)?;
    let mut out = Vec::new();
    while let Some(ev) = d.next_event()? {
        match ev {
            SplitEvent::Nonce(n) | SplitEvent::Verbatim(n) => out.extend_from_slice(n),
            SplitEvent::Stub(stub) => {
                let payload = lookup(&stub.id).ok_or(Error::ContentMismatch)?;
                stub.splice(&payload, &mut out)?;
            }
            SplitEvent::End => break,
        }
    }
    d.finish()?;
    Ok(out)
}
