//! Split serving (spec/split-serving.md): public bodies travel as CLEAR
//! records whose payloads an untrusted proxy supplies from its cache.
//!
//! On the origin → proxy leg a response is a *split stream*: the response
//! nonce, then frames. A verbatim frame carries a record as the client will
//! see it; a stub frame carries a CLEAR record's `header || tag` and the
//! BLAKE3-256 content ID of its payload instead of the payload (§S4).
//!
//! - [`SplitSealer`] writes a split stream with the fixed record boundaries
//!   of §S2 (origin side);
//! - [`SplitDecoder`] reads one, push bytes in and pull [`SplitEvent`]s out,
//!   for any split of the input (proxy side);
//! - [`Stub::splice`] rebuilds the client's record after checking the
//!   payload's length and content ID;
//! - [`BatchDecoder`] and friends: the content endpoint's batch format (§S5);
//! - [`PublicPaths`]: the origin's public globs (§S1), and [`public`]: the
//!   whole rule for a public answer (normalised paths, nothing personal).

pub mod public;

use crate::b64;
use crate::error::{Error, Result};
use crate::limits::{RECORD_CEILING, RECORD_FLOOR};
use crate::stream::{RecordHeader, Sealer, HEADER_LEN, RECORD_OVERHEAD};
use crate::suite::NONCE_LEN;

/// Outer request field by which a proxy asks for a split answer (§S3).
pub const SPLIT_FIELD: &str = "httpcrypt-split";
/// Outer response field naming the content endpoint's path prefix (§S3).
pub const CONTENT_FIELD: &str = "httpcrypt-content";
/// `Content-Type` of a split answer.
pub const SPLIT_TYPE: &str = "application/httpcrypt-split";
/// `Content-Type` of a content batch answer (§S5).
pub const BATCH_TYPE: &str = "application/httpcrypt-content";
/// Inner response field by which an application marks a response public
/// (`1`) or private (`0`); the origin strips it (§S1).
pub const PUBLIC_FIELD: &str = "hc-public";
/// The content endpoint's path under the mount (§S5).
pub const CONTENT_DIR: &str = "/.content/";
/// Length of a content ID.
pub const ID_LEN: usize = 32;
/// Bytes of a stub frame: type, header, tag, content ID.
pub const STUB_LEN: usize = 1 + RECORD_OVERHEAD + ID_LEN;
/// Most content IDs in one batch request.
pub const MAX_BATCH: usize = 256;
/// Default payload size of public records (§S2).
pub const DEFAULT_PUBLIC_RECORD: usize = 16 * 1024;
/// A batch entry's length word for an ID the origin does not hold.
pub const MISSING: u32 = u32::MAX;

const VERBATIM: u8 = 0;
const STUB: u8 = 1;

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

/// The origin's public path globs (§S1): `*` matches within a path
/// segment, `**` across segments, `?` one character other than `/`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublicPaths {
    globs: Vec<String>,
}

impl PublicPaths {
    /// Globs, each starting with `/`.
    pub fn new(globs: impl IntoIterator<Item = String>) -> Result<Self> {
        let globs: Vec<String> = globs.into_iter().collect();
        if globs.iter().any(|g| !g.starts_with('/')) {
            return Err(Error::BadNoncePath);
        }
        Ok(PublicPaths { globs })
    }

    /// Whether no glob is configured.
    pub fn is_empty(&self) -> bool {
        self.globs.is_empty()
    }

    /// Whether `path` (without query) matches one of the globs.
    pub fn matches(&self, path: &str) -> bool {
        self.globs
            .iter()
            .any(|g| glob_match(g.as_bytes(), path.as_bytes()))
    }
}

/// Glob matching by dynamic programming over (pattern, text) positions:
/// linear memory, no backtracking blow-up on hostile paths.
fn glob_match(pat: &[u8], text: &[u8]) -> bool {
    // Tokens: Literal(b), One, Star (no '/'), DoubleStar (anything).
    #[derive(Clone, Copy)]
    enum T {
        Lit(u8),
        One,
        Star,
        Any,
    }
    let mut toks = Vec::with_capacity(pat.len());
    let mut i = 0;
    while i < pat.len() {
        match pat[i] {
            b'*' if pat.get(i + 1) == Some(&b'*') => {
                toks.push(T::Any);
                i += 2;
            }
            b'*' => {
                toks.push(T::Star);
                i += 1;
            }
            b'?' => {
                toks.push(T::One);
                i += 1;
            }
            c => {
                toks.push(T::Lit(c));
                i += 1;
            }
        }
    }
    // reach[j]: the first k tokens can match text[..j].
    let mut reach = vec![false; text.len() + 1];
    reach[0] = true;
    for t in toks {
        let mut next = vec![false; text.len() + 1];
        match t {
            T::Lit(c) => {
                for j in 0..text.len() {
                    next[j + 1] = reach[j] && text[j] == c;
                }
            }
            T::One => {
                for j in 0..text.len() {
                    next[j + 1] = reach[j] && text[j] != b'/';
                }
            }
            T::Star | T::Any => {
                let mut on = false;
                for j in 0..=text.len() {
                    on = reach[j] || (on && j > 0 && (matches!(t, T::Any) || text[j - 1] != b'/'));
                    next[j] = on;
                }
            }
        }
        reach = next;
    }
    reach[text.len()]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::keys::SessionKey;
    use crate::stream::{open_all, Opener, ResponseKey};

    fn sealed(body: &[u8], size: usize) -> (Vec<u8>, Vec<ContentId>, SessionKey) {
        let k = SessionKey::from_bytes([7; 32]);
        let mut out = Vec::new();
        let sealer = Sealer::response(ResponseKey::new(k.clone(), [1; 24]), [2; 24], &mut out);
        let ids = seal_split(sealer, b"HTTP/1.1 200 OK\r\n\r\n", body, size, &mut out).unwrap();
        (out, ids, k)
    }

    #[test]
    fn split_round_trip_any_chunking() {
        let body: Vec<u8> = (0..50_000u32).map(|i| (i * 7) as u8).collect();
        let (split, ids, k) = sealed(&body, 16384);
        assert_eq!(ids.len(), 4);
        let store: std::collections::HashMap<ContentId, Vec<u8>> = body
            .chunks(16384)
            .map(|c| (ContentId::of(c), c.to_vec()))
            .collect();
        let whole = splice_all(&split, 1 << 20, |id| store.get(id).cloned()).unwrap();
        let plain = open_all(Opener::response(&k, [1; 24], 1 << 20), &whole).unwrap();
        assert_eq!(&plain[19..], &body[..]);
        // Byte-by-byte feeding gives the same events.
        for step in [1usize, 7, 53, 4096] {
            let mut d = SplitDecoder::new(1 << 20);
            let mut out = Vec::new();
            for piece in split.chunks(step) {
                d.receive(piece).unwrap();
                while let Some(ev) = d.next_event().unwrap() {
                    match ev {
                        SplitEvent::Nonce(b) | SplitEvent::Verbatim(b) => out.extend_from_slice(b),
                        SplitEvent::Stub(s) => s.splice(&store[&s.id], &mut out).unwrap(),
                        SplitEvent::End => {}
                    }
                }
            }
            d.finish().unwrap();
            assert_eq!(out, whole, "step {step}");
        }
    }

    #[test]
    fn same_body_same_ids_for_every_key() {
        let body = vec![9u8; 40_000];
        let (_, a, _) = sealed(&body, 16384);
        let k2 = SessionKey::from_bytes([8; 32]);
        let mut out = Vec::new();
        let sealer = Sealer::response(ResponseKey::new(k2, [3; 24]), [4; 24], &mut out);
        let b = seal_split(
            sealer,
            b"HTTP/1.1 200 OK\r\nX: y\r\n\r\n",
            &body,
            16384,
            &mut out,
        )
        .unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn wrong_payload_is_refused() {
        let (split, _, _) = sealed(b"hello world", 16384);
        assert_eq!(
            splice_all(&split, 1 << 20, |_| Some(b"hello worle".to_vec())),
            Err(Error::ContentMismatch)
        );
        assert_eq!(
            splice_all(&split, 1 << 20, |_| Some(b"hello worl".to_vec())),
            Err(Error::ContentMismatch)
        );
    }

    #[test]
    fn truncation_and_trailing() {
        let (split, _, _) = sealed(b"abc", 16384);
        for cut in 0..split.len() {
            let r = splice_all(&split[..cut], 1 << 20, |_| Some(b"abc".to_vec()));
            assert_eq!(r, Err(Error::Truncated), "cut {cut}");
        }
        let mut long = split.clone();
        long.push(0);
        assert_eq!(
            splice_all(&long, 1 << 20, |_| Some(b"abc".to_vec())),
            Err(Error::TrailingData)
        );
    }

    #[test]
    fn batch_round_trip() {
        let ids = [ContentId::of(b"a"), ContentId::of(b"b")];
        let mut req = Vec::new();
        encode_batch_request(&ids, &mut req);
        assert_eq!(decode_batch_request(&req).unwrap(), ids);
        assert_eq!(decode_batch_request(&req[1..]), Err(Error::MalformedSplit));
        assert_eq!(decode_batch_request(&[]), Err(Error::MalformedSplit));
        let mut rsp = Vec::new();
        encode_batch_entry(Some(b"a"), &mut rsp);
        encode_batch_entry(None, &mut rsp);
        let mut d = BatchDecoder::new(2, 1 << 20);
        let mut seen = Vec::new();
        for b in &rsp {
            d.receive(std::slice::from_ref(b)).unwrap();
            while let Some(ev) = d.next_event().unwrap() {
                seen.push(match ev {
                    BatchEvent::Found(p) => Some(p.to_vec()),
                    BatchEvent::Missing => None,
                });
            }
        }
        d.finish().unwrap();
        assert_eq!(seen, vec![Some(b"a".to_vec()), None]);
        let mut d = BatchDecoder::new(1, 1 << 20);
        d.receive(&rsp).unwrap();
        assert_eq!(d.next_event(), Err(Error::TrailingData));
    }

    #[test]
    fn globs() {
        let p =
            PublicPaths::new(["/static/**".into(), "/img/*.png".into(), "/a?c".into()]).unwrap();
        assert!(p.matches("/static/x/y/z.js"));
        assert!(p.matches("/static/"));
        assert!(!p.matches("/statics/x"));
        assert!(p.matches("/img/logo.png"));
        assert!(!p.matches("/img/sub/logo.png"));
        assert!(p.matches("/abc"));
        assert!(!p.matches("/a/c"));
        assert!(!p.matches("/private/x"));
        assert!(PublicPaths::new(["static".into()]).is_err());
        // Hostile input stays linear.
        let long = "/".to_string() + &"a".repeat(10_000);
        let p = PublicPaths::new(["/*a*a*a*a*a*a*b".into()]).unwrap();
        assert!(!p.matches(&long));
    }

    #[test]
    fn hex_and_b64_forms() {
        let id = ContentId::of(b"x");
        assert_eq!(ContentId::from_hex(&id.to_hex()), Some(id));
        assert_eq!(ContentId::from_b64(id.to_b64().as_bytes()).unwrap(), id);
        assert_eq!(ContentId::from_hex("zz"), None);
    }
}
