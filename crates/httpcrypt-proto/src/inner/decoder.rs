//! The incremental inner-message decoder ([`Decoder`]: push plaintext in,
//! pull the head and body chunks out) and the body rules it enforces: a
//! declared `Content-Length`, and the answer to `HEAD` and a 304, which carry
//! the representation's length with an empty body (erratum E2).

use crate::error::{Error, Result};
use crate::limits::Limits;

use super::parse::parse_content_length;
use super::{Head, RequestHead, ResponseHead};

/// Whether an inner answer to a `request_method` request with `status`
/// carries the representation's `Content-Length` (if any) and an empty body:
/// the answer to `HEAD`, and a 304 (erratum E2, spec §4.3). Every other
/// answer's `Content-Length` is its body's length.
pub fn is_bodiless_answer(request_method: &str, status: u16) -> bool {
    request_method == "HEAD" || status == 304
}

/// What a [`Decoder`] yields.
#[derive(Debug, PartialEq, Eq)]
pub enum InnerEvent<'a, H> {
    /// The parsed head (exactly once, first).
    Head(H),
    /// Body bytes (never empty).
    Body(&'a [u8]),
}

/// Incremental inner-message decoder: push stream plaintext in with
/// [`Decoder::receive`], pull the head and body chunks out with
/// [`Decoder::next_event`], and call [`Decoder::finish`] when the stream ends.
#[derive(Debug)]
pub struct Decoder<H> {
    limits: Limits,
    // A head that keeps its bytes (`Head::OWNS_BYTES`) may take them from
    // here without a copy.
    buf: bytes::BytesMut,
    pos: usize,
    scanned: usize,
    head_done: bool,
    content_length: Option<u64>,
    body_len: u64,
    // The message answers a HEAD request: its `Content-Length` is the
    // representation's and its body is empty (erratum E2).
    answers_head: bool,
    failed: Option<Error>,
    _head: core::marker::PhantomData<H>,
}

/// Decoder for inner requests (server side).
pub type RequestDecoder = Decoder<RequestHead>;
/// Decoder for inner responses (client side).
pub type ResponseDecoder = Decoder<ResponseHead>;

impl<H: Head> Decoder<H> {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Decoder {
            limits,
            buf: bytes::BytesMut::new(),
            pos: 0,
            scanned: 0,
            head_done: false,
            content_length: None,
            body_len: 0,
            answers_head: false,
            failed: None,
            _head: core::marker::PhantomData,
        }
    }

    /// Pushes plaintext.
    pub fn receive(&mut self, bytes: &[u8]) -> Result<()> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.pos > 0 {
            bytes::Buf::advance(&mut self.buf, self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    fn fail(&mut self, e: Error) -> Error {
        self.failed = Some(e.clone());
        self.buf = bytes::BytesMut::new();
        self.pos = 0;
        e
    }

    /// The next event, or `Ok(None)` when more plaintext is needed.
    pub fn next_event(&mut self) -> Result<Option<InnerEvent<'_, H>>> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if !self.head_done {
            let from = self.scanned.saturating_sub(3);
            let end = match find_head_end(&self.buf[from..]) {
                Some(i) => from + i + 4,
                None => {
                    self.scanned = self.buf.len();
                    if self.buf.len() >= self.limits.max_inner_head {
                        return Err(self.fail(Error::InnerHeadTooLarge));
                    }
                    return Ok(None);
                }
            };
            if end > self.limits.max_inner_head {
                return Err(self.fail(Error::InnerHeadTooLarge));
            }
            // A shared head keeps the whole buffer alive while it lives, so
            // the buffer is shared only when the head is most of it (a GET's
            // stream is its head alone); else the head copies its bytes.
            let parsed = if H::OWNS_BYTES && self.buf.capacity() <= 2 * end {
                H::parse_owned(self.buf.split_to(end).freeze(), &self.limits)
            } else {
                self.pos = end;
                H::parse(&self.buf[..end], &self.limits)
            };
            let head = match parsed {
                Ok(h) => h,
                Err(e) => return Err(self.fail(e)),
            };
            // An answer to HEAD and a 304 carry the representation's length
            // (any valid one, checked by the head's parser) and no body.
            self.content_length = if self.answers_head || head.is_bodiless() {
                Some(0)
            } else {
                head.field("content-length").and_then(parse_content_length)
            };
            self.head_done = true;
            return Ok(Some(InnerEvent::Head(head)));
        }
        let avail = self.buf.len() - self.pos;
        if avail == 0 {
            return Ok(None);
        }
        self.body_len += avail as u64;
        if self.content_length.is_some_and(|cl| self.body_len > cl) {
            return Err(self.fail(Error::ContentLengthMismatch));
        }
        let start = self.pos;
        self.pos = self.buf.len();
        Ok(Some(InnerEvent::Body(&self.buf[start..])))
    }

    /// Call at the end of the stream: the head must be complete and the body
    /// must match a declared Content-Length. Pull all events before calling.
    pub fn finish(self) -> Result<()> {
        self.check_finished()
    }

    /// [`Decoder::finish`] without giving the decoder up (see
    /// [`crate::stream::Opener::check_finished`]).
    pub fn check_finished(&self) -> Result<()> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if !self.head_done {
            return Err(Error::MalformedInner);
        }
        if self.pos != self.buf.len() {
            return Err(Error::MalformedInner);
        }
        match self.content_length {
            Some(cl) if cl != self.body_len => Err(Error::ContentLengthMismatch),
            _ => Ok(()),
        }
    }
}

pub(super) fn find_head_end(buf: &[u8]) -> Option<usize> {
    memchr::memchr_iter(b'\r', buf).find(|&i| buf[i..].starts_with(b"\r\n\r\n"))
}

impl Decoder<ResponseHead> {
    /// A decoder for the answer to a request with method `request_method`:
    /// the answer to `HEAD` carries the length a GET would get, with an
    /// empty body (erratum E2, spec §4.3); any body is refused with
    /// `content_length_mismatch`.
    pub fn answering(request_method: &str, limits: Limits) -> Self {
        let mut d = Self::new(limits);
        d.answers_head = is_bodiless_answer(request_method, 0);
        d
    }
}

/// A complete inner message decoded from whole plaintext.
pub fn decode_all<H: Head>(plaintext: &[u8], limits: &Limits) -> Result<(H, Vec<u8>)> {
    drain(Decoder::<H>::new(*limits), plaintext)
}

/// A complete inner response to a `request_method` request decoded from
/// whole plaintext ([`Decoder::answering`]).
pub fn decode_response(
    plaintext: &[u8],
    request_method: &str,
    limits: &Limits,
) -> Result<(ResponseHead, Vec<u8>)> {
    drain(Decoder::answering(request_method, *limits), plaintext)
}

fn drain<H: Head>(mut d: Decoder<H>, plaintext: &[u8]) -> Result<(H, Vec<u8>)> {
    d.receive(plaintext)?;
    let mut head = None;
    let mut body = Vec::new();
    while let Some(ev) = d.next_event()? {
        match ev {
            InnerEvent::Head(h) => head = Some(h),
            InnerEvent::Body(b) => body.extend_from_slice(b),
        }
    }
    d.finish()?;
    Ok((head.ok_or(Error::MalformedInner)?, body))
}
