//! The opening end of a stream: [`Opener`], an event API over bytes
//! (`receive`/`next_event`) with an explicit state and a sticky failure,
//! and whole-stream opening ([`open_all`]).

use crate::error::{Error, Result};
use crate::keys::SessionKey;
use crate::limits::{RECORD_CEILING, RECORD_FLOOR};
use crate::profile::{self, Profile, RESPONSE_RANDOM_LEN};
use crate::suite::{NONCE_LEN, TAG_LEN};

use super::chain::{Chain, Direction};
use super::{append_received, RecordHeader, HEADER_LEN, MAX_RECORDS, RECORD_OVERHEAD};

/// What an [`Opener`] yields.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// Verified plaintext of one record (never empty).
    Data {
        /// The record's plaintext.
        plaintext: &'a [u8],
        /// The record was a CLEAR record.
        clear: bool,
    },
    /// The FINAL record verified: the stream is complete.
    End,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Response streams: waiting for the 24-byte nonce prefix.
    Nonce,
    Records,
    /// The FINAL record's data was returned; `End` comes next.
    EndPending,
    Done,
    Failed(Error),
}

/// Opens one stream: push bytes in with [`Opener::receive`] (any split),
/// pull verified plaintext out with [`Opener::next_event`], and call
/// [`Opener::finish`] at the end of input to catch truncation.
pub struct Opener {
    chain: Chain,
    /// Profile of a response (how many bytes precede its stream).
    profile: Profile,
    max_record: usize,
    buf: Vec<u8>,
    pos: usize,
    state: State,
}

impl core::fmt::Debug for Opener {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Opener")
            .field("records", &self.chain.index)
            .field("buffered", &(self.buf.len() - self.pos))
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Opener {
    /// Opens a request stream whose nonce `n0` came from the outer path.
    pub fn request(key: &SessionKey, n0: [u8; NONCE_LEN], max_record: usize) -> Self {
        Opener {
            chain: Chain::new(key, n0, Direction::Request),
            profile: Profile::V1,
            max_record: max_record.clamp(RECORD_FLOOR, RECORD_CEILING),
            buf: Vec::new(),
            pos: 0,
            state: State::Records,
        }
    }

    /// Opens a profile-2 request stream whose record 0 binds the outer
    /// `Host` value `host` (spec §4.5). `bad_host` above 65535 bytes.
    pub fn request_bound(
        key: &SessionKey,
        n0: [u8; NONCE_LEN],
        host: &[u8],
        max_record: usize,
    ) -> Result<Self> {
        let bound = profile::bound_host(host)?;
        Ok(Self::request_prebound(key, n0, &bound, max_record))
    }

    /// [`Opener::request_bound`] with the `Host` already in its bound form
    /// `u16(len) || host` ([`profile::bound_host`]).
    pub(crate) fn request_prebound(
        key: &SessionKey,
        n0: [u8; NONCE_LEN],
        bound: &[u8],
        max_record: usize,
    ) -> Self {
        Opener {
            chain: Chain::new(key, n0, Direction::RequestBound(bound)),
            profile: Profile::Compact,
            max_record: max_record.clamp(RECORD_FLOOR, RECORD_CEILING),
            buf: Vec::new(),
            pos: 0,
            state: State::Records,
        }
    }

    /// Opens a v1 response body (`n0 || stream`) answering the request with nonce `request_n0`.
    pub fn response(key: &SessionKey, request_n0: [u8; NONCE_LEN], max_record: usize) -> Self {
        Self::response_for(key, request_n0, Profile::V1, max_record)
    }

    /// Opens a response body in `profile`: `n0 || stream` for v1, `random ||
    /// stream` for profile 2 (spec §4.5).
    pub fn response_for(
        key: &SessionKey,
        request_n0: [u8; NONCE_LEN],
        profile: Profile,
        max_record: usize,
    ) -> Self {
        Opener {
            chain: Chain::new(
                key,
                [0; NONCE_LEN],
                Direction::Response {
                    request_n0,
                    profile,
                },
            ),
            profile,
            max_record: max_record.clamp(RECORD_FLOOR, RECORD_CEILING),
            buf: Vec::new(),
            pos: 0,
            state: State::Nonce,
        }
    }

    /// Pushes received bytes. Bytes after the FINAL record are an error.
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
        append_received(&mut self.buf, &mut self.pos, bytes);
        Ok(())
    }

    /// [`Opener::receive`] of bytes the caller gives away (a GET query's
    /// decoded stream, say): an opener with nothing left buffered takes the
    /// vector as its buffer instead of copying it.
    pub fn receive_vec(&mut self, bytes: Vec<u8>) -> Result<()> {
        if self.pos == self.buf.len() && matches!(self.state, State::Nonce | State::Records) {
            self.buf = bytes;
            self.pos = 0;
            return Ok(());
        }
        self.receive(&bytes)
    }

    /// The next event, or `Ok(None)` when more input is needed (or after `End`).
    pub fn next_event(&mut self) -> Result<Option<Event<'_>>> {
        loop {
            match &self.state {
                State::Failed(e) => return Err(e.clone()),
                State::Done => return Ok(None),
                State::EndPending => {
                    self.state = State::Done;
                    return Ok(Some(Event::End));
                }
                State::Nonce => {
                    let n = self.profile.response_prefix_len();
                    if self.buf.len() - self.pos < n {
                        return Ok(None);
                    }
                    let prefix = &self.buf[self.pos..self.pos + n];
                    match self.profile {
                        Profile::V1 => self.chain.n0.copy_from_slice(prefix),
                        Profile::Compact => {
                            let mut r = [0u8; RESPONSE_RANDOM_LEN];
                            r.copy_from_slice(prefix);
                            self.chain.n0 = profile::response_n0(&r);
                        }
                    }
                    self.pos += n;
                    self.state = State::Records;
                }
                State::Records => match self.open_record()? {
                    None => return Ok(None),
                    Some((start, len, clear, last)) => {
                        if last {
                            self.state = if len == 0 {
                                State::Done
                            } else {
                                State::EndPending
                            };
                            if len == 0 {
                                return Ok(Some(Event::End));
                            }
                        } else if len == 0 {
                            continue;
                        }
                        return Ok(Some(Event::Data {
                            plaintext: &self.buf[start..start + len],
                            clear,
                        }));
                    }
                },
            }
        }
    }

    /// Verifies the next buffered record in place. Returns the plaintext's
    /// position, length, CLEAR flag and FINAL flag.
    fn open_record(&mut self) -> Result<Option<(usize, usize, bool, bool)>> {
        let avail = &self.buf[self.pos..];
        if avail.len() < HEADER_LEN {
            return Ok(None);
        }
        let header_bytes: [u8; HEADER_LEN] = avail[..HEADER_LEN]
            .try_into()
            .expect("length checked above");
        let header = RecordHeader::decode(header_bytes);
        // Spec §11: the header is judged before the payload is awaited.
        if header.len > self.max_record {
            return Err(self.fail(Error::RecordTooLarge));
        }
        if header.clear && self.chain.request {
            return Err(self.fail(Error::ClearInRequest));
        }
        if self.chain.index >= MAX_RECORDS {
            return Err(self.fail(Error::TooManyRecords));
        }
        let total = RECORD_OVERHEAD + header.len;
        if avail.len() < total {
            return Ok(None);
        }
        let tag: [u8; TAG_LEN] = avail[HEADER_LEN..RECORD_OVERHEAD]
            .try_into()
            .expect("length checked above");
        let start = self.pos + RECORD_OVERHEAD;
        let end = self.pos + total;
        self.chain.build_ad(&header_bytes);
        let nonce = self.chain.nonce();
        let verified = if header.clear {
            self.chain.ad.extend_from_slice(&self.buf[start..end]);
            self.chain
                .aead
                .open_in_place(&nonce, &self.chain.ad, &tag, &mut [])
        } else {
            self.chain
                .aead
                .open_in_place(&nonce, &self.chain.ad, &tag, &mut self.buf[start..end])
        };
        if verified.is_err() {
            return Err(self.fail(Error::Integrity));
        }
        self.chain.prev_tag = tag;
        self.chain.index += 1;
        self.pos = end;
        if header.last && self.pos != self.buf.len() {
            return Err(self.fail(Error::TrailingData));
        }
        Ok(Some((start, header.len, header.clear, header.last)))
    }

    fn fail(&mut self, e: Error) -> Error {
        self.state = State::Failed(e.clone());
        self.buf = Vec::new();
        self.pos = 0;
        e
    }

    /// Whether the FINAL record has verified.
    pub fn is_complete(&self) -> bool {
        matches!(self.state, State::EndPending | State::Done)
    }

    /// Number of records verified so far.
    pub fn records(&self) -> u64 {
        self.chain.index
    }

    /// Ends the input: succeeds only if the FINAL record verified and nothing
    /// follows it; otherwise the stream was truncated (spec §3).
    pub fn finish(self) -> Result<()> {
        self.check_finished()
    }

    /// [`Opener::finish`] without giving the opener up: for a caller that
    /// holds it in place (a body), which then drops it where it lies
    /// instead of moving its few hundred bytes out first.
    pub fn check_finished(&self) -> Result<()> {
        match &self.state {
            State::Failed(e) => Err(e.clone()),
            State::EndPending | State::Done => Ok(()),
            State::Nonce | State::Records => Err(Error::Truncated),
        }
    }
}

/// Opens a whole stream held in memory and returns its plaintext (CLEAR
/// and encrypted records alike; request openers refuse CLEAR records).
pub fn open_all(mut opener: Opener, bytes: &[u8]) -> Result<Vec<u8>> {
    opener.receive(bytes)?;
    let mut out = Vec::new();
    while let Some(ev) = opener.next_event()? {
        match ev {
            Event::Data { plaintext, .. } => out.extend_from_slice(plaintext),
            Event::End => break,
        }
    }
    opener.finish()?;
    Ok(out)
}
