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

use crate::error::{Error, Result};
use crate::keys::SessionKey;
use crate::limits::{RECORD_CEILING, RECORD_FLOOR};
use crate::profile::{self, Profile, RESPONSE_RANDOM_LEN};
use crate::suite::{nonce_add, XChaCha, NONCE_LEN, TAG_LEN};

/// Length of a record header.
pub const HEADER_LEN: usize = 4;
/// Bytes a record adds to its payload.
pub const RECORD_OVERHEAD: usize = HEADER_LEN + TAG_LEN;
/// At most this many records in one stream.
pub const MAX_RECORDS: u64 = 1 << 32;

const FINAL: u32 = 1 << 31;
const CLEAR: u32 = 1 << 30;
const LEN_MASK: u32 = CLEAR - 1;

const REQ_LABEL: &[u8] = b"hc1-req";
const RSP_LABEL: &[u8] = b"hc1-rsp";
const REQ_LABEL_2: &[u8] = b"hc2-req";
const RSP_LABEL_2: &[u8] = b"hc2-rsp";

/// Which way a stream flows, and what record 0 is bound to (spec §3.3,
/// §4.5): responses to their request's nonce, profile-2 requests to the
/// outer `Host`.
#[derive(Clone, Copy)]
enum Direction<'a> {
    Request,
    /// A profile-2 request; the bound `Host` as `u16(len) || host`.
    RequestBound(&'a [u8]),
    Response {
        request_n0: [u8; NONCE_LEN],
        profile: Profile,
    },
}

impl Direction<'_> {
    fn is_request(&self) -> bool {
        matches!(self, Direction::Request | Direction::RequestBound(_))
    }
}

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

/// The record chain state shared by both ends: nonce, index, previous tag.
struct Chain {
    aead: XChaCha,
    n0: [u8; NONCE_LEN],
    index: u64,
    prev_tag: [u8; TAG_LEN],
    request: bool,
    /// Holds the prefix of `AD_0` (label, bound `Host` or request nonce)
    /// until record 0 is done, then each record's `AD_i`.
    ad: smallvec::SmallVec<[u8; 96]>,
    ad0_len: usize,
}

impl Chain {
    fn new(key: &SessionKey, n0: [u8; NONCE_LEN], direction: Direction<'_>) -> Self {
        let mut ad = smallvec::SmallVec::new();
        match direction {
            Direction::Request => ad.extend_from_slice(REQ_LABEL),
            Direction::RequestBound(host) => {
                ad.reserve(host.len());
                ad.extend_from_slice(REQ_LABEL_2);
                ad.extend_from_slice(host);
            }
            Direction::Response {
                request_n0,
                profile,
            } => {
                ad.extend_from_slice(match profile {
                    Profile::V1 => RSP_LABEL,
                    Profile::Compact => RSP_LABEL_2,
                });
                ad.extend_from_slice(&request_n0);
            }
        }
        Chain {
            aead: XChaCha::new(key.as_bytes()),
            n0,
            index: 0,
            prev_tag: [0; TAG_LEN],
            request: direction.is_request(),
            ad0_len: ad.len(),
            ad,
        }
    }

    /// Builds `AD_i` for the current record into `self.ad`.
    fn build_ad(&mut self, header: &[u8; HEADER_LEN]) {
        if self.index == 0 {
            self.ad.truncate(self.ad0_len);
        } else {
            self.ad.clear();
            self.ad.extend_from_slice(&self.prev_tag);
        }
        self.ad.extend_from_slice(header);
    }

    fn nonce(&self) -> [u8; NONCE_LEN] {
        nonce_add(&self.n0, self.index)
    }

    /// Seals one record laid out as `header || tag || payload` in place.
    fn seal(&mut self, record: &mut [u8], last: bool, clear: bool) -> Result<()> {
        let len = record.len() - RECORD_OVERHEAD;
        if len > RECORD_CEILING {
            return Err(Error::RecordTooLarge);
        }
        if clear && self.request {
            return Err(Error::ClearInRequest);
        }
        if self.index >= MAX_RECORDS {
            return Err(Error::TooManyRecords);
        }
        let header = RecordHeader { last, clear, len }.encode();
        record[..HEADER_LEN].copy_from_slice(&header);
        self.build_ad(&header);
        let nonce = self.nonce();
        let (head, payload) = record.split_at_mut(RECORD_OVERHEAD);
        let tag = if clear {
            self.ad.extend_from_slice(payload);
            self.aead.seal_in_place(&nonce, &self.ad, &mut [])
        } else {
            self.aead.seal_in_place(&nonce, &self.ad, payload)
        };
        head[HEADER_LEN..].copy_from_slice(&tag);
        self.prev_tag = tag;
        self.index += 1;
        Ok(())
    }
}

impl Chain {
    /// Seals a CLEAR record whose payload stays where it is: returns the
    /// record's `header || tag` (split serving, spec/split-serving.md §S4).
    fn seal_clear_detached(&mut self, payload: &[u8], last: bool) -> Result<[u8; RECORD_OVERHEAD]> {
        if payload.len() > RECORD_CEILING {
            return Err(Error::RecordTooLarge);
        }
        if self.request {
            return Err(Error::ClearInRequest);
        }
        if self.index >= MAX_RECORDS {
            return Err(Error::TooManyRecords);
        }
        let header = RecordHeader {
            last,
            clear: true,
            len: payload.len(),
        }
        .encode();
        self.build_ad(&header);
        self.ad.extend_from_slice(payload);
        let nonce = self.nonce();
        let tag = self.aead.seal_in_place(&nonce, &self.ad, &mut []);
        self.prev_tag = tag;
        self.index += 1;
        let mut head = [0u8; RECORD_OVERHEAD];
        head[..HEADER_LEN].copy_from_slice(&header);
        head[HEADER_LEN..].copy_from_slice(&tag);
        Ok(head)
    }
}

/// Produces the records of one stream.
///
/// `seal*` appends a non-final record; `finish*` appends the FINAL record and
/// consumes the sealer, so a stream cannot continue after its end.
pub struct Sealer {
    chain: Chain,
}

impl core::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sealer")
            .field("records", &self.chain.index)
            .finish_non_exhaustive()
    }
}

/// The key a server may use to seal exactly one response: the session key
/// bound to the request's nonce. Not `Clone`: consumed by [`Sealer::response`].
pub struct ResponseKey {
    key: SessionKey,
    request_n0: [u8; NONCE_LEN],
    profile: Profile,
}

impl ResponseKey {
    /// Binds `key` to the v1 request whose nonce is `request_n0`.
    pub fn new(key: SessionKey, request_n0: [u8; NONCE_LEN]) -> Self {
        Self::for_profile(key, request_n0, Profile::V1)
    }

    /// Binds `key` to the request whose nonce is `request_n0`, answered in
    /// that request's profile.
    pub fn for_profile(key: SessionKey, request_n0: [u8; NONCE_LEN], profile: Profile) -> Self {
        ResponseKey {
            key,
            request_n0,
            profile,
        }
    }

    /// The profile the response is sealed in.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The request nonce this key answers.
    pub fn request_n0(&self) -> &[u8; NONCE_LEN] {
        &self.request_n0
    }

    /// The session key (for tickets and tokens issued in the response).
    pub fn session_key(&self) -> &SessionKey {
        &self.key
    }
}

impl core::fmt::Debug for ResponseKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("ResponseKey(..)")
    }
}

impl Sealer {
    /// A request stream starting at nonce `n0` (which the client puts in the path).
    pub fn request(key: &SessionKey, n0: [u8; NONCE_LEN]) -> Self {
        Sealer {
            chain: Chain::new(key, n0, Direction::Request),
        }
    }

    /// A profile-2 request stream (spec §4.5): record 0 binds the outer
    /// `Host` value `host`. `bad_host` above 65535 bytes.
    pub fn request_bound(key: &SessionKey, n0: [u8; NONCE_LEN], host: &[u8]) -> Result<Self> {
        let bound = profile::bound_host(host)?;
        Ok(Self::request_prebound(key, n0, &bound))
    }

    /// [`Sealer::request_bound`] with the `Host` already in its bound form.
    pub(crate) fn request_prebound(key: &SessionKey, n0: [u8; NONCE_LEN], bound: &[u8]) -> Self {
        Sealer {
            chain: Chain::new(key, n0, Direction::RequestBound(bound)),
        }
    }

    /// A response stream. `fresh` is 24 bytes from a CSPRNG: a v1 response
    /// appends them to `out` as its nonce (spec §4.2); a profile-2 response
    /// appends the first 16 as its response random and starts the stream
    /// at `ff × 8 || random` (spec §4.5).
    pub fn response(key: ResponseKey, fresh: [u8; NONCE_LEN], out: &mut Vec<u8>) -> Self {
        let n0 = match key.profile {
            Profile::V1 => {
                out.extend_from_slice(&fresh);
                fresh
            }
            Profile::Compact => {
                let mut r = [0u8; RESPONSE_RANDOM_LEN];
                r.copy_from_slice(&fresh[..RESPONSE_RANDOM_LEN]);
                out.extend_from_slice(&r);
                profile::response_n0(&r)
            }
        };
        Sealer {
            chain: Chain::new(
                &key.key,
                n0,
                Direction::Response {
                    request_n0: key.request_n0,
                    profile: key.profile,
                },
            ),
        }
    }

    /// Number of records sealed so far.
    pub fn records(&self) -> u64 {
        self.chain.index
    }

    fn append(
        &mut self,
        plaintext: &[u8],
        out: &mut Vec<u8>,
        last: bool,
        clear: bool,
    ) -> Result<()> {
        let start = out.len();
        out.resize(start + RECORD_OVERHEAD, 0);
        out.extend_from_slice(plaintext);
        let r = self.chain.seal(&mut out[start..], last, clear);
        if r.is_err() {
            out.truncate(start);
        }
        r
    }

    /// Appends a non-final encrypted record holding `plaintext`.
    pub fn seal(&mut self, plaintext: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.append(plaintext, out, false, false)
    }

    /// Appends a non-final CLEAR record (responses only, spec §9).
    pub fn seal_clear(&mut self, plaintext: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.append(plaintext, out, false, true)
    }

    /// Appends the FINAL encrypted record (possibly empty) and ends the stream.
    pub fn finish(mut self, plaintext: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.append(plaintext, out, true, false)
    }

    /// Appends the FINAL record as a CLEAR record (responses only).
    pub fn finish_clear(mut self, plaintext: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.append(plaintext, out, true, true)
    }

    /// Seals a non-final CLEAR record without copying its payload and
    /// returns `header || tag`; the record is that followed by `payload`
    /// (split serving: the origin sends a stub in the payload's place).
    pub fn seal_clear_detached(&mut self, payload: &[u8]) -> Result<[u8; RECORD_OVERHEAD]> {
        self.chain.seal_clear_detached(payload, false)
    }

    /// Seals a non-final record in place: `record` is `RECORD_OVERHEAD`
    /// bytes of space followed by the plaintext, and becomes the record.
    pub fn seal_in_place(&mut self, record: &mut [u8]) -> Result<()> {
        check_room(record)?;
        self.chain.seal(record, false, false)
    }

    /// Seals the FINAL record in place (see [`Sealer::seal_in_place`]).
    pub fn finish_in_place(mut self, record: &mut [u8]) -> Result<()> {
        check_room(record)?;
        self.chain.seal(record, true, false)
    }
}

fn check_room(record: &[u8]) -> Result<()> {
    if record.len() < RECORD_OVERHEAD {
        return Err(Error::Truncated);
    }
    Ok(())
}

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
        match self.state {
            State::Failed(e) => Err(e),
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

/// Bytes of the stream [`seal_all`] makes of `plain` plaintext bytes in
/// records of at most `record_size` bytes (at least one record, the FINAL one).
pub fn sealed_len(plain: u64, record_size: usize) -> u64 {
    let records = plain.div_ceil(record_size.max(1) as u64).max(1);
    plain + records * RECORD_OVERHEAD as u64
}

/// Seals `plaintext` as a stream of records of at most `record_size` bytes
/// (the last record is FINAL; an empty plaintext gives one empty FINAL record).
pub fn seal_all(
    mut sealer: Sealer,
    plaintext: &[u8],
    record_size: usize,
    out: &mut Vec<u8>,
) -> Result<()> {
    let record_size = record_size.max(1);
    let mut rest = plaintext;
    while rest.len() > record_size {
        let (chunk, tail) = rest.split_at(record_size);
        sealer.seal(chunk, out)?;
        rest = tail;
    }
    sealer.finish(rest, out)
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
